#!/bin/bash
B=/work/target-main/debug/mpi-suite
for n in 2 3 4 5; do
  for w in yield sleep:20us auto spin; do
    s=$(date +%s.%N)
    if [ "$w" = auto ]; then env -u SPARSE_MPI_WAIT MPIEXEC_TIMEOUT=400 mpiexec -n $n $B suite > out_${n}_$w.log 2>&1; rc=$?
    else SPARSE_MPI_WAIT=$w MPIEXEC_TIMEOUT=400 mpiexec -n $n $B suite > out_${n}_$w.log 2>&1; rc=$?; fi
    t=$(echo "$(date +%s.%N)-$s"|bc)
    chosen=$(grep -o "rank 0 waited [^:]*" out_${n}_$w.log | awk '{print $4}')
    echo "n=$n wait=$w chosen=$chosen rc=$rc seconds=$t"
  done
done
