#!/bin/bash
# A/B: the binary before the joint entry (572cdf7) and after (2524366), alternated.
cd /work/main
i=0
for which in old new new old old new; do
  i=$((i+1))
  BIN=/tmp/sb-$([ $which = new ] && echo joint || echo old) MODELS=mlp PS="3 4" MODES="layer fused" REPS=1 bash scripts/train-wire.sh /tmp/ab/${i}_$which > /tmp/ab/${i}_$which.log 2>&1 || echo "run $i $which failed"
done
echo AB DONE
