import json,glob,statistics as st,sys,os
base='/tmp/ab'
def jobs(which,p,mode):
    out={}
    for d in sorted(glob.glob(f'{base}/*_{which}')):
        f=f'{d}/train_mlp_{p}_{mode}.json'
        if not os.path.exists(f): continue
        for line in open(f):
            if '"bench":"train"' not in line: continue
            r=json.loads(line); out.setdefault(r['scheme'],[]).append(r)
    return out
for p in [3,4]:
    print(f"P = {p}")
    for mode in ['layer','fused']:
        O=jobs('old',p,mode); N=jobs('new',p,mode)
        for s in sorted(O):
            m=lambda rs,k: st.median([r[k] for r in rs])
            if s not in N: continue
            print(f"  {mode:6} {s:24} step {m(O[s],'step_ms'):7.3f} -> {m(N[s],'step_ms'):7.3f}  comm {m(O[s],'comm_ms'):6.3f} -> {m(N[s],'comm_ms'):6.3f}  agree {m(O[s],'agree_ms'):6.3f} -> {m(N[s],'agree_ms'):6.3f}  rounds/step traffic {m(O[s],'rounds') if 'rounds' in O[s][0] else '-'} -> {m(N[s],'rounds') if 'rounds' in N[s][0] else '-'}  n={len(O[s])},{len(N[s])}")
