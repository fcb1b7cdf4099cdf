"""Running the methods: decoders per benchmark method, interleaved timed runs, per-task records and
per-method summaries (lossless = token-identical to ``ar``)."""

from __future__ import annotations

import logging
import resource
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..native import forward_kernels
from .tasks import BenchError, Task

log = logging.getLogger("engine.bench")

#: Benchmark method name -> (engine method, decoder options). FastCoder ablations follow its Table II.
METHOD_SPECS: dict[str, tuple[str, dict]] = {
    "ar": ("ar", {}),
    "hf-prompt-lookup": ("hf-prompt-lookup", {}),
    "rest": ("rest", {}),
    "copyspec": ("copyspec", {}),
    "fastcoder": ("fastcoder", {}),
    "fastcoder-no-cache": ("fastcoder", {"use_cache": False}),
    "fastcoder-no-repo": ("fastcoder", {"use_repo": False}),
    "fastcoder-no-strategy": ("fastcoder", {"use_strategy": False}),
    # without the draft head's depth-1 estimates (engine.draft_head)
    "fastcoder-no-head": ("fastcoder", {"draft_head": False}),
    # with the learned per-node estimate over the trie shipped in the model's prior (engine.node_model; opt-in)
    "fastcoder-node-model": ("fastcoder", {"node_model": True}),
    # trees, copies and continuations at most 24 tokens deep even where verification is cheap (the default there
    # is 48: engine.cost_model.CHEAP_VERIFY_DRAFTING); on a CPU the same as fastcoder
    "fastcoder-depth24": ("fastcoder", {"tree_max_depth": 24, "copy_max_depth": 24, "draft_len": 24}),
    # the context copy under SuffixDecoding's suffix-tree bound, match + draft <= copy_max_depth (the default before
    # 2026-11-27: long agreements drafted as shorter matches; engine.context_match)
    "fastcoder-copy-bound": ("fastcoder", {"copy_depth_bound": True}),
    # the context copy's and the history's continuations as they are, not re-indented to the context's line
    # (engine.indent_shift)
    "fastcoder-no-indent": ("fastcoder", {"indent_shift": False}),
    # the LM head's whole product and the argmax of its logits at every greedy step, not its argmax by int8
    # screening (engine.lean_forward.forward_greedy; the same tokens)
    "ar-full-head": ("ar", {"screened_head": False}),
    "fastcoder-full-head": ("fastcoder", {"screened_head": False}),
    # one native call a step: Python between every two steps (engine.native.bound_verify.BoundVerify.verify_loop
    # not used; the same tokens and trees)
    "fastcoder-step-by-step": ("fastcoder", {"step_loop": False}),
    # the forward's AVX2 kernels on a CPU with AVX-512 (engine.native.forward_kernels around each generation; the
    # same tokens, the same trees: the verify-cost curve stays the process's). None for ar: its one-row steps run
    # the same kernels on both
    "fastcoder-avx2": ("fastcoder", {}),
    # the engine before trees were sized by the verify-cost model: top nodes by weight, budget 16 on a
    # CPU, nodes below a 0.2 share pruned
    "fastcoder-fixed": ("fastcoder", {"size_by_cost": False}),
    # SDSAT (issue #11): these need an SDSAT model (``fastcoder train-sdsat``); k sized by the verify-cost
    # model, or fixed at k adaptive tokens as in the paper's two-step loop
    "sdsat": ("sdsat", {}),
    "sdsat-k2": ("sdsat", {"adaptive_tokens": 2, "size_by_cost": False}),
    "sdsat-k4": ("sdsat", {"adaptive_tokens": 4, "size_by_cost": False}),
    "sdsat-k8": ("sdsat", {"adaptive_tokens": 8, "size_by_cost": False}),
    "fastcoder+sdsat": ("fastcoder+sdsat", {}),
    # SuffixDecoding (issue #9 item 5): arctic-inference's own drafter with vLLM's `suffix` settings
    # (chains), and with tree speculation (the paper's and arctic-inference's simulator's setting);
    # its global tree keeps every earlier task's output of the run, as a server's would
    "suffix": ("suffix", {}),
    "suffix-tree": ("suffix", {"use_tree_spec": True}),
}
#: Methods that need a model fine-tuned with adaptive tokens: not run unless asked for.
SDSAT_BENCH_METHODS = tuple(m for m, (base, _) in METHOD_SPECS.items() if base in ("sdsat", "fastcoder+sdsat"))
#: Methods that need the optional arctic-inference install: not run unless asked for.
SUFFIX_BENCH_METHODS = tuple(m for m, (base, _) in METHOD_SPECS.items() if base == "suffix")
#: Ablations that differ from fastcoder only where verification is cheap (a GPU's flat c(n)): not run unless asked for.
CHEAP_VERIFY_BENCH_METHODS = ("fastcoder-depth24",)
#: Ablations of the LM head's screened argmax and of the native step loop: run only when asked for.
FULL_HEAD_BENCH_METHODS = ("ar-full-head", "fastcoder-full-head", "fastcoder-step-by-step")
#: Ablations of the forward kernels' instruction set (method -> engine.native.forward_kernels' name): run only when
#: asked for.
KERNEL_ISA_METHODS = {"fastcoder-avx2": "avx2"}
DEFAULT_METHODS = tuple(m for m in METHOD_SPECS
                        if m not in SDSAT_BENCH_METHODS + SUFFIX_BENCH_METHODS + CHEAP_VERIFY_BENCH_METHODS
                        + FULL_HEAD_BENCH_METHODS + tuple(KERNEL_ISA_METHODS))
REFERENCE_METHOD = "ar"
DEFAULT_COST_SIZES = (1, 2, 4, 8, 16, 32, 64)
HIT_SOURCES = ("cache", "repo", "common", "context", "adaptive", "suffix", "history")


# --------------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------------


def reset_peak_rss() -> bool:
    """Reset the process's peak RSS (Linux ``/proc/self/clear_refs`` value 5); False if unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """Peak resident set size of this whole process in MiB (``VmHWM``, else ``ru_maxrss``).

    Process-wide: it includes the model, the datastores and everything run before (unless
    :func:`reset_peak_rss` reset it).
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024.0 * 1024.0) if sys.platform == "darwin" else rss / 1024.0


# --------------------------------------------------------------------------------------------------
# Running the methods
# --------------------------------------------------------------------------------------------------


@dataclass
class BenchConfig:
    """What one benchmark run does (mirrors the command line)."""

    methods: tuple[str, ...] = DEFAULT_METHODS
    max_new_tokens: int = 256
    warmup_tokens: int = 16
    exclude: tuple[str, ...] = ()
    cost_sizes: tuple[int, ...] = DEFAULT_COST_SIZES
    cost_repeats: int = 25
    headroom: bool = True
    progress: bool = True
    drafter_options: dict = field(default_factory=dict)  # extra options for rest/copyspec/fastcoder
    # sampling (issue #6): temperature/top_p/top_k for generate(); empty = greedy. Task i is
    # sampled with seed sampling_seed * 100_003 + i, the same for every method.
    sampling: dict = field(default_factory=dict)
    sampling_seed: int = 0
    # the whole task set this many times, each from fresh drafter state (report.benchmark: the spread)
    repeats: int = 1

    @property
    def sampled(self) -> bool:
        return float(self.sampling.get("temperature", 0.0)) > 0.0


def parse_methods(text: str | Sequence[str]) -> tuple[str, ...]:
    """Split a comma list of method names; ``ar`` is always included (it is the reference).

    Raises:
        BenchError: an unknown method name.
    """
    names = [m.strip() for m in (text.split(",") if isinstance(text, str) else text) if m.strip()]
    unknown = [m for m in names if m not in METHOD_SPECS]
    if unknown:
        raise BenchError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHOD_SPECS)}")
    ordered = [REFERENCE_METHOD] + [m for m in dict.fromkeys(names) if m != REFERENCE_METHOD]
    return tuple(ordered)


DRAFTING_METHODS = ("rest", "copyspec", "fastcoder", "sdsat", "fastcoder+sdsat", "suffix")
#: Engine methods with a per-document FastCoder cache and a shared acceptance estimator.
_CACHED_METHODS = ("fastcoder", "fastcoder+sdsat")
_ESTIMATORS: dict = {}
#: (id(loaded), method) -> the SuffixDecodingCache a suffix method keeps for the whole run.
_SUFFIX_CACHES: dict = {}
#: (id(loaded), method) -> the CompletionHistory a fastcoder method keeps for the whole run (a server's).
_HISTORIES: dict = {}


def _new_estimator(loaded=None):
    """A fresh estimator, starting from the prior fitted for ``loaded``'s model where there is one
    (:func:`engine.acceptance_prior.find_prior`)."""
    from ..acceptance import AcceptanceEstimator  # noqa: PLC0415
    from ..acceptance_prior import find_prior  # noqa: PLC0415

    return AcceptanceEstimator(prior=find_prior(loaded.model) if loaded is not None else None)


def make_decoder(loaded, method: str, repo_datastore, common_datastore, extra: dict | None = None):
    """A :class:`engine.SpeculativeDecoder` for a benchmark method name (ablations included);
    ``extra`` options (e.g. ``draft_budget``) go to the drafting methods only."""
    from engine import SpeculativeDecoder

    base, options = METHOD_SPECS[method]
    if extra and base in DRAFTING_METHODS:
        options = {**options, **extra}
    if base in (*_CACHED_METHODS, "sdsat") and options.get("size_by_cost", True):
        # one estimator per method for the whole run, as a server keeps one across requests
        options = {**options, "acceptance_estimator": _ESTIMATORS.setdefault((id(loaded), method), _new_estimator(loaded))}
    if base == "fastcoder":  # one completion history per method for the whole run, as a server keeps one
        from ..output_store import new_completion_history  # noqa: PLC0415

        key = (id(loaded), method)
        if key not in _HISTORIES:  # warmed with the model's output store where there is one
            _HISTORIES[key] = new_completion_history(loaded.model)
        options = {**options, "completion_history": _HISTORIES[key]}
    if base == "suffix":  # one SuffixDecodingCache per method for the whole run, as vLLM keeps one per engine
        key = (id(loaded), method)
        if key not in _SUFFIX_CACHES:
            from engine.suffix_drafter import SuffixOptions, new_suffix_cache  # noqa: PLC0415

            fields = SuffixOptions.__dataclass_fields__
            _SUFFIX_CACHES[key] = new_suffix_cache(SuffixOptions(**{k: v for k, v in options.items() if k in fields}))
        options = {**options, "suffix_cache": _SUFFIX_CACHES[key]}
    return SpeculativeDecoder(loaded, method=base, repo_datastore=repo_datastore,
                              common_datastore=common_datastore, **options)


def run_one(decoder, method: str, prompt_ids: Sequence[int], max_new_tokens: int,
            sampling: dict | None = None, seed: int | None = None, stop: Sequence[str] = (),
            constraint: bytes = b"") -> dict:
    """Generate once (greedy, or sampled with ``sampling`` = temperature/top_p/top_k and ``seed``)
    and return the raw per-task record (token ids kept for comparison).

    ``stop`` strings are passed to ``generate`` (a real stop). The decoder checks them once per
    forward pass, so a speculative step may commit a few tokens past the stop that ``ar`` never
    generates: the record's ``token_ids`` (compared with ``ar``, counted as new tokens) end at the
    first token whose text completes a stop string (:func:`cut_at_stop`); ``generated_tokens`` keeps
    the count the decoder returned.

    ``constraint``: a healed task's bytes (:attr:`Task.healed`), which the output must start with (``generate``'s
    token-healing constraint; a stop string counts only after them, and the decoder's ``token_ids`` already end where
    ``ar``'s do, so they are not cut again here).

    Each FastCoder run gets a fresh cache (``decoder.new_cache()``), i.e. a cold document. The peak
    RSS is reset first where Linux allows, so ``peak_rss_mb`` is this run's peak (still process-wide:
    model and datastores included).
    """
    cache = decoder.new_cache() if METHOD_SPECS[method][0] in _CACHED_METHODS else None
    reset_peak_rss()
    kernels = forward_kernels(KERNEL_ISA_METHODS[method]) if method in KERNEL_ISA_METHODS else nullcontext()
    with kernels:
        start = time.perf_counter()
        res = decoder.generate(list(prompt_ids), max_new_tokens=max_new_tokens, cache=cache, seed=seed,
                               stop=list(stop) or None, constraint=constraint or None,
                               **(sampling or {"temperature": 0.0}))
        wall_ms = (time.perf_counter() - start) * 1000.0
    stats = dict(res.stats or {})
    token_ids = [int(t) for t in res.token_ids]
    stats["generated_tokens"] = len(token_ids)
    if stop and not constraint:
        token_ids = cut_at_stop(decoder.loaded.tokenizer, token_ids, stop)
        stats["new_tokens"] = len(token_ids)
    if method == REFERENCE_METHOD and not stats.get("draft_sizes"):  # ar verifies no draft tokens
        stats["draft_sizes"] = [0] * int(stats.get("forward_passes", 0))
    return {"token_ids": token_ids, "finish_reason": res.finish_reason,
            "stats": stats, "wall_ms": wall_ms, "peak_rss_mb": peak_rss_mb(),
            "cache_bytes": int(getattr(cache, "nbytes", 0) or 0) if cache is not None else None}


def cut_at_stop(tokenizer, token_ids: Sequence[int], stop: Sequence[str]) -> list[int]:
    """``token_ids`` up to and including the first token whose decoded text completes one of ``stop``
    (the point where ``ar`` stops); all of them when no stop string occurs."""
    ids = [int(t) for t in token_ids]
    if tokenizer is None or not stop:
        return ids
    for k in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:k], skip_special_tokens=True)
        if any(s and s in text for s in stop):
            return ids[:k]
    return ids


def _first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def task_record(task: Task, method: str, raw: dict, reference: Sequence[int] | None,
                sampled: bool = False) -> dict:
    """The JSON per-task record of one method on one task (``lossless`` vs the ``ar`` output).

    Sampled runs (temperature > 0): ``lossless`` is None, since exactness there is a statement about
    distributions (tests/test_sampling.py), not tokens; ``first_divergence`` still compares with ``ar``
    sampled with the same seed (informative only)."""
    stats = raw["stats"]
    tokens = raw["token_ids"]
    divergence = None if reference is None else _first_divergence(tokens, reference)
    return {
        "task_id": task.task_id, "kind": task.kind, "file": task.path, "function": task.function,
        "prompt_tokens": int(stats.get("prompt_tokens", len(task.prompt_ids))),
        "new_tokens": int(stats.get("new_tokens", len(tokens))),
        "generated_tokens": int(stats.get("generated_tokens", len(tokens))),
        "prefill_ms": float(stats.get("prefill_ms", 0.0)),
        "decode_ms": float(stats.get("decode_ms", 0.0)),
        "wall_ms": raw["wall_ms"],
        "retrieval_ms": float(stats.get("retrieval_ms", 0.0) or 0.0),
        "retrieval_prefill_ms": float(stats.get("retrieval_prefill_ms", 0.0) or 0.0),
        "forward_ms": stats.get("forward_ms"),
        "forward_passes": int(stats.get("forward_passes", 0)),
        "accepted_lengths": [int(a) for a in stats.get("accepted_lengths", []) or []],
        "draft_sizes": [int(a) for a in stats.get("draft_sizes", []) or []],
        "hits": {k: int(v) for k, v in (stats.get("hits") or {}).items()},
        "finish_reason": raw["finish_reason"],
        "peak_rss_mb": raw["peak_rss_mb"],
        "cache_bytes": raw["cache_bytes"],
        "lossless": None if reference is None or sampled else divergence is None,
        "first_divergence": divergence,
        "error": stats.get("error"),
        "token_ids": tokens,
    }


def warm_up(loaded, methods: Sequence[str], prompt_ids: Sequence[int], repo_ds, common_ds,
            tokens: int, extra: dict | None = None) -> None:
    """Run every method once on a short generation (not recorded): lazy init, allocator, caches.

    The warm-up runs on the first task's prompt, so the suffix methods' caches and the fastcoder methods'
    completion histories are dropped afterwards (they would otherwise hold the start of that task's answer)."""
    if tokens <= 0:
        return
    for method in methods:
        try:
            run_one(make_decoder(loaded, method, repo_ds, common_ds, extra), method, prompt_ids, tokens)
        except Exception as err:  # the timed run records it; the warm-up only logs
            log.warning("warm-up of %s failed: %s", method, err)
        _SUFFIX_CACHES.pop((id(loaded), method), None)
        _HISTORIES.pop((id(loaded), method), None)


def fresh_drafter_state(loaded) -> None:
    """Forget what the methods learned in earlier runs on ``loaded`` (acceptance estimators, completion histories,
    SuffixDecoding caches), so that a repeat of the task set is the same experiment: an estimator trained on the
    first repeat sizes the next one's trees differently, and a history or a suffix cache holding a task's earlier
    completion would draft it whole (:func:`warm_up` drops those two after its own run as well)."""
    for table in (_ESTIMATORS, _HISTORIES, _SUFFIX_CACHES):
        for key in [k for k in table if k[0] == id(loaded)]:
            del table[key]


def failed_run(err: Exception) -> dict:
    """The raw record of a run that raised: no tokens, the error kept (``lossless`` becomes False)."""
    return {"token_ids": [], "finish_reason": "error", "stats": {"error": f"{type(err).__name__}: {err}"},
            "wall_ms": 0.0, "peak_rss_mb": peak_rss_mb(), "cache_bytes": None}


def rotate(methods: Sequence[str], k: int) -> list[str]:
    """``methods`` rotated by ``k`` (the order changes per task so no method always runs first)."""
    if not methods:
        return []
    k %= len(methods)
    return list(methods[k:]) + list(methods[:k])


def run_order(methods: Sequence[str], task_index: int) -> list[str]:
    """The order the methods run in on task ``task_index``: row ``task_index`` of a Williams design (Williams 1949: a
    Latin square whose rows put every method right after every other one equally often: n rows for an even number n
    of methods, the n rows and their mirror images for an odd one). A rotation alone kept each method right after the
    same one on every task: with ``ar,suffix,fastcoder`` fastcoder always ran after SuffixDecoding, whose structures
    then fill the caches, and SuffixDecoding always after ``ar``."""
    n = len(methods)
    if n < 2:
        return list(methods)
    base, lo, hi = [0], 1, n - 1  # 0, 1, n-1, 2, n-2, ...
    while len(base) < n:
        base.append(lo)
        lo += 1
        if len(base) < n:
            base.append(hi)
            hi -= 1
    r = task_index % (n if n % 2 == 0 else 2 * n)
    row = [methods[(b + r) % n] for b in base]
    return row[::-1] if r >= n else row


def build_repo_datastore(root: Path, tokenizer, task: Task | None, exclude: Sequence[str],
                         chunk_cache: dict | None = None):
    """D_r for one task: the repository with ``task``'s body span cut out of its file (the file is
    indexed as two documents, before and after the span), so retrieval cannot copy the target
    (``RepoDatastore.build(..., exclude_span=(path, start_char, end_char))``). ``task=None``: the
    whole repository. ``chunk_cache``: shared by the builds of one repository (tokenised once)."""
    from engine.repo_datastore import RepoDatastore

    span = None if task is None else (task.path, task.body_start, task.body_end)
    return RepoDatastore.build(root, tokenizer, exclude=list(exclude), exclude_span=span, chunk_cache=chunk_cache)


def memoized(repo_factory: Callable) -> Callable:
    """``repo_factory`` that builds each task's D_r once (the timed runs and the ceiling replay
    share it), all of them from one chunk cache (``repo_factory`` takes it as ``chunk_cache``, as
    :func:`build_repo_datastore` does): the repository is tokenised once for all its tasks."""
    built: dict = {}
    chunks: dict = {}

    def factory(root, tokenizer, task, exclude):
        key = None if task is None else task.task_id
        if key not in built:
            built[key] = repo_factory(root, tokenizer, task, exclude, chunk_cache=chunks)
        return built[key]

    return factory


def run_tasks(loaded, tasks: Sequence[Task], root: Path, common_ds, cfg: BenchConfig,
              repo_factory: Callable = build_repo_datastore) -> dict[str, list[dict]]:
    """Run every method on every task, interleaved per task, after a warm-up.

    Returns:
        method name -> list of per-task records (see :func:`task_record`), in task order.
    """
    from tqdm.auto import tqdm

    methods = cfg.methods
    records: dict[str, list[dict]] = {m: [] for m in methods}
    bar = tqdm(total=len(tasks) * len(methods), desc="bench", unit="run", file=sys.stderr,
               disable=not cfg.progress, dynamic_ncols=True)
    try:
        for i, task in enumerate(tasks):
            repo_ds = repo_factory(root, loaded.tokenizer, task, cfg.exclude)
            if i == 0:
                warm_up(loaded, methods, task.prompt_ids, repo_ds, common_ds, cfg.warmup_tokens,
                        cfg.drafter_options)
            raw: dict[str, dict] = {}
            for method in run_order(methods, i):
                bar.set_postfix_str(f"{task.task_id[-40:]} {method}", refresh=False)
                try:  # one failing method must not lose the whole run
                    decoder = make_decoder(loaded, method, repo_ds, common_ds, cfg.drafter_options)
                    raw[method] = run_one(decoder, method, task.prompt_ids, cfg.max_new_tokens, cfg.sampling,
                                          cfg.sampling_seed * 100_003 + i if cfg.sampled else None, task.stop,
                                          task.healed)
                except Exception as err:
                    log.error("%s failed on %s: %s", method, task.task_id, err)
                    raw[method] = failed_run(err)
                bar.update(1)
            reference = raw[REFERENCE_METHOD]["token_ids"] if REFERENCE_METHOD in raw else None
            for method in methods:
                records[method].append(task_record(task, method, raw[method], reference, cfg.sampled))
    finally:
        bar.close()
    return records


# --------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------


def histogram(values: Iterable[int]) -> dict[str, int]:
    """Counts per value, keys as strings in ascending numeric order (JSON-friendly)."""
    counts: dict[int, int] = {}
    for v in values:
        counts[int(v)] = counts.get(int(v), 0) + 1
    return {str(k): counts[k] for k in sorted(counts)}


def summarize_method(method: str, recs: Sequence[dict]) -> dict:
    """Aggregate one method's per-task records (ratios of totals, not means of ratios).

    ``ms_per_token`` = total decode ms / total new tokens (prefill excluded, reported as
    ``prefill_ms``, mean per task); ``decode_ms_per_completion`` and ``e2e_ms_per_completion`` = mean
    decode ms and mean wall ms of one ``generate`` call (prefill + decode + overhead: what an editor
    waits for one completion); ``mean_accepted_length`` = tokens committed by decode forwards
    (new tokens minus the prefill's one, plus a closing EOS, per task) / decode forwards (bonus token
    included, so ``ar`` is 1.0); ``retrieval_share`` = total retrieval ms / total decode ms (the
    drafting done in the prefill phase, ``retrieval_prefill_ms``, included); ``step_retrieval_share`` = the
    drafting done in decode steps (propose, observe, the generation's end) / total decode ms, the share of
    step time issue #9 bounds; ``step_retrieval_ms_per_step`` the same per decode forward; ``step_forward_share``
    = the decode steps' forwards (measured around each verify forward) / total decode ms and ``step_other_share``
    = the rest (masks, acceptance, KV compaction, the loop's Python: 1 - the two shares), ``forward_ms_per_step``
    a forward's mean ms (None for the HF baseline, whose loop is transformers'). The HF prompt-lookup
    baseline reports no per-step lengths, so it has no histogram.
    """
    new_tokens = sum(r["new_tokens"] for r in recs)
    decode_ms = sum(r["decode_ms"] for r in recs)
    retrieval_ms = sum(r["retrieval_ms"] for r in recs)
    # drafting inside the prefill phase (the drafter's reset over the prompt, the prefill's own draft)
    retrieval_prefill_ms = sum(r.get("retrieval_prefill_ms", 0.0) for r in recs)
    step_retrieval_ms = retrieval_ms - retrieval_prefill_ms
    forward_ms = sum(r["forward_ms"] for r in recs) if recs and all(r.get("forward_ms") is not None
                                                                    for r in recs) else None
    steps = [a for r in recs for a in r["accepted_lengths"]]
    forward_passes = sum(r["forward_passes"] for r in recs)
    # the first token is the prefill's; an EOS that ends a run was committed by a decode forward too
    decode_tokens = sum(max(r["new_tokens"] - 1, 0) + (r["finish_reason"] == "eos" and r["new_tokens"] > 0)
                        for r in recs)
    n_steps = forward_passes or len(steps)
    exact_steps = METHOD_SPECS.get(method, (method,))[0] != "hf-prompt-lookup"  # HF: no per-step data
    hits = {k: 0 for k in HIT_SOURCES}
    for r in recs:
        for k, v in r["hits"].items():
            hits[k] = hits.get(k, 0) + v
    lossless_flags = [r["lossless"] for r in recs]
    sizes = [s for r in recs for s in r["draft_sizes"]]
    base, options = METHOD_SPECS.get(method, (method, {}))
    cache_bytes = [r["cache_bytes"] for r in recs if r.get("cache_bytes") is not None]
    return {
        "method": method, "engine_method": base, "options": options, "tasks": len(recs),
        "new_tokens": new_tokens,
        "ms_per_token": decode_ms / new_tokens if new_tokens else None,
        "speedup": None,
        "decode_ms": decode_ms,
        "prefill_ms": statistics.fmean(r["prefill_ms"] for r in recs) if recs else None,
        "decode_ms_per_completion": decode_ms / len(recs) if recs else None,
        "e2e_ms_per_completion": statistics.fmean(r["wall_ms"] for r in recs) if recs else None,
        "e2e_speedup": None,
        "mean_new_tokens": new_tokens / len(recs) if recs else None,
        "mean_accepted_length": decode_tokens / forward_passes if forward_passes else None,
        "forward_passes": forward_passes,
        "retrieval_ms": retrieval_ms,
        "retrieval_ms_per_step": retrieval_ms / n_steps if n_steps else None,
        "retrieval_share": retrieval_ms / decode_ms if decode_ms else None,
        "retrieval_prefill_ms": retrieval_prefill_ms,
        "step_retrieval_ms_per_step": step_retrieval_ms / n_steps if n_steps else None,
        "step_retrieval_share": step_retrieval_ms / decode_ms if decode_ms else None,
        "forward_ms_per_step": forward_ms / n_steps if forward_ms is not None and n_steps else None,
        "step_forward_share": forward_ms / decode_ms if forward_ms is not None and decode_ms else None,
        "step_other_share": 1.0 - (forward_ms + step_retrieval_ms) / decode_ms
        if forward_ms is not None and decode_ms else None,
        "mean_draft_size": statistics.fmean(sizes) if sizes else None,
        "hits": hits,
        "peak_rss_mb": max((r["peak_rss_mb"] for r in recs), default=None),
        "max_cache_bytes": max(cache_bytes) if cache_bytes else None,
        "lossless": None if any(f is None for f in lossless_flags) else
        bool(lossless_flags) and all(f is True for f in lossless_flags),
        "lossless_tasks": sum(1 for f in lossless_flags if f is True),
        "accepted_length_histogram": histogram(steps) if exact_steps else None,
        "per_task": [{k: v for k, v in r.items() if k != "token_ids"} for r in recs],
    }


def summarize(records: dict[str, list[dict]]) -> dict[str, dict]:
    """Per-method summaries with ``speedup`` = ar ms_per_token / method ms_per_token and
    ``e2e_speedup`` = ar e2e_ms_per_completion / method e2e_ms_per_completion (same run)."""
    out = {m: summarize_method(m, recs) for m, recs in records.items()}
    ref = out.get(REFERENCE_METHOD, {}).get("ms_per_token")
    ref_e2e = out.get(REFERENCE_METHOD, {}).get("e2e_ms_per_completion")
    for rec in out.values():
        if ref and rec["ms_per_token"]:
            rec["speedup"] = ref / rec["ms_per_token"]
        if ref_e2e and rec["e2e_ms_per_completion"]:
            rec["e2e_speedup"] = ref_e2e / rec["e2e_ms_per_completion"]
    return out

