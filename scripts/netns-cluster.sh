#!/usr/bin/env bash
# A cluster of P network namespaces on this machine, one MPI rank each,
# joined through a bridge by veth pairs shaped to a rate with tc's tbf, and
# one MPI job across them; everything it made is removed when it ends,
# however it ends (a trap on EXIT, INT and TERM; a rank killed with
# `kill -9` fails the job, and the script still cleans).
#
# Usage: scripts/netns-cluster.sh [options] [P [RATE]] -- COMMAND [ARGS...]
#   (P and RATE may be given bare, before `--`: `netns-cluster.sh 4 1gbit --
#   prog` is `netns-cluster.sh --ranks 4 --rate 1gbit -- prog`)
#   -n, --ranks P       namespaces and ranks, 2 to 64 (default 2)
#   -r, --rate RATE     each link's rate, tc's units (1gbit, 10gbit, 500mbit)
#                       or "none" for unshaped veths (default 1gbit)
#   --burst BYTES       tbf's bucket (default: 2 ms at the rate, at least
#                       16 KiB). A message that finds the bucket full passes
#                       its first BYTES at the veth's own speed: the smaller
#                       the bucket, the closer to a NIC that serialises every
#                       byte at the rate, but each refill is a timer and
#                       softirq, and a timer served later than the bucket
#                       lasts loses rate: with 0.5 ms, three ranks in a ring
#                       on 2 cores got 40% of 1 Gb/s
#                       (docs/notes/2026-11-27-tbf-bucket.md)
#   --limit BYTES       tbf's queue (default: 2 x the burst, at least 4 MiB)
#   --queue acks-first|fifo
#                       the order of that queue (default acks-first): pure
#                       TCP acknowledgements (IPv4 TCP packets under 64
#                       bytes) leave before queued data, the rest in
#                       arrival order (an htb of two classes, by priority,
#                       under the tbf, which still shapes both). A rank's
#                       port queue carries the data coming to it and the
#                       acknowledgements of the data it sends; where two
#                       ranks send to one at once (a shifted exchange whose
#                       ranks drift a round apart), data fills the 4 MiB
#                       queue, 335 ms at 100 Mb/s where a switch's port
#                       buffer holds well under a millisecond at its rate,
#                       and the receiver's own sends wait on acknowledgements
#                       stuck behind it (1 MB shifted exchanges at P = 4, 100
#                       Mb/s: 555-756 ms fifo, 503-515 acks-first, 505
#                       alpha-beta; docs/notes/2026-11-28-acks-first.md).
#                       fifo: one queue, as
#                       tbf alone
#   --nice N            run each rank's scheduling group at nice N (-20 to
#                       19; the rank's autogroup, as Hydra starts each rank
#                       in a session of its own; plain nice where the kernel
#                       has no autogroups). MPICH's ranks poll: on a machine
#                       busy with other work a rank waits for a core while
#                       its peer spins, and that wait (4 to 100 ms here), not
#                       the network, is what the job measures. -20 takes the
#                       cores from everything else while the job runs
#   --wait WAIT         how the ranks' MpiTransport waits (SPARSE_MPI_WAIT:
#                       spin, yield, sleep or sleep:MICROSECONDS; default sleep:20us
#                       where ranks outnumber this machine's cores, else
#                       spin): polling ranks on shared cores wait for each
#                       other's time slices; sleeping ones give the core up;
#                       yielding ones (yield) hand it to a thread waiting
#                       for it (a backward pass hooked on the rank's one
#                       core). Both send eagerly (UCX_RNDV_THRESH=inf unless
#                       set: a rendezvous handshake waits for the peer's
#                       poll)
#   --bind cores|none   cores: bind each rank to CPUs of its own (taskset):
#                       the CPUs this script may use split evenly among the
#                       ranks, a physical core's hyperthreads kept together
#                       where the split allows (Hydra's `-bind-to core:K`
#                       with K = cores / ranks, on a cluster); the default
#                       where ranks do not outnumber the CPUs (and taskset
#                       is there), else none (unbound: the kernel places
#                       every thread). Unbound, a rank's extra threads (a
#                       backward pass hooked on a thread of its own, a
#                       progress thread) land on a peer's CPU and take its
#                       time: the CNN at P = 2 with gradient hooks took
#                       1.32-1.43x the steps fed after the pass unbound,
#                       0.97-1.10x bound
#                       (docs/notes/2026-11-29-hooked-steps-core-binding.md)
#   --mtu BYTES         the veths' MTU (default 1500)
#   --timeout S         MPIEXEC_TIMEOUT of the job (default 600)
#   --stats FILE        write each rank's veth counters of the job to FILE:
#                       lines "rank R tx_bytes N rx_bytes N
#                       acks_first_packets N" (the last: packets both its
#                       queues sent acknowledgements first; 0 with --queue
#                       fifo or unshaped)
#   --shaping FILE      write the shaper's settings to FILE (lines
#                       "rate_bps N", "burst_bytes N", "limit_bytes N", "queue Q";
#                       nothing but "rate none" unshaped), for a model of
#                       the link (scripts/wire-calibrate.sh)
#   -q, --quiet         print only the job's output and errors
#   --clean             remove what dead runs of this script left behind
#                       (after a `kill -9` of the script itself), then exit
#
# Layout (all in namespaces; the root namespace gets nothing, so the host's
# firewall and interfaces neither see nor filter the traffic):
#   spc-PID-sw   the switch: the bridge spc-PID-br and ports spc-PID-pI
#   spc-PID-nsI  rank I: veth spc-PID-vI, address 198.18.0.(I+1)/24, lo up
# Each veth pair is shaped in both directions: the port's egress (tbf on
# spc-PID-pI) shapes what goes into rank I, the rank side's egress (tbf on
# spc-PID-vI) what leaves it. Addresses are from the benchmarking range
# 198.18.0.0/15 (RFC 2544) only; concurrent clusters do not collide, each
# sees only its own bridge.
#
# The job: mpiexec -n 1 -env UCX_NET_DEVICES spc-PID-v0 ip netns exec
# spc-PID-ns0 COMMAND : -n 1 ... ; Hydra's proxy stays in the root
# namespace and talks PMI to each rank over an inherited socket (PMI_FD),
# which crosses the namespace boundary. Every rank gets UCX_TLS=tcp,self:
# the namespaces share the host name and /dev/shm, and with UCX's default
# transports the ranks find each other's shared memory and no byte crosses
# the veths (measured: 176 bytes through a veth for a 1 MiB ping-pong's
# hundreds of megabytes). MPIR_CVAR_NOLOCAL=1 (MPICH's own node-local
# paths off) is set as well; with Debian's ch4:ucx MPICH the bytes crossed
# the veths with or without it. The veth counters after the job show what
# crossed (printed on stderr; --stats).
#
# Needs root, iproute2 (ip, tc) and MPICH's mpiexec; where a namespace
# cannot be made it says why and exits non-zero, leaving nothing. The
# exit status is the job's (mpiexec's), or 2 for a usage or setup error.
set -euo pipefail

prog=netns-cluster
prefix="spc-$$-"
ranks=2
rate=1gbit
burst=""
limit=""
queue=acks-first
mtu=1500
timeout=600
stats=""
shaping_file=""
nice=""
wait_mode=""
bind=""
quiet=0
npos=0

say() { [ "$quiet" -eq 1 ] || echo "$prog: $*" >&2; }
fail() { echo "$prog: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }

# Removes the namespaces of runs of this script whose process is gone.
clean_stale() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^spc-[0-9]+-(sw|ns[0-9]+)$' || true); do
        pid=${ns#spc-}
        pid=${pid%%-*}
        if ! kill -0 "$pid" 2>/dev/null; then
            for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
            ip netns del "$ns" && echo "$prog: removed $ns (its run, pid $pid, is gone)" >&2
        fi
    done
}

# tc's rate in bits per second ("1gbit" -> 1000000000).
rate_bps() {
    local r=${1,,}
    [[ $r =~ ^([0-9]+)(bit|kbit|mbit|gbit|tbit)$ ]] || return 1
    local n=${BASH_REMATCH[1]}
    case ${BASH_REMATCH[2]} in
        bit) echo "$n" ;;
        kbit) echo $((n * 1000)) ;;
        mbit) echo $((n * 1000000)) ;;
        gbit) echo $((n * 1000000000)) ;;
        tbit) echo $((n * 1000000000000)) ;;
    esac
}

while [ $# -gt 0 ]; do
    case $1 in
        -n | --ranks) ranks=${2:?}; shift 2 ;;
        -r | --rate) rate=${2:?}; shift 2 ;;
        --burst) burst=${2:?}; shift 2 ;;
        --limit) limit=${2:?}; shift 2 ;;
        --queue) queue=${2:?}; shift 2 ;;
        --mtu) mtu=${2:?}; shift 2 ;;
        --timeout) timeout=${2:?}; shift 2 ;;
        --stats) stats=${2:?}; shift 2 ;;
        --shaping) shaping_file=${2:?}; shift 2 ;;
        --nice) nice=${2:?}; shift 2 ;;
        --wait) wait_mode=${2:?}; shift 2 ;;
        --bind) bind=${2:?}; shift 2 ;;
        -q | --quiet) quiet=1; shift ;;
        --clean) clean_stale; exit 0 ;;
        -h | --help) usage ;;
        --) shift; break ;;
        -*) fail "unknown option $1 (see --help)" ;;
        *)
            # Bare P, then RATE, before `--`.
            case $((npos++)) in
                0) ranks=$1 ;;
                1) rate=$1 ;;
                *) fail "unexpected argument $1: put the command after -- (see --help)" ;;
            esac
            shift
            ;;
    esac
done
[ $# -gt 0 ] || fail "no command to run: scripts/netns-cluster.sh [options] -- COMMAND [ARGS...] (see --help)"
[[ $ranks =~ ^[0-9]+$ ]] && [ "$ranks" -ge 2 ] && [ "$ranks" -le 64 ] \
    || fail "--ranks $ranks: give 2 to 64 (one namespace per rank, addresses 198.18.0.1 to .64)"
[[ $timeout =~ ^[0-9]+$ ]] && [ "$timeout" -ge 1 ] || fail "--timeout $timeout: give whole seconds, at least 1"
[ -z "$nice" ] || { [[ $nice =~ ^-?[0-9]+$ ]] && [ "$nice" -ge -20 ] && [ "$nice" -le 19 ]; } \
    || fail "--nice $nice: give -20 to 19"
# The CPUs this script may run on (its affinity as the kernel applies it,
# online CPUs only: taskset -p), the hyperthreads of one physical core next
# to each other, so that an even split gives ranks whole cores; nothing
# without taskset.
allowed_cores() {
    local list part a b c sib
    list=$(taskset -pc $$ 2>/dev/null | sed 's/.*: //') || return 0
    for part in ${list//,/ }; do
        a=${part%-*}
        b=${part#*-}
        for c in $(seq "$a" "$b"); do
            sib=$(cat "/sys/devices/system/cpu/cpu$c/topology/thread_siblings_list" 2>/dev/null || echo "$c")
            echo "${sib%%[,-]*} $c"
        done
    done | sort -n -k1,1 -k2,2 | awk '{print $2}'
}
cores=()
command -v taskset >/dev/null && mapfile -t cores < <(allowed_cores)
ncores=${#cores[@]}
[ "$ncores" -gt 0 ] || ncores=$(getconf _NPROCESSORS_ONLN)
if [ -z "$wait_mode" ]; then
    wait_mode=spin
    [ "$ranks" -le "$ncores" ] || wait_mode=sleep:20us
fi
# The forms MpiWait parses, checked before anything is made.
. "$(dirname "${BASH_SOURCE[0]}")/mpi-wait.sh"
mpi_wait_ok "$wait_mode" || fail "--wait $wait_mode: give spin, yield, sleep or sleep:MICROSECONDS (1 to 1000000)"
if [ -z "$bind" ]; then
    bind=none
    if [ "${#cores[@]}" -eq 0 ]; then
        say "no taskset (util-linux): the ranks run unbound"
    elif [ "$ranks" -le "${#cores[@]}" ]; then
        bind=cores
    fi
fi
case $bind in
    none) ;;
    cores)
        command -v taskset >/dev/null || fail "--bind cores needs taskset: install util-linux (apt-get install util-linux)"
        [ "${#cores[@]}" -gt 0 ] || fail "--bind cores: cannot read this script's CPUs (taskset -p $$ failed)"
        [ "$ranks" -le "${#cores[@]}" ] \
            || fail "--bind cores: $ranks ranks outnumber the ${#cores[@]} CPUs this script may use; give --bind none"
        ;;
    *) fail "--bind $bind: give cores or none" ;;
esac
# Rank I's CPUs under --bind cores: the allowed CPUs (in allowed_cores'
# order) split into RANKS runs of equal length (the first ranks get the
# ones left over).
rank_cores() { # I
    local per=$((${#cores[@]} / ranks)) extra=$((${#cores[@]} % ranks)) from n
    from=$(($1 * per + ($1 < extra ? $1 : extra)))
    n=$((per + ($1 < extra ? 1 : 0)))
    local IFS=,
    echo "${cores[*]:$from:$n}"
}
[[ $queue =~ ^(acks-first|fifo)$ ]] || fail "--queue $queue: give acks-first or fifo"
[[ $mtu =~ ^[0-9]+$ ]] && [ "$mtu" -ge 1280 ] && [ "$mtu" -le 65535 ] || fail "--mtu $mtu: give 1280 to 65535"
if [ "$rate" != none ]; then
    bps=$(rate_bps "$rate") || fail "--rate $rate: give a tc rate such as 1gbit, 10gbit, 500mbit, or none"
    [ "$bps" -gt 0 ] || fail "--rate $rate: the rate must be positive"
    [ -n "$burst" ] || burst=$((bps / 8 / 500 > 16384 ? bps / 8 / 500 : 16384))
    [ -n "$limit" ] || limit=$((2 * burst > 4194304 ? 2 * burst : 4194304))
    [[ $burst =~ ^[0-9]+$ && $limit =~ ^[0-9]+$ ]] || fail "--burst and --limit are bytes (whole numbers)"
    [ "$burst" -ge "$mtu" ] || fail "--burst $burst is below the MTU ($mtu): tbf would drop every full packet"
fi

# What this needs, checked before anything is made.
[ "$(id -u)" -eq 0 ] || fail "needs root to make network namespaces (it runs as uid $(id -u)): run it with sudo, or as root in CI"
command -v ip >/dev/null || fail "no 'ip' command: install iproute2 (apt-get install iproute2)"
[ "$rate" = none ] || command -v tc >/dev/null || fail "no 'tc' command: install iproute2 (apt-get install iproute2)"
command -v mpiexec >/dev/null || fail "no mpiexec: install MPICH (apt-get install mpich)"

# --- Teardown: every exit path comes here --------------------------------
made_ns=()
job=""
cleanup() {
    local rc=$? ns p
    trap - EXIT INT TERM
    if [ -n "$job" ] && kill -0 "$job" 2>/dev/null; then
        kill -TERM "$job" 2>/dev/null || true
        sleep 0.5
        kill -KILL "$job" 2>/dev/null || true
    fi
    # A namespace lives on while a process is in it: end the ranks left
    # behind (processes this run started inside its own namespaces).
    for ns in "${made_ns[@]}"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    done
    # Deleting a namespace destroys its veth ends, hence their peers, the
    # bridge and the qdiscs on them.
    for ns in "${made_ns[@]}"; do
        ip netns del "$ns" 2>/dev/null || echo "$prog: could not delete namespace $ns: remove it with 'ip netns del $ns'" >&2
    done
    local left
    left=$(ip netns list 2>/dev/null | grep -c "^$prefix" || true)
    [ "$left" -eq 0 ] || echo "$prog: $left namespaces named $prefix* are left: remove them with 'ip netns del'" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- Build ----------------------------------------------------------------
sw="${prefix}sw"
br="${prefix}br"
mkns() {
    local err
    err=$(ip netns add "$1" 2>&1) || fail "cannot make network namespace $1: $err"
    made_ns+=("$1")
    ip -n "$1" link set lo up
}
shape() { # NS DEV: tbf on DEV's egress
    [ "$rate" = none ] && return 0
    local err
    err=$(ip netns exec "$1" tc qdisc replace dev "$2" root handle 1: tbf rate "$rate" burst "$burst" limit "$limit" 2>&1) \
        || fail "cannot shape $2 with tbf (rate $rate burst $burst limit $limit): $err (is the sch_tbf module available?)"
    [ "$queue" = fifo ] && return 0
    # Under the tbf, an htb that only orders (its classes' rates are far
    # above any tbf rate): class 10:1 (priority 0) for pure acknowledgements,
    # 10:2 for the rest, each a byte FIFO of the tbf's limit. u32 matches
    # IPv4 TCP (protocol 6) whose total length is under 64 bytes (the
    # headers and options of an acknowledgement without data).
    local tcq=(ip netns exec "$1" tc)
    err=$({ "${tcq[@]}" qdisc add dev "$2" parent 1:1 handle 10: htb default 2 \
        && "${tcq[@]}" class add dev "$2" parent 10: classid 10:1 htb rate 100gbit quantum 65536 prio 0 \
        && "${tcq[@]}" class add dev "$2" parent 10: classid 10:2 htb rate 100gbit quantum 65536 prio 1 \
        && "${tcq[@]}" qdisc add dev "$2" parent 10:1 handle 11: bfifo limit "$limit" \
        && "${tcq[@]}" qdisc add dev "$2" parent 10:2 handle 12: bfifo limit "$limit" \
        && "${tcq[@]}" filter add dev "$2" parent 10: protocol ip prio 1 u32 \
            match ip protocol 6 0xff match u16 0x0000 0xffc0 at 2 flowid 10:1; } 2>&1) \
        || fail "cannot order $2's queue acknowledgements first (htb and u32 under the tbf): $err (--queue fifo does without)"
}
mkns "$sw"
err=$(ip -n "$sw" link add "$br" type bridge 2>&1) || fail "cannot make bridge $br: $err (is the bridge module available?)"
ip -n "$sw" link set "$br" up
for ((i = 0; i < ranks; i++)); do
    ns="${prefix}ns$i"
    mkns "$ns"
    err=$(ip link add "${prefix}p$i" netns "$sw" mtu "$mtu" type veth peer name "${prefix}v$i" netns "$ns" mtu "$mtu" 2>&1) \
        || fail "cannot make veth pair ${prefix}p$i/${prefix}v$i: $err (is the veth module available?)"
    ip -n "$sw" link set "${prefix}p$i" master "$br" up
    ip -n "$ns" addr add "198.18.0.$((i + 1))/24" dev "${prefix}v$i"
    ip -n "$ns" link set "${prefix}v$i" up
    shape "$sw" "${prefix}p$i"
    shape "$ns" "${prefix}v$i"
done
# The bridge forwards once its ports are up; wait until every rank reaches
# rank 0 (the ports need no learning delay: STP is off by default).
for ((i = 1; i < ranks; i++)); do
    ok=0
    for _ in $(seq 1 50); do
        # A TCP connection to a closed port: refused is an answer from
        # rank 0's namespace (no ping needed).
        answer=$(ip netns exec "${prefix}ns$i" timeout 1 bash -c 'exec 3<>/dev/tcp/198.18.0.1/9' 2>&1 || true)
        if [[ $answer == *refused* ]]; then ok=1; break; fi
        sleep 0.1
    done
    [ "$ok" -eq 1 ] || fail "rank $i's namespace cannot reach 198.18.0.1 through the bridge"
done

acks_first() { # NS DEV: packets its queue sent acknowledgements first
    if [ "$rate" = none ] || [ "$queue" = fifo ]; then
        echo 0
    else
        ip netns exec "$1" tc -s class show dev "$2" classid 10:1 | awk '$1 == "Sent" {n = $4} END {print n + 0}'
    fi
}
counters() { # prints "tx rx acks" of every rank's veth, one line per rank
    for ((i = 0; i < ranks; i++)); do
        echo "$(ip netns exec "${prefix}ns$i" cat "/sys/class/net/${prefix}v$i/statistics/tx_bytes" \
            "/sys/class/net/${prefix}v$i/statistics/rx_bytes" | tr '\n' ' ')" \
            $(($(acks_first "${prefix}ns$i" "${prefix}v$i") + $(acks_first "$sw" "${prefix}p$i")))
    done
}

# --- The job --------------------------------------------------------------
export UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1 MPIEXEC_TIMEOUT="$timeout"
# Sleeping ranks (more ranks than cores) send every message eagerly: UCX
# over TCP sends MPICH's messages from 8 KiB on in rendezvous, whose
# handshakes each wait for the peer's next poll, and a sleeping rank on a
# shared core polls late (P = 3 at 100 Mb/s, n = 2^20 at 1%: TopkA 24.9 ms
# in rendezvous, 14.4 ms eager, 14.7 ms simulated; at P = 2 with spinning
# ranks the two are the same: bench/RESULTS.md). UCX_RNDV_THRESH set by
# the caller wins.
if [ "$wait_mode" != spin ] && [ -z "${UCX_RNDV_THRESH:-}" ]; then
    export UCX_RNDV_THRESH=inf
fi
# With --nice, each rank first sets its session's autogroup (Hydra's proxy
# starts every rank in a session of its own), or its own nice value where
# the kernel has no autogroups, then becomes the command.
prio=()
if [ -n "$nice" ]; then
    prio=(bash -c 'echo "$0" 2>/dev/null > /proc/self/autogroup || renice -n "$0" -p $$ >/dev/null; exec "$@"' "$nice")
fi
cmd=(mpiexec)
binding="unbound"
[ "$bind" = none ] || binding="bound to cores:"
for ((i = 0; i < ranks; i++)); do
    [ "$i" -eq 0 ] || cmd+=(:)
    pin=()
    if [ "$bind" = cores ]; then
        pin=(taskset -c "$(rank_cores "$i")")
        [ "$i" -eq 0 ] || binding+=";"
        binding+=" rank $i on ${pin[2]}"
    fi
    cmd+=(-n 1 -env UCX_NET_DEVICES "${prefix}v$i" -env SPARSE_MPI_WAIT "$wait_mode" ip netns exec "${prefix}ns$i" "${pin[@]}" "${prio[@]}" "$@")
done
shaping="unshaped"
[ "$rate" = none ] || shaping="tbf rate $rate burst $burst limit $limit, queue $queue, both directions"
if [ -n "$shaping_file" ]; then
    if [ "$rate" = none ]; then
        echo "rate none" > "$shaping_file"
    else
        printf 'rate_bps %s\nburst_bytes %s\nlimit_bytes %s\nqueue %s\n' "$bps" "$burst" "$limit" "$queue" > "$shaping_file"
    fi
fi
say "$ranks namespaces ${prefix}ns0..$((ranks - 1)) (198.18.0.1-$ranks) on bridge $br in ${prefix}sw; $shaping; mtu $mtu${nice:+; ranks at nice $nice}; wait $wait_mode; ranks $binding${UCX_RNDV_THRESH:+; UCX_RNDV_THRESH=$UCX_RNDV_THRESH}"
before=$(counters)
"${cmd[@]}" &
job=$!
set +e
wait "$job"
rc=$?
set -e
job=""
after=$(counters)
paste <(echo "$before") <(echo "$after") | awk -v q="$quiet" -v f="$stats" -v p="$prog" '{
    tx = $4 - $1; rx = $5 - $2; acks = $6 - $3
    if (q != 1) printf "%s: rank %d sent %d bytes and received %d bytes through its veth (%d packets acknowledgements first)\n", p, NR - 1, tx, rx, acks > "/dev/stderr"
    if (f != "") printf "rank %d tx_bytes %d rx_bytes %d acks_first_packets %d\n", NR - 1, tx, rx, acks > f
}'
[ "$rc" -eq 0 ] || say "the job failed (mpiexec exit status $rc)"
exit "$rc"
