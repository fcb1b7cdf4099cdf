"""The table of replay_curves.sh: per curve and cell, the predicted speedups of SuffixDecoding and fastcoder over
`ar` (drafting time included) and their ratio; per curve the geometric mean of the ratios, with and without the
drafting time.

    python replay_curves_table.py benchmarks/results/2026-11-29g/replay
"""
import glob
import json
import math
import os
import sys

root = sys.argv[1]
for curve in sorted(os.listdir(root)):
    logs, logs_nd = [], []
    print(f"== curve {curve}")
    for path in sorted(glob.glob(os.path.join(root, curve, "*.jsonl"))):
        got = {}
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                rec = json.loads(line)
                got[rec["method"]] = rec
        s, f = got["suffix"], got["fastcoder"]
        r = f["predicted_speedup"] / s["predicted_speedup"]
        r_nd = f["predicted_speedup_without_drafting"] / s["predicted_speedup_without_drafting"]
        logs.append(math.log(r))
        logs_nd.append(math.log(r_nd))
        print(f"  {os.path.basename(path)[:-6]:18s} suffix {s['predicted_speedup']:.2f}x fastcoder "
              f"{f['predicted_speedup']:.2f}x  ratio {r:.3f} (without drafting {r_nd:.3f}); accepted length "
              f"{f['accepted_length']:.2f} / {s['accepted_length']:.2f}")
    n = len(logs)
    print(f"  geometric mean of the ratios over {n} cells: {math.exp(sum(logs) / n):.3f} "
          f"(without drafting {math.exp(sum(logs_nd) / n):.3f})")
