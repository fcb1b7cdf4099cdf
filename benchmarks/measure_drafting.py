"""Drafting cost per decode step, measured without the model: an oracle replay of a benchmark run.

A greedy generation is deterministic, so the drafter sees exactly the contexts it saw in the real
run when every tree is "verified" against the reference output (``ar``'s greedy tokens): the
accepted path is the longest tree path that spells the next reference tokens, plus the next token as
the bonus. This times only what the decoder counts as ``retrieval_ms`` (``drafter.propose`` +
``drafter.observe``), step by step, in CPU time of the thread (which other processes on a shared
machine disturb far less than wall time), without forward passes; it also counts suffix-array searches
(``Datastore.probes``, in the native search or ``Datastore.find``). The caches stay warm between steps here (no forward pass
evicts them), so a real run's wall time per step is higher (~1.5x on the 2-core dev machine).

Usage (from the repository root)::

    PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 python benchmarks/measure_drafting.py \\
        --repo .venv/lib/python3.11/site-packages/pluggy --tasks 6 --repeats 3 [--profile out.prof]

(``PYTHONPATH`` chooses the engine measured: another checkout's, for a before/after comparison.)

The tasks are the bench's (``function`` kind, same seed and prompt budget); the reference output is
``ar``'s greedy one, generated first; the drafter is the bench's ``fastcoder`` (cost-sized trees).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

#: ../shared/models/tiny-py-coder beside the clone (the project's dev model).
DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "shared" / "models" / "tiny-py-coder"


def accepted_path(tree, target) -> list[int]:
    """Node ids of the longest tree path that spells the start of ``target``."""
    path, node = [], -1
    for tok in target[:tree.longest_match(target)]:
        node = tree.children[(node, int(tok))]
        path.append(node)
    return path


def common_prefix_len(a, b) -> int:
    """How many leading tokens the sequences ``a`` and ``b`` share (a drafted chain against the reference)."""
    n = 0
    for x, y in zip(a, b):
        if int(x) != int(y):
            break
        n += 1
    return n


def replay(drafter, estimator, prompt_ids, reference, counter, end_tokens=(), on_step=None, head=None,
           hidden=None) -> dict:
    """Run the drafter loop against ``reference`` (list of int; ``ar``'s output, with the EOS that ended
    it where one did: it then comes as the bonus token of the last forward, as in the decoder). Returns
    per-step times (ms), accepted lengths and suffix-array searches. ``on_step(tree, path)``, where given, sees
    each step's tree and the node ids of its accepted path (untimed). At the end the drafter's ``finish`` hook (if
    any) gets the context without the trailing ``end_tokens``, as the decoder's loop gives it.

    ``head`` (the decoder's :class:`engine.draft_head.DepthOneFeature`) and ``hidden`` ((len(prompt_ids) +
    len(reference), d) float32 tensor: the final hidden states of one forward over both,
    ``engine.bench.fit_head._hidden_and_choice``): the draft head fed as the decoder feeds it
    (untimed): after the prefill the hidden state of the prompt's last row and the pending token, after each step
    what it learns from the token committed after the pending one, then the hidden state of the row that chose the
    new pending token. Without them the head stays disabled (the replay before 2026-11-28i)."""
    context = np.empty(len(prompt_ids) + len(reference) + 128, dtype=np.int64)
    context[:len(prompt_ids)] = prompt_ids
    n_ctx = len(prompt_ids)
    drafter.reset(context[:n_ctx])
    out = 0
    # the decoder's loop: the first reference token is the pending one after prefill
    context[n_ctx] = reference[0]
    n_ctx += 1
    out = 1
    feed = head is not None and hidden is not None
    if head is not None:
        head.disable()  # as a generation starts: no hidden state of this prompt yet
    if feed:
        head.set_hidden(hidden[n_ctx - 2], int(reference[0]))
    times, accepted, finds = [], [], []
    while out < len(reference):
        ctx = context[:n_ctx]
        f0 = counter[0]
        t = time.thread_time()
        tree = drafter.propose(ctx)
        dt = time.thread_time() - t
        target = reference[out:]
        path = accepted_path(tree, target)  # node indices of the matched prefix
        if on_step is not None:
            on_step(tree, path)
        matched = len(path)
        if estimator is not None and tree.keys is not None:
            estimator.update(tree.keys, tree.parents[:tree.n_draft], path)
        committed = [int(x) for x in target[:matched + 1]]
        t = time.thread_time()
        drafter.observe(ctx, tree, path, committed)
        dt += time.thread_time() - t
        finds.append(counter[0] - f0)
        times.append(dt * 1e3)
        accepted.append(len(committed))
        for tok in committed:
            context[n_ctx] = tok
            n_ctx += 1
            out += 1
        if feed:
            head.learn(committed[0])
            head.set_hidden(hidden[n_ctx - 2], committed[-1])
    finish = getattr(drafter, "finish", None)
    if finish is not None:
        while n_ctx > len(prompt_ids) and int(context[n_ctx - 1]) in end_tokens:
            n_ctx -= 1
        finish(context[:n_ctx])
    return {"ms": times, "accepted": accepted, "finds": finds}


def replay_setup(model: str, repo: str, common: str, num_tasks: int, seed: int, max_new_tokens: int,
                 kind: str = "function"):
    """What a replay needs: (loaded model, the bench's tasks of ``kind``, {task id: ``ar``'s greedy
    output token ids, cut at the task's stop strings, plus the EOS that ended it if one did}, D_c,
    {task id: D_r built without the task's body}). The pending token after prefill is each reference's
    first token. A fill-in-the-middle completion usually ends with EOS: a draft of its last tokens saves
    the forward that would produce it."""
    from engine import load_model  # noqa: PLC0415
    from engine.bench.cli import _default_prompt_budget, _load_common  # noqa: PLC0415
    from engine.bench.runner import build_repo_datastore, make_decoder, run_one  # noqa: PLC0415
    from engine.bench.tasks import extract_tasks  # noqa: PLC0415

    loaded = load_model(model)
    tasks = extract_tasks(repo, loaded.tokenizer, num_tasks, seed, _default_prompt_budget(loaded, max_new_tokens),
                          kind=kind)
    ar = make_decoder(loaded, "ar", None, None)
    eos = min(loaded.eos_token_ids) if loaded.eos_token_ids else None
    refs = {}
    for t in tasks:
        r = run_one(ar, "ar", t.prompt_ids, max_new_tokens, stop=t.stop)
        refs[t.task_id] = r["token_ids"] + ([eos] if r["finish_reason"] == "eos" and eos is not None else [])
    repos = {t.task_id: build_repo_datastore(Path(repo), loaded.tokenizer, t, ()) for t in tasks}
    return loaded, tasks, refs, _load_common(loaded, common), repos


def path_probabilities(tree) -> np.ndarray:
    """(N,) float64 estimated probability that each node's whole path is accepted: the product of
    ``tree.probs`` from the root (parents precede children). Zeros when the tree has no estimates."""
    out = np.zeros(len(tree))
    if tree.probs is None:
        return out
    for i, up in enumerate(tree.parents.tolist()):
        out[i] = tree.probs[i] * (out[up] if up >= 0 else 1.0)
    return out

def add_replay_arguments(ap) -> None:
    """The options of :func:`replay_setup` on an ``argparse`` parser: --model, --repo, --common,
    --task-kind, --tasks (default 10), --seed, --max-new-tokens (the bench's task set)."""
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--repo", required=True)
    ap.add_argument("--common", default="stdlib")
    ap.add_argument("--task-kind", default="function")
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=128)


def replay_from_command_line(argv=None):
    """(the parsed options of :func:`add_replay_arguments`, :func:`replay_setup`'s tuple for them), with torch on one
    thread: what an offline probe over the bench's tasks starts with."""
    import argparse  # noqa: PLC0415

    import torch  # noqa: PLC0415

    ap = argparse.ArgumentParser()
    add_replay_arguments(ap)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    return args, replay_setup(args.model, args.repo, args.common, args.tasks, args.seed, args.max_new_tokens,
                              args.task_kind)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--repo", required=True)
    ap.add_argument("--common", default="stdlib")
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--method", default="fastcoder")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", default=None, help="write a cProfile of the last repeat here")
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from engine.bench import runner
    from engine.bench.runner import make_decoder
    from engine.datastore import Datastore

    loaded, tasks, refs, common, repos = replay_setup(args.model, args.repo, args.common, args.tasks, args.seed,
                                                      args.max_new_tokens)
    stores = [common, *(s for r in repos.values() for s in (r._snap.base, r._snap.overlay, r._snap.tomb)
                        if s is not None)]

    class ProbeCounter:  # counter[0]: suffix-array searches so far (Datastore.probes: native or Python)
        def __getitem__(self, _):
            return sum(s.probes for s in stores if isinstance(s, Datastore))

    counter = ProbeCounter()
    prof = None
    results = []
    for rep in range(args.repeats):
        if args.profile and rep == args.repeats - 1:
            import cProfile

            prof = cProfile.Profile()
        all_ms, all_acc, all_finds = [], [], []
        runner._ESTIMATORS.clear()  # every repeat sees the same trees (the estimator learns online)
        runner._HISTORIES.clear()
        for task in tasks:
            ref = refs.get(task.task_id)
            if len(ref) < 2:
                continue
            dec = make_decoder(loaded, args.method, repos[task.task_id], common)
            drafter = dec._make_drafter(dec.new_cache())
            if prof:
                prof.enable()
            r = replay(drafter, dec.estimator, task.prompt_ids, ref, counter, loaded.eos_token_ids)
            if prof:
                prof.disable()
            all_ms += r["ms"]
            all_acc += r["accepted"]
            all_finds += r["finds"]
        res = {"repeat": rep, "total_ms": sum(all_ms), "steps": len(all_ms), "ms_per_step_mean": statistics.fmean(all_ms),
               "ms_per_step_median": statistics.median(all_ms),
               "ms_per_step_p90": float(np.percentile(all_ms, 90)),
               "mean_accepted": statistics.fmean(all_acc), "finds_per_step": statistics.fmean(all_finds)}
        results.append(res)
        print(json.dumps(res), flush=True)
    if prof:
        prof.dump_stats(args.profile)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
