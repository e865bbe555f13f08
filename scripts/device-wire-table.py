#!/usr/bin/env python3
"""Simulated: training steps with their local phases measured on a GPU and
their communication simulated over a link calibrated on the wire.

Usage: device-wire-table.py WIRE_OUTDIR GPU_OUTDIR DEVICE

WIRE_OUTDIR is scripts/train-wire.sh's output (its `step_<model>_<P>.json`:
`sparse-bench step`'s communication over the link it calibrated);
GPU_OUTDIR scripts/gpu-checks.sh's (`fashion_<model>_<mode>.json`:
`sparse-bench train --device cuda` of the same runs, 2 ranks on threads
sharing the GPU). Predicted step = the GPU run's medians of forward and
backward, selection and update + the simulated communication of the same
scheme and mode (the pipelined runs, hooked or not, by the fused communication, as in
train-wire-table.py). The GPU's local phases at P = 2 stand for every P:
each rank's batch is the same, only the update of a denser reduced
gradient grows with P. Nothing here was measured on a link with a GPU:
the tables say so."""
import glob
import json
import os
import sys

wire, gpu, device = sys.argv[1], sys.argv[2], sys.argv[3]
MODES = [("layer", "per layer"), ("fused", "fused"), ("pipelined", "fused"), ("hooked", "fused")]


def rows(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.startswith("{")]


def main():
    runs = sorted(glob.glob(os.path.join(wire, "step_*.json")))
    if not runs:
        sys.exit(f"device-wire-table: no step_*.json in {wire}")
    for step_file in runs:
        model, p = os.path.basename(step_file)[5:-5].rsplit("_", 1)
        sim = {(r["scheme"], r["mode"]): r for r in rows(step_file) if r.get("kind") == "bucket_step"}
        local = {}
        for mode, _ in MODES:
            for r in rows(os.path.join(gpu, f"fashion_{model}_{mode}.json")):
                if r.get("bench") == "train":
                    local[(r["scheme"], mode)] = r
        if not local:
            continue
        pred = {}
        for (s, mode), r in local.items():
            srow = sim.get((s, dict(MODES)[mode]))
            if srow:
                loc = r["grad_ms"] + r["select_ms"] + r["apply_ms"]
                pred[(s, mode)] = (loc, srow["comm_ms"], loc + srow["comm_ms"])
        # Against the bucketed dense step; a run without fused rows against
        # its fastest dense step.
        dense = min((v[2] for (s, m), v in pred.items() if s.startswith("dense") and m == "fused"), default=None)
        if dense is None:
            dense = min((v[2] for (s, m), v in pred.items() if s.startswith("dense")), default=None)
        print(f"\n{model.upper()}, P = {p}: local phases on {device} (P = 2), communication simulated on the calibrated link\n")
        print("| scheme | mode | local ms (GPU) | comm ms (simulated) | step ms (simulated) | x dense (bucketed) |")
        print("|---|---|---|---|---|---|")
        schemes = sorted({s for s, _ in pred}, key=lambda s: (not s.startswith("dense"), s))
        best = None
        for s in schemes:
            for mode, _ in MODES:
                if (s, mode) not in pred:
                    continue
                loc, comm, step = pred[(s, mode)]
                ratio = step / dense if dense else float("nan")
                if not s.startswith("dense"):
                    best = ratio if best is None else min(best, ratio)
                print(f"| `{s}` | {mode} | {loc:.3f} | {comm:.3f} | {step:.3f} | {ratio:.2f} |")
        if best is not None:
            print(f"\nbest sparse step / dense (bucketed), simulated: {best:.2f}")


main()
