# Sourced by scripts/wire-bench.sh and scripts/train-wire.sh: one MPI job
# across the namespaces whose output is kept even when MPI_Finalize hangs.
#
# wire_job FILE DONE -- COMMAND...  runs COMMAND (the cluster script and
# the job) with its output in FILE. Rank 0 prints its rows before
# MPI_Finalize, which can hang on UCX's TCP (openucx/ucx#8738): once FILE
# holds a line matching DONE (grep's pattern) and has not grown for 20 s,
# the job is stopped (the cluster script cleans up on TERM). Sets
# wire_rc to the job's exit status (143 for a job stopped so).
wire_job() {
    local f=$1 done_pattern=$2 job size=-1 still=0
    shift 3
    wire_rc=0
    "$@" > "$f" &
    job=$!
    while kill -0 "$job" 2>/dev/null; do
        if grep -q "$done_pattern" "$f" && [ "$(stat -c %s "$f")" = "$size" ]; then
            still=$((still + 1))
        else
            still=0
        fi
        size=$(stat -c %s "$f")
        if [ "$still" -gt 20 ]; then kill -TERM "$job"; break; fi
        sleep 1
    done
    wait "$job" || wire_rc=$?
}
