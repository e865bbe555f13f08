#!/usr/bin/env bash
# The GPU checks of backend-cuda, run on a machine with an NVIDIA GPU and
# CUDA 13's NVRTC but no Rust toolchain: the backend and selector suites and
# the differential tests on CUDA, and `sparse-bench select --backend cuda`
# at 2^24 and 2^26 elements (then the CPU backend at 2^24 on the same host),
# and `sparse-bench train --device cuda` with its per-phase times: first a
# short run (a failing device step ends the training part there, leaving
# the device time to the kernel checks), then the digits MLP of 1,024
# hidden units, then Fashion-MNIST's MLP and CNN as scripts/train-wire.sh
# trains them (per layer, fused, fused and pipelined, and pipelined with
# gradient hooks) where .gpu/fmnist
# holds the images (`python3 scripts/fashion-subset.py .gpu/fmnist`:
# train-wire's 2,000 training images; carry it with the binaries).
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
# then, beside .gpu/bins.tar.xz (and .gpu/fmnist) on the GPU machine:
# bash scripts/gpu-checks.sh
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
stamp() { echo "== $((SECONDS-t0)) s" | tee -a "$1"; }
# The training step on the device (issues 43 and 44): burn's cuda backend
# and the optimizer's kernels on one cubecl client, 2 ranks on threads
# sharing the GPU. A short run first: where the device step fails, the
# longer runs are skipped.
timeout -k 5 90 .gpu/sparse-bench train --device cuda --epochs 1 --train-images 256 --ranks 2 \
    --scheme redsync_rgc --density 0.01 2>&1 | tee "$OUT"/train_smoke.txt
smoke=${PIPESTATUS[0]}
stamp "$OUT"/train_smoke.txt
timeout -k 5 60 .gpu/sparse-bench select --backend cuda --n 16777216 --density 0.001 --min-ms 100 2>&1 | tee "$OUT"/select.txt
stamp "$OUT"/select.txt
timeout -k 5 100 .gpu/differential cuda:: --nocapture 2>&1 | tee "$OUT"/differential.txt
stamp "$OUT"/differential.txt
timeout -k 5 150 .gpu/suite cuda:: --nocapture 2>&1 | tee "$OUT"/suite.txt
stamp "$OUT"/suite.txt
if [ "$smoke" = 0 ]; then
    # Issue 43, item 4: the digits MLP with a 1,024-unit hidden layer,
    # about 280 steps per scheme, per-phase times against dense's.
    timeout -k 5 240 .gpu/sparse-bench train --device cuda --epochs 12 --hidden 1024 --batch 32 --ranks 2 2>&1 | tee "$OUT"/train.txt
    stamp "$OUT"/train.txt
    # Issue 44: train-wire's runs (density 1%, 2,000 images, one epoch)
    # with the local phases on the GPU.
    if [ -f .gpu/fmnist/train-images-idx3-ubyte.gz ]; then
        # hooked: pipelined with burn's backward pass inside the step,
        # each gradient pushed as the pass completes it (--hooks).
        for model in cnn mlp; do for mode in layer fused pipelined hooked; do
            extra=()
            [ $mode = layer ] || extra+=(--bucket-mib 25)
            [ $mode = pipelined ] && extra+=(--pipelined)
            [ $mode = hooked ] && extra+=(--pipelined --hooks)
            timeout -k 5 60 .gpu/sparse-bench train --device cuda --ranks 2 --data fashion-mnist=.gpu/fmnist \
                --model $model --epochs 1 --train-images 2000 --density 0.01 --warmup 0 --seeds 1 \
                --json "${extra[@]}" > "$OUT"/fashion_${model}_${mode}.json 2> "$OUT"/fashion_${model}_${mode}.err
            echo "fashion $model $mode: exit $?, $(grep -c '"bench":"train"' "$OUT"/fashion_${model}_${mode}.json) rows" | tee -a "$OUT"/fashion.txt
            stamp "$OUT"/fashion.txt
        done; done
    else
        echo "no .gpu/fmnist: Fashion-MNIST's device runs skipped" | tee "$OUT"/fashion.txt
    fi
else
    echo "the device step failed (exit $smoke): the training runs are skipped" | tee "$OUT"/train.txt
fi
for n in 16777216 67108864; do for d in 0.01 0.001; do
  [ $n = 16777216 ] && [ $d = 0.001 ] && continue
  timeout -k 5 40 .gpu/sparse-bench select --backend cuda --n $n --density $d --min-ms 100 2>&1 | tee -a "$OUT"/select.txt
done; done
stamp "$OUT"/select.txt
timeout -k 5 35 .gpu/sparse-bench select --backend cpu --n 16777216 --density 0.001 --min-ms 100 2>&1 | tee "$OUT"/select_cpu.txt
echo "== total $((SECONDS-t0)) s"
grep -c "skipped: no CUDA device" "$OUT"/differential.txt "$OUT"/suite.txt
