"""Summary of fed_replay.sh: per replay mode (the draft head fed or not), the predicted speedup of the node model and
of the draft head, as ratios of fastcoder's (geometric mean over the cell-runs, how many better, the range), without
and with the drafting time; and per cell, the accepted lengths.
Usage: python benchmarks/results/2026-11-28i/fed_replay.py OUT"""
import json
import math
import sys
from pathlib import Path


def load(out: Path, mode: str) -> dict:
    rows = {}
    for path in sorted(out.glob(f"{mode}_s*.jsonl")):
        for line in path.open():
            kind, repo, seed, js = line.split(" ", 3)
            d = json.loads(js)
            rows.setdefault((kind, repo, seed), {})[d["method"]] = d
    return rows


def summary(rows: dict, num: str, den: str, key: str) -> str:
    logs = [math.log(m[num][key] / m[den][key]) for m in rows.values() if num in m and den in m]
    if not logs:
        return "n/a"
    gm = 100 * (math.exp(sum(logs) / len(logs)) - 1)
    return (f"{gm:+.2f}% ({sum(v > 0 for v in logs)} of {len(logs)} better, "
            f"{100 * (math.exp(min(logs)) - 1):+.1f}% to {100 * (math.exp(max(logs)) - 1):+.1f}%)")


def main(out: Path) -> None:
    modes = {m: load(out, m) for m in ("fed", "unfed")}
    print("| replay | node model / buckets, without drafting | with drafting | buckets with / without the draft head, "
          "without drafting | with drafting |")
    print("|---|---|---|---|---|")
    for mode, rows in modes.items():
        print(f"| {mode} | {summary(rows, 'fastcoder-node-model', 'fastcoder', 'predicted_speedup_without_drafting')} "
              f"| {summary(rows, 'fastcoder-node-model', 'fastcoder', 'predicted_speedup')} "
              f"| {summary(rows, 'fastcoder', 'fastcoder-no-head', 'predicted_speedup_without_drafting')} "
              f"| {summary(rows, 'fastcoder', 'fastcoder-no-head', 'predicted_speedup')} |")
    print("\n| cell | seed | accepted length fed: buckets / node model / no head "
          "| unfed: buckets / node model / no head |")
    print("|---|---|---|---|")
    for cell, m in sorted(modes["fed"].items()):
        u = modes["unfed"].get(cell, {})
        fmt = lambda d: " / ".join(str(d[x]["accepted_length"]) if x in d else "-"  # noqa: E731
                                   for x in ("fastcoder", "fastcoder-node-model", "fastcoder-no-head"))
        print(f"| {cell[0]} {cell[1]} | {cell[2]} | {fmt(m)} | {fmt(u)} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
