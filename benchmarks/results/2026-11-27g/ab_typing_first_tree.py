"""The editor's path (a document cache: each request's prompt shares most of the last one's, a short warm prefill that
verifies a draft): fastcoder with a generation's first tree drafted by DraftAhead.draft_first and the fields primed
(as shipped) against the drafter's propose there, interleaved per request over a typing simulation (four third-party
files, the cursor moving forward and back, FIM prompts of up to 600 tokens, line stops, 24 new tokens at most).
Prints the median and mean wall ms per request of each variant and whether their outputs agree.
Usage (from the repository root): PYTHONPATH=$PWD python benchmarks/results/2026-11-27g/ab_typing_first_tree.py"""
import random
import sys
import time

import numpy as np
import torch

sys.path.insert(0, "tests")
from conftest import TINY_CODER, third_party_sources  # noqa: E402

from engine import load_model  # noqa: E402
from engine.bench.tasks import build_fim_ids  # noqa: E402
from engine.decoder import SpeculativeDecoder  # noqa: E402
from engine.native import draft_ahead as da  # noqa: E402

torch.set_num_threads(1)
m = load_model(str(TINY_CODER), device="cpu")
real_first, real_prime = da.DraftAhead.draft_first, da.DraftAhead.prime
off = [False]
da.DraftAhead.draft_first = lambda self, c, o: (None, False) if off[0] else real_first(self, c, o)
da.DraftAhead.prime = lambda self, n, o: None if off[0] else real_prime(self, n, o)
decs = {"draft_first": SpeculativeDecoder(m, "fastcoder"), "propose": SpeculativeDecoder(m, "fastcoder")}
T = {k: [] for k in decs}
same = True
rnd = random.Random(0)
for rep in range(2):
    for path in third_party_sources(4):
        text = path.read_text(encoding="utf-8")
        pos = text.rfind("\n", 0, len(text) // 2) + 1
        docs = {k: d.new_cache() for k, d in decs.items()}
        for step in range(30):
            pos = max(10, pos + rnd.choice([1, 1, 1, 2, -1, 6]))
            ids = build_fim_ids(m.tokenizer, text[:pos], text[pos:], 600)[0]
            outs = {}
            for k in (["draft_first", "propose"] if step % 2 else ["propose", "draft_first"]):
                off[0] = k == "propose"
                t = time.perf_counter()
                outs[k] = decs[k].generate(ids, max_new_tokens=24, stop=["\n"], cache=docs[k])
                T[k].append(time.perf_counter() - t)
            off[0] = False
            same = same and outs["draft_first"].token_ids == outs["propose"].token_ids
for k, v in T.items():
    v = np.array(v[8:]) * 1e3  # the first requests of the run warm the process
    print(f"{k}: n={len(v)} median {np.median(v):.2f} ms, mean {v.mean():.2f} ms")
print("same outputs:", same)
