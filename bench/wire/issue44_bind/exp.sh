#!/usr/bin/env bash
# exp.sh MODE TAG [wrapper...]: one RGC CNN job at P=2, prints step/grad/comm/cpu
set -uo pipefail
cd /work/main
mode=$1; tag=$2; shift 2
extra=(--bucket-mib 25 --pipelined); [ "$mode" = hooked ] && extra+=(--hooks)
out=/tmp/hk/x_${tag}_${mode}_$(date +%s%N).json
bash scripts/netns-cluster.sh -q --rate 1gbit --queue acks-first --nice -20 --wait ${WAIT:-spin} --ranks 2 --timeout 300 -- \
  "$@" /tmp/hk/sb train --transport mpi --data fashion-mnist --model cnn --epochs 1 --train-images ${IMAGES:-1000} --density 0.01 --warmup 0 --seeds 1 --json --scheme redsync_rgc "${extra[@]}" > "$out" 2>/dev/null
python3 - "$out" "$tag" "$mode" <<'P'
import json,sys
for l in open(sys.argv[1]):
    if '"bench":"train"' in l:
        d=json.loads(l)
        if d["collective"]!="dense_allreduce":
            print(sys.argv[2],sys.argv[3],"step %.2f grad %.2f comm %.2f cpu %.2f"%(d["step_ms"],d["grad_ms"],d["comm_ms"],d["ranks_cpu_ms"]))
P
