# Sourced by scripts/netns-cluster.sh and scripts/train-wire.sh: the check
# of a wait for SPARSE_MPI_WAIT before anything is made or run.
#
# mpi_wait_ok WAIT  succeeds where WAIT is a form sparse_coll::MpiWait
# parses: spin, yield, sleep or sleep:N / sleep:Nus with N from 1 to
# 1000000 (written without leading zeros).
mpi_wait_ok() {
    [[ $1 =~ ^(spin|yield|sleep|sleep:([1-9][0-9]{0,6})(us)?)$ ]] \
        && [ "${BASH_REMATCH[2]:-1}" -le 1000000 ]
}
