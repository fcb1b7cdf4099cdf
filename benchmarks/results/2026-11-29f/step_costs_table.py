import json, statistics as st, sys
rec = json.load(open(sys.argv[1]))
cost = json.load(open(sys.argv[2]))["verify_cost"]
import bisect
def curve(ctx):
    return cost["c"] if ctx < 768 else cost["c_long"]
byb = {}
for n, ctx, ms in rec:
    b = "short" if ctx < 768 else "long"
    byb.setdefault((b, n), []).append(ms)
for b in ("short", "long"):
    plain = byb.get((b, -1)) or byb.get((b, 0))
    if not plain: continue
    p = st.median(plain)
    print(b, "plain median %.3f ms (n=%d)" % (p, len(plain)), "n0:", len(byb.get((b,0),[])))
    c = cost["c"] if b == "short" else cost["c_long"]
    for n in sorted(k[1] for k in byb if k[0] == b and k[1] >= 0):
        xs = byb[(b, n)]
        if len(xs) < 8: continue
        m = st.median(xs)
        cn = c.get(str(n)) if isinstance(c, dict) else None
        print(f"  n={n:2d} steps {len(xs):4d} median {m:6.3f} ms  ratio {m/p:5.3f}  c(n) {cn}")
