#!/usr/bin/env bash
# The Fashion-MNIST convergence table of bench/RESULTS.md ("Training
# accuracy"): every
# scheme at densities 1% and 0.1% against its dense counterpart, on the
# threads of this machine, with the same hyperparameters and data order as
# the dense baselines. Runs, one after another, each timed:
#   cnn_p4  the CNN at P = 4, seed 1, 8 epochs, learning rate 0.02
#   cnn_p8  the CNN at P = 8, seed 1, 8 epochs, learning rate 0.02 (not in
#           the default list: about an hour more)
#   cnn_p4_s2, cnn_p4_s3
#           cnn_p4 with seed 2, and with seed 3 (not in the default list:
#           about an hour each); the tables average cnn_p4 over the seeds
#           present
#   mlp_p4  the MLP at P = 4, seeds 1-3, 10 epochs, learning rate 0.05
#   mlp_p8  the MLP at P = 8, seed 1, 10 epochs, learning rate 0.05
# then, under mpiexec -n 2, one epoch of the CNN on 6,400 images per scheme
# for the step times against MPI_Allreduce (step_mpi2). Each run writes its
# JSON lines, train.csv, sparsity.csv and the two plots under OUTDIR/NAME;
# the markdown of the tables is printed at the end.
# Usage: bash scripts/fashion-table.sh [OUTDIR] [RUN...]
# (needs dataset-fashion-mnist, and MPICH for step_mpi2; see test.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/fashion-table}
shift || true
runs=("$@")
[ "${#runs[@]}" -gt 0 ] || runs=(cnn_p4 mlp_p4 mlp_p8 step_mpi2)
mkdir -p "$out"
cargo build --release -q -p bench --bin sparse-bench --features mpi
bin=target/release/sparse-bench
common=(--data fashion-mnist --warmup 2 --density 0.01 --density 0.001 --json)
for run in "${runs[@]}"; do
  case "$run" in
    cnn_p4) args=(--model cnn --ranks 4 --seeds 1 --epochs 8 --lr 0.02) ;;
    cnn_p8) args=(--model cnn --ranks 8 --seeds 1 --epochs 8 --lr 0.02) ;;
    cnn_p4_s[23]) args=(--model cnn --ranks 4 --seeds 1 --first-seed "${run#cnn_p4_s}" --epochs 8 --lr 0.02) ;;
    mlp_p4) args=(--model mlp --ranks 4 --seeds 3 --epochs 10 --lr 0.05) ;;
    mlp_p8) args=(--model mlp --ranks 8 --seeds 1 --epochs 10 --lr 0.05) ;;
    step_mpi2)
      start=$SECONDS
      MPIEXEC_TIMEOUT=1800 mpiexec -n 2 "$bin" train --transport mpi --data fashion-mnist --model cnn \
        --epochs 1 --train-images 6400 --lr 0.05 --density 0.01 --density 0.001 --json > "$out/$run.jsonl"
      grep -q '"ranks":2' "$out/$run.jsonl" || { echo "world size is not 2" >&2; exit 1; }
      echo "$run: $((SECONDS - start)) s" | tee "$out/$run.time"
      continue ;;
    *) echo "unknown run $run" >&2; exit 1 ;;
  esac
  start=$SECONDS
  "$bin" train "${common[@]}" "${args[@]}" --out "$out/$run" > "$out/$run.jsonl"
  echo "$run: $((SECONDS - start)) s" | tee "$out/$run.time"
done
python3 scripts/fashion-table.py "$out"
