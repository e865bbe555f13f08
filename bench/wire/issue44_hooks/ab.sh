#!/usr/bin/env bash
# A/B on the shaped link: the old binary (gradients after burn's backward
# pass) against the new (burn gradient hooks, dense groups pipelined), the
# CNN at P = 2, interleaved, the order reversed every other repetition.
set -euo pipefail
cd /work/main
out=${1:?outdir}; reps=${REPS:-3}; p=${P:-2}; model=${MODEL:-cnn}
mkdir -p "$out"
. scripts/wire-job.sh
cluster=(bash scripts/netns-cluster.sh -q --rate 1gbit --queue acks-first --nice -20 --wait ${WAIT:-spin})
read -ra jobs <<< "${JOBS:-}"; jobs=(); IFS=, read -ra jobs <<< "${JOBS:-old pipelined,new pipelined,old pipedlayer,new pipedlayer,new fused}"
for rep in $(seq 1 "$reps"); do
    order=("${jobs[@]}")
    if [ $((rep % 2)) -eq 0 ]; then
        order=(); for ((i=${#jobs[@]}-1; i>=0; i--)); do order+=("${jobs[$i]}"); done
    fi
    for j in "${order[@]}"; do
        set -- $j; bin=/tmp/ab/$1; mode=$2
        extra=()
        case $mode in
            pipelined) extra=(--bucket-mib 25 --pipelined) ;;
            pipedlayer) extra=(--pipelined) ;;
            fused) extra=(--bucket-mib 25) ;;
            hooked) extra=(--bucket-mib 25 --pipelined --hooks) ;;
            hookedlayer) extra=(--pipelined --hooks) ;;
        esac
        f="$out/${model}_${p}_$1_${mode}_r$rep.json"
        echo "$j rep $rep: $(uptime)" | tee -a "$out/load.txt"
        wire_job "$f" '"bench":"train"' -- "${cluster[@]}" --ranks "$p" --timeout 600 -- \
            "$bin" train --transport mpi --data fashion-mnist --model "$model" --epochs 1 \
            --train-images 2000 --density 0.01 --warmup 0 --seeds 1 --json ${SCHEME:+--scheme $SCHEME} "${extra[@]}"
        grep -q '"bench":"train"' "$f" || { echo "no rows in $f" >&2; exit 1; }
        ! grep '"bench":"train"' "$f" | grep -vq "\"ranks\":$p," || { echo "world size not $p in $f" >&2; exit 1; }
    done
done
echo finished | tee -a "$out/load.txt"
