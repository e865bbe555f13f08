#!/usr/bin/env bash
# Calibrates the simulator against the MPI engine on this machine and
# prints a comparison table (bench/RESULTS.md's "Real links" shows the
# same comparison across shaped links): the MPI transport's
# latency and time per byte (sparse-bench calibrate under mpiexec -n 2),
# then every algorithm at P = 2, 3 and 4 measured under mpiexec and
# simulated over the calibrated network with local computation counted
# (each rank's thread CPU time, factor 1), warm calls in both.
# Usage: bash scripts/calibrate.sh [OUTDIR]   (needs MPICH; see test.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/calibrate}
mkdir -p "$out"
n=${N:-1048576}
density=${DENSITY:-0.001}
cargo build --release -q -p bench --bin sparse-bench --features mpi
bin=target/release/sparse-bench
MPIEXEC_TIMEOUT=600 mpiexec -n 2 "$bin" calibrate --out "$out/calibrated.net" | tee "$out/calibrate.txt"
for p in 2 3 4; do
  MPIEXEC_TIMEOUT=900 mpiexec -n "$p" "$bin" allreduce --transport mpi --n "$n" --density "$density" --json \
    > "$out/measured_$p.json"
  grep -q "\"ranks\":$p" "$out/measured_$p.json" || { echo "world size is not $p" >&2; exit 1; }
done
"$bin" scale --ranks 2,3,4 --n "$n" --density "$density" --network "$out/calibrated.net" \
  --compute-factor 1 --warm --json > "$out/simulated.json"
python3 - "$out" <<'PY'
import json, sys, glob
out = sys.argv[1]
measured = {}
for f in glob.glob(f"{out}/measured_*.json"):
    for line in open(f):
        d = json.loads(line)
        if d.get("bench") == "allreduce" and d.get("algo") not in (None, "auto"):
            measured[(d["algo"], d["ranks"])] = d["ms"]
print("| algorithm | P | measured ms (mpiexec) | simulated ms (calibrated, compute counted) | error |")
print("|---|---|---|---|---|")
errs = []
for line in open(f"{out}/simulated.json"):
    d = json.loads(line)
    if d["kind"] != "scale":
        continue
    key = (d["algo"], d["ranks"])
    if key not in measured:
        continue
    m, s = measured[key], d["sim_ms"]
    e = (s - m) / m
    errs.append(abs(e))
    print(f"| `{d['algo']}` | {d['ranks']} | {m:.3f} | {s:.3f} | {100*e:+.0f}% |")
errs.sort()
if errs:
    print(f"\nmedian |error| {100*errs[len(errs)//2]:.0f}%, largest {100*errs[-1]:.0f}%")
PY
