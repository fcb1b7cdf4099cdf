"""The ``fastcoder bench`` / ``python -m engine.bench`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from .report import benchmark, render_markdown
from .runner import (DEFAULT_METHODS, METHOD_SPECS, SDSAT_BENCH_METHODS, SUFFIX_BENCH_METHODS, BenchConfig,
                     build_repo_datastore, parse_methods)
from .headroom import DEFAULT_COST_SIZES
from .tasks import DEFAULT_MAX_PROMPT_TOKENS, TASK_KINDS, BenchError, extract_tasks, heal_task


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``bench`` options to ``parser`` (used by ``fastcoder bench`` and ``python -m``)."""
    parser.add_argument("--model", default=None, help="model folder or hub id (default: $FASTCODER_MODEL "
                        "or engine.DEFAULT_MODEL)")
    parser.add_argument("--repo", required=True, help="repository folder the tasks and D_r come from")
    parser.add_argument("--common", default="stdlib", help="common datastore D_c: PATH, stdlib or none")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                        help=f"comma list from {','.join(METHOD_SPECS)} (ar is always run)")
    parser.add_argument("--tasks", type=int, default=10, help="number of tasks (functions or cursors)")
    parser.add_argument("--task-kind", choices=TASK_KINDS, default="function",
                        help="function: complete a function body from the text before it (no stop); "
                             "fim-line: cursor inside a body line, FIM prompt, stop at the end of the line; "
                             "fim-block: cursor at a body start, FIM prompt with the text after the body, "
                             "stop at the first blank line (the language server's stops)")
    parser.add_argument("--token-healing", action="store_true",
                        help="back each prompt's text before the cursor up to a token boundary and make every method's "
                             "output start with the removed bytes, as the language server does by default (a cursor "
                             "after a space or inside a word); not with hf-prompt-lookup")
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
    parser.add_argument("--repeats", type=int, default=1,
                        help="run the whole task set this many times, each from fresh drafter state, and report "
                             "the spread (min / median / max per method) besides the pooled table")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def _default_prompt_budget(loaded, max_new_tokens: int) -> int:
    return max(1, min(DEFAULT_MAX_PROMPT_TOKENS, loaded.max_positions - max_new_tokens))


def run(args: argparse.Namespace) -> int:
    """Run the benchmark from parsed arguments; returns a process exit code (0 ok, 2 bad input)."""
    from engine import ModelLoadError, load_model

    try:
        methods = parse_methods(args.methods)
        if any(m in SUFFIX_BENCH_METHODS for m in methods):
            from engine.suffix_drafter import INSTALL_HINT, suffix_decoding_available  # noqa: PLC0415

            if not suffix_decoding_available():
                raise BenchError(INSTALL_HINT)
        if args.tasks < 1 or args.max_new_tokens < 1 or args.repeats < 1:
            raise BenchError("--tasks, --max-new-tokens and --repeats must be >= 1")
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
                              args.min_body_lines, kind=args.task_kind)
        if args.token_healing:
            if "hf-prompt-lookup" in methods:
                raise BenchError("--token-healing: hf-prompt-lookup (transformers' generate) takes no constraint")
            tasks = [heal_task(task, loaded.token_bytes) for task in tasks]
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
                      sampling_seed=args.seed, repeats=args.repeats)
    result = benchmark(loaded, args.repo, tasks, common_ds, cfg)
    result["config"] = {"model": loaded.name, "repo": str(args.repo), "common": args.common,
                        "methods": list(methods), "tasks": args.tasks, "task_kind": args.task_kind,
                        "max_new_tokens": args.max_new_tokens,
                        "max_prompt_tokens": budget, "seed": args.seed, "draft_budget": args.draft_budget,
                        "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
                        "device": str(loaded.device), "dtype": str(loaded.dtype).replace("torch.", ""),
                        "threads": args.threads, "repeats": args.repeats, "token_healing": args.token_healing,
                        "argv": list(sys.argv)}
    from ..cost_model import load_or_measure_verify_cost  # noqa: PLC0415

    result["verify_cost"] = load_or_measure_verify_cost(loaded).as_dict()
    from ..acceptance_prior import find_prior  # noqa: PLC0415

    prior = find_prior(loaded.model)  # where fastcoder's acceptance estimates start (None: the hand-set prior)
    result["acceptance_prior"] = prior.describe() if prior is not None else None
    from .runner import _ESTIMATORS  # noqa: PLC0415

    # the draft head's calibration at the end of the run, per method that used it (engine.draft_head)
    result["draft_head"] = {method: est.depth_one.summary() for (_, method), est in _ESTIMATORS.items()
                            if getattr(est, "depth_one", None) is not None} or None
    result["output_store"] = _output_store_report(loaded, args.repo, methods)
    result["datastores"] = _datastore_sizes(args.repo, loaded, common_ds, args.exclude)
    write_outputs(result, args.json_out, args.markdown_out, args.plot_out)
    return 0


def _output_store_report(loaded, repo, methods) -> dict | None:
    """What warmed fastcoder's completion history (:mod:`engine.output_store`), None where nothing did. A store built
    on the benchmarked repository itself would draft its answers: a warning on stderr, and ``"built_on_this_repo"``."""
    from ..output_store import find_output_store  # noqa: PLC0415

    store = find_output_store(loaded.model) if any(METHOD_SPECS[m][0] == "fastcoder" for m in methods) else None
    if store is None:
        return None
    report = store.describe()
    built_on = {str(s.get("repo")) for s in store.info.get("built_on", ())}
    report["built_on_this_repo"] = Path(repo).resolve().name in built_on
    if report["built_on_this_repo"]:
        print(f"fastcoder bench: warning: the output store was built on {Path(repo).name}: fastcoder drafts from the "
              f"model's own answers to these tasks (FASTCODER_OUTPUT_STORE=off to leave it out)", file=sys.stderr)
    return report


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
        from .plot import plot_result
        plot_result(result, plot_out)
    if not (json_out or markdown_out or plot_out):
        print(render_markdown(result))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m engine.bench`` entry point."""
    parser = add_arguments(argparse.ArgumentParser(prog="fastcoder bench", description="Every method side by side on functions of a real repository."))
    return run(parser.parse_args(argv))
