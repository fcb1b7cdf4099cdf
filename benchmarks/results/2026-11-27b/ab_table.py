"""The table of ab_cells.sh: per cell and method, decode ms per token through the one native call ("step") and the
three calls ("calls"), their ratio, and fastcoder's speedups over ar and over the best other method under each.
Usage: python ab_table.py FOLDER"""
import json
import math
import sys
from pathlib import Path

folder = Path(sys.argv[1])
rows, ratios = [], {}
geo = {"step": {}, "calls": {}}
for step_file in sorted(folder.glob("step_*.json")):
    cell = step_file.stem.removeprefix("step_")
    calls_file = folder / f"calls_{cell}.json"
    if not calls_file.exists():
        continue
    runs = {v: json.loads(f.read_text())["methods"] for v, f in (("step", step_file), ("calls", calls_file))}
    line = [cell]
    for m in runs["step"]:
        a, b = runs["step"][m]["ms_per_token"], runs["calls"][m]["ms_per_token"]
        ratios.setdefault(m, []).append(a / b)
        line.append(f"{b:.3f} -> {a:.3f} ({a / b:.3f})")
        for v in geo:
            geo[v].setdefault(m, []).append(runs[v][m]["ms_per_token"])
    for v in ("calls", "step"):
        ms = runs[v]
        fc = ms["fastcoder"]["ms_per_token"]
        best = min(x["ms_per_token"] for k, x in ms.items() if k not in ("fastcoder", "ar"))
        line.append(f"{ms['ar']['ms_per_token'] / fc:.2f} / {best / fc:.3f}")
    line.append("yes" if all(x["lossless"] for v in runs for x in runs[v].values()) else "NO")
    rows.append(line)
methods = list(ratios)
print("| cell | " + " | ".join(f"{m} ms/token calls -> step (ratio)" for m in methods)
      + " | fastcoder vs ar / vs best other (calls) | (step) | lossless |")
print("|---" * (len(methods) + 4) + "|")
for line in rows:
    print("| " + " | ".join(line) + " |")
gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
print()
for m in methods:
    print(f"{m}: step / calls ms per token, geometric mean {gm(ratios[m]):.3f} (range {min(ratios[m]):.3f}-{max(ratios[m]):.3f})")
for v in ("calls", "step"):
    fc = geo[v]["fastcoder"]
    print(f"{v}: geometric mean ms/token " + ", ".join(f"{m} {gm(geo[v][m]):.3f}" for m in methods)
          + f"; fastcoder vs ar {gm([a / f for a, f in zip(geo[v]['ar'], fc)]):.3f}"
          + f", vs best other {gm([min(geo[v][m][i] for m in methods if m not in ('ar', 'fastcoder')) / f for i, f in enumerate(fc)]):.3f}")
