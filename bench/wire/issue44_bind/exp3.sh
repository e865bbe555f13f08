#!/usr/bin/env bash
# exp3.sh P TAG [wrapper...]: one RGC MLP job fused at P ranks
set -uo pipefail
cd /work/main
p=$1; tag=$2; shift 2
out=/tmp/hk/y_${tag}_${p}_$(date +%s%N).json
bash scripts/netns-cluster.sh -q --rate 1gbit --queue acks-first --nice -20 --ranks $p --timeout 300 -- \
  "$@" /tmp/hk/sb train --transport mpi --data fashion-mnist --model mlp --epochs 1 --train-images 2000 --density 0.01 --warmup 0 --seeds 1 --json --scheme redsync_rgc --bucket-mib 25 > "$out" 2>/dev/null
python3 - "$out" "$tag" "$p" <<'P'
import json,sys
for l in open(sys.argv[1]):
    if '"bench":"train"' in l:
        d=json.loads(l)
        print(sys.argv[2],sys.argv[3],d["collective"],"step %.2f grad %.2f comm %.2f agree %.2f cpu %.2f"%(d["step_ms"],d["grad_ms"],d["comm_ms"],d["agree_ms"],d["ranks_cpu_ms"]))
P
