#!/usr/bin/env bash
# The simulator against a real, bandwidth-limited network: network
# namespaces joined by tbf-shaped veths (scripts/netns-cluster.sh), one MPI
# rank each over UCX's TCP. Calibrates the link (scripts/wire-calibrate.sh:
# sparse-bench calibrate at P = 2, shaped and unshaped, and the shaper's
# bucket), measures every registered algorithm and the dense baselines
# (sparse-bench allreduce --transport mpi: medians of warm calls) at each P
# of $PS, n of $NS and density of $DENSITIES, simulates the same calls over
# the calibrated network file (sparse-bench scale --warm --compute-factor 1
# --reps REPS --floors: the benchmark's loop, barriers and floors included,
# so that a shaper's bucket in the model starts each call where the
# measured one did)
# and prints the tables of bench/RESULTS.md: measured beside simulated, the
# error of every row, the load of the machine (uptime) beside each table.
#
# Usage: sudo bash scripts/wire-bench.sh [OUTDIR]   (root: namespaces)
# Environment (defaults in brackets):
#   RATE       each link's rate, tc units [1gbit]
#   PS         rank counts [2 3 4]
#   NS         dimensions [1048576 4194304]
#   DENSITIES  densities [0.001 0.01]
#   REPS       timed warm calls per algorithm [5]
#   FIT        calibrate's --fit [large: the bandwidth of the messages of
#              1 MiB and more; tbf's bucket lets smaller ones through
#              faster than the rate, and the relative fit, pulled by them,
#              doubles the bandwidth]
#   NICE       the ranks' scheduling priority (netns-cluster.sh --nice);
#              empty for none [-20: MPICH's ranks poll, and on a busy machine
#              a rank's wait for a core is what would be measured]
#   MODEL_BUCKET  the shaper's bucket in the model (scripts/wire-calibrate.sh):
#              veth (the bucket, at the veth's unshaped speed while it
#              holds tokens), fit (older) or none [veth]
#   GAP_MS     idle milliseconds before each timed call, measured
#              (allreduce --gap-ms) and simulated (scale --gap-ms) alike: at
#              least the bucket's refill time, so that each call starts
#              from a full bucket [0]
#   QUEUE      the port queues' order (netns-cluster.sh --queue): acks-first
#              (pure TCP acknowledgements ahead of data) or fifo [acks-first]
#   SETTLE_MS  idle milliseconds before each algorithm's first call
#              (allreduce --settle-ms): the bucket refills, so that each
#              algorithm starts from a full bucket as its simulation does,
#              not from what the algorithms before it left [10]
#   BIN        a built sparse-bench (built with --features mpi when absent)
#   JOB_TIMEOUT  seconds per allreduce job [300]
# The tables regenerate from a clean checkout with this command (and the
# same environment); the raw JSON lines stay in OUTDIR [target/wire-RATE].
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${RATE:-1gbit}
ps=${PS:-2 3 4}
ns=${NS:-1048576 4194304}
densities=${DENSITIES:-0.001 0.01}
reps=${REPS:-5}
fit=${FIT:-large}
nice=${NICE--20}
gap=${GAP_MS:-0}
settle=${SETTLE_MS:-10}
queue=${QUEUE:-acks-first}
export MODEL_BUCKET=${MODEL_BUCKET:-veth}
out=${1:-target/wire-$rate}
mkdir -p "$out"
if [ -z "${BIN:-}" ]; then
    cargo build --release -q -p bench --bin sparse-bench --features mpi
    # A copy, so that a build running beside this one cannot swap it.
    cp "${CARGO_TARGET_DIR:-target}/release/sparse-bench" "$out/sparse-bench"
    BIN=$out/sparse-bench
fi
. scripts/wire-job.sh
cluster=(bash scripts/netns-cluster.sh -q --rate "$rate" --queue "$queue" ${nice:+--nice "$nice"})

echo "load before calibrate: $(uptime)" | tee "$out/load.txt"
bash scripts/wire-calibrate.sh "$out" "$BIN" --rate "$rate" --queue "$queue" ${nice:+--nice "$nice"}
for n in $ns; do
    for d in $densities; do
        for p in $ps; do
            f="$out/measured_${p}_${n}_${d}.json"
            echo "n=$n density=$d P=$p: $(uptime)" | tee -a "$out/load.txt"
            # A job whose last row (the overlap line) is out and that hangs
            # in MPI_Finalize is stopped, its output kept (scripts/wire-job.sh).
            wire_job "$f" '"bench":"overlap"' -- "${cluster[@]}" --ranks "$p" --timeout "${JOB_TIMEOUT:-300}" -- \
                "$BIN" allreduce --transport mpi --n "$n" --density "$d" --reps "$reps" --gap-ms "$gap" --settle-ms "$settle" --json
            rc=$wire_rc
            if [ "$rc" -ne 0 ]; then
                grep -q '"algo":"mpi_allreduce"' "$f" || { echo "wire-bench: $f: the job failed (exit $rc)" >&2; exit 1; }
                echo "wire-bench: $f: complete, but the job ended with exit $rc (a hang in MPI_Finalize?)" | tee -a "$out/load.txt" >&2
            fi
            grep -q "\"ranks\":$p[,}]" "$f" && ! grep -v "\"ranks\":$p[,}]" "$f" | grep -q '"bench":"allreduce"' \
                || { echo "wire-bench: $f: the world size is not $p" >&2; exit 1; }
        done
        "$BIN" scale --ranks "$(echo $ps | tr ' ' ,)" --n "$n" --density "$d" --network "$out/calibrated.net" \
            --compute-factor 1 --warm --gap-ms "$gap" --reps "$reps" --floors --json > "$out/simulated_${n}_${d}.json"
    done
done
python3 scripts/wire-table.py "$out" "$rate (calibrate --fit $fit; model bucket $MODEL_BUCKET; gap $gap ms; settle $settle ms; queue $queue)"
