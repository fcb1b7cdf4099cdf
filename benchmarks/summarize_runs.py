"""One table from several ``fastcoder bench --json`` files: the README's benchmark table.

Usage (from the repository root)::

    python benchmarks/summarize_runs.py benchmarks/results/2026-11-23b/*.json [--flagship fastcoder]

One row per file (task kind, repository): tokens generated, every method's speedup over ``ar``, the
flagship's and its strongest rival's accepted length and draft tokens per step, the flagship's
drafting share of decode time (all its drafting, and in brackets the part done in decode steps, without the
reset over the prompt and the prefill's draft; older files have no bracket), the rest of its decode steps' time
besides the forward and the drafting ("other": masks, acceptance, KV compaction, Python; files from before
2169972 have none), its speed relative to the best other method, and whether every
method reproduced ``ar``'s tokens; the geometric mean and range of that relative speed; then every method's ms
per generated token and end-to-end ms per
completion, geometric means over the files (absolute speed, which a ratio to ``ar`` hides when the forward
itself gets faster). Plain standard library; prints Markdown.

The flagship against each of its ablations (``<flagship>-*`` methods run beside it) is given twice: per file (the
ratio of the two speedups) and *paired per task run* (:func:`paired`): the bench runs every method on a task before
the next task, so the ratio of two methods' decode ms per token on the same task run cancels the machine's slow
swings, and the spread of those ratios over all task runs gives a bootstrap 95% interval. On this project's shared
2-core machine the per-file ratios of two runs of one engine move 5-10%; the paired interval over three runs of the
nine cells is about +-1.3% (``benchmarks/results/2026-11-26m``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

ORDER = ("hf-prompt-lookup", "rest", "copyspec", "suffix", "fastcoder")
KIND_ORDER = {"function": 0, "fim-line": 1, "fim-block": 2}


def is_rival(name: str, flagship: str) -> bool:
    """Whether a method competes with the flagship: not ``ar``, not the flagship, not one of its ablations
    (``<flagship>-...``, e.g. ``fastcoder-no-head``), not an ablation of ``ar`` (``ar-full-head``)."""
    return name not in ("ar", flagship) and not name.startswith((flagship + "-", "ar-"))


def vs_best_other(run: dict, flagship: str) -> float | None:
    """The flagship's speedup over the best other method's in one benchmark JSON document (None without both)."""
    methods = run["methods"]
    others = [m["speedup"] for name, m in methods.items() if is_rival(name, flagship)]
    return methods[flagship]["speedup"] / max(others) if flagship in methods and others else None


def row(run: dict, flagship: str) -> tuple[tuple, str, list[str], str | None]:
    """(sort key, Markdown row, the method columns in order, the flagship's strongest rival) of one
    benchmark JSON document (``fastcoder-bench/1``)."""
    methods = run["methods"]
    tasks = run["tasks"]
    kind = tasks[0]["kind"] if tasks else "?"
    repo = Path(run["config"].get("repo", "?")).name
    names = [m for m in ORDER if m in methods] + [m for m in methods if m not in ORDER and m != "ar"]
    speed = {m: methods[m]["speedup"] for m in names}
    others = {m: s for m, s in speed.items() if is_rival(m, flagship)}
    rival = max(others, key=others.get) if others else None
    flag = methods.get(flagship, {})
    lossless = all(methods[m].get("lossless") for m in methods)
    cells = [kind, repo, str(methods["ar"]["new_tokens"])] + [f"{speed[m]:.2f}x" for m in names]
    if flag and rival:
        cells += [f"{flag['mean_accepted_length']:.2f} / {methods[rival]['mean_accepted_length']:.2f}",
                  f"{flag.get('mean_draft_size', 0):.1f} / {methods[rival].get('mean_draft_size', 0):.1f}",
                  f"{100 * flag.get('retrieval_share', 0):.1f}%"
                  + (f" ({100 * flag['step_retrieval_share']:.1f}%)" if flag.get("step_retrieval_share") is not None
                     else ""),
                  f"{100 * flag['step_other_share']:.1f}%" if flag.get("step_other_share") is not None else "-",
                  f"{speed[flagship] / others[rival]:.2f} ({rival})"]
    cells.append("yes" if lossless else "NO")
    return (KIND_ORDER.get(kind, 9), repo), "| " + " | ".join(cells) + " |", names, rival


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--flagship", default="fastcoder")
    args = ap.parse_args(argv)
    rows = []
    names = None
    for f in args.files:
        key, text, names_f, _ = row(json.loads(Path(f).read_text()), args.flagship)
        names = names or names_f
        rows.append((key, text))
    head = ["task kind", "repository", "tokens"] + list(names) + [
        f"accepted length {args.flagship} / best other", f"draft tokens per step {args.flagship} / best other",
        f"{args.flagship} drafting share (in steps)", f"{args.flagship} other share in steps",
        f"{args.flagship} vs best other", "lossless"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for _, text in sorted(rows):
        print(text)
    runs = [json.loads(Path(f).read_text()) for f in args.files]
    ratios = [r for r in (vs_best_other(run, args.flagship) for run in runs) if r]
    if ratios:
        print(f"\n{args.flagship} vs best other: geometric mean "
              f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f} ({min(ratios):.2f}-{max(ratios):.2f})")
    ablations = sorted({m for run in runs for m in run["methods"] if m.startswith(args.flagship + "-")})
    for ablation in ablations:  # the flagship against each of its ablations run beside it
        pairs = [run["methods"][args.flagship]["speedup"] / run["methods"][ablation]["speedup"] for run in runs
                 if args.flagship in run["methods"] and ablation in run["methods"]]
        if pairs:
            print(f"{args.flagship} vs {ablation}: geometric mean {math.exp(sum(map(math.log, pairs)) / len(pairs)):.3f}"
                  f" ({min(pairs):.2f}-{max(pairs):.2f}, {len(pairs)} runs)")
        groups = paired(runs, args.flagship, ablation)
        if groups:
            print(f"{args.flagship} vs {ablation}, paired per task run (decode speed ratio, bootstrap 95% interval): "
                  + "; ".join(f"{kind} {g:.3f} ({lo:.3f}-{hi:.3f}, n={n})" for kind, (n, g, lo, hi) in groups.items()))
    print()
    print(absolute(runs))
    return 0


def paired(runs: list[dict], a: str, b: str, rounds: int = 2000, seed: int = 0) -> dict:
    """Method ``a``'s decode speed over method ``b``'s, task run by task run: for each file holding both and each
    index of their ``per_task`` records (the same task and repeat; a record without new tokens is skipped),
    (b's decode ms per new token) / (a's). Returns {task kind or "all": (n, geometric mean, lo, hi)}, lo-hi the
    2.5th-97.5th percentile of the geometric mean over ``rounds`` bootstrap resamples of the ratios (``seed``: the
    same interval for the same input); empty when no file holds both. Raises ValueError when two records paired by
    index are of different tasks."""
    logs: dict[str, list[float]] = {}
    for run in runs:
        methods = run.get("methods", {})
        if a not in methods or b not in methods:
            continue
        for ra, rb in zip(methods[a].get("per_task") or [], methods[b].get("per_task") or []):
            if ra.get("task_id") != rb.get("task_id"):
                raise ValueError(f"per-task records of {a} and {b} are not in the same order")
            if not (ra.get("new_tokens") and rb.get("new_tokens") and ra.get("decode_ms") and rb.get("decode_ms")):
                continue
            x = math.log((rb["decode_ms"] / rb["new_tokens"]) / (ra["decode_ms"] / ra["new_tokens"]))
            logs.setdefault(ra.get("kind") or "?", []).append(x)
            logs.setdefault("all", []).append(x)
    rng = random.Random(seed)
    out = {}
    for kind in sorted(logs, key=lambda k: (k == "all", KIND_ORDER.get(k, 9), k)):
        xs = logs[kind]
        means = sorted(sum(rng.choices(xs, k=len(xs))) / len(xs) for _ in range(rounds))
        out[kind] = (len(xs), math.exp(sum(xs) / len(xs)), math.exp(means[int(0.025 * rounds)]),
                     math.exp(means[int(0.975 * rounds) - 1]))
    return out


def absolute(runs: list[dict]) -> str:
    """A Markdown table: per method, ms per generated token and end-to-end ms per completion, geometric
    means over ``runs`` (methods present in every run)."""
    names = [m for m in ("ar", *ORDER) if all(m in r["methods"] for r in runs)]

    def gmean(key: str, m: str) -> float:
        return math.exp(sum(math.log(r["methods"][m][key]) for r in runs) / len(runs))

    lines = ["| geometric mean over %d cells | %s |" % (len(runs), " | ".join(names)),
             "|---|" + "---|" * len(names),
             "| ms per token | " + " | ".join(f"{gmean('ms_per_token', m):.2f}" for m in names) + " |",
             "| end-to-end ms per completion | " + " | ".join(f"{gmean('e2e_ms_per_completion', m):.0f}" for m in names)
             + " |"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
