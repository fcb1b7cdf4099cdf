"""Headroom: the verify-cost curve c(n), the retrieval ceiling (greedy replay of the ``ar``
transcripts against every draft source) and predicted vs measured speedups (anchors note, sections 9-10)."""

from __future__ import annotations

import logging
import random
import statistics
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .runner import DEFAULT_COST_SIZES, REFERENCE_METHOD, BenchConfig, build_repo_datastore
from .tasks import Task

log = logging.getLogger("engine.bench")


def measure_verify_cost(loaded, prompt_ids: Sequence[int], sizes: Sequence[int] = DEFAULT_COST_SIZES,
                        repeats: int = 5) -> dict:
    """Measure ``c(n) = T(n) / T_ar``: one forward over ``n`` new tokens with a 4-D tree mask on top
    of a KV cache holding ``prompt_ids``, over one plain ``ar`` decode step (1 token, no explicit
    mask) on the same cache (anchors note, section 10). ``c(1)`` > 1 is the cost of the mask alone.

    The tree is a chain (each node sees the prompt and its ancestors); the dense cost of a forward
    depends on ``n`` only, not on the tree's shape. Each size is timed ``repeats`` times in shuffled
    round-robin order (so load changes hit all sizes alike), cropping the cache back after every
    forward; ``c`` uses the fastest time of each size (the least disturbed by other processes on a
    shared machine), medians are reported too.

    Returns:
        ``{"prompt_tokens": P, "n": [...], "ms": [...], "c": [...], "ar_ms": T_ar, "ms_median": [...],
        "ar_ms_median": ..., "repeats": R}`` (ms per forward, c unitless).
    """
    import torch

    from ..kv_cache import new_kv_cache

    model, device, dtype = loaded.model, loaded.device, loaded.dtype
    sizes = sorted({int(n) for n in sizes if int(n) >= 1} | {1})
    ids = torch.tensor([list(prompt_ids) or [0]], dtype=torch.long, device=device)
    fill = ids[0, -1].item()
    times: dict[int, list[float]] = {n: [] for n in sizes}
    rng = random.Random(0)
    with torch.inference_mode():
        cache = new_kv_cache(model, ids.shape[1] + max(sizes) + 1)  # the decoder's cache
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        past = cache.get_seq_length()
        inputs = {n: _tree_inputs(n, past, fill, device, dtype) for n in sizes}
        inputs[0] = {"input_ids": torch.full((1, 1), fill, dtype=torch.long, device=device)}  # ar step
        times[0] = []
        for round_ in range(max(1, repeats) + 1):  # round 0 warms up; sizes shuffled per round
            order = list(inputs)
            rng.shuffle(order)
            for n in order:
                ms = _time_forward(model, cache, past, inputs[n])
                if round_:
                    times[n].append(ms)
    ar_ms = min(times[0])
    ms = [min(times[n]) for n in sizes]
    return {"prompt_tokens": int(past), "n": sizes, "ms": ms, "c": [m / ar_ms for m in ms],
            "ar_ms": ar_ms, "ms_median": [statistics.median(times[n]) for n in sizes],
            "ar_ms_median": statistics.median(times[0]), "repeats": max(1, repeats)}


def _tree_inputs(n: int, past: int, fill: int, device, dtype) -> dict:
    """Forward arguments for an ``n``-token chain below a ``past``-token KV cache (float 4-D mask)."""
    import torch

    allow = torch.ones(n, past + n, dtype=torch.bool, device=device)
    allow[:, past:] = torch.tril(torch.ones(n, n, dtype=torch.bool, device=device))
    mask = torch.where(allow, 0.0, torch.finfo(dtype).min).to(dtype)[None, None]
    return {"input_ids": torch.full((1, n), fill, dtype=torch.long, device=device),
            "position_ids": torch.arange(past, past + n, device=device)[None], "attention_mask": mask}


def _time_forward(model, cache, past: int, inputs: dict) -> float:
    """Milliseconds of one forward; the cache is cropped back to ``past`` tokens afterwards."""
    start = time.perf_counter()
    model(**inputs, past_key_values=cache, use_cache=True)
    elapsed = (time.perf_counter() - start) * 1000.0
    cache.crop(past - cache.get_seq_length())
    return elapsed


def interpolate_cost(cost: dict, n: float) -> float:
    """``c(n)`` by linear interpolation in ``n`` (clamped to the measured range; 1.0 if unmeasured)."""
    if not cost or not cost.get("n"):
        return 1.0
    return float(np.interp(n, cost["n"], cost["c"]))


def greedy_pieces(propose_all: Callable[[np.ndarray, list[int]], int], prompt_ids: Sequence[int],
                  transcript: Sequence[int]) -> list[int]:
    """Split ``transcript[1:]`` greedily into the longest pieces a drafter could have proposed.

    ``transcript[0]`` comes from the prefill (no draft), as in the decoder. At position ``i`` the
    context is ``prompt + transcript[:i]`` (the pending token last); ``propose_all(context,
    remaining)`` returns how many leading tokens of ``remaining = transcript[i:]`` the best draft
    matches (``m``); the piece covers ``m + 1`` tokens (the accepted draft plus the model's own token),
    i.e. one decode forward.

    Args:
        propose_all: ``(context: int64 1-D, remaining: list[int]) -> int`` matched length (tokens).
        prompt_ids, transcript: token ids.

    Returns:
        the piece lengths (each >= 1); ``(len(transcript) - 1) / len(pieces)`` is the ceiling on
        the mean accepted length.
    """
    context = np.asarray(list(prompt_ids) + list(transcript), dtype=np.int64)
    p, i, pieces = len(prompt_ids), 1, []
    while i < len(transcript):
        m = propose_all(context[:p + i], list(transcript[i:]))
        step = min(int(m) + 1, len(transcript) - i)
        pieces.append(step)
        i += step
    return pieces


def prompt_lookup_match(context: np.ndarray, remaining: Sequence[int], max_ngram: int = 2,
                        num_tokens: int = 10) -> int:
    """Matched length of transformers' prompt lookup draft (``PromptLookupCandidateGenerator``:
    earliest earlier occurrence of the last ``max_ngram``..1 tokens, next ``num_tokens`` tokens)."""
    ctx = context.tolist()
    for n in range(min(max_ngram, len(ctx) - 1), 0, -1):
        gram = ctx[-n:]
        for start in range(len(ctx) - n):
            if ctx[start:start + n] == gram:
                draft = ctx[start + n:start + n + num_tokens]
                matched = 0
                for a, b in zip(draft, remaining):
                    if a != b:
                        break
                    matched += 1
                return matched
    return 0


class _ReplayDrafter:
    """A drafter driven along a known transcript: propose, then observe the greedy-accepted path
    (so FastCoder's cache fills as it would live)."""

    def __init__(self, drafter, prompt_ids: Sequence[int]):
        self.drafter = drafter
        drafter.reset(np.asarray(list(prompt_ids), dtype=np.int64))

    def match(self, context: np.ndarray, remaining: list[int]) -> int:
        tree = self.drafter.propose(context)
        m = tree.longest_match(remaining)
        path, node = [], -1
        for tok in remaining[:m]:
            node = tree.children[(node, int(tok))]
            path.append(node)
        self.drafter.observe(context, tree, path, [int(t) for t in remaining[:m + 1]])
        return m


def make_ceiling_drafters(loaded, repo_ds, common_ds) -> list:
    """One drafter per draft source family for the ceiling replay (FastCoder with its strategy off,
    so no random skips; REST; CopySpec)."""
    from engine.drafters import make_drafter

    drafters = []
    for method, options in (("fastcoder", {"use_strategy": False}), ("rest", {}), ("copyspec", {})):
        try:
            drafters.append(make_drafter(method, loaded.token_info, repo_ds, common_ds, **options))
        except Exception as err:  # a missing drafter only narrows the ceiling
            log.warning("ceiling: no %s drafter (%s)", method, err)
    return drafters


def retrieval_ceiling(loaded, tasks: Sequence[Task], transcripts: Sequence[Sequence[int]], root: Path,
                      common_ds, cfg: BenchConfig, repo_factory: Callable = build_repo_datastore) -> dict:
    """Replay the ``ar`` transcripts against all draft sources (anchors note, section 10, item 5).

    Returns:
        ``{"mean_accepted_length_bound": decode tokens / pieces over all tasks, "per_task": [...]}``.
    """
    per_task, total_tokens, total_pieces = [], 0, 0
    for task, transcript in zip(tasks, transcripts):
        if len(transcript) < 2:
            continue
        repo_ds = repo_factory(root, loaded.tokenizer, task, cfg.exclude)
        replay = [_ReplayDrafter(d, task.prompt_ids) for d in make_ceiling_drafters(loaded, repo_ds, common_ds)]

        def propose_all(context: np.ndarray, remaining: list[int]) -> int:
            found = [r.match(context, remaining) for r in replay]
            return max(found + [prompt_lookup_match(context, remaining)])

        pieces = greedy_pieces(propose_all, task.prompt_ids, transcript)
        total_tokens += len(transcript) - 1
        total_pieces += len(pieces)
        per_task.append({"task_id": task.task_id, "decode_tokens": len(transcript) - 1,
                         "pieces": len(pieces), "bound": (len(transcript) - 1) / len(pieces)})
    return {"mean_accepted_length_bound": total_tokens / total_pieces if total_pieces else None,
            "sources": ["fastcoder (cache, repo, common, context; no strategy)", "rest", "copyspec",
                        "hf-prompt-lookup"],
            "per_task": per_task}


def predicted_speedups(methods: dict[str, dict], cost: dict | None) -> dict[str, dict]:
    """Predicted speedup = accepted length / mean c(draft size + 1) per method, next to the measured
    one, and where a decode step's time goes (anchors note, section 10).

    Time breakdown per decode forward (ms): ``step_ms`` = decode ms / forwards; ``verify_ms`` =
    mean c(draft size + 1) x the measured ``ar`` step time (the modelled forward cost); ``retrieval_ms`` =
    drafting + retrieval; ``other_ms`` = the rest (masks, KV compaction, acceptance, Python).
    """
    ar = methods.get(REFERENCE_METHOD)
    ar_step = ar["decode_ms"] / ar["forward_passes"] if ar and ar["forward_passes"] else None
    out = {}
    for name, rec in methods.items():
        sizes = [s for t in rec["per_task"] for s in t["draft_sizes"]]
        tau = rec["mean_accepted_length"]
        if tau is None or not cost:
            continue
        c = statistics.fmean(interpolate_cost(cost, s + 1) for s in sizes) if sizes else None
        step = rec["decode_ms"] / rec["forward_passes"] if rec["forward_passes"] else None
        verify = c * ar_step if c and ar_step else None
        retrieval = rec.get("retrieval_ms_per_step") or 0.0
        out[name] = {"mean_accepted_length": tau, "mean_draft_size": rec.get("mean_draft_size"),
                     "mean_verify_cost": c, "predicted_speedup": tau / c if c else None,
                     "measured_speedup": rec.get("speedup"), "step_ms": step, "verify_ms": verify,
                     "retrieval_ms": retrieval,
                     "other_ms": step - verify - retrieval if step and verify else None}
    return out



def headroom(loaded, tasks: Sequence[Task], records: dict[str, list[dict]], methods: dict[str, dict],
             root: Path, common_ds, cfg: BenchConfig, repo_factory: Callable) -> dict:
    """Verify-cost curve, retrieval ceiling and predicted vs measured speedups."""
    lengths = sorted(len(t.prompt_ids) for t in tasks)
    typical = min(tasks, key=lambda t: abs(len(t.prompt_ids) - lengths[len(lengths) // 2]))
    cost = measure_verify_cost(loaded, typical.prompt_ids, cfg.cost_sizes, cfg.cost_repeats)
    transcripts = [r["token_ids"] for r in records.get(REFERENCE_METHOD, [])]
    try:
        ceiling = retrieval_ceiling(loaded, tasks, transcripts, root, common_ds, cfg, repo_factory)
    except ImportError as err:
        ceiling = {"mean_accepted_length_bound": None, "error": str(err), "per_task": []}
    return {"verify_cost": cost, "hardware_ceiling": max(n / c for n, c in zip(cost["n"], cost["c"])),
            "retrieval_ceiling": ceiling, "predicted": predicted_speedups(methods, cost)}
