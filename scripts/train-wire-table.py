#!/usr/bin/env python3
"""The tables of scripts/train-wire.sh: measured training steps across
namespaces beside the simulator's prediction of each.

Usage: train-wire-table.py OUTDIR RATE BUCKET_MIB

Measured: `sparse-bench train --transport mpi` (medians over the run's
steps; one seed). Predicted: the same run's measured local phases (forward
and backward, selection, update) plus the communication `sparse-bench step`
simulates over the calibrated link (`comm_ms` of its per layer and fused
rows; the pipelined runs overlap one bucket's collective with the next
bucket's selection only, as burn has no gradient hook, so they are
predicted by the fused communication)."""
import glob
import json
import os
import statistics
import sys

out, rate, bucket = sys.argv[1], sys.argv[2], sys.argv[3]
MODES = [("layer", "per layer"), ("fused", "fused"), ("pipelined", "fused")]


def rows(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.startswith("{")]


def main():
    errors = []
    verdicts = []
    runs = sorted(glob.glob(os.path.join(out, "step_*.json")))
    if not runs:
        sys.exit(f"train-wire-table: no step_*.json in {out}")
    for step_file in runs:
        model, p = os.path.basename(step_file)[5:-5].rsplit("_", 1)
        sim = {}
        for r in rows(step_file):
            if r.get("kind") == "bucket_step":
                sim[(r["scheme"], r["mode"])] = r
        measured = {}
        for mode, _ in MODES:
            for r in rows(os.path.join(out, f"train_{model}_{p}_{mode}.json")):
                if r.get("bench") == "train":
                    measured[(r["scheme"], mode)] = r
        schemes = sorted({s for s, _ in measured}, key=lambda s: (not s.startswith("dense"), s))
        print(f"\n{model.upper()}, P = {p}, {rate} (bucket cap {bucket} MiB)\n")
        print("| scheme | mode | step ms | predicted ms | error | comm ms (measured / simulated) | x dense (bucketed) |")
        print("|---|---|---|---|---|---|---|")
        dense_fused = min(
            (measured[(s, "fused")]["step_ms"] for s in schemes if s.startswith("dense") and (s, "fused") in measured),
            default=None,
        )
        best = None
        for s in schemes:
            steps = {}
            for mode, sim_mode in MODES:
                m = measured.get((s, mode))
                if m is None:
                    continue
                steps[mode] = m["step_ms"]
                local = m["grad_ms"] + m["select_ms"] + m["apply_ms"]
                srow = sim.get((s, sim_mode))
                pred = local + srow["comm_ms"] if srow else None
                err = (pred - m["step_ms"]) / m["step_ms"] if pred else None
                if err is not None:
                    errors.append(err)
                ratio = m["step_ms"] / dense_fused if dense_fused else float("nan")
                if not s.startswith("dense"):
                    best = min(best, ratio) if best is not None else ratio
                print(
                    f"| `{s}` | {mode} | {m['step_ms']:.3f} | "
                    + (f"{pred:.3f} | {err * 100:+.0f}% | " if pred else "- | - | ")
                    + f"{m['comm_ms']:.3f} / "
                    + (f"{srow['comm_ms']:.3f}" if srow else "-")
                    + f" | {ratio:.2f} |"
                )
            if not s.startswith("dense") and "layer" in steps and "fused" in steps:
                verdicts.append((model, p, s, steps["fused"] <= steps["layer"] * 1.05))
        if best is not None:
            print(f"\nbest sparse step / dense (bucketed): {best:.2f} (goal: at most 0.5)")
    if errors:
        abs_err = [abs(e) for e in errors]
        within = sum(e <= 0.25 for e in abs_err)
        print(
            f"\nAll: median |error| of the prediction {statistics.median(abs_err) * 100:.0f}%, "
            f"{within} of {len(abs_err)} within 25%"
        )
    slower = [(m, p, s) for m, p, s, ok in verdicts if not ok]
    print(
        f"fused slower than per layer (by more than 5%): {len(slower)} of {len(verdicts)}"
        + ("" if not slower else ": " + ", ".join(f"{s} ({m}, P = {p})" for m, p, s in slower))
    )


main()
