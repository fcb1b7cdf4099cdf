"""Does a forward over many rows give the same greedy tokens as one-row decoding, in bfloat16 and in float32?

For each of the first N `function` tasks of a repository (the bench's tasks, seed 0), decode 128 tokens greedily one
row at a time (the `ar` reference), then run one forward over prompt + those tokens (every generated position in
one multi-row forward, as a verified chain would be) and count the positions whose argmax differs from the token
one-row decoding chose, with the top-1 / top-2 logit gap one-row decoding saw there. Runs on this machine's CPU
with transformers' own forward (the native float32 kernels are not used for either dtype: pack_weights=False).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/results/2026-11-26g/bf16_rows.py ../shared/models/tiny-py-coder \
        .venv/lib/python3.11/site-packages/pluggy 10
"""

from __future__ import annotations

import sys

import torch
from transformers import DynamicCache

from engine import load_model
from engine.bench.tasks import extract_tasks
from engine.decoder import decode_one_token, prefill


def compare(loaded, prompt_ids: list[int], new_tokens: int) -> tuple[int, list[float], list[float]]:
    """(flips, gaps at flips, all gaps) of one task."""
    model = loaded.model
    cache = DynamicCache()
    logits = prefill(model, cache, torch.tensor([prompt_ids]))
    out, gaps = [], []
    for _ in range(new_tokens):
        top = torch.topk(logits.float(), 2).values
        gaps.append(float(top[0] - top[1]))
        out.append(int(logits.argmax()))
        logits = decode_one_token(model, cache, out[-1])
    with torch.inference_mode():
        full = model(torch.tensor([prompt_ids + out[:-1]])).logits[0, len(prompt_ids) - 1:]
    multi = full.argmax(-1).tolist()
    flips = [i for i, (a, b) in enumerate(zip(out, multi)) if a != b]
    return len(flips), [gaps[i] for i in flips], gaps


def main(model: str, repo: str, n: int) -> None:
    for dtype in ("float32", "bfloat16"):
        loaded = load_model(model, device="cpu", dtype=dtype, pack_weights=False)
        tasks = extract_tasks(repo, loaded.tokenizer, n, 0, 1024 - 128, 3, kind="function")
        flips, flip_gaps, all_gaps = 0, [], []
        for task in tasks:
            f, fg, g = compare(loaded, list(task.prompt_ids), 128)
            flips += f
            flip_gaps += fg
            all_gaps += g
        all_gaps.sort()
        print(f"{dtype}: {len(tasks)} tasks x 128 tokens: {flips} positions where the multi-row forward's argmax "
              f"differs from one-row decoding; top-1/top-2 gaps there {[round(x, 3) for x in flip_gaps]}; "
              f"median gap over all positions {all_gaps[len(all_gaps) // 2]:.3f}, smallest "
              f"{[round(x, 3) for x in all_gaps[:5]]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
