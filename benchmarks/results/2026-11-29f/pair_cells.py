"""Per cell: fastcoder / suffix speed in each arm; the arms' ratio per cell, geometric mean and spread over runs."""
import glob, json, math, os, statistics as st, sys
a, b = sys.argv[1], sys.argv[2]
runs = sys.argv[3:]
logs = []
for run in runs:
    for f in sorted(glob.glob(f"{run}/{a}/*.json")):
        name = os.path.basename(f)
        g = f"{run}/{b}/{name}"
        if not os.path.exists(g):
            continue
        r = []
        for path in (f, g):
            m = json.load(open(path))["methods"]
            r.append(m["suffix"]["ms_per_token"] / m["fastcoder"]["ms_per_token"])
        logs.append(math.log(r[1] / r[0]))
        print(f"{run:18s} {name:24s} {a} {r[0]:.3f}  {b} {r[1]:.3f}  {b}/{a} {r[1] / r[0]:.3f}")
m = st.fmean(logs); s = st.stdev(logs) / math.sqrt(len(logs))
print(f"geometric mean {b}/{a} over {len(logs)} cell pairs: {math.exp(m):.3f} (95% interval {math.exp(m - 1.96 * s):.3f}-{math.exp(m + 1.96 * s):.3f})")
