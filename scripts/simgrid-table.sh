#!/usr/bin/env bash
# Regenerates bench/RESULTS.md's SimGrid tables: every registered algorithm
# at each rank count (n = 2^20, density 0.1%), on 25gbe and nvlink8-25gbe,
# timed by sparse_coll::sim and replayed by SimGrid (`sparse-bench scale
# --engine simgrid`) under SMPI configured as plain alpha-beta (and, on
# nvlink8-25gbe, the same with eager sends, beside the simulator with its
# eager sends detached as SMPI's are: the JSON's sim_matched_ms) and under
# SMPI's defaults on the network's equivalent platform; and (on 25gbe's
# links, alpha-beta) on fat trees of racks of 16 without and with 4:1
# oversubscription between racks and on a balanced dragonfly. Rank counts in order, smallest first,
# so that an interrupted run has the small ones.
#
#   scripts/simgrid-table.sh [SPARSE_BENCH] [RANKS] [OUT_DIR]
#       SPARSE_BENCH: the binary (default target/release/sparse-bench);
#       RANKS: comma-separated (default 16,64,256,1024); OUT_DIR: where the
#       JSON rows of each run go (default /tmp/simgrid-table).
#       Prints the Markdown tables on stdout.
#
# Each algorithm runs alone (a call of sparse-bench per algorithm and rank
# count), so that one refused by sparse-bench's memory cap (--mem-cap-gib)
# is a row saying so and the others run. Needs smpirun (libsimgrid-dev;
# scripts/simgrid-replay.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-${CARGO_TARGET_DIR:-target}/release/sparse-bench}
ranks=${2:-16,64,256,1024}
out=${3:-/tmp/simgrid-table}
[ -x "$bin" ] || { echo "simgrid-table: no $bin (cargo build --release -p bench)" >&2; exit 1; }
mkdir -p "$out"
algos=$("$bin" scale --ranks 2 --n 1024 --json | python3 -c '
import json, sys
print(" ".join(r["algo"] for r in map(json.loads, sys.stdin) if r.get("kind") == "scale"))')
# run NET P ALGO SUFFIX FLAGS...: one call of sparse-bench, its JSON rows
# in OUT_DIR (kept: a rerun skips what is there).
run() {
    local net=$1 p=$2 algo=$3 f="$out/$1_P$2_$3$4.json"
    shift 4
    [ -s "$f" ] && return
    echo "simgrid-table: $net P = $p $algo $*" >&2
    "$bin" scale --network "$net" --ranks "$p" --algo "$algo" --engine simgrid --json "$@" \
        >"$f.part" 2>"$f.err" || tail -n 1 "$f.err" >&2
    mv "$f.part" "$f"
}
# The simulator alone with its sends in rendezvous, as SMPI's alpha-beta
# model sends them (sparse_coll::sim::Rendezvous).
run_sim() {
    local f="$out/$1_P$2_$3.json"
    [ -s "$f" ] && return
    "$bin" scale --network "$1" --ranks "$2" --algo "$3" --json >"$f.part" 2>"$f.err" ||
        tail -n 1 "$f.err" >&2
    mv "$f.part" "$f"
}
for p in ${ranks//,/ }; do
    for algo in $algos; do
        run_sim 25gbe:rendezvous "$p" "$algo"
        run_sim nvlink8-25gbe:rendezvous "$p" "$algo"
        run 25gbe "$p" "$algo" "" --smpi-model alpha-beta,default
        # Two levels: also SMPI's eager sends (see RESULTS: rendezvous
        # makes a send across the NIC wait for its latency).
        run nvlink8-25gbe "$p" "$algo" "" --smpi-model alpha-beta,alpha-beta-eager,default
    done
    # Platforms the simulator does not have, on 25gbe's links (alpha-beta).
    for algo in $algos; do
        run 25gbe "$p" "$algo" _topologies --topology fat-tree-1to1,fat-tree-4to1,dragonfly
    done
done
python3 - "$out" "$algos" <<'PY'
import glob, json, os, sys
rows = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    net, rest = os.path.basename(path)[:-5].split("_P", 1)
    p, algo = rest.split("_", 1)
    extra_run = algo.endswith(("_topologies", "_ft1"))
    algo = algo.removesuffix("_topologies").removesuffix("_ft1")
    if net.endswith(":rendezvous"):
        cell = rows.setdefault((net.removesuffix(":rendezvous"), int(p), algo), {})
        for line in open(path):
            r = json.loads(line)
            if r.get("kind") == "scale":
                cell["rdv"] = r["sim_ms"]
        continue
    cell = rows.setdefault((net, int(p), algo), {})
    err = path[:-5] + ".json.err"
    if os.path.exists(err) and "mem-cap-gib" in open(err).read():
        cell["refused"] = True
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") == "scale" and not extra_run:
            cell["sim"] = r["sim_ms"]
        elif r.get("kind") == "simgrid":
            cell[(r["smpi_model"], r["topology"])] = (r["simgrid_ms"], r["wall_s"])
            # The simulator with SMPI's eager sends: detached.
            if r["smpi_model"] == "alpha-beta-eager" and r.get("sim_matched_ms") is not None:
                cell["detached"] = r["sim_matched_ms"]
def ms(x):
    return "-" if x is None else f"{x:.3f}"
def vs(sim, sg):
    return "-" if sim is None or not sg else f"{100 * (sim / sg - 1):+.1f}%"
for net in ("25gbe", "nvlink8-25gbe"):
    keys = sorted(k for k in rows if k[0] == net)
    if not keys:
        continue
    extra = net == "25gbe"
    head = ["algorithm", "P", "sim ms", "SimGrid alpha-beta ms", "sim vs it"]
    head += ["sim rendezvous ms", "vs alpha-beta"]
    if not extra:
        head += ["SimGrid alpha-beta-eager ms", "sim vs it", "sim detached ms", "vs alpha-beta-eager"]
    head += ["SimGrid default ms", "sim vs it"]
    if extra:
        head += ["fat tree 1:1 ms", "fat tree 4:1 ms", "dragonfly ms"]
    head += ["replay wall s"]
    print(f"\n#### {net}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    order = sys.argv[2].split()
    for k in sorted(keys, key=lambda k: (k[1], order.index(k[2]) if k[2] in order else 99)):
        c = rows[k]
        if "sim" not in c:
            if c.get("refused"):
                print(f"| {k[2]} | {k[1]} | refused by the memory cap |" + " |" * (len(head) - 3))
            continue
        get = lambda m, t: (c.get((m, t)) or (None, 0.0))
        ab, d = get("alpha-beta", "same"), get("default", "same")
        line = [k[2], str(k[1]), ms(c.get("sim")), ms(ab[0]), vs(c.get("sim"), ab[0])]
        line += [ms(c.get("rdv")), vs(c.get("rdv"), ab[0])]
        walls = [ab[1], d[1]]
        if not extra:
            e = get("alpha-beta-eager", "same")
            line += [ms(e[0]), vs(c.get("sim"), e[0])]
            line += [ms(c.get("detached")), vs(c.get("detached"), e[0])]
            walls.append(e[1])
        line += [ms(d[0]), vs(c.get("sim"), d[0])]
        if extra:
            ft1, ft = get("alpha-beta", "fat-tree-1to1"), get("alpha-beta", "fat-tree-4to1")
            df = get("alpha-beta", "dragonfly")
            line += [ms(ft1[0]), ms(ft[0]), ms(df[0])]
            walls += [ft1[1], ft[1], df[1]]
        line.append(f"{sum(walls):.0f}")
        print("| " + " | ".join(line) + " |")
PY
