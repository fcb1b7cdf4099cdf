"""Fresh D_c searches (the standard library store of the user cache, MatchState fresh each time, 16-token contexts
cut from its own documents, half of them with a perturbed last token) with the caches cold (a 64 MB sweep before
each search), the suffix array searched from each pattern's first-token range (Datastore._first_token_ranges) or
over the whole array (the same store object loaded twice, one with the table switched off), alternating per search.
Usage: PYTHONPATH=$PWD .venv/bin/python benchmarks/results/2026-11-27d/exp_first_token.py"""
import glob
import os
import time

import numpy as np

from engine.datastore import Datastore
from engine.datastore.matching import MatchState

path = glob.glob(os.path.expanduser("~/.cache/fastcoder/datastores/*"))[0]
with_table = Datastore.load(path)
without = Datastore.load(path)
without._first_token_ranges = lambda: None
print(with_table)
docs = with_table.document_tokens()
sweep = np.ones(64 << 18, dtype=np.float32)
rng = np.random.default_rng(0)
for rnd in range(3):
    times = {"first-token range": [], "whole array": []}
    for r in range(150):
        d = docs[rng.integers(len(docs))]
        if len(d) < 300:
            continue
        i = int(rng.integers(100, len(d) - 20))
        ctx = np.asarray(d[:i], dtype=np.int64).copy()
        if r % 2:
            ctx[-1] = (ctx[-1] + 1) % 8000
        for name, store in (("first-token range", with_table), ("whole array", without))[::1 if r % 4 < 2 else -1]:
            sweep.sum()
            t = time.perf_counter()
            res = store.search(ctx, 16, 2, 16, 128, MatchState())
            times[name].append(time.perf_counter() - t)
    print(f"round {rnd}: " + ", ".join(f"{k} p50 {np.median(v) * 1e6:.1f} us mean {np.mean(v) * 1e6:.1f} us"
                                        for k, v in times.items()))

# the C call alone (fc_ds_retrieve, as the decode step's fc_propose_retrieve makes it): fresh state, cold caches
from engine import native  # noqa: E402

import ctypes  # noqa: E402

lib = native.library()
ptr, i64 = ctypes.c_void_p, ctypes.c_int64
lib.fc_ds_retrieve.restype = i64
lib.fc_ds_retrieve.argtypes = [ptr, ptr, ptr] + [i64] * 7 + [ptr, ptr, ptr]
mm, dl = 128, 16
rows = np.zeros((mm, dl), dtype=np.int32)
counts = np.zeros(mm, dtype=np.int64)
scratch = np.zeros((mm * (dl * 4 + 24) + 7) // 8, dtype=np.int64)
addr = {name: store._native_match_search()[1] for name, store in (("first-token range", with_table),
                                                                    ("whole array", without))}
for rnd in range(3):
    times = {k: [] for k in addr}
    for r in range(300):
        d = docs[rng.integers(len(docs))]
        if len(d) < 300:
            continue
        i = int(rng.integers(100, len(d) - 20))
        ctx = np.asarray(d[i - 16:i], dtype=np.int64).copy()
        if r % 2:
            ctx[-1] = (ctx[-1] + 1) % 8000
        for name in list(addr)[::1 if r % 4 < 2 else -1]:
            st = MatchState()
            sweep.sum()
            t = time.perf_counter()
            lib.fc_ds_retrieve(addr[name], st.buffer_address, ctx.ctypes.data, 16, 16, 2, 16, 1, mm, dl,
                               rows.ctypes.data, counts.ctypes.data, scratch.ctypes.data)
            times[name].append(time.perf_counter() - t)
    print(f"C only, round {rnd}: " + ", ".join(f"{k} p50 {np.median(v) * 1e6:.1f} us mean {np.mean(v) * 1e6:.1f} us"
                                               for k, v in times.items()))
