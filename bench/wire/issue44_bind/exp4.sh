#!/usr/bin/env bash
# exp4.sh MODEL MODE WAIT: one RGC job at P=2 (bound), prints step/grad/comm/cpu
set -uo pipefail
cd /work/main
model=$1; mode=$2; wait=$3
case $mode in fused) extra=(--bucket-mib 25);; pipelined) extra=(--bucket-mib 25 --pipelined);; hooked) extra=(--bucket-mib 25 --pipelined --hooks);; esac
out=/tmp/hk/z_${model}_${mode}_${wait}_$(date +%s%N).json
bash scripts/netns-cluster.sh -q --rate 1gbit --queue acks-first --nice -20 --wait $wait --ranks 2 --timeout 300 -- \
  /tmp/hk/sb2 train --transport mpi --data fashion-mnist --model $model --epochs 1 --train-images ${IMAGES:-2000} --density 0.01 --warmup 0 --seeds 1 --json --scheme ${SCHEME:-redsync_rgc} "${extra[@]}" > "$out" 2>/dev/null
python3 - "$out" "$model $mode $wait" <<'P'
import json,sys
for l in open(sys.argv[1]):
    if '"bench":"train"' in l:
        d=json.loads(l)
        print(sys.argv[2],d["scheme"],"step %.3f grad %.3f sel %.3f comm %.3f cpu %.2f"%(d["step_ms"],d["grad_ms"],d["select_ms"],d["comm_ms"],d["ranks_cpu_ms"]))
P
