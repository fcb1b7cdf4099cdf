"""propose_native's prologue at b73bace (library() and thread_scratch() called every step) against this tree's (both
kept in ProposeArgs), inside one bench run: method ``fastcoder-old`` runs the b73bace function (its source from git,
executed in engine.native.propose's namespace), interleaved per task with fastcoder. Prints each variant's propose
time per call at exit (the bench JSON has their drafting per step). Usage: as `python -m engine bench` with
--methods fastcoder,fastcoder-old."""
import sys
import time
from pathlib import Path

import engine.drafters as D
import engine.native.propose as P

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_common import TIMES, old_function, run  # noqa: E402

old = old_function("b73bace", "engine/native/propose.py", "def propose_native(", "\ndef _python_tree(", P)
variants = {"fastcoder": P.propose_native, "fastcoder-old": old}
current = ["fastcoder"]
propose = D.FastCoderDrafter.propose


def timed(self, context):
    t = time.perf_counter()
    tree = propose(self, context)
    TIMES[current[0]].append(time.perf_counter() - t)
    return tree


def switch(name):
    current[0] = name
    P.propose_native = variants[name]


D.FastCoderDrafter.propose = timed
run(["fastcoder-old"], switch, "propose")
