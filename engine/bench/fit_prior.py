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
import dataclasses
import json
from dataclasses import dataclass
import sys
import time
from pathlib import Path

import numpy as np

from .tasks import TASK_KINDS, BenchError, extract_tasks


@dataclass
class ReplayStep:
    """One drafting step of :func:`replay_drafts`: ``context`` ((n,) int64, the pending token last), the ``tree``
    drafted there, the model's ``target`` continuation (token ids) and the accepted ``path`` (node ids)."""

    context: np.ndarray
    tree: object
    target: list[int]
    path: list[int]


def replay_drafts(loaded, repo: Path, kind: str, num_tasks: int, seed: int, max_new_tokens: int, estimator,
                  common=None, on_task=None, before_step=None, verify_cost=None):
    """fastcoder drafting along the model's own greedy output on the benchmark's tasks of one repository and kind,
    as the decoder would (a flat verify cost, so each tree holds every candidate its sources offer, up to 64 nodes;
    ``estimator`` learns from each step; one completion history across the tasks, as a server keeps): a generator
    of :class:`ReplayStep`, each taken before the estimator and the drafter learn from it. ``on_task(prompt,
    reference)`` (token id lists) is called before each task's steps, ``before_step(context)`` before each tree is
    drafted (when given). ``verify_cost``: the curve the trees are sized on instead of the flat one (a
    :class:`engine.cost_model.VerifyCost`: the trees the decoder builds on that device).

    Raises:
        BenchError: no task of ``kind`` in ``repo``.
    """
    from ..cost_model import VerifyCost  # noqa: PLC0415
    from ..decoder import SpeculativeDecoder  # noqa: PLC0415
    from ..history import CompletionHistory  # noqa: PLC0415
    from .cli import _default_prompt_budget  # noqa: PLC0415
    from .runner import build_repo_datastore  # noqa: PLC0415

    tasks = extract_tasks(repo, loaded.tokenizer, num_tasks, seed,
                          _default_prompt_budget(loaded, max_new_tokens), kind=kind)
    ar = SpeculativeDecoder(loaded, method="ar")
    history = CompletionHistory()
    eos = set(loaded.eos_token_ids or ())
    chunks: dict = {}  # one tokenisation of the repository for all its tasks' D_r
    for task in tasks:
        res = ar.generate(list(task.prompt_ids), max_new_tokens=max_new_tokens, stop=list(task.stop) or None,
                          temperature=0.0)
        reference = [int(t) for t in res.token_ids]
        if res.finish_reason == "eos" and eos:
            reference.append(min(eos))  # the last forward's bonus token: drafting it saves that forward
        if len(reference) < 2:
            continue
        dec = SpeculativeDecoder(loaded, method="fastcoder", draft_head=False,
                                 repo_datastore=build_repo_datastore(repo, loaded.tokenizer, task, (), chunks),
                                 common_datastore=common,
                                 verify_cost=VerifyCost.flat() if verify_cost is None else verify_cost,
                                 acceptance_estimator=estimator, completion_history=history)
        drafter = dec._make_drafter(dec.new_cache())
        prompt = list(task.prompt_ids)
        if on_task is not None:
            on_task(prompt, reference)
        context = np.empty(len(prompt) + len(reference) + 8, dtype=np.int64)
        context[:len(prompt)] = prompt
        n = len(prompt)
        drafter.reset(context[:n])
        context[n] = reference[0]  # the prefill's token: pending
        n += 1
        done = 1
        while done < len(reference):
            ctx = context[:n]
            if before_step is not None:
                before_step(ctx)
            tree = drafter.propose(ctx)
            target = reference[done:]
            path, node = [], -1
            for tok in target[:tree.longest_match(target)]:
                node = tree.children[(node, int(tok))]
                path.append(node)
            yield ReplayStep(ctx, tree, target, path)
            if tree.keys is not None and tree.n_draft:
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

    estimator = AcceptanceEstimator()  # the hand-set prior: what the prior is fitted to replace
    keys: list[np.ndarray] = []
    hits: list[np.ndarray] = []
    for step in replay_drafts(loaded, repo, kind, num_tasks, seed, max_new_tokens, estimator, common):
        tree, path = step.tree, step.path
        if tree.keys is not None and tree.n_draft:
            tried = tried_nodes(tree.parents[:tree.n_draft], path)
            on_path = np.zeros(tree.n_draft, dtype=bool)
            on_path[path] = True
            keys.append(np.asarray(tree.keys[:tree.n_draft], dtype=np.int64)[tried])
            hits.append(on_path[tried])
    if not keys:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    return np.concatenate(keys), np.concatenate(hits)


def collect_node_rows(loaded, repo: Path, kind: str, num_tasks: int, seed: int, max_new_tokens: int, prior,
                      classes: np.ndarray, common=None) -> tuple[np.ndarray, np.ndarray]:
    """Observations for the node model (:mod:`engine.node_model`) from one repository and task kind: fastcoder
    drafting along the model's greedy output with the trees the decoder builds here (the measured verify cost, the
    estimator starting from ``prior``), every trie node whose parent the reference reaches recorded
    (:class:`engine.node_model.TrieRecorder`).

    Returns:
        ``(rows, accepted)``: (N, :data:`engine.node_model.NUM_FEATURES`) float64 features, (N,) bool.
    Raises:
        BenchError: no task of ``kind`` in ``repo``.
    """
    from ..acceptance import AcceptanceEstimator  # noqa: PLC0415
    from ..cost_model import load_or_measure_verify_cost  # noqa: PLC0415
    from ..node_model import NUM_FEATURES, TrieRecorder  # noqa: PLC0415

    estimator = AcceptanceEstimator(prior=prior)
    recorder = estimator.node_model = TrieRecorder(classes)
    full: list[int] = []

    def on_task(prompt, reference):
        full[:] = list(prompt) + list(reference)

    def before_step(ctx):
        recorder.set_target(full[len(ctx):])

    for _ in replay_drafts(loaded, repo, kind, num_tasks, seed, max_new_tokens, estimator, common, on_task,
                           before_step, load_or_measure_verify_cost(loaded)):
        pass
    if not recorder.rows:
        return np.zeros((0, NUM_FEATURES)), np.zeros(0, dtype=bool)
    return np.asarray(recorder.rows, dtype=np.float64), np.asarray(recorder.labels, dtype=bool)


def parse_kinds(spec: str) -> list[str] | None:
    """The task kinds of a comma list, or None (after printing the error) when one is unknown or none is given."""
    kinds = [k.strip() for k in spec.split(",") if k.strip()]
    if not kinds or any(k not in TASK_KINDS for k in kinds):
        print(f"fastcoder: error: --kinds {spec!r}: choose from {', '.join(TASK_KINDS)}", file=sys.stderr)
        return None
    return kinds


def missing_folders(repos: list[Path]) -> bool:
    """Whether a repository folder is missing (the error printed)."""
    missing = [str(r) for r in repos if not r.is_dir()]
    if missing:
        print(f"fastcoder: error: not a folder: {', '.join(missing)}", file=sys.stderr)
    return bool(missing)


def load_for_replay(args: argparse.Namespace, device: str, dtype: str):
    """(loaded model, D_c, task kinds) for a fitting command's ``args`` (:func:`add_replay_arguments`), torch's
    threads set; None after printing the error (an unknown kind, a missing folder, a model or D_c that fails)."""
    import torch  # noqa: PLC0415

    from ..model import ModelLoadError, load_model  # noqa: PLC0415
    from .cli import _load_common  # noqa: PLC0415

    if args.threads:
        torch.set_num_threads(args.threads)
    kinds = parse_kinds(args.kinds)
    if kinds is None or missing_folders(args.repo):
        return None
    try:
        loaded = load_model(args.model, device=device, dtype=dtype)
        return loaded, _load_common(loaded, args.common), kinds
    except (ModelLoadError, BenchError) as err:
        print(f"fastcoder: error: {err}", file=sys.stderr)
        return None


def collect_all(args: argparse.Namespace, kinds: list[str], collect, unit: str) -> tuple[list, list, list[dict]]:
    """``collect(repo, kind)`` -> ``(observations, accepted)`` ((N, ...) array, (N,) bool) over every repository of
    ``args`` and kind, under ``torch.inference_mode``; a repository without tasks of a kind is skipped (printed).
    Returns the observation arrays, the accepted arrays and per pair ``{"repo", "kind", "nodes"}``; ``unit`` names
    the observations in the progress lines on stderr."""
    import torch  # noqa: PLC0415

    xs, ys, sources = [], [], []
    with torch.inference_mode():
        for repo in args.repo:
            for kind in kinds:
                try:
                    x, y = collect(repo, kind)
                except BenchError as err:
                    print(f"fastcoder: {repo} {kind}: skipped ({err})", file=sys.stderr)
                    continue
                xs.append(x)
                ys.append(y)
                sources.append({"repo": repo.name, "kind": kind, "nodes": int(len(y))})
                print(f"{repo.name} {kind}: {len(y)} {unit}, {y.mean() if len(y) else 0:.3f} accepted", file=sys.stderr)
    return xs, ys, sources


def add_replay_arguments(p, what: str) -> None:
    """The options of a command fitted on :func:`replay_drafts` (``what``: the file it writes, for the help): --model,
    --repo (repeatable), --kinds, --tasks, --max-new-tokens, --seed, --common, --threads, --out."""
    p.add_argument("--model", default=None, help="model folder or hub id (default: $FASTCODER_MODEL)")
    p.add_argument("--repo", action="append", required=True, type=Path,
                   help=f"a repository to fit on (repeatable); not the code the {what} will serve")
    p.add_argument("--kinds", default="function,fim-line,fim-block", help=f"comma list from {','.join(TASK_KINDS)}")
    p.add_argument("--tasks", type=int, default=10, help="tasks per repository and kind")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--common", default="stdlib", help="common datastore D_c: PATH, stdlib or none")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=None,
                   help=f"{what} file (default: the user cache, where the server and the benchmark find it)")


def add_command(sub) -> None:
    """Register ``fit-acceptance-prior`` on an ``argparse`` subparsers object."""
    p = sub.add_parser("fit-acceptance-prior", help="fit the acceptance estimates' prior for a model",
                       description=__doc__.split("\n\n")[0])
    add_replay_arguments(p, "prior")
    p.add_argument("--strength", type=float, default=None, help="pseudo-observations per bucket (default 8)")
    p.add_argument("--node-model", action="store_true",
                   help="keep the model's current prior and fit the learned per-node estimate on top of it "
                        "(engine.node_model), written with the prior")
    p.add_argument("--hidden", type=int, default=16, help="hidden units of the node model")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..acceptance_prior import DEFAULT_STRENGTH, default_prior_folder, fit_prior, model_identity, prior_file_name

    ready = load_for_replay(args, args.device, args.dtype)
    if ready is None:
        return 2
    loaded, common, kinds = ready
    if args.node_model:
        return run_node_model(args, loaded, common, kinds)
    t0 = time.perf_counter()
    all_keys, all_hits, sources = collect_all(
        args, kinds, lambda repo, kind: collect_observations(loaded, repo, kind, args.tasks, args.seed,
                                                             args.max_new_tokens, common), "tried nodes")
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


def run_node_model(args: argparse.Namespace, loaded, common, kinds) -> int:
    """``--node-model``: the prior :func:`engine.acceptance_prior.find_prior` finds for the model, with a node model
    fitted on the repositories of ``args`` (:func:`collect_node_rows`, :func:`engine.node_model.fit_node_model`)."""
    from ..acceptance_prior import default_prior_folder, find_prior, prior_file_name  # noqa: PLC0415
    from ..node_model import fit_node_model, token_classes  # noqa: PLC0415

    prior = find_prior(loaded.model)
    if prior is None:
        print("fastcoder: error: no acceptance prior for this model: fit one first (without --node-model)",
              file=sys.stderr)
        return 2
    prior = dataclasses.replace(prior, node_model=None)  # the features read the prior's own estimates
    classes = token_classes(loaded.tokenizer)
    t0 = time.perf_counter()
    rows, hits, sources = collect_all(
        args, kinds, lambda repo, kind: collect_node_rows(loaded, repo, kind, args.tasks, args.seed,
                                                          args.max_new_tokens, prior, classes, common), "trie nodes")
    if not rows or not sum(len(y) for y in hits):
        print("fastcoder: error: no draft tree to learn from (no tasks, or nothing drafted)", file=sys.stderr)
        return 2
    x, y = np.concatenate(rows), np.concatenate(hits)
    prior.node_model = fit_node_model(x, y, classes, hidden=args.hidden)
    prior.info = {**prior.info, "node_model_info": {
        "fitted_on": sources, "nodes": int(len(y)), "accepted_rate": round(float(y.mean()), 4),
        "task_seed": args.seed, "tasks": args.tasks, "seconds": round(time.perf_counter() - t0, 1)}}
    out = args.out or default_prior_folder() / prior_file_name(prior.model)
    path = prior.save(out)
    print(json.dumps({"path": str(path), "node_model": prior.describe()["node_model"]}))
    return 0
