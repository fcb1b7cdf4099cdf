"""On a lent GPU, before the bench: the CUDA graphs (engine.cuda_graphs) checked and timed against the eager forward.

Prints, for tiny-py-coder in float32 (then bfloat16): whether the graphs installed; per tree size (0-80 draft tokens)
the forward's wall time (ms, median of 50, synchronised) graphed and eager on a 512-token cache with the largest logit
difference; then `ar` and `fastcoder` generations (128 tokens from 4 prompts of a third-party repository) graphed
and eager: tokens equal or not, ms per token. Exit status 1 where a graphed generation differs from the eager `ar` in
float32.
Usage: python gpu_smoke.py MODEL REPO_DIR [DEVICE] (DEVICE cpu: the same checks with the graphs' body run eagerly,
a dry run of this script)"""
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from engine import SpeculativeDecoder, load_model
from engine.cuda_graphs import ATTR, install_cuda_graphs
from engine.draft_tree import DraftTree
from engine.kv_cache import new_kv_cache
from engine.steps import prefill
from engine.verify import tree_forward


DEVICE = sys.argv[3] if len(sys.argv) > 3 else "cuda"


def sync():
    if DEVICE == "cuda":
        sync()


def chain_tree(n: int, rng) -> DraftTree:
    if n == 0:
        return DraftTree.empty()
    half = (n + 1) // 2  # two chains below the pending token: nodes 0..half-1 and half..n-1
    parents = np.array([-1 if i in (0, half) else i - 1 for i in range(n)], dtype=np.int64)
    depths = np.zeros(n, dtype=np.int64)
    for i, p in enumerate(parents):
        depths[i] = 1 if p < 0 else depths[p] + 1
    return DraftTree(rng.integers(0, 8000, n).astype(np.int64), parents, depths, np.zeros(n, dtype=np.uint8),
                     np.ones(n))


def time_forward(loaded, runner, n: int, graphs: bool, rng):
    model = loaded.model
    if graphs:
        model.__dict__[ATTR] = runner
    else:
        model.__dict__.pop(ATTR, None)
    tree = chain_tree(n, rng)
    times, out = [], None
    with torch.inference_mode():
        cache = new_kv_cache(model, 1024)
        prefill(model, cache, torch.tensor([rng.integers(0, 8000, 512).tolist()], device=loaded.device))
        for _ in range(50):
            sync()
            t = time.perf_counter()
            logits = tree_forward(model, cache, 5, tree, 512)
            sync()
            times.append(time.perf_counter() - t)
            out = logits.float().clone()
            cache.crop(-(1 + n))
    model.__dict__[ATTR] = runner
    return statistics.median(times) * 1e3, out


def generations(loaded, runner, method, prompts, graphs):
    model = loaded.model
    dec = SpeculativeDecoder(loaded, method=method)
    if not graphs:
        model.__dict__.pop(ATTR, None)
    toks, ms = [], []
    try:
        for p in prompts:
            dec.generate(p, max_new_tokens=16)  # warm (captures)
            sync()
            t = time.perf_counter()
            res = dec.generate(p, max_new_tokens=128)
            sync()
            ms.append((time.perf_counter() - t) * 1e3 / max(1, len(res.token_ids)))
            toks.append(res.token_ids)
    finally:
        model.__dict__[ATTR] = runner
    return toks, ms


def main(model_path, repo):
    files = [f for f in sorted(Path(repo).rglob("*.py")) if f.stat().st_size > 3000][:4]
    failed = False
    for dtype in ("float32", "bfloat16"):
        if DEVICE == "cpu":
            loaded = load_model(model_path, device="cpu", dtype=dtype, pack_weights=False)
            loaded.cuda_graphs = install_cuda_graphs(loaded.model, capture=False)
        else:
            loaded = load_model(model_path, device=DEVICE, dtype=dtype)
        name = torch.cuda.get_device_name() if DEVICE == "cuda" else os.uname().machine
        print(f"== {dtype}: cuda_graphs={loaded.cuda_graphs!r} {name}", flush=True)
        runner = loaded.model.__dict__.get(ATTR)
        if runner is None:
            failed = True
            continue
        for n in (0, 1, 7, 15, 31, 63, 80):
            g_ms, g = time_forward(loaded, runner, n, True, np.random.default_rng(n))
            e_ms, e = time_forward(loaded, runner, n, False, np.random.default_rng(n))
            same = g.argmax(-1).tolist() == e.argmax(-1).tolist()
            print(f"  tree {n:2d}: graphed {g_ms:.3f} ms, eager {e_ms:.3f} ms, x{e_ms / g_ms:.2f}, "
                  f"max |dlogit| {float((g - e).abs().max()):.2e}, argmax equal {same}", flush=True)
        tok = loaded.tokenizer
        prompts = [tok(f.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"][:400] for f in files]
        base, base_ms = generations(loaded, runner, "ar", prompts, False)
        print(f"  ar eager: {statistics.mean(base_ms):.3f} ms/token", flush=True)
        for method in ("ar", "fastcoder"):
            for graphs in ((True,) if method == "ar" else (True, False)):
                toks, ms = generations(loaded, runner, method, prompts, graphs)
                eq = sum(a == b for a, b in zip(toks, base))
                print(f"  {method} {'graphed' if graphs else 'eager'}: {statistics.mean(ms):.3f} ms/token, "
                      f"{eq}/{len(base)} equal to eager ar", flush=True)
                if dtype == "float32" and eq != len(base):
                    failed = True
        print(f"  graphs recorded: {sorted(runner.graphs)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
