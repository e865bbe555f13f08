#!/usr/bin/env python3
"""The tables of scripts/train-wire.sh: measured training steps across
namespaces beside the simulator's prediction of each.

Usage: train-wire-table.py OUTDIR RATE BUCKET_MIB

Where OUTDIR/calibrated.net models the shaper's bucket (train-wire.sh's
MODEL_BUCKET) and STEP_BIN names a sparse-bench, each row's communication
is simulated again with the bucket at the level the row's own local phases
refill (`bucket_level_bytes`: tokens come at the link's rate while the
rank computes, up to the bucket's size; a step's calls drain them): the
steady state of a training loop, where a simulation from a full bucket
would be a step after a pause. DENSITY (default 0.01) must be the runs'
density.

Measured: `sparse-bench train --transport mpi` (medians over the run's
steps of the whole step, agreement rounds included; one seed). Predicted:
the same run's measured local phases (the straggler's, `straggler_local_ms`,
where train reports it: forward and backward, selection, update and the
checks) plus the communication `sparse-bench step` simulates over the
calibrated link (`comm_ms` of its per layer and fused rows: the calls and
the trainer's agreement rounds, as many as the measured step made:
agree_rounds, two a step since Trainer::step dropped its round after
selection, three in per layer and fused runs before that; since the
collective calls of a Trainer::step share one entry round, step simulates
them so, and runs from before that are predicted as they were made with a
sparse-bench from before it); the pipelined
runs take the gradients after the pass and overlap one bucket's collective
with the next bucket's selection only, so they are predicted by the fused
communication; so are the hooked runs (`--hooks`: each gradient goes in as
burn's pass completes it), whose ranks have one core each on this host
(scripts/netns-cluster.sh binds them where they do not outnumber the
cores; more ranks share them), so the pass and the step's communication
cannot run at once there)."""
import functools
import glob
import json
import os
import statistics
import subprocess
import sys

out, rate, bucket = sys.argv[1], sys.argv[2], sys.argv[3]
MODES = [("layer", "per layer"), ("fused", "fused"), ("pipelined", "fused"), ("hooked", "fused")]


def rows(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.startswith("{")]


@functools.lru_cache(maxsize=None)
def network(path):
    """The key = value lines of a network file (read once)."""
    kv = {}
    if not os.path.exists(path):
        return kv
    with open(path) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if "=" in line:
                k, v = line.split("=", 1)
                kv[k.strip()] = v.strip()
    return kv


LEVELS = {}


def link_of(p):
    """The calibrated link at P: calibrated_P.net where train-wire.sh
    calibrated the latency on P ranks (LATENCY=shift), else calibrated.net."""
    at_p = os.path.join(out, f"calibrated_{p}.net")
    return at_p if os.path.exists(at_p) else os.path.join(out, "calibrated.net")


def has_bucket(p):
    """Whether the link at P models the shaper's bucket."""
    return "bucket_bytes" in network(link_of(p))


def levelled(p):
    """Whether the rows at P are simulated at their levels: the link at P
    has a bucket and STEP_BIN is given."""
    return has_bucket(p) and bool(os.environ.get("STEP_BIN"))


def at_level(model, p, local_ms):
    """The simulated rows of `step` for (model, P) over the calibrated link
    whose bucket starts with what `local_ms` of idle link refills, or None
    where the link has no bucket or no STEP_BIN is given."""
    if not levelled(p):
        return None
    net_file = link_of(p)
    kv = network(net_file)
    depth, rate = float(kv["bucket_bytes"]), float(kv["bytes_per_s"])
    # To 100 bytes: rows whose levels differ by less share a simulation.
    level = min(depth, round(rate * local_ms * 1e-3, -2))
    key = (model, p, level)
    if key not in LEVELS:
        os.makedirs(os.path.join(out, "levels"), exist_ok=True)
        path = os.path.join(out, "levels", f"{p}_{int(level)}.net")
        with open(net_file) as f:
            # A level the file may already give is replaced.
            text = "".join(l for l in f if not l.strip().startswith("bucket_level_bytes"))
        with open(path, "w") as f:
            f.write(text.rstrip("\n") + f"\nbucket_level_bytes = {level:.0f}\n")
        res = subprocess.run(
            [os.environ["STEP_BIN"], "step", "--model", f"fashion_{model}", "--ranks", p,
             "--network", path, "--density", os.environ.get("DENSITY", "0.01"),
             "--bucket-mib", bucket, "--dense", "mpich", "--json"],
            capture_output=True, text=True,
        )
        if res.returncode != 0:
            sys.exit(f"train-wire-table: step over {path} failed: {res.stderr.strip()}")
        LEVELS[key] = {
            (r["scheme"], r["mode"]): r
            for r in map(json.loads, res.stdout.splitlines())
            if r.get("kind") == "bucket_step"
        }
    return LEVELS[key]


def median_row(rs):
    """One row of a scheme and mode from its jobs' rows: each numeric field
    that every row has, the median over them (an integer field's lower
    median), each field taken separately (so a row's step and its phases
    may come from different jobs); `identical_weights` only where every
    job had them; the first row's other fields."""
    out = dict(rs[0])
    for k, v in rs[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) \
                and all(isinstance(r.get(k), (int, float)) for r in rs):
            ints = all(isinstance(r[k], int) for r in rs)
            out[k] = (statistics.median_low if ints else statistics.median)(r[k] for r in rs)
    if "identical_weights" in out:
        out["identical_weights"] = all(r.get("identical_weights") for r in rs)
    out["jobs"] = len(rs)
    return out


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
            # One file per job (train-wire.sh's REPS: _rR), each field the
            # median over the jobs.
            runs = {}
            files = glob.glob(os.path.join(out, f"train_{model}_{p}_{mode}.json"))
            files += glob.glob(os.path.join(out, f"train_{model}_{p}_{mode}_r*.json"))
            for path in sorted(files):
                for r in rows(path):
                    if r.get("bench") == "train":
                        runs.setdefault((r["scheme"], mode), []).append(r)
            for key, rs in runs.items():
                if len(rs) < len(files):
                    print(f"train-wire-table: {key[0]} ({model}, P = {p}, {mode}) is in "
                          f"{len(rs)} of the {len(files)} jobs", file=sys.stderr)
                measured[key] = median_row(rs)
        schemes = sorted({s for s, _ in measured}, key=lambda s: (not s.startswith("dense"), s))
        print(f"\n{model.upper()}, P = {p}, {rate} (bucket cap {bucket} MiB)\n")
        print(
            "predicted over the calibrated link "
            + ("with the shaper's bucket at the level each row's local phases refill\n"
               if levelled(p)
               else "with the shaper's bucket, full at each call (STEP_BIN unset)\n"
               if has_bucket(p)
               else "(no bucket in the model)\n")
        )
        print("| scheme | mode | step ms | predicted ms | error | comm ms (measured / simulated) "
              "| agree ms (measured / simulated) | x dense (bucketed) |")
        print("|---|---|---|---|---|---|---|---|")
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
                # The straggler's local phases where train reports them:
                # a synchronous step waits for the slowest rank each step.
                local = m.get("straggler_local_ms",
                              m["grad_ms"] + m["select_ms"] + m["apply_ms"])
                at = at_level(model, p, local)
                srow = (at if at is not None else sim).get((s, sim_mode))
                # step's comm includes the trainer's agreement rounds
                # (agree_rounds of them; 3 in the sequential rows before
                # the field); the prediction takes as many as the measured
                # step made: agree_rounds where train gives it, else 3 per
                # layer and fused and 2 pipelined (Trainer::step's round
                # after selection, since dropped), none in a run from
                # before the rounds were timed (its step_ms is the four
                # phases' sum).
                rounds = (m.get("agree_rounds", 2 if mode in ("pipelined", "hooked") else 3)
                          if "agree_ms" in m else 0)
                sim_agree = 0.0
                comm = None
                if srow:
                    one = srow.get("agree_ms", 0.0) / srow.get("agree_rounds", 3)
                    sim_agree = one * rounds
                    comm = srow["comm_ms"] - srow.get("agree_ms", 0.0) + sim_agree
                pred = local + comm if srow else None
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
                    + (f"{comm - sim_agree:.3f}" if srow else "-")
                    + " | "
                    + (f"{m['agree_ms']:.3f}" if "agree_ms" in m else "-")
                    + " / "
                    + (f"{sim_agree:.3f}" if srow else "-")
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
