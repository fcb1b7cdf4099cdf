"""``fastcoder fit-acceptance-prior``: fit the acceptance estimates' prior (:mod:`engine.acceptance_prior`) for a
model, from its own verified draft trees on repositories that are not the user's.

For each repository and task kind the benchmark's tasks are taken (:func:`engine.bench.tasks.extract_tasks`), the
model decodes each greedily (its reference output), and fastcoder drafts along that output as the decoder would,
with a flat verify cost so its trees hold every candidate its sources offer (up to 64 nodes): every node whose
parent the reference accepted is one observation (its estimate bucket, accepted or not). A logistic model over
the buckets' features is fitted to them (:func:`engine.acceptance_prior.fit_prior`) and written where
:func:`engine.acceptance_prior.find_prior` looks, so the server and the benchmark use it from then on.

Cost: tiny-py-coder, 3 repositories x 3 task kinds x 10 tasks: ~2 minutes on a 2-core CPU (mostly the reference
generations).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from .tasks import TASK_KINDS, BenchError, extract_tasks


def collect_observations(loaded, repo: Path, kind: str, num_tasks: int, seed: int, max_new_tokens: int,
                         common=None) -> tuple[np.ndarray, np.ndarray]:
    """Observations for the prior from one repository and task kind (see the module docstring).

    Returns:
        ``(keys, accepted)``: (N,) int64 estimate buckets of the tried nodes and (N,) bool whether each was
        accepted.
    Raises:
        BenchError: no task of ``kind`` in ``repo``.
    """
    from ..acceptance import AcceptanceEstimator, tried_nodes  # noqa: PLC0415
    from ..cost_model import VerifyCost  # noqa: PLC0415
    from ..decoder import SpeculativeDecoder  # noqa: PLC0415
    from .cli import _default_prompt_budget  # noqa: PLC0415
    from .runner import build_repo_datastore  # noqa: PLC0415

    tasks = extract_tasks(repo, loaded.tokenizer, num_tasks, seed,
                          _default_prompt_budget(loaded, max_new_tokens), kind=kind)
    ar = SpeculativeDecoder(loaded, method="ar")
    from ..history import CompletionHistory  # noqa: PLC0415

    estimator = AcceptanceEstimator()  # the hand-set prior: what the prior is fitted to replace
    history = CompletionHistory()  # across the tasks, as a server keeps one across requests
    eos = set(loaded.eos_token_ids or ())
    keys: list[np.ndarray] = []
    hits: list[np.ndarray] = []
    for task in tasks:
        res = ar.generate(list(task.prompt_ids), max_new_tokens=max_new_tokens, stop=list(task.stop) or None,
                          temperature=0.0)
        reference = [int(t) for t in res.token_ids]
        if res.finish_reason == "eos" and eos:
            reference.append(min(eos))  # the last forward's bonus token: drafting it saves that forward
        if len(reference) < 2:
            continue
        dec = SpeculativeDecoder(loaded, method="fastcoder", repo_datastore=build_repo_datastore(repo, loaded.tokenizer,
                                                                                             task, ()),
                                 common_datastore=common, verify_cost=VerifyCost.flat(),
                                 acceptance_estimator=estimator, completion_history=history)
        drafter = dec._make_drafter(dec.new_cache())
        prompt = list(task.prompt_ids)
        context = np.empty(len(prompt) + len(reference) + 8, dtype=np.int64)
        context[:len(prompt)] = prompt
        n = len(prompt)
        drafter.reset(context[:n])
        context[n] = reference[0]  # the prefill's token: pending
        n += 1
        done = 1
        while done < len(reference):
            ctx = context[:n]
            tree = drafter.propose(ctx)
            target = reference[done:]
            path, node = [], -1
            for tok in target[:tree.longest_match(target)]:
                node = tree.children[(node, int(tok))]
                path.append(node)
            if tree.keys is not None and tree.n_draft:
                tried = tried_nodes(tree.parents[:tree.n_draft], path)
                on_path = np.zeros(tree.n_draft, dtype=bool)
                on_path[path] = True
                keys.append(np.asarray(tree.keys[:tree.n_draft], dtype=np.int64)[tried])
                hits.append(on_path[tried])
                estimator.update(tree.keys, tree.parents[:tree.n_draft], path)
            committed = [int(t) for t in target[:len(path) + 1]]
            drafter.observe(ctx, tree, path, committed)
            for tok in committed:
                context[n] = tok
                n += 1
            done += len(committed)
        finish = getattr(drafter, "finish", None)
        if finish is not None:
            end = n
            while end > len(prompt) and int(context[end - 1]) in eos:
                end -= 1
            finish(context[:end])
    if not keys:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    return np.concatenate(keys), np.concatenate(hits)


def add_command(sub) -> None:
    """Register ``fit-acceptance-prior`` on an ``argparse`` subparsers object."""
    p = sub.add_parser("fit-acceptance-prior", help="fit the acceptance estimates' prior for a model",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model folder or hub id (default: $FASTCODER_MODEL)")
    p.add_argument("--repo", action="append", required=True, type=Path,
                   help="a repository to fit on (repeatable); not the code the prior will serve")
    p.add_argument("--kinds", default="function,fim-line,fim-block", help=f"comma list from {','.join(TASK_KINDS)}")
    p.add_argument("--tasks", type=int, default=10, help="tasks per repository and kind")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--common", default="stdlib", help="common datastore D_c: PATH, stdlib or none")
    p.add_argument("--strength", type=float, default=None, help="pseudo-observations per bucket (default 8)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=None,
                   help="prior file (default: the user cache, where the server and the benchmark find it)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch  # noqa: PLC0415

    from ..acceptance_prior import DEFAULT_STRENGTH, default_prior_folder, fit_prior, model_identity, prior_file_name
    from ..model import ModelLoadError, load_model
    from .cli import _load_common

    if args.threads:
        torch.set_num_threads(args.threads)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    bad = [k for k in kinds if k not in TASK_KINDS]
    if bad or not kinds:
        print(f"fastcoder: error: --kinds {args.kinds!r}: choose from {', '.join(TASK_KINDS)}", file=sys.stderr)
        return 2
    missing = [str(r) for r in args.repo if not r.is_dir()]
    if missing:
        print(f"fastcoder: error: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        loaded = load_model(args.model, device=args.device, dtype=args.dtype)
        common = _load_common(loaded, args.common)
    except (ModelLoadError, BenchError) as err:
        print(f"fastcoder: error: {err}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    all_keys, all_hits, sources = [], [], []
    with torch.inference_mode():
        for repo in args.repo:
            for kind in kinds:
                try:
                    keys, hits = collect_observations(loaded, repo, kind, args.tasks, args.seed, args.max_new_tokens,
                                                      common)
                except BenchError as err:
                    print(f"fastcoder: {repo} {kind}: skipped ({err})", file=sys.stderr)
                    continue
                all_keys.append(keys)
                all_hits.append(hits)
                sources.append({"repo": repo.name, "kind": kind, "nodes": int(len(keys))})
                print(f"{repo.name} {kind}: {len(keys)} tried nodes, {hits.mean() if len(hits) else 0:.3f} accepted",
                      file=sys.stderr)
    keys = np.concatenate(all_keys) if all_keys else np.zeros(0, dtype=np.int64)
    hits = np.concatenate(all_hits) if all_hits else np.zeros(0, dtype=bool)
    if len(keys) == 0:
        print("fastcoder: error: no draft tree to learn from (no tasks, or nothing drafted)", file=sys.stderr)
        return 2
    prior = fit_prior(keys, hits, strength=args.strength if args.strength is not None else DEFAULT_STRENGTH)
    prior.model = model_identity(loaded.model)
    prior.info = {"model_name": Path(str(loaded.name)).name, "fitted_on": sources, "nodes": int(len(keys)),
                  "accepted_rate": round(float(hits.mean()), 4), "task_seed": args.seed, "tasks": args.tasks,
                  "max_new_tokens": args.max_new_tokens, "common": args.common,
                  "seconds": round(time.perf_counter() - t0, 1)}
    out = args.out or default_prior_folder() / prior_file_name(prior.model)
    path = prior.save(out)
    print(json.dumps({"path": str(path), **prior.describe()}))
    return 0
