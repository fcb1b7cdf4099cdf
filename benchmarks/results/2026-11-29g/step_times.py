"""Each decode step's wall time by method, draft size and index within its generation, from a real bench run.

Wraps engine.generation.Generation.plain_step / tree_step (one forward each with $FASTCODER_STEP_LOOP=0), runs
`python -m engine bench ...` in-process with the arguments given, and writes one JSON line per step to $STEPS_OUT:
{"drafter", "i" (step index in the generation), "n" (draft tokens), "ctx" (tokens in the cache), "ms"}.

    FASTCODER_STEP_LOOP=0 STEPS_OUT=/tmp/steps.jsonl python step_times.py bench --model ... (bench arguments)
"""
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
from engine import generation as G  # noqa: E402
from engine.cli import main  # noqa: E402

out = open(os.environ["STEPS_OUT"], "w")
real_plain, real_tree = G.Generation.plain_step, G.Generation.tree_step


def plain_step(self, pending):
    t = time.perf_counter()
    got = real_plain(self, pending)
    i = getattr(self, "_st_i", 0)
    self._st_i = i + 1
    out.write(json.dumps({"drafter": "ar", "i": i, "n": 0, "ctx": self.n_ctx, "ms": (time.perf_counter() - t) * 1e3})
              + "\n")
    return got


def tree_step(self, pending):
    t = time.perf_counter()
    k = len(self.draft_sizes)
    got = real_tree(self, pending)
    i = getattr(self, "_st_i", 0)
    self._st_i = i + 1
    n = self.draft_sizes[k] if len(self.draft_sizes) > k else -1
    out.write(json.dumps({"drafter": type(self.drafter).__name__, "i": i, "n": n, "ctx": self.n_ctx,
                          "ms": (time.perf_counter() - t) * 1e3}) + "\n")
    return got


G.Generation.plain_step, G.Generation.tree_step = plain_step, tree_step
sys.exit(main(sys.argv[1:]))
