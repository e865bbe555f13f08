#!/usr/bin/env bash
# The GPU checks of backend-cuda, run on a machine with an NVIDIA GPU and
# CUDA 13's NVRTC but no Rust toolchain: the backend and selector suites and
# the differential tests on CUDA, and `sparse-bench select --backend cuda`
# at 2^24 and 2^26 elements (then the CPU backend at 2^24 on the same host),
# and `sparse-bench train --device cuda` with its per-phase times.
# Outputs go to $OUT (default ./gpu-out). Build and pack the binaries where
# cargo is (CUDARC_CUDA_VERSION pins the CUDA version that cudarc's loader
# names, here 13.0, the GPU machine's):
#
#   export XDG_DATA_HOME=$(bash scripts/cuda-llvm.sh) CUDARC_CUDA_VERSION=13000 CARGO_TARGET_DIR=target/cuda
#   cargo build --release -p bench --features cuda --bin sparse-bench
#   cargo test --release -p backend-cuda --features cuda --no-run   # prints the test binaries
#   mkdir -p .gpu; strip -o .gpu/sparse-bench target/cuda/release/sparse-bench
#   strip -o .gpu/suite target/cuda/release/deps/suite-HASH     # and differential-HASH
#   (cd .gpu && tar cf - sparse-bench suite differential | xz -6 --lzma2=dict=512MiB > bins.tar.xz)
#
# then, beside .gpu/bins.tar.xz on the GPU machine: bash scripts/gpu-checks.sh
# The tests print "skipped: no CUDA device" where they find none; this
# script counts those lines last (0 and 0 when the GPU ran everything).

set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
cd .gpu
(xz -dc bins.tar.xz 2>/dev/null || python3 -c "import lzma,sys,shutil; shutil.copyfileobj(lzma.open('bins.tar.xz'), sys.stdout.buffer)") | tar xf -
cd ..
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT"/device.txt
nvrtc=$(find /usr/local /opt /usr/lib -name 'libnvrtc.so*' -not -path '*stubs*' 2>/dev/null | head -3)
echo "nvrtc: $nvrtc" | tee -a "$OUT"/device.txt
for d in $(for f in $nvrtc; do dirname $f; done | sort -u); do LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}; done
export LD_LIBRARY_PATH
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee -a "$OUT"/device.txt
t0=$SECONDS
timeout -k 5 60 .gpu/sparse-bench select --backend cuda --n 16777216 --density 0.001 --min-ms 100 2>&1 | tee "$OUT"/select.txt
echo "== $((SECONDS-t0)) s" | tee -a "$OUT"/select.txt
timeout -k 5 100 .gpu/differential cuda:: --nocapture 2>&1 | tee "$OUT"/differential.txt
echo "== $((SECONDS-t0)) s" | tee -a "$OUT"/differential.txt
timeout -k 5 150 .gpu/suite cuda:: --nocapture 2>&1 | tee "$OUT"/suite.txt
echo "== $((SECONDS-t0)) s" | tee -a "$OUT"/suite.txt
for n in 16777216 67108864; do for d in 0.01 0.001; do
  [ $n = 16777216 ] && [ $d = 0.001 ] && continue
  timeout -k 5 40 .gpu/sparse-bench select --backend cuda --n $n --density $d --min-ms 100 2>&1 | tee -a "$OUT"/select.txt
done; done
echo "== $((SECONDS-t0)) s" | tee -a "$OUT"/select.txt
timeout -k 5 35 .gpu/sparse-bench select --backend cpu --n 16777216 --density 0.001 --min-ms 100 2>&1 | tee "$OUT"/select_cpu.txt
# The training step on the device (issue 43, item 4): burn's cuda backend
# and the optimizer's kernels on one cubecl client, the digits MLP with a
# 1,024-unit hidden layer, 2 ranks on threads, about 280 steps per scheme,
# the per-phase times (grad, select, comm, apply, step) against dense's.
timeout -k 5 240 .gpu/sparse-bench train --device cuda --epochs 12 --hidden 1024 --batch 32 --ranks 2 2>&1 | tee "$OUT"/train.txt
echo "== $((SECONDS-t0)) s" | tee -a "$OUT"/train.txt
echo "== total $((SECONDS-t0)) s"
grep -c "skipped: no CUDA device" "$OUT"/differential.txt "$OUT"/suite.txt
