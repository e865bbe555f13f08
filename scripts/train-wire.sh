#!/usr/bin/env bash
# Training steps across a shaped network: `sparse-bench train` of the
# Fashion-MNIST MLP and CNN over MPI across network namespaces
# (scripts/netns-cluster.sh, one rank each), per layer, fused (one
# collective per bucket), fused and pipelined, and (MODES) hooked into
# burn's backward pass, with the dense baseline
# of each run; then `sparse-bench step` over the link calibrated in the
# same run predicts each measured step from its own local phases (forward
# and backward, selection, update: measured by train) plus the simulated
# communication. Prints the table of bench/RESULTS.md's "Training steps on
# a shaped link".
# The model has the shaper's bucket (MODEL_BUCKET=veth: its size, the
# veth's own speed as its peak), and each row's communication is simulated
# with the bucket at the level that row's local phases refill at the rate
# (scripts/train-wire-table.py): a loop's steady state, not a full bucket.
# DGC runs without its warm-up (--warmup 0), at the density the simulated
# step assumes.
#
# Usage: sudo bash scripts/train-wire.sh [OUTDIR]   (root: namespaces)
# Environment (defaults in brackets):
#   RATE        each link's rate, tc units [1gbit]
#   PS          rank counts [2 3 4]
#   MODELS      train's --model values [mlp cnn]
#   DENSITY     the schemes' density [0.01]
#   IMAGES      --train-images, per run [2000]
#   BUCKET_MIB  the fused runs' bucket cap [25]
#   NICE        the ranks' nice (netns-cluster.sh --nice) [-20]
#   WAIT        the ranks' wait between polls (netns-cluster.sh --wait:
#               spin, yield, sleep, sleep:MICROSECONDS) [that script's
#               default: sleep:20us where ranks outnumber the cores, else
#               spin], the calibrations' jobs included
#   QUEUE       the port queues' order (netns-cluster.sh --queue) [acks-first]
#   MODEL_BUCKET  the shaper's bucket in the model (scripts/wire-calibrate.sh):
#               veth, fit or none (a plain alpha-beta link) [veth]
#   LATENCY     the model's latency at each P: shift (calibrate --latency
#               shift on the job's P ranks: a round among all of them, the
#               cores' sharing included; calibrated_P.net) or ping-pong (the
#               P = 2 calibration's at every P) [shift]
#   REPS        jobs per model, P and mode [1]: the modes interleaved (the
#               order reversed every other repetition), the table taking
#               each field's median over them (train_M_P_MODE_rR.json)
#   MODES       the modes run [layer fused pipelined]: layer, fused
#               (--bucket-mib), pipelined (and --pipelined: the gradients
#               after the pass), hooked (and --hooks: each gradient as
#               burn's backward pass completes it)
#   SCHEMES     train's schemes (--scheme each) [all]
#   BIN         a built sparse-bench (built with --features mpi when absent)
#   JOB_TIMEOUT seconds per train job [600]
# netns-cluster.sh makes the ranks sleep between polls where they
# outnumber the cores (--wait) and binds each to CPUs of its own where
# they do not (--bind); the raw JSON lines stay in OUTDIR
# [target/train-wire-RATE].
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${RATE:-1gbit}
ps=${PS:-2 3 4}
models=${MODELS:-mlp cnn}
reps=${REPS:-1}
case $reps in ''|*[!0-9]*|0) echo "train-wire: REPS=$reps: give a positive number" >&2; exit 2 ;; esac
modes=${MODES:-layer fused pipelined}
# train's flags of a mode beyond the schemes' (one a line).
mode_flags() { # MODE
    case $1 in
        layer) ;;
        fused) printf '%s\n' --bucket-mib "$bucket" ;;
        pipelined) printf '%s\n' --bucket-mib "$bucket" --pipelined ;;
        hooked) printf '%s\n' --bucket-mib "$bucket" --pipelined --hooks ;;
        *) echo "train-wire: MODES: $1: give layer, fused, pipelined or hooked" >&2; return 2 ;;
    esac
}
schemes=()
for s in ${SCHEMES:-}; do schemes+=(--scheme "$s"); done
density=${DENSITY:-0.01}
images=${IMAGES:-2000}
bucket=${BUCKET_MIB:-25}
for mode in $modes; do mode_flags "$mode" > /dev/null || exit 2; done
nice=${NICE--20}
queue=${QUEUE:-acks-first}
export MODEL_BUCKET=${MODEL_BUCKET:-veth}
latency=${LATENCY:-shift}
case $latency in shift|ping-pong) ;; *) echo "train-wire: LATENCY=$latency: give shift or ping-pong" >&2; exit 2 ;; esac
wait_mode=${WAIT:-}
# netns-cluster.sh's check of --wait, here before anything is built or run.
. scripts/mpi-wait.sh
[ -z "$wait_mode" ] || mpi_wait_ok "$wait_mode" \
    || { echo "train-wire: WAIT=$wait_mode: give spin, yield, sleep or sleep:MICROSECONDS (1 to 1000000)" >&2; exit 2; }
out=${1:-target/train-wire-$rate}
mkdir -p "$out"
[ -d /usr/share/datasets/fashion-mnist ] || {
    echo "train-wire: Fashion-MNIST is missing: apt-get install dataset-fashion-mnist" >&2
    exit 1
}
if [ -z "${BIN:-}" ]; then
    cargo build --release -q -p bench --bin sparse-bench --features mpi
    cp "${CARGO_TARGET_DIR:-target}/release/sparse-bench" "$out/sparse-bench"
    BIN=$out/sparse-bench
fi
. scripts/wire-job.sh
cluster=(bash scripts/netns-cluster.sh -q --rate "$rate" --queue "$queue" ${nice:+--nice "$nice"} ${wait_mode:+--wait "$wait_mode"})

# Runs a train job on P ranks into FILE, its rows kept where the job
# hangs in MPI_Finalize (scripts/wire-job.sh).
train_job() { # FILE P ARGS...
    local f=$1 p=$2 rc
    shift 2
    wire_job "$f" '"bench":"train"' -- "${cluster[@]}" --ranks "$p" --timeout "${JOB_TIMEOUT:-600}" -- \
        "$BIN" train "$@"
    rc=$wire_rc
    grep -q '"bench":"train"' "$f" || { echo "train-wire: $f: no rows (exit $rc)" >&2; exit 1; }
    [ "$rc" -eq 0 ] || echo "train-wire: $f: complete, but the job ended with exit $rc (a hang in MPI_Finalize?)" | tee -a "$out/load.txt" >&2
    ! grep '"bench":"train"' "$f" | grep -vq "\"ranks\":$p," \
        || { echo "train-wire: $f: the world size is not $p" >&2; exit 1; }
}

echo "load before calibrate: $(uptime)" | tee "$out/load.txt"
echo "wait: ${wait_mode:-the default of netns-cluster.sh (spin where ranks do not outnumber the cores, else sleep:20us)}" | tee -a "$out/load.txt"
bash scripts/wire-calibrate.sh "$out" "$BIN" --rate "$rate" --queue "$queue" ${nice:+--nice "$nice"} ${wait_mode:+--wait "$wait_mode"}
# The link at each P: the P = 2 calibration's, or with LATENCY=shift a
# calibration on the job's P ranks whose latency is the empty shift among
# all of them (the bucket's lines copied): calibrated_P.net, which
# train-wire-table.py takes where it exists.
net_of() { # P
    if [ "$latency" = shift ]; then echo "$out/calibrated_$1.net"; else echo "$out/calibrated.net"; fi
}
for p in $ps; do
    [ "$latency" = shift ] || continue
    wire_job "$out/calibrate_$p.txt" '^fit: alpha' -- "${cluster[@]}" --ranks "$p" --timeout "${JOB_TIMEOUT:-600}" -- \
        "$BIN" calibrate --max-mib 16 --fit large --latency shift --out "$(net_of "$p")"
    grep -q "world size $p:" "$out/calibrate_$p.txt" && grep -q '^fit: alpha' "$out/calibrate_$p.txt" \
        || { echo "train-wire: the calibration on $p ranks failed (exit $wire_rc)" >&2; exit 1; }
    grep -E '^(# tbf|bucket_bytes|peak_bytes_per_s)' "$out/calibrated.net" >> "$(net_of "$p")" || true
    echo "link at P = $p: $(grep -v '^#' "$(net_of "$p")" | tr '\n' ' ')" | tee -a "$out/load.txt"
done
for model in $models; do
    for p in $ps; do
        # A run's jobs only: an earlier run's into the same OUTDIR would
        # enter the table's medians.
        rm -f "$out/train_${model}_${p}_"*.json
        for rep in $(seq 1 "$reps"); do
            order=$modes
            # shellcheck disable=SC2086
            [ $((rep % 2)) -eq 0 ] && order=$(printf '%s\n' $modes | tac)
            for mode in $order; do
                mapfile -t extra < <(mode_flags "$mode")
                extra+=("${schemes[@]}")
                f="$out/train_${model}_${p}_${mode}.json"
                [ "$reps" -eq 1 ] || f="$out/train_${model}_${p}_${mode}_r$rep.json"
                echo "$model P=$p $mode (repetition $rep): $(uptime)" | tee -a "$out/load.txt"
                train_job "$f" "$p" --transport mpi --data fashion-mnist --model "$model" --epochs 1 \
                    --train-images "$images" --density "$density" --warmup 0 --seeds 1 --json "${extra[@]}"
            done
        done
        # The simulated communication of the same step over the same link.
        # MPICH's allreduce for the dense layers, as train --transport mpi
        # runs them (not the ring where P is not a power of two).
        "$BIN" step --model "fashion_$model" --ranks "$p" --network "$(net_of "$p")" \
            --density "$density" --bucket-mib "$bucket" --dense mpich --json > "$out/step_${model}_${p}.json"
    done
done
STEP_BIN=$BIN DENSITY=$density python3 scripts/train-wire-table.py "$out" "$rate" "$bucket"
