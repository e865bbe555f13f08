"""Prints the markdown tables of bench/RESULTS.md's "Training accuracy" section
from the runs of scripts/fashion-table.sh: the convergence table per run,
Zen's statistics of the real gradients per layer (first and last epoch),
and the step times under mpiexec -n 2.

Usage: python3 scripts/fashion-table.py OUTDIR
"""

import csv
import json
import os
import sys


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def convergence(name, rs, secs):
    r0 = rs[0]
    print(f"\n#### {name}: P = {r0['ranks']}, {r0['seeds']} seed(s), {r0['epochs']} epochs"
          f" ({secs})\n")
    print("| scheme | collective | density | test acc % | gap (pts) | goal | bytes/step | x dense bytes |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rs:
        gap = r["gap_points"]
        if r["density"] == 1:
            goal = "dense >= 90" if name.startswith("cnn") and r["scheme"] == "dense_momentum_sgd" else ""
            if goal:
                goal += " met" if r["final_test_acc"] >= 0.90 else " **missed**"
        else:
            bound = 1.0 if r["density"] >= 0.01 else 2.0
            goal = f"within {bound:g}: " + ("met" if gap >= -bound else "**missed**")
        print(f"| {r['scheme']} | {r['collective']} | {r['density']:g} | {100 * r['final_test_acc']:.2f} |"
              f" {gap:+.2f} | {goal} | {r['bytes_per_step']:.0f} | {r['bytes_ratio']:.4f} |")


def sparsity(name, out):
    path = os.path.join(out, name, "sparsity.csv")
    if not os.path.exists(path):
        return
    lines = [l for l in csv.DictReader(open(path)) if l["seed"] == "1"]
    epochs = max(int(l["epoch"]) for l in lines)
    at = {(l["scheme"], l["density"], l["epoch"], l["layer"]): l for l in lines}
    layers = list(dict.fromkeys(l["layer"] for l in lines))
    schemes = list(dict.fromkeys(l["scheme"] for l in lines if l["density"] != "1"))
    f = lambda x: "-" if x in ("nan", None) else f"{float(x):.3f}"
    for density in sorted({l["density"] for l in lines if l["density"] != "1"}, reverse=True):
        print(f"\n#### {name}: Zen's statistics of the real gradients at density {density}"
              f" (seed 1; e1 = epoch 1, eN = epoch {epochs})\n")
        print("Gradient density (Def. 2) from dense momentum SGD; per scheme the overlap ratio"
              " (Def. 3) of the ranks' selected sets, e1 / eN, and the densification ratio (Def. 4)"
              " at eN; `-` for a layer the scheme sends dense.\n")
        print("| layer | params | grad density e1 / eN | " + " | ".join(schemes) + " |")
        print("|---|---|---|" + "---|" * len(schemes))
        for layer in layers:
            d1 = at.get(("dense_momentum_sgd", "1", "1", layer), {}).get("grad_density")
            dn = at.get(("dense_momentum_sgd", "1", str(epochs), layer), {}).get("grad_density")
            cells = []
            for s in schemes:
                a = at.get((s, density, "1", layer))
                b = at.get((s, density, str(epochs), layer))
                if a is None or a["compressed"] != "true":
                    cells.append("-")
                else:
                    cells.append(f"{f(a['overlap'])} / {f(b['overlap'])}, x{f(b['densification'])}")
            n = next(l["len"] for l in lines if l["layer"] == layer)
            print(f"| {layer} | {n} | {f(d1)} / {f(dn)} | " + " | ".join(cells) + " |")


def steps(rs, secs):
    print(f"\n#### CNN step times under mpiexec -n 2 (one epoch on 6,400 images, {secs})\n")
    print("| scheme | density | grad ms | select ms | comm ms | apply ms | step ms | x dense step |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rs:
        print(f"| {r['scheme']} | {r['density']:g} | {r['grad_ms']:.2f} | {r['select_ms']:.3f} |"
              f" {r['comm_ms']:.3f} | {r['apply_ms']:.3f} | {r['step_ms']:.2f} |"
              f" {r['step_ms'] / r['dense_step_ms']:.2f} |")


def merge(parts):
    """One configuration's rows from runs of other seeds (cnn_p4, cnn_p4_s2,
    ...): every mean weighted by its run's seeds. The gap to the dense
    counterpart is linear in the accuracies, so its mean is the gap of the
    means."""
    if len(parts) == 1:
        return parts[0]
    keyed = [{(r["scheme"], r["density"]): r for r in p} for p in parts]
    assert all(k.keys() == keyed[0].keys() for k in keyed), "runs of other schemes or densities"
    out = []
    for key, r0 in keyed[0].items():
        rs = [k[key] for k in keyed]
        n = sum(r["seeds"] for r in rs)
        m = dict(r0, seeds=n)
        for f in ["final_test_acc", "gap_points", "bytes_per_step", "bytes_ratio"]:
            m[f] = sum(r[f] * r["seeds"] for r in rs) / n
        out.append(m)
    return out


def main(out):
    for name in ["cnn_p4", "cnn_p8", "mlp_p4", "mlp_p8", "step_mpi2"]:
        path = os.path.join(out, f"{name}.jsonl")
        if not os.path.exists(path):
            continue
        rs = rows(path)
        if not rs:
            continue
        t = os.path.join(out, f"{name}.time")
        secs = open(t).read().strip().split(": ")[-1] if os.path.exists(t) else "time not recorded"
        # The same configuration's other seeds, run apart (cnn_p4_s2, ...).
        more = sorted(f[:-len(".jsonl")] for f in os.listdir(out)
                      if f.startswith(name + "_s") and f.endswith(".jsonl"))
        if more:
            rs = merge([rs] + [rows(os.path.join(out, f"{m}.jsonl")) for m in more])
            secs += " + " + " + ".join(
                open(os.path.join(out, f"{m}.time")).read().strip().split(": ")[-1]
                if os.path.exists(os.path.join(out, f"{m}.time")) else "?" for m in more)
        if name == "step_mpi2":
            steps(rs, secs)
        else:
            convergence(name, rs, secs)
            sparsity(name, out)


if __name__ == "__main__":
    main(sys.argv[1])
