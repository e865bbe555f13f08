#!/usr/bin/env python3
"""The tables of scripts/wire-bench.sh: measured (allreduce --transport mpi
across namespaces) beside simulated (scale over the calibrated network
file), the error of every row, per n and density; the load beside each.

Usage: python3 scripts/wire-table.py OUTDIR RATE
The dense rows (the ring, MPI_Allreduce) are not in `scale`: their
simulated time is computed here on the calibrated link, the ring's
alpha-beta formula, 2 (P - 1) (alpha + 4 n / P beta), and MPICH's
algorithm's for MPI_Allreduce (`rabenseifner`)."""
import glob
import json
import os
import re
import sys

out, rate = sys.argv[1], sys.argv[2]


def network(path):
    v = {}
    for line in open(path):
        line = line.split("#", 1)[0]
        if "=" in line:
            k, x = (s.strip() for s in line.split("=", 1))
            v[k] = x
    return float(v["alpha_s"]), 1.0 / float(v["bytes_per_s"])


def loads():
    got = {}
    for line in open(os.path.join(out, "load.txt")):
        m = re.match(r"n=(\d+) density=([\d.]+) P=(\d+): .*load average: ([\d.]+)", line)
        if m:
            got[(int(m[1]), m[2], int(m[3]))] = m[4]
    return got


def ring(p, n):
    """The ring allreduce of n floats: 2 (P - 1) (alpha + 4 n / P beta), ms."""
    return 2 * (p - 1) * (alpha + 4 * n / p * beta) * 1e3


def rabenseifner(p, n):
    """MPICH's MPI_Allreduce of n floats at these sizes (above its 2 KiB
    short-message limit, n at least the largest power of two pof2 <= P):
    reduce-scatter by recursive halving and allgather by recursive
    doubling among pof2 ranks, 2 lg pof2 alpha + 2 (pof2 - 1) / pof2 4 n
    beta; where P is not a power of two, P - pof2 ranks first send their
    whole vector to a partner and get the whole result back, 2 (alpha +
    4 n beta) more (MPIR_Allreduce_intra_reduce_scatter_allgather), ms."""
    pof2 = 1 << (p.bit_length() - 1)
    t = 2 * (pof2.bit_length() - 1) * alpha + 2 * (pof2 - 1) / pof2 * 4 * n * beta
    if pof2 != p:
        t += 2 * (alpha + 4 * n * beta)
    return t * 1e3


by_p = {}
alpha, beta = network(os.path.join(out, "calibrated.net"))
load = loads()
print(f"Rate {rate}; calibrated link: alpha {alpha * 1e6:.1f} us, {1e-9 / beta:.3f} GB/s "
      f"({out}/calibrate.txt).\n")
everything = []
for sim_path in sorted(glob.glob(os.path.join(out, "simulated_*.json"))):
    n, d = re.match(r".*simulated_(\d+)_([\d.]+)\.json", sim_path).groups()
    n = int(n)
    sim = {}
    for line in open(sim_path):
        r = json.loads(line)
        if r.get("kind") == "scale":
            sim[(r["algo"], r["ranks"])] = r["sim_ms"]
    meas = {}
    for f in glob.glob(os.path.join(out, f"measured_*_{n}_{d}.json")):
        # mpiexec's own lines (a job stopped after a hang in MPI_Finalize
        # prints its banner) are not rows.
        for line in open(f):
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r.get("bench") == "allreduce" and r["algo"] not in ("auto", "mpi_allgather"):
                meas[(r["algo"], r["ranks"])] = r["ms"]
    ps = sorted({p for _, p in meas})
    print(f"n = {n}, density {d}: load average (1 min) "
          + ", ".join(f"P = {p}: {load.get((n, d, p), '?')}" for p in ps) + "\n")
    print("| algorithm | P | measured ms | simulated ms | error |")
    print("|---|---|---|---|---|")
    errs = []
    algos = sorted({a for a, _ in meas}, key=lambda a: (a in ("dense_ring", "mpi_allreduce"), a))
    for a in algos:
        for p in ps:
            if (a, p) not in meas:
                continue
            m = meas[(a, p)]
            if a == "dense_ring":
                s = ring(p, n)
                label = f"`{a}` (ring formula)"
            elif a == "mpi_allreduce":
                s = rabenseifner(p, n)
                label = f"`{a}` (MPICH's formula)"
            elif (a, p) in sim:
                s = sim[(a, p)]
                label = f"`{a}`"
            else:
                continue
            e = (s - m) / m
            errs.append(abs(e))
            by_p.setdefault(p, []).append(abs(e))
            print(f"| {label} | {p} | {m:.3f} | {s:.3f} | {100 * e:+.0f}% |")
    errs.sort()
    everything += errs
    if errs:
        within = sum(e <= 0.30 for e in errs)
        print(f"\nmedian |error| {100 * errs[len(errs) // 2]:.0f}%, largest {100 * errs[-1]:.0f}%, "
              f"{within} of {len(errs)} rows within 30%\n")
everything.sort()
if everything:
    within = sum(e <= 0.30 for e in everything)
    print(f"All tables: median |error| {100 * everything[len(everything) // 2]:.0f}%, "
          f"{within} of {len(everything)} rows within 30%")
    for p, errs in sorted(by_p.items()):
        errs.sort()
        within = sum(e <= 0.30 for e in errs)
        print(f"- P = {p}: median |error| {100 * errs[len(errs) // 2]:.0f}%, "
              f"{within} of {len(errs)} rows within 30%")
