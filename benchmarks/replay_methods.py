"""Predicted speedup of drafting methods from an oracle replay, in seconds instead of minutes.

A greedy, lossless decoder sees exactly the contexts ``ar`` produces, so a drafter can be replayed
against ``ar``'s reference output without the model (``benchmarks/measure_drafting.py``'s replay: the
accepted path is the longest tree path that spells the next reference tokens, plus the bonus token).
Each step's draft-tree size n and the device's measured verify cost c(n) (:mod:`engine.cost_model`,
cached per model, device, dtype and threads) then predict the decode time of a method:

    predicted time = sum over steps of c(n_step) x plain decode step  (+ the drafting time measured)
    predicted speedup = tokens x plain decode step / predicted time

Steps are decode forwards and the accepted length is the bench's (``mean_accepted_length``: tokens after
the prefill's, a closing EOS included, per decode forward). Before 2026-11-23 (night) the replay stopped
at the last token without the EOS forward, which hid what drafting a completion's last tokens saves.

It tracks the real benchmark within a few percent in ranking and ratio (function tasks on pygls:
predicted copyspec / suffix / fastcoder 2.13 / 2.56 / 2.32x, measured by ``fastcoder bench`` in the
same session 2.07 / 2.60 / 2.29x), and being deterministic in everything but the drafting time, it
separates design choices that a 2-core machine's noise hides. The drafting time is the drafter's
thread CPU time with warm caches, lower than in a real run (forward passes evict the caches).

Usage (from the repository root)::

    PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/replay_methods.py \\
        --repo .venv/lib/python3.11/site-packages/pygls --task-kind function --tasks 10 \\
        --methods copyspec,suffix,fastcoder [--json out.json]

Methods are ``fastcoder bench``'s names (``engine.bench.runner.METHOD_SPECS``; ``suffix`` needs
arctic-inference), or variants defined on the command line (:func:`parse_variant`), e.g.
``--variant fastcoder-deep=fastcoder:copy_max_depth=48 --methods fastcoder,fastcoder-deep``. Prints one JSON line per method: steps (forward passes), accepted length, mean draft
tree size, drafting ms per step, predicted speedup with and without the drafting time, and the
expected vs accepted draft tokens per step when the drafter gives node estimates (calibration), and per
node role (a parent's first choice, or an alternative to it; each also by depth, ``first_choice_depth_03``, 10 for
10 or deeper) the tried nodes' accepted and estimated rates of P(accepted | parent accepted).

As in the decoder, a line completion (``fim-line``: a stop at the newline) gets the line drafter and no draft head,
and other completions feed the draft head (:mod:`engine.draft_head`) each step: the final hidden state of the row that
chose the pending token, from one forward of the model over the prompt and ``ar``'s output
(``engine.bench.fit_head._hidden_and_choice``, as the head's calibration is fitted). Before 2026-11-28i the head
stayed disabled here and line completions got the drafter of longer ones (``--unfed-head`` still leaves the head
out); that replay ranked changes to the estimates 2-3% above what the wall clock then gave (benchmarks/HISTORY.md,
"Update 2026-11-28 (from 20:18)").

``oracle_pruned_speedup`` bounds what better tree *sizing* could give with the same candidates: each step's
tree pruned to exactly the path verification accepted (a chain of a tokens at c(a); no draft at all where
nothing was accepted), scored on the same curve. With ``FASTCODER_VERIFY_COST=flat --score-measured`` the
drafters build the widest trees they can (every candidate up to the 64-token cap) while every method is still
scored on this machine's measured curve: that run's ``oracle_pruned_speedup`` is the ceiling of the draft
*sources* here, whatever the estimator (benchmarks/HISTORY.md, "Update 2026-11-26 (04:52-06:30)").
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_drafting import add_replay_arguments, path_probabilities, replay, replay_setup  # noqa: E402

from engine.cost_model import VerifyCost  # noqa: E402


def expected_tokens(tree) -> float:
    """Sum over draft nodes of the estimated probability that the whole path to the node is accepted
    (NaN when the tree has no estimates)."""
    if tree.probs is None:
        return float("nan")
    return float(path_probabilities(tree)[:tree.n_draft].sum())


#: The curve at a KV-cache length, as measured; kept before ``--single-curve`` stubs ``VerifyCost.at`` for the
#: drafters, so every variant is scored on the same curves.
CURVE_AT = VerifyCost.at


def replay_method(loaded, method: str, tasks, refs: dict, repos: dict, common, cost,
                  record: list | None = None, feed_head: bool = True) -> dict:
    """Replay ``method`` over ``tasks`` against the reference outputs; plain data (see module docstring).
    ``record``: when a list, every step's draft-source candidates (list of
    :class:`engine.draft_tree.Candidates`) are appended to it (drafters with ``candidates``: fastcoder).
    ``feed_head``: the draft head gets each step's final hidden state, as in the decoder (False: it stays disabled,
    the replay before 2026-11-28i). A line completion (a stop at the newline) gets the line drafter and no head."""
    import torch  # noqa: PLC0415

    from engine.bench import runner  # noqa: PLC0415
    from engine.bench.fit_head import _hidden_and_choice  # noqa: PLC0415
    from engine.stops import one_line  # noqa: PLC0415

    runner._ESTIMATORS.clear()  # a fresh estimator, suffix cache and history per method, as in one bench run
    runner._SUFFIX_CACHES.clear()
    runner._HISTORIES.clear()
    from engine.acceptance import ALTERNATIVE_STRIDE  # noqa: PLC0415

    sizes, lengths, expected, accepted_draft = [], [], [], []
    roles = {"first_choice": [0, 0, 0.0], "alternative": [0, 0, 0.0]}  # tried, accepted, sum of estimates
    last = []  # the tree of the step being verified
    steps = tokens = 0
    drafting_ms = 0.0
    for task in tasks:
        ref = refs[task.task_id]
        if len(ref) < 2:
            continue
        dec = runner.make_decoder(loaded, method, repos[task.task_id], common)
        cache = dec.new_cache() if runner.METHOD_SPECS[method][0] in runner._CACHED_METHODS else None
        line = one_line(task.stop)  # as the decoder: a line completion's drafter, and no draft head for it
        drafter = dec._make_drafter(cache, True, line)
        head = None if line or not feed_head else dec.depth_one
        hidden = None
        if head is not None:  # every row's final hidden state, one forward over the prompt and the reference
            with torch.no_grad():
                hidden = _hidden_and_choice(loaded.model, [*task.prompt_ids, *ref])[0]
        propose = drafter.propose

        def recording_propose(ctx, propose=propose):
            tree = propose(ctx)
            sizes.append(tree.n_draft)
            lengths.append(len(ctx))
            expected.append(expected_tokens(tree))
            last[:] = [tree]
            return tree

        drafter.propose = recording_propose
        if dec.estimator is not None and not hasattr(dec.estimator, "_replay_update"):
            update = dec.estimator._replay_update = dec.estimator.update

            def recording_update(keys, parents, path, update=update):
                tree = last[0]
                if tree.probs is not None:  # each tried node's estimate, by its role
                    reached = {-1, *path}
                    for i, (key, up) in enumerate(zip(keys.tolist(), parents.tolist())):
                        if up in reached:
                            name = "alternative" if key >= ALTERNATIVE_STRIDE else "first_choice"
                            depth = min(int(tree.depths[i]), 10)  # and by depth (10: 10 or deeper)
                            for role in (roles[name], roles.setdefault(f"{name}_depth_{depth:02d}", [0, 0, 0.0])):
                                role[0] += 1
                                role[1] += i in path
                                role[2] += float(tree.probs[i])
                update(keys, parents, path)

            dec.estimator.update = recording_update
        if record is not None and hasattr(drafter, "candidates"):
            candidates = drafter.candidates

            def recording_candidates(ctx, candidates=candidates):
                found = candidates(ctx)
                record.append(found)
                return found

            drafter.candidates = recording_candidates
        r = replay(drafter, dec.estimator, task.prompt_ids, ref, [0], loaded.eos_token_ids, head=head, hidden=hidden)
        steps += len(r["accepted"])  # decode forwards (the prefill gives the first token)
        tokens += len(ref) - 1  # committed by them: ar needs one forward each
        drafting_ms += sum(r["ms"])
        accepted_draft += [a - 1 for a in r["accepted"]]
    plain_ms = tokens * cost.decode_ms
    # each step at the curve of its KV-cache length (engine.cost_model.VerifyCost.at)
    verify_ms = sum(float(CURVE_AT(cost, length).c(n)) if n else 1.0
                    for n, length in zip(sizes, lengths)) * cost.decode_ms
    # perfect sizing: each step's tree pruned to the path verification accepted (no draft where none was)
    oracle_ms = (sum(float(CURVE_AT(cost, length).c(a)) if a else 1.0
                     for a, length in zip(accepted_draft, lengths)) * cost.decode_ms
                 if len(accepted_draft) == len(lengths) else float("nan"))  # one proposal per decode step
    known = [e for e in expected if not np.isnan(e)]
    return {"method": method, "steps": steps, "accepted_length": round(tokens / max(steps, 1), 3),  # the bench's
            "mean_tree": round(statistics.fmean(sizes), 2) if sizes else 0.0,
            "drafting_ms_per_step": round(drafting_ms / max(len(sizes), 1), 3),
            "predicted_speedup": round(plain_ms / (verify_ms + drafting_ms), 3),
            "predicted_speedup_without_drafting": round(plain_ms / verify_ms, 3),
            "oracle_pruned_speedup": round(plain_ms / oracle_ms, 3),
            "expected_draft_tokens_per_step": round(statistics.fmean(known), 3) if known else None,
            "accepted_draft_tokens_per_step": round(statistics.fmean(accepted_draft), 3) if accepted_draft else 0.0,
            "calibration": {name: {"tried": n, "accepted_rate": round(a / n, 3), "estimated_rate": round(e / n, 3)}
                            for name, (n, a, e) in sorted(roles.items()) if n}}


def parse_variant(spec: str) -> tuple[str, tuple[str, dict]]:
    """``NAME=BASE:key=value[,key=value...]`` -> (NAME, (BASE's engine method, BASE's options updated with the
    given ones)): a method to replay beside the others with different decoder options. Values are JSON where they
    parse (``48``, ``false``, ``0.5``), else strings. Raises ValueError on a malformed spec or an unknown BASE."""
    from engine.bench.runner import METHOD_SPECS  # noqa: PLC0415

    name, sep, rest = spec.partition("=")
    base, sep2, opts = rest.partition(":")
    if not (sep and sep2 and name.strip() and base.strip()):
        raise ValueError(f"--variant {spec!r}: expected NAME=BASE:key=value[,key=value...]")
    if base not in METHOD_SPECS:
        raise ValueError(f"--variant {spec!r}: unknown method {base!r}")
    engine_method, options = METHOD_SPECS[base]
    options = dict(options)
    for item in filter(None, (x.strip() for x in opts.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--variant {spec!r}: {item!r} is not key=value")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return name.strip(), (engine_method, options)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_replay_arguments(ap)
    ap.add_argument("--methods", default="copyspec,suffix,fastcoder")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=BASE:key=value,...",
                    help="a method NAME that is BASE with these decoder options (repeatable), for --methods")
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--record-candidates", default=None, metavar="PKL",
                    help="pickle every step's candidates of the last method that has them, as (list,), "
                         "the input of benchmarks/measure_draft_tree.py")
    ap.add_argument("--single-curve", action="store_true",
                    help="drafters size trees with the short-context c(n) curve at every context length (as "
                         "before 2026-11-24); the prediction still scores each step at its own length")
    ap.add_argument("--score-measured", action="store_true",
                    help="score every method with this machine's measured curve (the user cache) even when "
                         "$FASTCODER_VERIFY_COST gives the drafters another one (e.g. flat: the widest trees "
                         "the drafters can build, whose oracle_pruned_speedup is their candidates' ceiling here)")
    ap.add_argument("--unfed-head", action="store_true",
                    help="leave the draft head without hidden states (disabled), as the replay was before "
                         "2026-11-28i; by default it is fed each step's final hidden state, as in the decoder")
    args = ap.parse_args(argv)
    if args.single_curve:
        VerifyCost.at = lambda self, context: self

    import torch  # noqa: PLC0415

    torch.set_num_threads(1)
    from engine.bench.runner import METHOD_SPECS, parse_methods  # noqa: PLC0415
    from engine.cost_model import default_cost_cache, load_or_measure_verify_cost  # noqa: PLC0415

    METHOD_SPECS.update(parse_variant(spec) for spec in args.variant)

    methods = [m for m in parse_methods(args.methods) if m != "ar"]
    loaded, tasks, refs, common, repos = replay_setup(args.model, args.repo, args.common, args.tasks, args.seed,
                                                      args.max_new_tokens, args.task_kind)
    cost = load_or_measure_verify_cost(loaded, default_cost_cache() if args.score_measured else None)
    results = []
    for method in methods:
        record = [] if args.record_candidates else None
        res = replay_method(loaded, method, tasks, refs, repos, common, cost, record, not args.unfed_head)
        results.append(res)
        print(json.dumps(res), flush=True)
        if record:
            with open(args.record_candidates, "wb") as fh:
                pickle.dump((record,), fh)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"repo": args.repo, "task_kind": args.task_kind,
                                                   "cost": cost.as_dict(), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
