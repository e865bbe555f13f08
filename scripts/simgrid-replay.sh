#!/usr/bin/env bash
# Replays trace directories written by `sparse-bench scale --traces DIR`
# with SimGrid's SMPI (`smpirun -replay`) and prints SimGrid's simulated
# time beside sparse_coll::sim's.
#
#   scripts/simgrid-replay.sh [--model M] [--platform NAME] DIR...
#       DIR: a trace directory (it holds index.txt) or a directory of them
#       (what --traces DIR writes: DIR/<algorithm>_P<ranks>/).
#       --model: alpha-beta (SMPI configured as the simulator's plain
#       alpha-beta model, sends in rendezvous), alpha-beta-eager (the same,
#       sends detached and eager), default (SMPI's defaults) or all
#       (default: alpha-beta). --platform: same (the simulator's network), another
#       platform written with --topology (fat-tree-4to1, dragonfly, ...) or
#       all (default: same).
#       Prints one line per replay: the directory, model, platform,
#       SimGrid's simulated time, the simulator's, and sim/simgrid - 1.
#   scripts/simgrid-replay.sh --check SPARSE_BENCH
#       CI's check: traces of one algorithm at P = 16 on 25gbe, on
#       nvlink8-25gbe with sends in rendezvous and on nvlink8-25gbe with
#       eager sends detached, written by the given sparse-bench binary,
#       replayed here under the alpha-beta model (alpha-beta-eager for the
#       detached ones); fails unless SimGrid's time is within 10% (1% in
#       rendezvous and detached) of the simulator's.
#
# Each trace directory's smpirun.args lists its replays (model, platform,
# smpirun's arguments: sparse_coll::sim::smpi::SmpiModel::cfg says what
# the alpha-beta flags set). Installs Debian's libsimgrid-dev (smpirun,
# smpireplaymain) with apt-get when smpirun is missing.
set -euo pipefail

die() { echo "simgrid-replay: $*" >&2; exit 1; }

ensure_simgrid() {
    command -v "${SMPIRUN:-smpirun}" >/dev/null 2>&1 && return
    echo "simgrid-replay: no smpirun on PATH; installing libsimgrid-dev" >&2
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq ||
        die "apt-get update failed: install libsimgrid-dev (Debian, Ubuntu) by hand"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        libsimgrid-dev || die "cannot install libsimgrid-dev: install it by hand"
    command -v smpirun >/dev/null 2>&1 || die "libsimgrid-dev installed no smpirun"
}

# replay_dir DIR MODEL PLATFORM: one line per matching replay of DIR.
replay_dir() {
    local dir=$1 model=$2 platform=$3 found=0 sim_s="" m p args out sg
    [ -f "$dir/smpirun.args" ] ||
        die "$dir has no smpirun.args: write it with sparse-bench scale --traces"
    [ -f "$dir/meta.txt" ] && sim_s=$(sed -n 's/^sim_s = //p' "$dir/meta.txt")
    while read -r m p args; do
        [ "$model" = all ] || [ "$model" = "$m" ] || continue
        [ "$platform" = all ] || [ "$platform" = "$p" ] || continue
        found=1
        # shellcheck disable=SC2086 # args is smpirun's word list
        if ! out=$(cd "$dir" && "${SMPIRUN:-smpirun}" $args 2>&1); then
            echo "$out" | tail -n 8 >&2
            die "smpirun failed in $dir ($m, $p)"
        fi
        # The replay's line with the clock to the nanosecond after '@'.
        sg=$(echo "$out" | sed -n 's/.*Simulation time [^@]*@\([0-9.e+-]*\).*/\1/p' | tail -n 1)
        [ -n "$sg" ] || sg=$(echo "$out" | sed -n 's/.*Simulation time \([0-9.e+-]*\).*/\1/p' | tail -n 1)
        [ -n "$sg" ] || { echo "$out" | tail -n 8 >&2; die "no simulated time from $dir"; }
        awk -v d="$dir" -v m="$m" -v p="$p" -v sg="$sg" -v sim="$sim_s" 'BEGIN {
            if (sim != "" && p == "same")
                printf "%s %s %s simgrid_s=%.9g sim_s=%.9g sim_vs_simgrid=%+.2f%%\n",
                    d, m, p, sg, sim, 100 * (sim / sg - 1)
            else
                printf "%s %s %s simgrid_s=%.9g\n", d, m, p, sg
        }'
    done <"$dir/smpirun.args"
    [ "$found" = 1 ] || die "$dir lists no replay of model $model on platform $platform"
}

check() {
    local bin=$1 line net goal
    [ -x "$bin" ] || die "--check needs the sparse-bench binary, not $bin"
    ensure_simgrid
    check_dir=$(mktemp -d)
    trap 'rm -rf "$check_dir"' EXIT
    # 25gbe (eager sends, within 10%); two levels with the simulator's
    # sends in rendezvous as SMPI's alpha-beta model sends them (within 1%:
    # bench/RESULTS.md, "SimGrid as the referee", where eager sends are
    # 39% off on this row), and detached as SMPI's alpha-beta-eager model
    # sends them (within 1%).
    local i=0 m
    for net in 25gbe:10:alpha-beta nvlink8-25gbe:rendezvous:1:alpha-beta \
        nvlink8-25gbe:detached:1:alpha-beta-eager; do
        m=${net##*:}
        net=${net%:*}
        goal=${net##*:}
        net=${net%:*}
        i=$((i + 1))
        mkdir -p "$check_dir/$i"
        "$bin" scale --ranks 16 --algo spardl --network "$net" --traces "$check_dir/$i" >/dev/null
        line=$(replay_dir "$check_dir/$i/spardl_P16" "$m" same)
        echo "$net: $line"
        echo "$line" | awk -v goal="$goal" -v net="$net" '{
            for (i = 1; i <= NF; i++) if ($i ~ /^sim_vs_simgrid=/) {
                e = substr($i, 16); sub(/%/, "", e); e += 0; found = 1
            }
            if (!found) { print "no comparison in the replay line"; exit 1 }
            if (e < -goal || e > goal) {
                print "sparse_coll::sim on " net " is " e "% off SimGrid (goal: " goal "%)"; exit 1
            }
        }'
    done
}

model=alpha-beta
platform=same
dirs=()
while [ $# -gt 0 ]; do
    case $1 in
    --check)
        [ $# -eq 2 ] || die "--check takes the sparse-bench binary alone"
        check "$2"
        exit
        ;;
    --model) model=${2:?--model needs alpha-beta, alpha-beta-eager, default or all}; shift 2 ;;
    --platform) platform=${2:?--platform needs a name or all}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit ;;
    *) dirs+=("$1"); shift ;;
    esac
done
case $model in
alpha-beta | alpha-beta-eager | default | all) ;;
*) die "--model $model: give alpha-beta, alpha-beta-eager, default or all" ;;
esac
[ "${#dirs[@]}" -gt 0 ] || die "give a trace directory (sparse-bench scale --traces DIR writes them)"
ensure_simgrid
for d in "${dirs[@]}"; do
    [ -d "$d" ] || die "$d is not a directory"
    if [ -f "$d/index.txt" ]; then
        replay_dir "$d" "$model" "$platform"
    else
        any=0
        for sub in "$d"/*/; do
            [ -f "$sub/index.txt" ] || continue
            any=1
            replay_dir "${sub%/}" "$model" "$platform"
        done
        [ "$any" = 1 ] || die "$d holds no trace directory (no index.txt in it or under it)"
    fi
done
