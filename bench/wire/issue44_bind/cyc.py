import re,sys,statistics
f=sys.argv[1]
seen=set(); starts={}
pat=re.compile(r'^\s*([\d.]+)\s+\[\d+\]\s+sb\[(\d+)\]\s+awakened: sb\[(\d+)/(\d+)\]')
for line in open(f):
    m=pat.match(line)
    if not m: continue
    t,waker,tid,pid=float(m[1]),m[2],m[3],m[4]
    if waker==pid and tid not in seen:
        seen.add(tid); starts.setdefault(pid,[]).append(t)
for pid,ts in starts.items():
    d=[(b-a)*1e3 for a,b in zip(ts,ts[1:]) if (b-a)<0.1]
    d.sort()
    print(pid,len(ts),"cycles<100ms:",len(d),"median %.2f"%statistics.median(d),"q25 %.2f q75 %.2f"%(d[len(d)//4],d[3*len(d)//4]), "max %.2f"%d[-1])
for pid,ts in starts.items():
    print(pid, " ".join("%.1f"%((b-a)*1e3) for a,b in zip(ts,ts[1:])))
print("long cycles")
for pid,ts in starts.items():
    half=ts[len(ts)//2+1:]
    for a,b in zip(half,half[1:]):
        if (b-a)>0.024: print(pid,"%.6f %.6f %.1f"%(a,b,(b-a)*1e3))
