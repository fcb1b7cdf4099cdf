"""Table of benchmarks/replay_methods.py output lines prefixed "KIND REPO SEED " (compare_replay.sh): per cell the
bucket estimates alone (fastcoder; fastcoder-no-node-model while the node model was on by default) against the
node model (fastcoder-node-model; fastcoder then); geometric means.
Usage: python compare_replay.py FILE..."""
import json
import math
import sys

rows = {}
for path in sys.argv[1:]:
    for line in open(path):
        kind, repo, seed, js = line.split(" ", 3)
        d = json.loads(js)
        rows.setdefault((kind, repo, seed), {})[d["method"]] = d
print("| cell | seed | accepted length (buckets / node model) | tree | predicted speedup without drafting | change |"
      " drafting ms a step | with drafting, change |")
print("|---|---|---|---|---|---|---|---|")
no_draft, with_draft = [], []
for (kind, repo, seed), m in rows.items():
    a, b = m.get("fastcoder-no-node-model", m["fastcoder"]), m.get("fastcoder-node-model", m["fastcoder"])
    x = b["predicted_speedup_without_drafting"] / a["predicted_speedup_without_drafting"]
    y = b["predicted_speedup"] / a["predicted_speedup"]
    no_draft.append(math.log(x))
    with_draft.append(math.log(y))
    print(f"| {kind} {repo} | {seed} | {a['accepted_length']} / {b['accepted_length']} | {a['mean_tree']} / "
          f"{b['mean_tree']} | {a['predicted_speedup_without_drafting']} / {b['predicted_speedup_without_drafting']}"
          f" | {100 * (x - 1):+.1f}% | {a['drafting_ms_per_step']} / {b['drafting_ms_per_step']} | {100 * (y - 1):+.1f}% |")
gm = lambda v: 100 * (math.exp(sum(v) / len(v)) - 1)  # noqa: E731
print(f"\ngeometric mean: without drafting {gm(no_draft):+.2f}% ({sum(v > 0 for v in no_draft)} of {len(no_draft)} "
      f"better), with the drafting time {gm(with_draft):+.2f}%")
