"""Per-section wall time of engine.native.propose.propose_native without a line profiler's overhead: the function's
source recompiled with a perf_counter mark before each marked line (``# @label`` below), each section's time
printed at exit (us a call: mean, p50), plus the drafter's observe and the decoder's _verifiable.
Usage: as `python -m engine bench ...` (method fastcoder)."""
import atexit
import inspect
import sys
import time
from collections import defaultdict

import numpy as np

import engine.decoder as decoder_module
import engine.drafters as drafters_module
import engine.native.propose as P

if "MAX_MATCHES" in __import__("os").environ:  # RetrievalOptions.max_matches' default (n_max, n_min, draft_len, max_matches, ...)
    _d = list(drafters_module.RetrievalOptions.__init__.__defaults__)
    _d[3] = int(__import__("os").environ["MAX_MATCHES"])
    drafters_module.RetrievalOptions.__init__.__defaults__ = tuple(_d)

MARKS = {  # line fragment -> label of the section it starts
    "args = drafter._native_args": "setup",
    "idx.extend_to(context)": "extend_to",
    "sc = args.scratch": "scratch+estimator",
    "budget, min_prob = drafter.ret.budget": "limits+stop",
    "cache = drafter.cache": "sync_cache",
    "n_ctx = len(idx)": "fc_propose",
    "if found == RETRIEVE:": "after",
    "return _tree_from(sc, found)": "tree_from",
}
S = defaultdict(list)
src = inspect.getsource(P.propose_native)
lines = []
for line in src.splitlines():
    for frag, label in MARKS.items():
        if line.strip().startswith(frag):
            ind = line[:len(line) - len(line.lstrip())]
            lines.append(f"{ind}_mark({label!r})")
    if line.strip().startswith("return"):
        ind = line[:len(line) - len(line.lstrip())]
        lines.append(f"{ind}_got = {line.strip()[len('return '):]}")
        lines.append(f"{ind}_mark('end')")
        lines.append(f"{ind}return _got")
        continue
    lines.append(line)
state = {"t": None, "label": None}


def _mark(label):
    t = time.perf_counter()
    if state["label"] is not None and state["label"] != "end":
        S[state["label"]].append(t - state["t"])
    state["t"], state["label"] = t, label


ns = dict(vars(P))
ns["_mark"] = _mark
exec(compile("\n".join(lines), "propose_native(marked)", "exec"), ns)
P.propose_native = ns["propose_native"]


def timed(name, real):
    def f(*a, **k):
        t = time.perf_counter()
        got = real(*a, **k)
        S[name].append(time.perf_counter() - t)
        return got
    return f


from engine.native import library  # noqa: E402
_lib = library()
for _name in ("fc_propose", "fc_propose_retrieve"):
    setattr(_lib, _name, timed("native " + _name, getattr(_lib, _name)))
drafters_module.FastCoderDrafter._retrieval_key = timed("_retrieval_key", drafters_module.FastCoderDrafter._retrieval_key)
drafters_module.FastCoderDrafter.observe = timed("observe", drafters_module.FastCoderDrafter.observe)
drafters_module.FastCoderDrafter.propose = timed("propose(all)", drafters_module.FastCoderDrafter.propose)
decoder_module.SpeculativeDecoder._verifiable = timed("_verifiable", decoder_module.SpeculativeDecoder._verifiable)


@atexit.register
def report():
    for name, v in S.items():
        v = np.array(v) * 1e6
        print(f"{name:20s} n={len(v):5d} mean {v.mean():6.1f} us p50 {np.median(v):6.1f}", file=sys.stderr)


from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
