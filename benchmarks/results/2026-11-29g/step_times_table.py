"""What step_times.py recorded: each method's step time over `ar`'s warm step (index >= 3), by the step's index in
its generation and by its draft size (index >= 2), and `ar`'s own step by index (the steps after a prefill).

    python step_times_table.py steps_function_pluggy.jsonl steps_fim-block_pluggy.jsonl
"""
import collections
import json
import statistics as st
import sys

for path in sys.argv[1:]:
    rows = [json.loads(line) for line in open(path)]
    ar_warm = st.median([r["ms"] for r in rows if r["drafter"] == "ar" and r["i"] >= 3])
    by_i = collections.defaultdict(list)
    for r in rows:
        if r["drafter"] == "ar":
            by_i[min(r["i"], 40)].append(r["ms"])
    print(f"== {path}: ar's step by index in its generation, median ms (count):")
    print("   ", ", ".join(f"{i}{'+' if i == 40 else ''}: {st.median(v):.2f} ({len(v)})"
                         for i, v in sorted(by_i.items()) if i < 10 or i == 40))
    for d in sorted({r["drafter"] for r in rows} - {"ar"}):
        mine = [r for r in rows if r["drafter"] == d]
        by_i, by_n = collections.defaultdict(list), collections.defaultdict(list)
        for r in mine:
            by_i[min(r["i"], 4)].append(r["ms"] / ar_warm)
            if r["i"] >= 2:
                by_n[r["n"]].append(r["ms"] / ar_warm)
        print(f"  {d}, step over ar's warm step ({ar_warm:.2f} ms), by index:",
              ", ".join(f"{i}{'+' if i == 4 else ''}: {st.median(v):.2f} ({len(v)})" for i, v in sorted(by_i.items())))
        print("    by draft size (index >= 2, 5+ steps):",
              ", ".join(f"{n}: {st.median(v):.2f} ({len(v)})" for n, v in sorted(by_n.items()) if len(v) >= 5))
