"""Experiment: a common datastore that also holds the model's own greedy output on code it was not trained on.

Prompts: the bench's three task kinds on third-party packages that are NOT the benchmark's repositories (nor their
close relatives). Each output is stored with the last TAIL prompt tokens before it. The store written to OUT is
D_c's standard-library documents plus these output documents (``--outputs-only`` writes the outputs alone).

    PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python \
        benchmarks/results/2026-11-28c/build_output_store.py OUT [--tasks 40]
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

PACKAGES = ("rich", "click", "anyio", "trio", "h11", "packaging", "pathspec", "platformdirs", "tqdm", "filelock",
            "fsspec", "sortedcontainers", "pyparsing", "idna", "networkx", "httpx2", "httpcore2", "psutil")
KINDS = ("function", "fim-line", "fim-block")
TAIL = 32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--outputs-only", action="store_true")
    ap.add_argument("--method", default="fastcoder")
    ap.add_argument("--packages", default=",".join(PACKAGES))
    ap.add_argument("--parts", default=None, help="folder keeping each (package, kind)'s outputs; reused when there")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from engine import load_model
    from engine.bench.cli import _default_prompt_budget, _load_common
    from engine.bench.runner import build_repo_datastore, make_decoder, run_one
    from engine.bench.tasks import BenchError, extract_tasks
    from engine.common_datastore import tokenizer_fingerprint
    from engine.datastore import Datastore

    loaded = load_model(str(Path(__file__).resolve().parents[4] / "shared" / "models" / "tiny-py-coder"))
    site = Path(sys.prefix) / "lib/python3.11/site-packages"
    common = _load_common(loaded, "stdlib")
    eos = set(loaded.eos_token_ids or ())
    docs, n_tokens, t0 = [], 0, time.time()
    parts = Path(args.parts) if args.parts else None
    for pkg in args.packages.split(","):
        for kind in KINDS:
            part = parts / f"{pkg}_{kind}.npy" if parts else None
            if part is not None and part.exists():
                got = np.load(part, allow_pickle=True).tolist()
                docs += got
                n_tokens += sum(len(d) - TAIL for d in got)
                continue
            first = len(docs)
            try:
                tasks = extract_tasks(site / pkg, loaded.tokenizer, args.tasks, 0, _default_prompt_budget(loaded, 128),
                                      kind=kind)
            except BenchError as exc:
                print(pkg, kind, exc, flush=True)
                continue
            for t in tasks:
                repo = build_repo_datastore(site / pkg, loaded.tokenizer, t, ())
                dec = make_decoder(loaded, args.method, repo, common)
                r = run_one(dec, args.method, t.prompt_ids, 128, stop=t.stop)
                out = [i for i in r["token_ids"] if i not in eos]
                if out:
                    docs.append(np.asarray(list(t.prompt_ids[-TAIL:]) + out, dtype=np.int64))
                    n_tokens += len(out)
            if part is not None:
                part.parent.mkdir(parents=True, exist_ok=True)
                np.save(part, np.array(docs[first:], dtype=object), allow_pickle=True)
            print(f"{pkg} {kind}: {len(tasks)} tasks, {n_tokens} output tokens so far, {time.time() - t0:.0f} s",
                  flush=True)
    if args.out == "-":
        return
    if not args.outputs_only:
        docs = list(common.document_tokens()) + docs
    ds = Datastore.from_documents(docs, len(loaded.tokenizer), tokenizer_fingerprint=tokenizer_fingerprint(loaded.tokenizer))
    ds.save(Path(args.out))
    print(json.dumps({"documents": len(docs), "output_tokens": n_tokens, "seconds": round(time.time() - t0)}))


if __name__ == "__main__":
    main()
