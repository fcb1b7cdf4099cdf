"""The table of ab_inprocess.sh: per cell, each method's decode ms per token with the one-call step and with the three
calls (``-calls``) in the same run, their ratio, and fastcoder's speedups over ar and suffix both ways.
Usage: python ab_inprocess_table.py FOLDER"""
import json
import math
import sys
from pathlib import Path

gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
BASES = ("ar", "suffix", "fastcoder")
ratios = {b: [] for b in BASES}
speed = {v: {"ar": [], "suffix": []} for v in ("", "-calls")}
print("| cell | " + " | ".join(f"{b} ms/token calls -> step (ratio)" for b in BASES)
      + " | fastcoder vs ar, vs suffix (calls) | (step) | lossless |")
print("|---" * (len(BASES) + 4) + "|")
for f in sorted(Path(sys.argv[1]).glob("*.json")):
    ms = json.loads(f.read_text())["methods"]
    line = [f.stem]
    for b in BASES:
        a, c = ms[b]["ms_per_token"], ms[f"{b}-calls"]["ms_per_token"]
        ratios[b].append(a / c)
        line.append(f"{c:.3f} -> {a:.3f} ({a / c:.3f})")
    for v in ("-calls", ""):
        fc = ms["fastcoder" + v]["ms_per_token"]
        for o in ("ar", "suffix"):
            speed[v][o].append(ms[o + v]["ms_per_token"] / fc)
        line.append(f"{speed[v]['ar'][-1]:.2f}, {speed[v]['suffix'][-1]:.3f}")
    line.append("yes" if all(x["lossless"] for x in ms.values()) else "NO")
    print("| " + " | ".join(line) + " |")
print()
for b in BASES:
    print(f"{b}: step / calls ms per token, geometric mean {gm(ratios[b]):.3f} (range {min(ratios[b]):.3f}-{max(ratios[b]):.3f})")
for v, name in (("-calls", "calls"), ("", "step")):
    print(f"{name}: fastcoder vs ar {gm(speed[v]['ar']):.3f}, vs suffix {gm(speed[v]['suffix']):.3f} (geometric means)")
