"""Geometric means over the cells of a sweep.sh output, each method against fastcoder: accepted length, predicted
speedup without and with the drafting time (the cells' range in brackets).

Usage: python benchmarks/results/2026-11-28g/sweep_table.py OUT.jsonl"""
import collections
import json
import math
import sys

by = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    if line.startswith("{"):
        d = json.loads(line)
        by[d["cell"]][d["method"]] = d
methods = list(next(iter(by.values())))


def ratios(method, key):
    return [cell[method][key] / cell["fastcoder"][key] for cell in by.values()]


for m in methods:
    out = []
    for key in ("accepted_length", "predicted_speedup_without_drafting", "predicted_speedup"):
        v = ratios(m, key)
        out.append(f"{key} {math.exp(sum(map(math.log, v)) / len(v)):.4f} ({min(v):.3f}-{max(v):.3f})")
    print(f"{m:10s} " + "  ".join(out))
