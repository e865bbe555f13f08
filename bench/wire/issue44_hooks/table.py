import json, glob, os, sys, statistics as st
d = sys.argv[1]
cols = [tuple(c.split(":")) for c in sys.argv[2].split(",")]
rows = {}
for f in sorted(glob.glob(os.path.join(d, "*.json"))):
    name = os.path.basename(f)[:-5]
    model, p, binary, mode, rep = name.split("_")
    for line in open(f):
        if '"bench":"train"' not in line:
            continue
        r = json.loads(line)
        rows.setdefault((r["scheme"], binary, mode), []).append(r)
schemes = sorted({k[0] for k in rows})
def med(key, field):
    v = [r[field] for r in rows.get(key, [])]
    return st.median(v) if v else float("nan")
fields = [("step_ms", "step"), ("grad_ms", "fwd+bwd"), ("comm_ms", "comm")]
print("| scheme | " + " | ".join(f"{b} {m}: {lab}" for b, m in cols for _, lab in fields) + " |")
print("|---|" + "---|" * (len(cols) * len(fields)))
for s in schemes:
    print(f"| `{s}` | " + " | ".join(f"{med((s, b, m), f):.2f}" for b, m in cols for f, _ in fields) + " |")
n = {k: len(v) for k, v in rows.items()}
print(f"\njobs per cell: {sorted(set(n.values()))}")
