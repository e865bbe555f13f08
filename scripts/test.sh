#!/usr/bin/env bash
# Runs every check of the workspace; CI runs exactly this (.ci/run).
# Idempotent: installs what is missing (Debian packages, only when absent),
# then: fmt, clippy, all tests (doc tests included), bench builds.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step prints the minutes since the start, so that a slow step shows.
step() { printf '\n==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

# --- System packages -------------------------------------------------------
# Packages the checks need: MPICH and libclang (bindgen) for the MPI
# transport; Mesa's Vulkan drivers (lavapipe, a software Vulkan device) and
# the Vulkan loader for the kernel tests on wgpu; Fashion-MNIST (Zalando,
# MIT licence; the IDX files under /usr/share/datasets/fashion-mnist) for
# the IDX reader's test on the real files. apt-get update runs only when
# one is missing. python3 runs the structure check.
# Debian's PyTorch (1.13, CPU, gloo), venv and pytest for the sparse_comm
# package's tests.
required_pkgs=(libmpich-dev mpich libclang-dev mesa-vulkan-drivers libvulkan1 dataset-fashion-mnist python3
    python3-torch python3-venv python3-pytest python3-numpy)
need_pkgs=()
for pkg in "${required_pkgs[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_pkgs+=("$pkg")
done
if [ "${#need_pkgs[@]}" -gt 0 ]; then
    step "installing ${need_pkgs[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}"
fi

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# A clean build gains nothing from incremental compilation, whose caches
# took a third of the build directory (13 of 40 GB): CI's disk is not
# large. Set CARGO_INCREMENTAL=1 to keep them when running this repeatedly.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Mesa warns on every Vulkan start without a runtime dir.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

step "cargo fmt --check"
cargo fmt --all -- --check

step "structure: files <= 1100 lines, functions <= 110, no import cycle (scripts/check-structure.py)"
python3 scripts/check-structure.py

step "pages: RESULTS, notes, status, crate READMEs, links (scripts/check-docs.py)"
python3 scripts/check-docs.py

step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo doc (broken intra-doc links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

# One build of the whole workspace with the MPI features on, so that
# every later step reuses it: the tests, the MPI tests and the smoke runs
# of the sparse-bench binary it leaves in target/debug.
# backend-cuda's default feature is wgpu: its backend suite, selector suite
# and differential tests against backend-cpu run here, on lavapipe where the
# machine has no GPU.
# DECODE_FUZZ_ROUNDS: the bounded fuzz of every decoder under a counting
# allocator (sparse-core/tests/decode_alloc.rs), about a minute here.
# The MPI transport: the collective suite under mpiexec -n 1..5,
# disagreement and abort-on-panic (sparse-coll/tests/mpi.rs launches mpiexec
# with MPIEXEC_TIMEOUT and checks the world size and per-rank lines), and
# the optimizers under mpiexec -n 1..5 (residual-sgd/tests/mpi.rs: identical
# weights on every rank after every step, and equal to the thread
# transport's).
mpi_features=sparse-coll/mpi,sparse-coll/testing,residual-sgd/mpi,bench/mpi
step "cargo test (unit, integration, doc; kernels on wgpu; decoder fuzz; MPI under mpiexec)"
DECODE_FUZZ_ROUNDS=200 cargo test --workspace --features "$mpi_features"
bin="${CARGO_TARGET_DIR:-target}/debug"
[ -x "$bin/sparse-bench" ] || { echo "cargo test left no $bin/sparse-bench"; exit 1; }

# Clippy on the MPI code (the tests above ran it). The divan benches are
# compiled by both clippy runs (--all-targets), not built in release: a
# release build of burn, cubecl and wgpu would add minutes and check nothing
# more.
step "MPI: clippy"
cargo clippy --workspace --features "$mpi_features" --all-targets -- -D warnings

step "sparse-bench smoke run"
"$bin/sparse-bench" encode --n 100000 --density 0.01 --min-ms 1 --json >/dev/null
"$bin/sparse-bench" select --n 100000 --density 0.01 --min-ms 1 --json >/dev/null
# The kernel backend must select exactly what the CPU backend selects.
select_args=(select --n 1048576 --density 0.01 --min-ms 1 --json)
cpu_rows=$("$bin/sparse-bench" "${select_args[@]}" --backend cpu)
wgpu_rows=$("$bin/sparse-bench" "${select_args[@]}" --backend wgpu)
python3 - "$cpu_rows" "$wgpu_rows" <<'PY'
import json, sys
cpu, gpu = ([json.loads(l) for l in t.splitlines() if l.startswith("{")] for t in sys.argv[1:])
assert len(cpu) == len(gpu) > 0, (len(cpu), len(gpu))
for c, g in zip(cpu, gpu):
    assert g["backend"] == "wgpu" and c["algo"] == g["algo"], (c, g)
    assert (c["selected"], c["recall"]) == (g["selected"], g["recall"]), (c, g)
print(f"{len(gpu)} selectors: wgpu selects what cpu selects")
PY
rows=$("$bin/sparse-bench" allreduce --ranks 5 --n 100000 --density 0.01 --reps 1 --json)
for field in algo params ranks n nnz bytes_recv_max bytes_sent_max rounds model_bytes ms dense_ms max_abs_err lossless; do
    [ "$(grep '"bench":"allreduce"' <<<"$rows" | grep -c "\"$field\":")" -eq 15 ] || { echo "allreduce JSON rows lack $field"; exit 1; }
done
# Every algorithm's cost model predicts the busiest rank's bytes within 10%
# (P = 7, overlap 0, 0.5 and 1), and every registry name with parameters
# is accepted.
for overlap in 0 0.5 1; do
    rows=$("$bin/sparse-bench" allreduce --ranks 7 --n 100000 --density 0.01 --overlap "$overlap" --reps 1 --json)
    python3 - "$rows" "$overlap" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
rows = [r for r in rows if r["bench"] == "allreduce"]
assert len(rows) == 15, len(rows)
for r in rows:
    b, m = r["bytes_recv_max"], r["model_bytes"]
    assert abs(m - b) <= 0.1 * b, (r["algo"], b, m)
print(f"overlap {sys.argv[2]}: {len(rows)} rows, model_bytes within 10% of bytes_recv_max")
PY
done
"$bin/sparse-bench" allreduce --ranks 4 --n 20000 --density 0.01 --reps 1 --json \
    --algo 'spardl_bsag:k=40,d=2' --algo 'dsar_split_allgather:qsgd=8,bucket=64' --algo 'ok_topk:k=30,period=4' \
    --algo 'omnireduce_blocks:block=64' --algo 'zen_balanced_parallelism:seed=9,r1=64,r2=8' --algo 'spardl_rsag:d=4' \
    --algo 'topk_a:values=ssmean' --algo 'ssar_recursive_double:values=f16' --algo 'spardl:values=bf16' \
    --algo 'hierarchical:node=2,intra=topk_a,inter=spardl' >/dev/null
if "$bin/sparse-bench" allreduce --ranks 2 --n 1000 --algo 'gtopk:kk=1' 2>/dev/null; then
    echo "a bad parameter was accepted"; exit 1
fi

# sparse-bench train on threads: the JSON fields and the CSV and plots of
# --out (the accuracy and identical-weight checks at P = 2 and 3 are in
# bench/tests/train.rs, run by cargo test above).
out_dir=$(mktemp -d)
rows=$("$bin/sparse-bench" train --ranks 3 --epochs 1 --hidden 32 --density 0.01 --json --out "$out_dir")
python3 - "$rows" "$out_dir" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
assert len(rows) == 2 + 5, len(rows)
need = ["bench", "scheme", "collective", "density", "ranks", "epochs", "final_test_acc", "dense_test_acc",
        "bytes_per_step", "dense_bytes_per_step", "select_ms", "comm_ms", "apply_ms", "agree_ms", "step_ms",
        "dense_step_ms", "straggler_local_ms", "ranks_cpu_ms", "agree_rounds", "start"]
for r in rows:
    missing = [f for f in need if f not in r]
    assert not missing, (r.get("scheme"), missing)
    assert r["ranks"] == 3 and r["identical_weights"] and r["start"] == "fresh", r
    # The whole step holds each of its phases at every step (so at the
    # medians); the agreement rounds are their own.
    for f in ["grad_ms", "select_ms", "comm_ms", "apply_ms", "agree_ms"]:
        assert 0 <= r[f] <= r["step_ms"], (r["scheme"], f, r[f], r["step_ms"])
    assert r["agree_ms"] > 0 and r["straggler_local_ms"] > 0, r
    assert r["agree_rounds"] == 2, r
    assert r["ranks_cpu_ms"] is None, "the thread transport's ranks share one process's clock"
for f in ["train.csv", "accuracy_vs_epoch.svg", "accuracy_vs_bytes.svg"]:
    assert os.path.getsize(os.path.join(sys.argv[2], f)) > 0, f
print(f"train: {len(rows)} rows with every field; train.csv and two plots written")
PY
rm -rf "$out_dir"

# --first-seed: a configuration's seeds run apart (seed 1, then seed 2)
# and averaged by scripts/fashion-table.py equal one run of both seeds.
a=(train --ranks 3 --epochs 1 --hidden 16 --density 0.05 --scheme redsync_rgc --json)
python3 - "$("$bin/sparse-bench" "${a[@]}" --seeds 2)" "$("$bin/sparse-bench" "${a[@]}" --seeds 1)" \
    "$("$bin/sparse-bench" "${a[@]}" --seeds 1 --first-seed 2)" <<'PY'
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("table", "scripts/fashion-table.py")
table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(table)
both, one, two = ([json.loads(l) for l in a.splitlines() if l.startswith("{")] for a in sys.argv[1:])
merged = table.merge([one, two])
assert len(both) == len(merged) == 2, (len(both), len(merged))
for b, m in zip(both, merged):
    assert b["scheme"] == m["scheme"] and b["seeds"] == m["seeds"] == 2, (b, m)
    for f in ["final_test_acc", "gap_points", "bytes_per_step"]:
        assert abs(b[f] - m[f]) <= 1e-9 * max(1, abs(b[f])), (f, b[f], m[f])
print("--first-seed: seeds 1 and 2 run apart and averaged equal one run of both")
PY

# A short Fashion-MNIST training (Debian's dataset-fashion-mnist, installed
# above) with every scheme: the MLP (784-256-10) at P = 4 on 6,400 images,
# 2 epochs of 100 steps; identical weights on every rank, accuracy well
# above chance, every layer reported dense with its reason or compressed at
# the density, Zen's statistics written. Then the CNN's pipeline, 25 steps
# of one scheme, identical weights.
out_dir=$(mktemp -d)
rows=$("$bin/sparse-bench" train --data fashion-mnist --model mlp --ranks 4 --epochs 2 --train-images 6400 \
    --lr 0.05 --density 0.01 --json --out "$out_dir")
python3 - "$rows" "$out_dir" <<'PY'
import csv, json, os, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
assert len(rows) == 2 + 5, len(rows)
for r in rows:
    assert r["ranks"] == 4 and r["identical_weights"], r["scheme"]
    assert r["final_test_acc"] > 0.5, (r["scheme"], r["final_test_acc"])
    assert len(r["layers"]) == 4, r["layers"]
    for l in r["layers"]:
        assert (l["dense_because"] is None) == (l["density"] < 0.5), (r["scheme"], l)
stats = list(csv.DictReader(open(os.path.join(sys.argv[2], "sparsity.csv"))))
assert len(stats) == 7 * 2 * 4, len(stats)
print(f"train on Fashion-MNIST, MLP: {len(rows)} rows, identical weights, above chance; "
      f"{len(stats)} sparsity lines")
PY
rows=$("$bin/sparse-bench" train --data fashion-mnist --model cnn --ranks 4 --epochs 1 --train-images 1600 \
    --lr 0.05 --density 0.01 --scheme redsync_rgc --json)
python3 - "$rows" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
assert len(rows) == 2 and all(r["identical_weights"] and len(r["layers"]) == 8 for r in rows), rows
print("train on Fashion-MNIST, CNN: 2 rows, identical weights")
PY
rm -rf "$out_dir"

# sparse-bench scale on the simulated cluster: a row per algorithm, every
# figure labelled simulated with its network, the log-log plot written, and
# a run over the memory cap refused before it starts.
out_dir=$(mktemp -d)
rows=$("$bin/sparse-bench" scale --ranks 16,64 --n 65536 --density 0.002 --json --svg "$out_dir/scale.svg")
python3 - "$rows" "$out_dir/scale.svg" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
scale = [r for r in rows if r["kind"] == "scale"]
planner = [r for r in rows if r["kind"] == "planner"]
assert len(scale) == 2 * 14 and len(planner) == 2, (len(scale), len(planner))
for r in rows:
    assert r["simulated"] is True and r["network"].startswith("25gbe"), r
for r in scale:
    assert r["sim_ms"] > 0 and r["call_bytes_recv_max"] > 0, r
for r in planner:
    assert r["regret"] >= 1.0, r
assert os.path.getsize(sys.argv[2]) > 0
print(f"scale: {len(scale)} rows and {len(planner)} planner choices, all simulated; plot written")
PY
if "$bin/sparse-bench" scale --ranks 1024 --n 16777216 --mem-cap-gib 1 2>"$out_dir/err"; then
    echo "a run over the memory cap was not refused"; exit 1
fi
grep -q "nothing was run" "$out_dir/err"
rm -rf "$out_dir"

# Every crate's examples (built by cargo test above), each asserting what
# it shows; custom_scheme: a user's own allreduce, defined outside the
# crate, through the registry, the collective suite and the planner.
step "examples"
for example in encode primitives topk wgpu_topk allreduce custom_scheme train_steps allreduce_rows; do
    echo "-- $example"
    "$bin/examples/$example"
done

# The MPI rows must carry the same measured bytes as the thread transport's
# on the same inputs, plus MPICH's own MPI_Allreduce.
step "sparse-bench allreduce under mpiexec -n 2"
args=(allreduce --n 100000 --density 0.01 --reps 1 --json)
threads_rows=$("$bin/sparse-bench" "${args[@]}" --ranks 2)
mpi_rows=$(MPIEXEC_TIMEOUT=120 mpiexec -n 2 "$bin/sparse-bench" "${args[@]}" --transport mpi)
python3 - "$threads_rows" "$mpi_rows" <<'PY'
import json, sys
def rows(text):
    rows = [json.loads(line) for line in text.splitlines()]
    return {r["algo"]: r for r in rows if r["bench"] == "allreduce"}
threads, mpi = rows(sys.argv[1]), rows(sys.argv[2])
assert "mpi_allreduce" in mpi, "no mpi_allreduce row"
assert "mpi_allgather" in mpi, "no mpi_allgather row"
assert all(mpi[a]["floor_ms"] > 0 for a in threads), "a sparse row without its floor"
assert all(r["ranks"] == 2 for r in mpi.values()), "world size is not 2"
for algo, r in threads.items():
    assert mpi[algo]["bytes_recv_max"] == r["bytes_recv_max"], (algo, mpi[algo], r)
    assert mpi[algo]["rounds"] == r["rounds"], algo
print(f"{len(mpi)} MPI rows; measured bytes equal the thread transport's")
PY

# The calibration of the simulator against the MPI transport (small sizes
# here; the full one is scripts/calibrate.sh): a network file that
# sparse-bench scale reads.
out_dir=$(mktemp -d)
MPIEXEC_TIMEOUT=120 mpiexec -n 2 "$bin/sparse-bench" calibrate --max-mib 1 --min-ms 20 --out "$out_dir/net" \
    | tee "$out_dir/log" | tail -1
grep -q "world size 2" "$out_dir/log"
# At 3 ranks (on 2 cores: sleeping between polls) the shift among all of
# them gives the latency (--latency shift): the file's alpha_s is the
# table's empty shift.
MPIEXEC_TIMEOUT=120 SPARSE_MPI_WAIT=sleep mpiexec -n 3 "$bin/sparse-bench" calibrate --max-mib 1 --min-ms 20 \
    --latency shift --out "$out_dir/net3" > "$out_dir/log3" || { cat "$out_dir/log3"; exit 1; }
grep -q "world size 3: .*shift among all 3" "$out_dir/log3" || { cat "$out_dir/log3"; exit 1; }
shift_s=$(awk '$1 == 0 && NF >= 5 {printf "%.12e", $4 * 1e-6}' "$out_dir/log3")
awk -v a="$shift_s" '$1 == "alpha_s" {found = 1; d = $3 - a; if (d < 0) d = -d; ok = (a > 0 && d <= 1e-9 + 1e-6 * a)}
    END {exit !(found && ok)}' "$out_dir/net3" || { echo "calibrate --latency shift: alpha_s is not the empty shift ($shift_s s)"; cat "$out_dir/log3" "$out_dir/net3"; exit 1; }
"$bin/sparse-bench" scale --ranks 4 --n 20000 --density 0.01 --algo topk_a --network "$out_dir/net" --json \
    | grep -q '"network":"calibrated: full bisection'
rm -rf "$out_dir"

# Across a real (shaped) network: two network namespaces joined by 1 Gb/s
# tbf-shaped veths, one rank each over UCX's TCP (scripts/netns-cluster.sh).
# One lossless (topk_a) and one lossy (spardl) algorithm: the same error
# against the dense oracle, entries and bytes as the thread transport on the
# same inputs (lossless: within f32 rounding), world size 2, and at least
# the counted bytes through each rank's veth (not MPICH's shared memory).
# Skipped, saying why, only where namespaces cannot be made (not root, no
# netns); CI is root.
step "sparse-bench allreduce across two network namespaces"
if [ "$(id -u)" -eq 0 ] && ! command -v tc >/dev/null; then
    apt-get install -y -q iproute2 >/dev/null || { echo "no ip/tc and apt-get install iproute2 failed"; exit 1; }
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "SKIPPED: network namespaces need root (uid $(id -u))"
elif ! ip netns add "spc-probe-$$" 2>/dev/null; then
    echo "SKIPPED: cannot make a network namespace here (ip netns add failed: no netns support or no CAP_SYS_ADMIN)"
else
    ip netns del "spc-probe-$$"
    out_dir=$(mktemp -d)
    args=(allreduce --n 100000 --density 0.01 --reps 2 --algo topk_a --algo spardl --json)
    "$bin/sparse-bench" "${args[@]}" --ranks 2 > "$out_dir/threads"
    # Its namespaces are named spc-PID-* after the script's process id.
    bash scripts/netns-cluster.sh --ranks 2 --rate 1gbit --timeout 120 --stats "$out_dir/stats" \
        -- "$bin/sparse-bench" "${args[@]}" --transport mpi > "$out_dir/netns" &
    cluster=$!
    wait "$cluster"
    python3 - "$out_dir" <<'PY'
import json, sys
d = sys.argv[1]
def rows(name):
    rows = [json.loads(line) for line in open(f"{d}/{name}")]
    return {r["algo"]: r for r in rows if r["bench"] == "allreduce"}
threads, netns = rows("threads"), rows("netns")
assert all(r["ranks"] == 2 for r in netns.values()), "world size is not 2"
for algo in ("topk_a", "spardl"):
    t, m = threads[algo], netns[algo]
    for key in ("max_abs_err", "result_nnz", "bytes_recv_max", "rounds"):
        assert m[key] == t[key], (algo, key, m[key], t[key])
assert netns["topk_a"]["lossless"] and netns["topk_a"]["max_abs_err"] < 1e-5, netns["topk_a"]
assert not netns["spardl"]["lossless"] and netns["spardl"]["result_nnz"] <= 1000, netns["spardl"]
stats = [line.split() for line in open(f"{d}/stats")]
assert len(stats) == 2, stats
for s in stats:
    assert int(s[3]) >= netns["topk_a"]["bytes_recv_max"] and int(s[5]) > 0, s
    # The default queue (--queue acks-first) classified acknowledgements.
    assert s[6] == "acks_first_packets" and int(s[7]) > 0, s
print("topk_a and spardl across two namespaces equal the thread transport's results; veths carried the bytes, acknowledgements first")
PY
    # Each rank bound to CPUs of its own where the ranks do not outnumber
    # the CPUs (--bind cores, the default there; with --nice too, as
    # train-wire.sh runs them), unbound with --bind none.
    allowed=$(taskset -pc $$ | sed 's/.*: //')
    if [ "$allowed" = "$(echo "$allowed" | tr -d ',-')" ]; then
        echo "SKIPPED: binding ranks to CPUs of their own needs 2 CPUs (this shell may use: $allowed)"
    else
        for bind in default nice none; do
            opt=()
            case $bind in nice) opt=(--nice 0) ;; none) opt=(--bind none) ;; esac
            bash scripts/netns-cluster.sh -q --ranks 2 --rate none --timeout 60 "${opt[@]}" \
                -- bash -c 'echo "rank $PMI_RANK cpus $(taskset -pc $$ | sed "s/.*: //")"' > "$out_dir/bind_$bind" &
            pid=$!
            wait "$pid"
            left=$(ip netns list | grep "^spc-$pid-" || true)
            [ -z "$left" ] || { echo "network namespaces left behind: $left"; exit 1; }
        done
        python3 - "$out_dir" "$allowed" <<'PY'
import sys
d = sys.argv[1]
def cpus(spec):
    s = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        s.update(range(int(a), int(b or a) + 1))
    return s
allowed = cpus(sys.argv[2])
def ranks(name):
    out = {}
    for line in open(f"{d}/bind_{name}"):
        _, rank, _, spec = line.split()
        out[int(rank)] = cpus(spec)
    assert sorted(out) == [0, 1], out
    return out
for name in ("default", "nice"):
    b = ranks(name)
    assert b[0] and b[1] and not b[0] & b[1], (name, b)
    assert b[0] | b[1] == allowed, (name, b, allowed)
    assert len(b[0]) - len(b[1]) in (0, 1), (name, b)
free = ranks("none")
assert free[0] == free[1] == allowed, free
print(f"ranks bound to CPUs of their own by default and with --nice ({ranks('default')}), unbound with --bind none")
PY
    fi
    rm -rf "$out_dir"
    left=$(ip netns list | grep "^spc-$cluster-" || true)
    [ -z "$left" ] || { echo "network namespaces left behind: $left"; exit 1; }
fi

# Training under MPI: two processes, every rank the same weights after
# every epoch, the world size in the rows, accuracy above chance.
train_rows=$(MPIEXEC_TIMEOUT=300 mpiexec -n 2 "$bin/sparse-bench" train --transport mpi \
    --epochs 2 --hidden 32 --density 0.05 --scheme redsync_rgc --scheme sparcml_topk_sgd --json)
python3 - "$train_rows" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
assert len(rows) == 4, len(rows)
for r in rows:
    assert r["bench"] == "train" and r["transport"] == "mpi" and r["ranks"] == 2, r
    assert r["identical_weights"], r["scheme"]
    assert r["final_test_acc"] > 0.5, (r["scheme"], r["final_test_acc"])
print(f"train under mpiexec -n 2: {len(rows)} rows, identical weights, above chance")
PY

# Training on the device (--device wgpu: burn's wgpu backend and the
# optimizer's wgpu kernels sharing the device's memory; lavapipe here), on
# threads and under mpiexec -n 2 with a wgpu device per process: identical
# weights, accuracy above chance. bench/tests/train.rs compares it with
# --device cpu; residual-sgd/tests/burn_device.rs counts its transfers.
dev_args=(train --device wgpu --epochs 2 --hidden 32 --density 0.05 --scheme redsync_rgc --json)
for launch in "" "mpiexec -n 2"; do
    if [ -n "$launch" ]; then
        dev_rows=$(MPIEXEC_TIMEOUT=300 $launch "$bin/sparse-bench" "${dev_args[@]}" --transport mpi)
    else
        dev_rows=$("$bin/sparse-bench" "${dev_args[@]}" --ranks 2)
    fi
    python3 - "$dev_rows" "${launch:-threads}" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
assert len(rows) == 2, len(rows)
for r in rows:
    assert r["bench"] == "train" and r["ranks"] == 2 and r["identical_weights"], r
    assert r["final_test_acc"] > 0.5, (r["scheme"], r["final_test_acc"])
print(f"train --device wgpu ({sys.argv[2]}): {len(rows)} rows, identical weights, above chance")
PY
done

# Durable training under MPI (issue 32). For every scheme, on 2, 3 and 4
# processes: 1 epoch with checkpoints every 7 steps (not a divisor of an
# epoch; the two newest kept), then a new mpiexec job resumed to 2
# epochs, ends with the weights of an unbroken 2-epoch job (digests
# equal) and its accuracies.
ck_dir=$(mktemp -d)
ck=(--transport mpi --density 0.05 --hidden 32 --json)
for n in 2 3 4; do
    whole=$(MPIEXEC_TIMEOUT=300 mpiexec -n $n "$bin/sparse-bench" train "${ck[@]}" --epochs 2)
    MPIEXEC_TIMEOUT=300 mpiexec -n $n "$bin/sparse-bench" train "${ck[@]}" --epochs 1 \
        --checkpoint-every 7 --keep-checkpoints 2 --checkpoint-dir "$ck_dir/n$n" >/dev/null
    # --keep-checkpoints 2: each run directory holds two checkpoints, the
    # newest of them the one LATEST names (names of 8 digits sort as steps).
    for run in "$ck_dir/n$n"/*/; do
        kept=$(cd "$run" && ls -d step-* | sort)
        [ "$(wc -l <<<"$kept")" -eq 2 ] && [ "$(tail -1 <<<"$kept")" = "$(cat "$run/LATEST")" ] \
            || { echo "$run: not the 2 newest checkpoints: $kept"; exit 1; }
    done
    resumed=$(MPIEXEC_TIMEOUT=300 mpiexec -n $n "$bin/sparse-bench" train "${ck[@]}" --epochs 2 --resume "$ck_dir/n$n")
    python3 - "$n" "$whole" "$resumed" <<'PY'
import json, sys
n = int(sys.argv[1])
whole, resumed = [[json.loads(l) for l in a.splitlines() if l.startswith("{")] for a in sys.argv[2:]]
assert len(whole) == len(resumed) == 7, (len(whole), len(resumed))
for w, r in zip(whole, resumed):
    assert w["scheme"] == r["scheme"] and r["ranks"] == n and r["resumed_from_ranks"] == [n], r
    assert r["resumed_from_step"][0] > 0 and r["lost_steps"] == 0, r
    assert r["start"] == f"resumed from step {r['resumed_from_step'][0]}", r
    assert r["weights_digest"] == w["weights_digest"], (w["scheme"], w["weights_digest"], r["weights_digest"])
    assert r["test_acc"] == w["test_acc"] and r["identical_weights"], w["scheme"]
print(f"mpiexec -n {n}: every scheme ({len(whole)}) resumed from a checkpoint of the first epoch "
      "ends with the weights (digests) and accuracies of an unbroken run")
PY
done

# A rank killed under mpiexec: a job of 3 processes training on
# Fashion-MNIST with checkpoints every 20 steps (dense momentum SGD, then
# RGC) loses one process to `kill -9` (found by its PMI_RANK) once RGC has
# done 50 steps; mpiexec ends the job, and a job of 2 resumes it: the
# finished dense run as it ended (same digest and accuracies), the RGC run
# from its last checkpoint, resharded, reporting the steps lost, with
# identical weights on both ranks and the accuracy of an unbroken
# 3-process run within 2 points.
fm=(--transport mpi --data fashion-mnist --model mlp --hidden 64 --train-images 9600 --epochs 2
    --scheme redsync_rgc --density 0.01 --lr 0.02 --json)
unbroken=$(MPIEXEC_TIMEOUT=300 mpiexec -n 3 "$bin/sparse-bench" train "${fm[@]}")
MPIEXEC_TIMEOUT=300 mpiexec -n 3 "$bin/sparse-bench" train "${fm[@]}" \
    --checkpoint-every 20 --checkpoint-dir "$ck_dir/kill" >/dev/null 2>"$ck_dir/kill.err" &
job=$!
progress="$ck_dir/kill/redsync_rgc-d0.01-s1/progress"
for _ in $(seq 1 2400); do
    [ "$(cat "$progress" 2>/dev/null || echo 0)" -ge 50 ] 2>/dev/null && break
    sleep 0.05
done
killed=""
for pid in $(pgrep -f "sparse-bench train"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx PMI_RANK=1; then
        kill -9 "$pid" && killed=$pid
    fi
done
if [ -z "$killed" ] || wait $job; then
    echo "no rank was killed, or the job with a killed rank did not fail"; exit 1
fi
at=$(cat "$progress")
survived=$(MPIEXEC_TIMEOUT=300 mpiexec -n 2 "$bin/sparse-bench" train "${fm[@]}" --resume "$ck_dir/kill")
python3 - "$at" "$unbroken" "$survived" <<'PY'
import json, sys
at = int(sys.argv[1])
unbroken, survived = [[json.loads(l) for l in a.splitlines() if l.startswith("{")] for a in sys.argv[2:]]
assert len(unbroken) == len(survived) == 2, (len(unbroken), len(survived))
done, cut = survived
assert done["ranks"] == 2 and done["resumed_from_ranks"] == [3], done
assert done["weights_digest"] == unbroken[0]["weights_digest"], (done, unbroken[0])
assert done["test_acc"] == unbroken[0]["test_acc"], (done, unbroken[0])
step = cut["resumed_from_step"][0]
assert cut["ranks"] == 2 and cut["resumed_from_ranks"] == [3] and cut["identical_weights"], cut
assert step % 20 == 0 and 40 <= step <= at and cut["lost_steps"] == at - step, (at, cut)
gap = 100 * (cut["final_test_acc"] - unbroken[1]["final_test_acc"])
assert abs(gap) <= 2, (cut["final_test_acc"], unbroken[1]["final_test_acc"])
print(f"{cut['scheme']}: {100 * cut['final_test_acc']:.2f}% resumed on 2, "
      f"{100 * unbroken[1]['final_test_acc']:.2f}% unbroken on 3 ({gap:+.2f} points); "
      f"{done['scheme']}, finished before the kill, resumed as it ended")
print(f"kill -9 of rank 1 of 3 after step {at}: resumed on 2 from step {step}, "
      f"{cut['lost_steps']} steps lost")
PY
rm -rf "$ck_dir"

# SimGrid as the referee of sparse_coll::sim: spardl's traces at P = 16 on
# 25gbe (sparse-bench scale --traces), replayed by SMPI configured as plain
# alpha-beta, within 10% of the simulator, and on nvlink8-25gbe with the
# simulator's sends in rendezvous as SMPI's, within 1% (installs
# libsimgrid-dev).
step "SimGrid replay of spardl at P = 16 against sparse_coll::sim"
scripts/simgrid-replay.sh --check "$bin/sparse-bench"

# PyTorch users' way in: `pip install ./python` (maturin, the PyO3
# extension in release) in a virtual environment that sees Debian's torch,
# then the package's tests on gloo with 2 and 4 processes: the collective
# suite of every registry algorithm over the process group, the hook
# against residual_sgd::Trainer bit for bit, training within a point of
# dense DDP, a resumed run bit for bit, and the failures on every rank.
step "PyTorch: pip install ./python and its tests (pytest, gloo)"
venv="$(realpath -m "${CARGO_TARGET_DIR:-target}")/venv-sparse-comm"
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check ./python
(cd python && "$venv/bin/python" -m pytest -q tests)

# The library crates package as users get them: each one's tarball
# unpacked and built against the others' (a local registry), no
# dev-dependency cycle, no file outside the package. Nothing is published.
step "cargo package --workspace --exclude bench"
cargo package --workspace --exclude bench --locked

# Each crate's minimum Rust version (rust-version): scripts/msrv.py checks
# it is what the crate needs; scripts/msrv.sh builds the crates that
# declare an older Rust than this toolchain with that Rust (from rustup).
step "minimum Rust versions (scripts/msrv.sh)"
# Where rustup cannot fetch that Rust (the machine reaches only package
# registries), this says so and goes on: scripts/msrv.py still holds each
# crate to the version it needs.
MSRV_OPTIONAL=1 bash scripts/msrv.sh

# The CUDA configuration is checked (cubecl-llvm's LLVM bundle comes from
# PyPI: scripts/cuda-llvm.sh), so CUDA code cannot rot. Its tests run where
# a CUDA device is present; elsewhere they would only print that they skip,
# after a five-minute build.
step "CUDA configuration: clippy (tests where nvidia-smi finds a GPU)"
XDG_DATA_HOME=$(bash scripts/cuda-llvm.sh)
export XDG_DATA_HOME
cargo clippy -p backend-cuda -p bench --features backend-cuda/cuda,bench/cuda --all-targets -- -D warnings
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    cargo test -p backend-cuda --features cuda -- cuda:: --nocapture
else
    echo "no CUDA device (nvidia-smi finds none): the CUDA tests do not run here"
fi

echo
echo "all checks passed in $((SECONDS / 60))m$((SECONDS % 60))s"
