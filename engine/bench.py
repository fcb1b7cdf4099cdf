"""Benchmark harness: repository-level code generation with every decoding method (issue #3).

Tasks come from a real repository, as in RepoEval / DevEval function-level completion: a function
whose body has at least ``min_body_lines`` lines is picked (seeded, deterministic); the prompt is the
file's text before the body (left-truncated to a token budget); the target is the model's own greedy
continuation of ``max_new_tokens`` tokens. The repository datastore D_r is built with the target body
removed from its file, so retrieval cannot copy the answer (no leakage).

All methods run in one process, interleaved per task (so machine noise hits them alike), after a
warm-up. Per method the harness reports decode ms per new token, speedup vs ``ar`` (same run), mean
accepted length (tokens committed per decode forward, bonus token included; Spec-Bench convention),
forward passes, retrieval ms per step and its share of decode time, accepted draft tokens per draft
source, peak RSS, and ``lossless`` (every output token-identical to ``ar``'s).

Headroom (see notes/speculative-decoding-anchors.md, sections 9-10):

* verify-cost curve ``c(n) = T(n) / T(1)``: time of one forward over ``n`` new tokens under a tree
  (4-D additive) mask on top of a typical prompt, divided by a 1-token forward.
* retrieval ceiling: the ``ar`` transcripts replayed against the union of all draft sources; each
  transcript is split greedily into the longest pieces any drafter could have proposed (+1 bonus token
  per piece); ``tokens / pieces`` bounds the mean accepted length of these exact-match drafters.
* predicted speedup ``accepted length / c(tree size + 1)`` next to the measured one.

Usage: ``python -m engine.bench --model M --repo DIR --tasks 10 --max-new-tokens 128 --json OUT``
(or ``fastcoder bench ...``). This module imports nothing from ``lsp_server``.
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import os
import platform
import random
import re
import resource
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

log = logging.getLogger(__name__)

SCHEMA = "fastcoder-bench/1"

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
}
#: Methods that need a model fine-tuned with adaptive tokens: not run unless asked for.
SDSAT_BENCH_METHODS = tuple(m for m, (base, _) in METHOD_SPECS.items() if base in ("sdsat", "fastcoder+sdsat"))
DEFAULT_METHODS = tuple(m for m in METHOD_SPECS if m not in SDSAT_BENCH_METHODS)
REFERENCE_METHOD = "ar"
DEFAULT_MAX_PROMPT_TOKENS = 1024  # tiny-py-coder was trained on 1,024-token windows
DEFAULT_COST_SIZES = (1, 2, 4, 8, 16, 32, 64)
HIT_SOURCES = ("cache", "repo", "common", "context", "adaptive")
_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "build", "dist"}


class BenchError(RuntimeError):
    """Bad benchmark input (no repository, no usable functions, unknown method); one line for a person."""


# --------------------------------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------------------------------


@dataclass
class FunctionSpan:
    """A function body inside one source text.

    Attributes:
        qualname: dotted name (``Class.method``, ``outer.inner``).
        lineno: 1-based line of the ``def``.
        body_start: char offset of the start of the body's first line (after a docstring, if the
            body has more statements); the prompt is ``source[:body_start]``.
        body_end: char offset just past the body's last line (its newline included).
        body_lines: lines from the body's first to its last line.
    """

    qualname: str
    lineno: int
    body_start: int
    body_end: int
    body_lines: int


@dataclass
class Task:
    """One benchmark task (repository-level function completion).

    Attributes:
        task_id: ``"<relative path>::<qualname>"``.
        path: file path relative to the repository root (POSIX separators).
        function: the function's qualified name.
        lineno: 1-based line of its ``def``.
        body_start, body_end: char offsets of the excluded body span in the file.
        prompt_ids: the prompt's token ids (left-truncated to the prompt budget).
        truncated: whether left truncation dropped tokens.
    """

    task_id: str
    path: str
    function: str
    lineno: int
    body_start: int
    body_end: int
    prompt_ids: list[int] = field(repr=False)
    truncated: bool = False

    def describe(self) -> dict:
        """JSON-ready summary without the prompt ids."""
        return {"task_id": self.task_id, "file": self.path, "function": self.function,
                "lineno": self.lineno, "body_span": [self.body_start, self.body_end],
                "prompt_tokens": len(self.prompt_ids), "truncated_prompt": self.truncated}


def _line_starts(source: str) -> list[int]:
    """Char offset of the start of every line (1-based line ``k`` starts at ``result[k - 1]``);
    line breaks as Python's tokenizer sees them (``\\r\\n``, ``\\r``, ``\\n``)."""
    return [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", source)]


def _is_docstring(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


def find_functions(source: str, min_body_lines: int = 3) -> list[FunctionSpan]:
    """All functions (sync/async, methods, nested) whose body has at least ``min_body_lines`` lines.

    The body starts at its first statement's line (a leading docstring stays in the prompt when more
    statements follow); one-line functions (body on the ``def`` line) are skipped.

    Returns:
        spans sorted by line; an empty list when ``source`` does not parse.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    starts = _line_starts(source)
    spans: list[FunctionSpan] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    span = _body_span(child, qualname, source, starts)
                    if span is not None and span.body_lines >= min_body_lines:
                        spans.append(span)
                visit(child, qualname + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return sorted(spans, key=lambda s: s.lineno)


def _body_span(node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str, source: str,
               starts: list[int]) -> FunctionSpan | None:
    body = list(node.body)
    if len(body) > 1 and _is_docstring(body[0]):
        body = body[1:]
    first, last = body[0], body[-1]
    body_start = starts[first.lineno - 1]
    line_head = source[body_start:body_start + len(source[body_start:].split("\n", 1)[0])]
    if line_head[:first.col_offset].strip() or first.lineno <= node.lineno:
        return None  # the body shares a line with the signature: no clean split
    end_line = last.end_lineno or last.lineno
    body_end = starts[end_line] if end_line < len(starts) else len(source)
    return FunctionSpan(qualname, node.lineno, body_start, body_end, end_line - first.lineno + 1)


def iter_python_files(root: Path) -> list[Path]:
    """Sorted ``*.py`` files under ``root``, skipping hidden folders, caches and build outputs."""
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        files.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
    return files


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def extract_tasks(root: str | Path, tokenizer, num_tasks: int, seed: int = 0,
                  max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS, min_body_lines: int = 3,
                  min_prompt_chars: int = 64) -> list[Task]:
    """Pick ``num_tasks`` functions from a repository, seeded and deterministic.

    Args:
        root: repository folder.
        tokenizer: a Hugging Face tokenizer (``tokenizer(text, add_special_tokens=False)``).
        num_tasks: how many tasks (fewer when the repository has fewer eligible functions).
        seed: sampling seed; the same seed and files give the same tasks.
        max_prompt_tokens: prompt budget (tokens); longer prefixes keep their last tokens.
        min_body_lines: minimum body length (lines).
        min_prompt_chars: skip functions whose file prefix is shorter than this (chars).

    Returns:
        the tasks, in sampled order.

    Raises:
        BenchError: ``root`` is not a folder, or it holds no eligible function.
    """
    root = Path(root)
    if not root.is_dir():
        raise BenchError(f"--repo {str(root)!r} is not a folder")
    candidates: list[tuple[str, FunctionSpan, str]] = []
    for path in iter_python_files(root):
        source = _read_text(path)
        if not source:
            continue
        rel = path.relative_to(root).as_posix()
        for span in find_functions(source, min_body_lines):
            if span.body_start >= min_prompt_chars:
                candidates.append((rel, span, source))
    if not candidates:
        raise BenchError(f"no function with a body of >= {min_body_lines} lines under {str(root)!r}")
    rng = random.Random(seed)
    chosen = rng.sample(candidates, min(max(num_tasks, 0), len(candidates)))
    return [_make_task(rel, span, source, tokenizer, max_prompt_tokens) for rel, span, source in chosen]


def _make_task(rel: str, span: FunctionSpan, source: str, tokenizer, max_prompt_tokens: int) -> Task:
    ids = list(tokenizer(source[:span.body_start], add_special_tokens=False)["input_ids"])
    truncated = len(ids) > max_prompt_tokens
    ids = ids[-max_prompt_tokens:] if max_prompt_tokens > 0 else []
    return Task(f"{rel}::{span.qualname}", rel, span.qualname, span.lineno, span.body_start,
                span.body_end, [int(t) for t in ids], truncated)


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


DRAFTING_METHODS = ("rest", "copyspec", "fastcoder", "sdsat", "fastcoder+sdsat")
#: Engine methods with a per-document FastCoder cache and a shared acceptance estimator.
_CACHED_METHODS = ("fastcoder", "fastcoder+sdsat")
_ESTIMATORS: dict = {}


def _new_estimator():
    from .acceptance import AcceptanceEstimator  # noqa: PLC0415

    return AcceptanceEstimator()


def make_decoder(loaded, method: str, repo_datastore, common_datastore, extra: dict | None = None):
    """A :class:`engine.SpeculativeDecoder` for a benchmark method name (ablations included);
    ``extra`` options (e.g. ``draft_budget``) go to the drafting methods only."""
    from engine import SpeculativeDecoder

    base, options = METHOD_SPECS[method]
    if extra and base in DRAFTING_METHODS:
        options = {**options, **extra}
    if base in (*_CACHED_METHODS, "sdsat") and options.get("size_by_cost", True):
        # one estimator per method for the whole run, as a server keeps one across requests
        options = {**options, "acceptance_estimator": _ESTIMATORS.setdefault((id(loaded), method), _new_estimator())}
    return SpeculativeDecoder(loaded, method=base, repo_datastore=repo_datastore,
                              common_datastore=common_datastore, **options)


def run_one(decoder, method: str, prompt_ids: Sequence[int], max_new_tokens: int,
            sampling: dict | None = None, seed: int | None = None) -> dict:
    """Generate once (greedy, or sampled with ``sampling`` = temperature/top_p/top_k and ``seed``)
    and return the raw per-task record (token ids kept for comparison).

    Each FastCoder run gets a fresh cache (``decoder.new_cache()``), i.e. a cold document. The peak
    RSS is reset first where Linux allows, so ``peak_rss_mb`` is this run's peak (still process-wide:
    model and datastores included).
    """
    cache = decoder.new_cache() if METHOD_SPECS[method][0] in _CACHED_METHODS else None
    reset_peak_rss()
    start = time.perf_counter()
    res = decoder.generate(list(prompt_ids), max_new_tokens=max_new_tokens, cache=cache, seed=seed,
                           **(sampling or {"temperature": 0.0}))
    wall_ms = (time.perf_counter() - start) * 1000.0
    stats = dict(res.stats or {})
    if method == REFERENCE_METHOD and not stats.get("draft_sizes"):  # ar verifies no draft tokens
        stats["draft_sizes"] = [0] * int(stats.get("forward_passes", 0))
    return {"token_ids": [int(t) for t in res.token_ids], "finish_reason": res.finish_reason,
            "stats": stats, "wall_ms": wall_ms, "peak_rss_mb": peak_rss_mb(),
            "cache_bytes": int(getattr(cache, "nbytes", 0) or 0) if cache is not None else None}


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
        "task_id": task.task_id, "file": task.path, "function": task.function,
        "prompt_tokens": int(stats.get("prompt_tokens", len(task.prompt_ids))),
        "new_tokens": int(stats.get("new_tokens", len(tokens))),
        "prefill_ms": float(stats.get("prefill_ms", 0.0)),
        "decode_ms": float(stats.get("decode_ms", 0.0)),
        "wall_ms": raw["wall_ms"],
        "retrieval_ms": float(stats.get("retrieval_ms", 0.0) or 0.0),
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
    """Run every method once on a short generation (not recorded): lazy init, allocator, caches."""
    if tokens <= 0:
        return
    for method in methods:
        try:
            run_one(make_decoder(loaded, method, repo_ds, common_ds, extra), method, prompt_ids, tokens)
        except Exception as err:  # the timed run records it; the warm-up only logs
            log.warning("warm-up of %s failed: %s", method, err)


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


def build_repo_datastore(root: Path, tokenizer, task: Task | None, exclude: Sequence[str]):
    """D_r for one task: the repository with ``task``'s body span cut out of its file (the file is
    indexed as two documents, before and after the span), so retrieval cannot copy the target
    (``RepoDatastore.build(..., exclude_span=(path, start_char, end_char))``). ``task=None``: the
    whole repository."""
    from engine.repo_datastore import RepoDatastore

    span = None if task is None else (task.path, task.body_start, task.body_end)
    return RepoDatastore.build(root, tokenizer, exclude=list(exclude), exclude_span=span)


def memoized(repo_factory: Callable) -> Callable:
    """``repo_factory`` that builds each task's D_r once (the timed runs and the ceiling replay
    share it)."""
    built: dict = {}

    def factory(root, tokenizer, task, exclude):
        key = None if task is None else task.task_id
        if key not in built:
            built[key] = repo_factory(root, tokenizer, task, exclude)
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
            for method in rotate(methods, i):
                bar.set_postfix_str(f"{task.task_id[-40:]} {method}", refresh=False)
                try:  # one failing method must not lose the whole run
                    decoder = make_decoder(loaded, method, repo_ds, common_ds, cfg.drafter_options)
                    raw[method] = run_one(decoder, method, task.prompt_ids, cfg.max_new_tokens, cfg.sampling,
                                          cfg.sampling_seed * 100_003 + i if cfg.sampled else None)
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
    ``prefill_ms``, mean per task); ``mean_accepted_length`` = tokens committed by decode forwards
    (new tokens minus the prefill's one, per task) / decode forwards (bonus token included, so ``ar``
    is 1.0); ``retrieval_share`` = total retrieval ms / total decode ms. The HF prompt-lookup
    baseline reports no per-step lengths, so it has no histogram.
    """
    new_tokens = sum(r["new_tokens"] for r in recs)
    decode_ms = sum(r["decode_ms"] for r in recs)
    retrieval_ms = sum(r["retrieval_ms"] for r in recs)
    steps = [a for r in recs for a in r["accepted_lengths"]]
    forward_passes = sum(r["forward_passes"] for r in recs)
    decode_tokens = sum(max(r["new_tokens"] - 1, 0) for r in recs)  # the first token is the prefill's
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
        "mean_accepted_length": decode_tokens / forward_passes if forward_passes else None,
        "forward_passes": forward_passes,
        "retrieval_ms": retrieval_ms,
        "retrieval_ms_per_step": retrieval_ms / n_steps if n_steps else None,
        "retrieval_share": retrieval_ms / decode_ms if decode_ms else None,
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
    """Per-method summaries with ``speedup`` = ar ms_per_token / method ms_per_token (same run)."""
    out = {m: summarize_method(m, recs) for m, recs in records.items()}
    ref = out.get(REFERENCE_METHOD, {}).get("ms_per_token")
    for rec in out.values():
        if ref and rec["ms_per_token"]:
            rec["speedup"] = ref / rec["ms_per_token"]
    return out


# --------------------------------------------------------------------------------------------------
# Headroom: verify cost and retrieval ceiling
# --------------------------------------------------------------------------------------------------


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
    from transformers import DynamicCache

    model, device, dtype = loaded.model, loaded.device, loaded.dtype
    sizes = sorted({int(n) for n in sizes if int(n) >= 1} | {1})
    ids = torch.tensor([list(prompt_ids) or [0]], dtype=torch.long, device=device)
    fill = ids[0, -1].item()
    times: dict[int, list[float]] = {n: [] for n in sizes}
    rng = random.Random(0)
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
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


# --------------------------------------------------------------------------------------------------
# Whole run and outputs
# --------------------------------------------------------------------------------------------------


def environment() -> dict:
    """Hardware and library versions for the report."""
    import torch
    import transformers

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "platform": platform.platform(), "cpu": cpu,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **engine_revision()}


def engine_revision() -> dict:
    """``{"git_commit": sha, "engine_modified": bool}`` of the checkout holding ``engine/`` (which
    code produced a result); None values outside a git checkout."""
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip() or None
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None, "engine_modified": None}
    return {"git_commit": sha, "engine_modified": bool(dirty) if sha else None}


def benchmark(loaded, root: str | Path, tasks: Sequence[Task], common_ds, cfg: BenchConfig,
              repo_factory: Callable = build_repo_datastore) -> dict:
    """Run the whole benchmark and return the JSON-ready result (schema ``fastcoder-bench/1``)."""
    root = Path(root)
    repo_factory = memoized(repo_factory)
    records = run_tasks(loaded, tasks, root, common_ds, cfg, repo_factory)
    methods = summarize(records)
    result = {"schema": SCHEMA, "environment": environment(),
              "tasks": [t.describe() for t in tasks], "methods": methods, "headroom": None}
    if cfg.headroom and tasks:
        result["headroom"] = headroom(loaded, tasks, records, methods, root, common_ds, cfg, repo_factory)
    return result


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


def _fmt(value, spec: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def render_markdown(result: dict) -> str:
    """A markdown report: config, the per-method table, and the headroom analysis."""
    cfg, env = result.get("config", {}), result.get("environment", {})
    lines = ["# fastcoder benchmark", ""]
    if cfg:
        lines += [f"- model: `{cfg.get('model')}`; repository: `{cfg.get('repo')}`; common datastore: "
                  f"`{cfg.get('common')}`",
                  f"- tasks: {len(result.get('tasks', []))}; max new tokens: {cfg.get('max_new_tokens')}; "
                  f"max prompt tokens: {cfg.get('max_prompt_tokens')}; seed: {cfg.get('seed')}; "
                  f"temperature: {cfg.get('temperature', 0.0)}, top_p: {cfg.get('top_p', 1.0)}, "
                  f"top_k: {cfg.get('top_k', 0)}"]
    if env:
        lines.append(f"- hardware: {env.get('cpu')} ({env.get('cpu_count')} cores, torch threads "
                     f"{env.get('torch_threads')}); torch {env.get('torch')}, transformers "
                     f"{env.get('transformers')}; engine commit {str(env.get('git_commit'))[:10]}"
                     f"{' (modified)' if env.get('engine_modified') else ''}")
    if result.get("datastores"):
        ds = result["datastores"]
        lines.append(f"- D_r: {ds.get('repo_tokens')} tokens in {ds.get('repo_files')} files; "
                     f"D_c: {ds.get('common_tokens')} tokens")
    lines += ["", "| method | ms/token | speedup | accepted length | forward passes | retrieval ms/step "
              "| retrieval share | hits cache/repo/common/context/adaptive | peak RSS MB | lossless |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for name, m in result["methods"].items():
        h = m["hits"]
        hits = "/".join(str(h.get(k, 0)) for k in HIT_SOURCES)
        lines.append(f"| {name} | {_fmt(m['ms_per_token'])} | {_fmt(m['speedup'])}x | "
                     f"{_fmt(m['mean_accepted_length'])} | {m['forward_passes']} | "
                     f"{_fmt(m['retrieval_ms_per_step'], '.3f')} | {_fmt(m['retrieval_share'], '.1%')} | "
                     f"{hits} | {_fmt(m['peak_rss_mb'], '.0f')} | "
                     f"{_lossless_cell(m)} |")
    lines += _headroom_markdown(result.get("headroom"))
    return "\n".join(lines) + "\n"


def _lossless_cell(m: dict) -> str:
    if m["lossless"] is None:
        return "n/a (sampled)"
    return f"{'yes' if m['lossless'] else 'NO'} ({m['lossless_tasks']}/{m['tasks']})"


def _headroom_markdown(head: dict | None) -> list[str]:
    if not head:
        return []
    cost = head["verify_cost"]
    lines = ["", "## Headroom", "",
             f"Verify cost c(n) = T(n)/T_ar: one forward over n tokens with a tree mask, over one plain "
             f"ar decode step (T_ar = {cost.get('ar_ms', cost['ms'][0]):.2f} ms), on a "
             f"{cost['prompt_tokens']}-token prompt, fastest of {cost.get('repeats', '?')}:", "",
             "| n | " + " | ".join(str(n) for n in cost["n"]) + " |",
             "|---|" + "---|" * len(cost["n"]),
             "| ms | " + " | ".join(f"{m:.2f}" for m in cost["ms"]) + " |",
             "| c(n) | " + " | ".join(f"{c:.2f}" for c in cost["c"]) + " |", "",
             f"Hardware ceiling max n/c(n) = {head['hardware_ceiling']:.2f}x; retrieval ceiling "
             f"(greedy replay of the ar transcripts against all draft sources) = "
             f"{_fmt(head['retrieval_ceiling'].get('mean_accepted_length_bound'))} tokens per forward.",
             "", "Predicted speedup = accepted length / mean c(draft size + 1). Per decode forward (ms): "
             "step = measured; verify = c(size + 1) x the ar step; retrieval = drafting + retrieval; "
             "other = the rest (masks, KV compaction, acceptance, Python).", "",
             "| method | accepted length | mean draft size | mean c(size+1) | predicted speedup "
             "| measured speedup | step ms | verify ms | retrieval ms | other ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, p in head["predicted"].items():
        lines.append(f"| {name} | {_fmt(p['mean_accepted_length'])} | {_fmt(p['mean_draft_size'], '.1f')} | "
                     f"{_fmt(p['mean_verify_cost'])} | {_fmt(p['predicted_speedup'])}x | "
                     f"{_fmt(p['measured_speedup'])}x | {_fmt(p.get('step_ms'))} | "
                     f"{_fmt(p.get('verify_ms'))} | {_fmt(p.get('retrieval_ms'))} | {_fmt(p.get('other_ms'))} |")
    return lines


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``bench`` options to ``parser`` (used by ``fastcoder bench`` and ``python -m``)."""
    parser.add_argument("--model", default=None, help="model folder or hub id (default: $FASTCODER_MODEL "
                        "or engine.DEFAULT_MODEL)")
    parser.add_argument("--repo", required=True, help="repository folder the tasks and D_r come from")
    parser.add_argument("--common", default="stdlib", help="common datastore D_c: PATH, stdlib or none")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                        help=f"comma list from {','.join(METHOD_SPECS)} (ar is always run)")
    parser.add_argument("--tasks", type=int, default=10, help="number of functions to complete")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="greedy tokens per task")
    parser.add_argument("--max-prompt-tokens", type=int, default=None,
                        help=f"prompt budget in tokens (default {DEFAULT_MAX_PROMPT_TOKENS}, the dev "
                        "model's training context, capped so prompt + new tokens fit the model)")
    parser.add_argument("--seed", type=int, default=0,
                        help="task sampling seed; with --temperature > 0 task i is also sampled with "
                             "seed SEED * 100003 + i (every method the same)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--min-body-lines", type=int, default=3)
    parser.add_argument("--exclude", action="append", default=[], help="glob to leave out of D_r")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--warmup-tokens", type=int, default=16)
    parser.add_argument("--draft-budget", type=int, default=None,
                        help="draft tokens per tree for rest/copyspec/fastcoder (default: the engine's, 64)")
    parser.add_argument("--no-headroom", action="store_true", help="skip c(n) and the retrieval ceiling")
    parser.add_argument("--cost-sizes", default=",".join(map(str, DEFAULT_COST_SIZES)))
    parser.add_argument("--json", dest="json_out", default=None, help="write the JSON result here")
    parser.add_argument("--markdown", dest="markdown_out", default=None, help="write a markdown report")
    parser.add_argument("--plot", dest="plot_out", default=None, help="write a PNG plot")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def _default_prompt_budget(loaded, max_new_tokens: int) -> int:
    return max(1, min(DEFAULT_MAX_PROMPT_TOKENS, loaded.max_positions - max_new_tokens))


def run(args: argparse.Namespace) -> int:
    """Run the benchmark from parsed arguments; returns a process exit code (0 ok, 2 bad input)."""
    from engine import ModelLoadError, load_model

    try:
        methods = parse_methods(args.methods)
        if args.tasks < 1 or args.max_new_tokens < 1:
            raise BenchError("--tasks and --max-new-tokens must be >= 1")
        cost_sizes = tuple(int(x) for x in str(args.cost_sizes).split(",") if x.strip())
        from engine.verify import SamplingParams
        SamplingParams(args.temperature, args.top_p, args.top_k)  # ValueError on bad values
    except (BenchError, ValueError) as err:
        print(f"fastcoder bench: {err}", file=sys.stderr)
        return 2
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    if not Path(args.repo).is_dir():
        print(f"fastcoder bench: --repo {args.repo!r} is not a folder", file=sys.stderr)
        return 2
    try:
        loaded = load_model(args.model, device=args.device, dtype=args.dtype)
        budget = args.max_prompt_tokens or _default_prompt_budget(loaded, args.max_new_tokens)
        tasks = extract_tasks(args.repo, loaded.tokenizer, args.tasks, args.seed, budget,
                              args.min_body_lines)
        common_ds = _load_common(loaded, args.common)
        needs_sdsat = [m for m in methods if m in SDSAT_BENCH_METHODS]
        if needs_sdsat and loaded.sdsat is None:
            raise BenchError(f"{', '.join(needs_sdsat)} need an SDSAT model (an sdsat.json beside the weights); "
                             f"{args.model or 'the default model'} has none: make one with `fastcoder train-sdsat`")
    except (ModelLoadError, BenchError) as err:
        print(f"fastcoder bench: {err}", file=sys.stderr)
        return 2
    cfg = BenchConfig(methods=methods, max_new_tokens=args.max_new_tokens, warmup_tokens=args.warmup_tokens,
                      exclude=tuple(args.exclude), cost_sizes=cost_sizes, headroom=not args.no_headroom,
                      progress=not args.no_progress,
                      drafter_options={} if args.draft_budget is None else {"draft_budget": args.draft_budget},
                      sampling=dict(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k),
                      sampling_seed=args.seed)
    result = benchmark(loaded, args.repo, tasks, common_ds, cfg)
    result["config"] = {"model": loaded.name, "repo": str(args.repo), "common": args.common,
                        "methods": list(methods), "tasks": args.tasks, "max_new_tokens": args.max_new_tokens,
                        "max_prompt_tokens": budget, "seed": args.seed, "draft_budget": args.draft_budget,
                        "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
                        "device": str(loaded.device), "dtype": str(loaded.dtype).replace("torch.", ""),
                        "threads": args.threads, "argv": list(sys.argv)}
    from .cost_model import load_or_measure_verify_cost  # noqa: PLC0415

    result["verify_cost"] = load_or_measure_verify_cost(loaded).as_dict()
    result["datastores"] = _datastore_sizes(args.repo, loaded, common_ds, args.exclude)
    write_outputs(result, args.json_out, args.markdown_out, args.plot_out)
    return 0


def _load_common(loaded, spec: str):
    if str(spec).lower() == "none":
        return None
    from engine.common_datastore import load_common_datastore

    try:
        return load_common_datastore(loaded.tokenizer, spec, build_if_missing=True)
    except Exception as err:  # DatastoreError, OSError: a clear message, not a traceback
        raise BenchError(f"cannot load common datastore {spec!r}: {err}") from err


def _datastore_sizes(root, loaded, common_ds, exclude) -> dict:
    out = {"common_tokens": _num_tokens(common_ds)}
    try:
        repo = build_repo_datastore(Path(root), loaded.tokenizer, None, exclude)
        out.update(repo_tokens=int(repo.num_tokens), repo_files=int(repo.num_files))
    except Exception as err:  # sizes are informative only
        out["repo_error"] = str(err)
    return out


def _num_tokens(ds) -> int | None:
    if ds is None:
        return None
    for attr in ("num_tokens", "size"):
        value = getattr(ds, attr, None)
        if isinstance(value, int):
            return value
    try:
        return len(ds)
    except TypeError:
        return None


def write_outputs(result: dict, json_out: str | None, markdown_out: str | None,
                  plot_out: str | None) -> None:
    """Write the JSON, markdown and PNG outputs that were asked for (folders are created); without
    any, print the markdown table on stdout."""
    for path in (json_out, markdown_out, plot_out):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    if json_out:
        Path(json_out).write_text(json.dumps(result, indent=2) + "\n")
    if markdown_out:
        Path(markdown_out).write_text(render_markdown(result))
    if plot_out:
        from engine.bench_plot import plot_result
        plot_result(result, plot_out)
    if not (json_out or markdown_out or plot_out):
        print(render_markdown(result))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m engine.bench`` entry point."""
    parser = add_arguments(argparse.ArgumentParser(prog="fastcoder bench", description=__doc__.split("\n")[0]))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
