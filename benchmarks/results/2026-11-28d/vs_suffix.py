"""Per cell and geometric mean: each fastcoder variant's speedup over SuffixDecoding's in the same run.
    python benchmarks/results/2026-11-28d/vs_suffix.py benchmarks/results/2026-11-28d/ab1/*.json"""
import json
import math
import sys

ratios: dict[str, list[float]] = {}
for f in sys.argv[1:]:
    methods = json.load(open(f))["methods"]
    row = {m: methods[m]["speedup"] / methods["suffix"]["speedup"] for m in methods if m.startswith("fastcoder")}
    print(f.rsplit("/", 1)[-1], " ".join(f"{m} {r:.3f}" for m, r in row.items()))
    for m, r in row.items():
        ratios.setdefault(m, []).append(r)
for m, rs in ratios.items():
    print(f"{m}: geometric mean {math.exp(sum(map(math.log, rs)) / len(rs)):.3f} ({min(rs):.2f}-{max(rs):.2f}), "
          f"faster in {sum(r > 1 for r in rs)} of {len(rs)}")
