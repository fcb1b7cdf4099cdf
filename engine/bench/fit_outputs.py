"""``fastcoder build-output-store``: the model's own greedy output on packages that are not the user's
(:mod:`engine.output_store`), which warms the completion history of the server and the benchmark.

For each ``--repo`` and task kind the benchmark's tasks are taken (:func:`engine.bench.tasks.extract_tasks`) and the
model completes each greedily (through fastcoder: the same tokens as ``ar``, faster), stopping where the task
stops; each output is kept with the last ``--tail`` prompt tokens before it (an end-of-sequence token left out).
The store is written where :func:`engine.output_store.find_output_store` looks (the user cache).

Cost: tiny-py-coder, 18 packages x 3 task kinds x 30 tasks (1,518 completions, 71,040 output tokens): 27 minutes
on one core of the project's 2-core CPU with other work on the other (1,607 s). The packaged store
(``engine/data/output_store/``) was built that way; ``info.built_on`` in the file names the packages. Never build it
on the repositories it will serve or be benchmarked on. ``--add STORE`` keeps an earlier store's sequences in the new
one: a store can grow by packages later, or be built in parts, one process per core, and merged.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .fit_prior import add_replay_arguments, load_for_replay
from .tasks import BenchError, extract_tasks

#: Prompt tokens kept before each output (the history keeps its own ``context_tokens`` of them).
DEFAULT_TAIL = 32


def complete_tasks(loaded, repo: Path, kind: str, num_tasks: int, seed: int, max_new_tokens: int, common,
                   tail: int = DEFAULT_TAIL) -> list[tuple[list[int], list[int]]]:
    """(last ``tail`` prompt token ids, greedy output token ids without end-of-sequence) for the benchmark's tasks of
    one repository and kind; outputs end at the task's stop string (:func:`engine.bench.runner.run_one`).

    Raises:
        BenchError: no task of ``kind`` in ``repo``.
    """
    from .cli import _default_prompt_budget  # noqa: PLC0415
    from .runner import build_repo_datastore, make_decoder, run_one  # noqa: PLC0415

    tasks = extract_tasks(repo, loaded.tokenizer, num_tasks, seed, _default_prompt_budget(loaded, max_new_tokens),
                          kind=kind)
    eos = set(loaded.eos_token_ids or ())
    pairs, chunks = [], {}  # one tokenisation of the repository for all its tasks' D_r
    for task in tasks:
        decoder = make_decoder(loaded, "fastcoder", build_repo_datastore(repo, loaded.tokenizer, task, (), chunks),
                               common)
        out = [t for t in run_one(decoder, "fastcoder", task.prompt_ids, max_new_tokens, stop=task.stop)["token_ids"]
               if t not in eos]
        if out:
            pairs.append((list(task.prompt_ids[-tail:]) if tail else [], out))
    return pairs


def add_command(sub) -> None:
    """Register ``build-output-store`` on an ``argparse`` subparsers object."""
    p = sub.add_parser("build-output-store", help="the model's own output on other packages, to warm its drafts",
                       description=__doc__.split("\n\n")[0])
    add_replay_arguments(p, "output store")
    p.add_argument("--tail", type=int, default=DEFAULT_TAIL, help="prompt tokens kept before each output")
    p.add_argument("--add", action="append", type=Path, default=[], metavar="STORE",
                   help="an output store of the same model whose sequences the new one also holds (repeatable): "
                        "build on more packages later, or in parts on several cores, and merge")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch  # noqa: PLC0415

    from ..acceptance_prior import model_identity  # noqa: PLC0415
    from ..output_store import OutputStore, default_store_folder, store_file_name  # noqa: PLC0415

    try:
        added = [OutputStore.load(path) for path in args.add]
    except (OSError, ValueError) as err:
        print(f"fastcoder: error: --add: {err}", file=sys.stderr)
        return 2
    ready = load_for_replay(args, args.device, args.dtype)
    if ready is None:
        return 2
    loaded, common, kinds = ready
    identity = model_identity(loaded.model)
    for path, other in zip(args.add, added):
        if other.model != identity:
            print(f"fastcoder: error: --add {path}: written by another model ({other.model}, not {identity})",
                  file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    pairs, sources = [], []
    with torch.inference_mode():
        for repo in args.repo:
            for kind in kinds:
                try:
                    got = complete_tasks(loaded, repo, kind, args.tasks, args.seed, args.max_new_tokens, common,
                                         max(0, args.tail))
                except BenchError as err:
                    print(f"fastcoder: {repo} {kind}: skipped ({err})", file=sys.stderr)
                    continue
                pairs += got
                tokens = sum(len(out) for _, out in got)
                sources.append({"repo": repo.name, "kind": kind, "completions": len(got), "tokens": tokens})
                print(f"{repo.name} {kind}: {len(got)} completions, {tokens} tokens", file=sys.stderr)
    if not pairs and not added:
        print("fastcoder: error: no output to store (no tasks, or every output empty)", file=sys.stderr)
        return 2
    info = {"model_name": Path(str(loaded.name)).name, "task_seed": args.seed,  # built_on: merged() joins them
            "tasks": args.tasks, "max_new_tokens": args.max_new_tokens, "tail": args.tail,
            "seconds": round(time.perf_counter() - t0, 1) + sum(float(o.info.get("seconds") or 0) for o in added)}
    store = OutputStore.merged([*added, OutputStore.from_sequences(pairs, identity, {"built_on": sources})], info)
    path = store.save(args.out or default_store_folder() / store_file_name(store.model))
    print(json.dumps({"path": str(path), **store.describe()}))
    return 0
