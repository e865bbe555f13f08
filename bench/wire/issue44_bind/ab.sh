#!/usr/bin/env bash
# Gradient hooks with the ranks bound to cores of their own and unbound
# (scripts/netns-cluster.sh --bind): the Fashion-MNIST CNN at P = 2 on the
# 1 Gb/s link, every scheme, one binary, the jobs interleaved and the order
# reversed every other repetition. JOBS: "BIND MODE [WAIT]", BIND cores
# or none, WAIT the ranks' wait (netns-cluster.sh --wait; spin where not
# given, a tag of its own otherwise: bound-yield). Tables: python3 bench/wire/issue44_hooks/table.py OUT COLUMNS.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?outdir}; reps=${REPS:-3}; p=${P:-2}; model=${MODEL:-cnn}
bin=${BIN:?a sparse-bench built with --features mpi}
mkdir -p "$out"
. scripts/wire-job.sh
IFS=, read -ra jobs <<< "${JOBS:-cores pipelined,cores hooked,none pipelined,none hooked}"
for rep in $(seq 1 "$reps"); do
    order=("${jobs[@]}")
    if [ $((rep % 2)) -eq 0 ]; then
        order=(); for ((i=${#jobs[@]}-1; i>=0; i--)); do order+=("${jobs[$i]}"); done
    fi
    for j in "${order[@]}"; do
        set -- $j; bind=$1; mode=$2; wait=${3:-spin}
        case $mode in
            pipelined) extra=(--bucket-mib 25 --pipelined) ;;
            hooked) extra=(--bucket-mib 25 --pipelined --hooks) ;;
            pipedlayer) extra=(--pipelined) ;;
            hookedlayer) extra=(--pipelined --hooks) ;;
            fused) extra=(--bucket-mib 25) ;;
            *) echo "unknown mode $mode" >&2; exit 2 ;;
        esac
        tag=$([ "$bind" = cores ] && echo bound || echo unbound)
        [ "$wait" = spin ] || tag+="-$wait"
        f="$out/${model}_${p}_${tag}_${mode}_r$rep.json"
        echo "$j rep $rep: $(uptime)" | tee -a "$out/load.txt"
        wire_job "$f" '"bench":"train"' -- bash scripts/netns-cluster.sh -q --rate 1gbit --queue acks-first \
            --nice -20 --wait "$wait" --bind "$bind" --ranks "$p" --timeout 600 -- \
            "$bin" train --transport mpi --data fashion-mnist --model "$model" --epochs 1 \
            --train-images 2000 --density 0.01 --warmup 0 --seeds 1 --json ${SCHEME:+--scheme $SCHEME} "${extra[@]}"
        grep -q '"bench":"train"' "$f" || { echo "no rows in $f" >&2; exit 1; }
        ! grep '"bench":"train"' "$f" | grep -vq "\"ranks\":$p," || { echo "world size not $p in $f" >&2; exit 1; }
    done
done
echo finished | tee -a "$out/load.txt"
