"""fastcoder / SuffixDecoding over many nine-cell runs of one engine: each run's geometric mean, their mean and
spread, and the per-cell ratios pooled over the runs (each cell's mean over runs, then the geometric mean).

    python pool_runs.py RUN_DIR [RUN_DIR ...]     (each RUN_DIR holds the nine cells' JSON files)
"""
import glob
import json
import math
import os
import statistics as st
import sys

per_run, per_cell = [], {}
for d in sys.argv[1:]:
    logs = []
    for f in sorted(glob.glob(os.path.join(d, "*.json"))):
        m = json.load(open(f))["methods"]
        r = m["suffix"]["ms_per_token"] / m["fastcoder"]["ms_per_token"]
        logs.append(math.log(r))
        per_cell.setdefault(os.path.basename(f)[:-5], []).append(math.log(r))
    if len(logs) != 9:
        sys.exit(f"{d}: {len(logs)} cells, not 9")
    per_run.append(math.exp(sum(logs) / 9))
    print(f"{d}: {per_run[-1]:.3f}")
n = len(per_run)
mean, sd = st.mean(per_run), st.stdev(per_run)
print(f"{n} runs: mean {mean:.3f}, sd {sd:.3f}, 95% interval of the mean {mean - 2.0 * sd / math.sqrt(n):.3f}-"
      f"{mean + 2.0 * sd / math.sqrt(n):.3f}; min {min(per_run):.3f}, max {max(per_run):.3f}; "
      f"below 1.25: {sum(r < 1.25 for r in per_run)}")
for cell, v in sorted(per_cell.items()):
    print(f"  {cell:20s} {math.exp(st.mean(v)):.3f} (runs {min(map(math.exp, v)):.2f}-{max(map(math.exp, v)):.2f})")
print(f"pooled over cells: {math.exp(st.mean([st.mean(v) for v in per_cell.values()])):.3f}")
