"""propose_native's prologue at b73bace (library() and thread_scratch() called every step) against this tree's (both
kept in ProposeArgs), inside one bench run: method ``fastcoder-old`` runs the b73bace function (its source from git,
executed in engine.native.propose's namespace), interleaved per task with fastcoder. Prints each variant's propose
time per call at exit (the bench JSON has their drafting per step). Usage: as `python -m engine bench` with
--methods fastcoder,fastcoder-old."""
import atexit
import subprocess
import sys
import time
from collections import defaultdict

import numpy as np

import engine.drafters as D
import engine.native.propose as P
from engine.bench import runner

src = subprocess.run(["git", "show", "b73bace:engine/native/propose.py"], capture_output=True, text=True,
                     check=True).stdout
start = src.index("def propose_native(")
end = src.index("\ndef _python_tree(")
namespace = dict(vars(P))
exec(compile(src[start:end], "propose_native@b73bace", "exec"), namespace)
variants = {"fastcoder": P.propose_native, "fastcoder-old": namespace["propose_native"]}
runner.METHOD_SPECS["fastcoder-old"] = runner.METHOD_SPECS["fastcoder"]
times = defaultdict(list)
current = ["fastcoder"]
propose = D.FastCoderDrafter.propose


def timed(self, context):
    t = time.perf_counter()
    tree = propose(self, context)
    times[current[0]].append(time.perf_counter() - t)
    return tree


D.FastCoderDrafter.propose = timed
run_one = runner.run_one


def run_one_toggled(decoder, method, *args, **kwargs):
    current[0] = method if method in variants else "fastcoder"
    P.propose_native = variants[current[0]]
    try:
        return run_one(decoder, method, *args, **kwargs)
    finally:
        P.propose_native = variants["fastcoder"]


runner.run_one = run_one_toggled


@atexit.register
def report():
    for name, v in times.items():
        v = np.array(v) * 1e6
        print(f"{name}: propose n={len(v)} mean {v.mean():.1f} us, p50 {np.median(v):.1f}, p90 {np.percentile(v, 90):.1f}",
              file=sys.stderr)


from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
