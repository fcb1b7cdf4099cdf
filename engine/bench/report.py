"""The whole run (:func:`benchmark`), the environment it ran in, and the markdown report."""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable, Sequence

from ..lean_forward import greedy_screen, greedy_step_serves
from ..native import packed_kernels_isa
from ..packed_linear import weights_on_huge_pages_mb
from ..probe_cache import native_rows
from .headroom import headroom
from .runner import (HIT_SOURCES, REFERENCE_METHOD, BenchConfig, build_repo_datastore, fresh_drafter_state, memoized,
                     run_tasks, summarize)
from .tasks import Task

SCHEMA = "fastcoder-bench/1"
#: dtypes whose verify forwards round differently from one-token decode steps (the report says so).
HALF_DTYPES = ("bfloat16", "float16")


def environment(device=None) -> dict:
    """Hardware and library versions for the report; ``accelerator``: the GPU's name where ``device`` (the
    model's torch device) is a CUDA one, else None."""
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
            "accelerator": _accelerator(device),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **engine_revision()}


def _accelerator(device) -> str | None:
    import torch

    if device is None or getattr(device, "type", str(device).split(":")[0]) != "cuda":
        return None
    try:
        return torch.cuda.get_device_name(device)
    except (RuntimeError, AssertionError):  # no driver, or a CPU-only build
        return None


def engine_revision() -> dict:
    """``{"git_commit": sha, "engine_modified": bool}`` of the checkout holding ``engine/`` (which
    code produced a result); None values outside a git checkout."""
    import subprocess

    here = Path(__file__).resolve().parents[1]  # engine/
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
    runs = []
    for repeat in range(max(1, cfg.repeats)):
        fresh_drafter_state(loaded)
        records = run_tasks(loaded, tasks, root, common_ds, cfg, repo_factory)
        for recs in records.values():
            for rec in recs:
                rec["repeat"] = repeat
        runs.append(records)
    pooled = {m: [rec for records in runs for rec in records[m]] for m in runs[0]}
    methods = summarize(pooled)
    result = {"schema": SCHEMA, "environment": environment(getattr(loaded, "device", None)),
              "tasks": [t.describe() for t in tasks], "methods": methods, "headroom": None}
    # greedy steps take the LM head's argmax by int8 screening (screened_head=True): with which instructions
    result["environment"]["lm_head_screen"] = greedy_screen(loaded.model) or False
    # the native forward kernels' instruction set ("avx512", "avx2"), False where they do not serve
    result["environment"]["forward_kernels"] = packed_kernels_isa(getattr(loaded, "packing", None)) or False
    # greedy steps in one native call (engine.native.step): gather, layers, screened head, walk, KV compaction
    result["environment"]["greedy_step"] = greedy_step_serves(loaded.model)
    # a GPU model's decode steps replay CUDA graphs (engine.cuda_graphs): True, or why not (None: not tried)
    result["environment"]["cuda_graphs"] = getattr(loaded, "cuda_graphs_status", None)
    # the packed weights' bytes on 2 MB pages (engine.huge_pages; the KV cache's follow the same switch)
    result["environment"]["weights_on_huge_pages_mb"] = weights_on_huge_pages_mb(getattr(loaded, "packing", None))
    # the native products' and attention's row limits, and whether their probes' timings came from the cache
    result["environment"]["native_rows"] = native_rows(loaded)
    if len(runs) > 1:
        result["repeats"] = [{m: {k: s[k] for k in REPEAT_FIELDS} for m, s in summarize(records).items()}
                             for records in runs]
        result["spread"] = spread(result["repeats"])
    if cfg.headroom and tasks:
        result["headroom"] = headroom(loaded, tasks, runs[0], methods, root, common_ds, cfg, repo_factory)
    return result


#: Per repeat, each method's fields kept in the result's ``repeats`` (its summary over that repeat's tasks).
REPEAT_FIELDS = ("ms_per_token", "speedup", "e2e_ms_per_completion", "e2e_speedup", "mean_accepted_length",
                 "lossless")


def spread(repeats: Sequence[dict]) -> dict:
    """Per method, ``{field: [min, median, max]}`` over the repeats for ``ms_per_token``, ``speedup`` and
    ``e2e_speedup``, and ``vs_best_other``: the method's speedup over the best other method's (``ar`` aside; None
    for ``ar``) in the same repeat, [min, median, max]: how much a ranking moves between runs of the same tasks."""
    out: dict[str, dict] = {}
    for method in repeats[0]:
        stats = {}
        for key in ("ms_per_token", "speedup", "e2e_speedup"):
            values = [r[method][key] for r in repeats if r[method].get(key) is not None]
            stats[key] = [min(values), statistics.median(values), max(values)] if values else None
        ratios = []
        for r in repeats:
            others = [s["speedup"] for m, s in r.items() if m not in (method, REFERENCE_METHOD) and s.get("speedup")]
            if others and r[method].get("speedup"):
                ratios.append(r[method]["speedup"] / max(others))
        stats["vs_best_other"] = ([min(ratios), statistics.median(ratios), max(ratios)]
                                  if ratios and method != REFERENCE_METHOD else None)
        out[method] = stats
    return out



def _fmt(value, spec: str = ".2f", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def render_markdown(result: dict) -> str:
    """A markdown report: config, the per-method table, and the headroom analysis."""
    cfg, env = result.get("config", {}), result.get("environment", {})
    lines = ["# fastcoder benchmark", ""]
    if cfg:
        lines += [f"- model: `{cfg.get('model')}`; repository: `{cfg.get('repo')}`; common datastore: "
                  f"`{cfg.get('common')}`",
                  f"- tasks: {len(result.get('tasks', []))} of kind {cfg.get('task_kind', 'function')}"
                  f"{_stop_note(result)}; max new tokens: {cfg.get('max_new_tokens')}; "
                  f"max prompt tokens: {cfg.get('max_prompt_tokens')}; seed: {cfg.get('seed')}; "
                  f"temperature: {cfg.get('temperature', 0.0)}, top_p: {cfg.get('top_p', 1.0)}, "
                  f"top_k: {cfg.get('top_k', 0)}"]
    if env:
        device = (f"{env['accelerator']} ({cfg.get('device', 'cuda')}, {cfg.get('dtype', '?')}); host "
                  if env.get("accelerator") else "")
        kernels = f", forward kernels {env['forward_kernels']}" if env.get("forward_kernels") else ""
        if env.get("accelerator") and "cuda_graphs" in env:
            kernels += ", CUDA graphs" if env["cuda_graphs"] is True else f", no CUDA graphs ({env['cuda_graphs']})"
        lines.append(f"- hardware: {device}{env.get('cpu')} ({env.get('cpu_count')} cores, torch threads "
                     f"{env.get('torch_threads')}{kernels}); torch {env.get('torch')}, transformers "
                     f"{env.get('transformers')}; engine commit {str(env.get('git_commit'))[:10]}"
                     f"{' (modified)' if env.get('engine_modified') else ''}")
    if result.get("datastores"):
        ds = result["datastores"]
        lines.append(f"- D_r: {ds.get('repo_tokens')} tokens in {ds.get('repo_files')} files; "
                     f"D_c: {ds.get('common_tokens')} tokens")
    lines += ["", "| method | ms/token | speedup | prefill ms | decode ms/completion | e2e ms/completion "
              "| e2e speedup | new tokens/completion | accepted length | forward passes | retrieval ms/step "
              "| retrieval share | in steps | forward ms/step | other share "
              "| hits cache/repo/common/context/adaptive/suffix/history | peak RSS MB | lossless |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, m in result["methods"].items():
        h = m["hits"]
        hits = "/".join(str(h.get(k, 0)) for k in HIT_SOURCES)
        lines.append(f"| {name} | {_fmt(m['ms_per_token'])} | {_fmt(m['speedup'])}x | "
                     f"{_fmt(m.get('prefill_ms'), '.1f')} | {_fmt(m.get('decode_ms_per_completion'), '.1f')} | "
                     f"{_fmt(m.get('e2e_ms_per_completion'), '.1f')} | {_fmt(m.get('e2e_speedup'))}x | "
                     f"{_fmt(m.get('mean_new_tokens'), '.1f')} | "
                     f"{_fmt(m['mean_accepted_length'])} | {m['forward_passes']} | "
                     f"{_fmt(m['retrieval_ms_per_step'], '.3f')} | {_fmt(m['retrieval_share'], '.1%')} | "
                     f"{_fmt(m.get('step_retrieval_share'), '.1%')} | {_fmt(m.get('forward_ms_per_step'), '.3f')} | "
                     f"{_fmt(m.get('step_other_share'), '.1%')} | {hits} | {_fmt(m['peak_rss_mb'], '.0f')} | "
                     f"{_lossless_cell(m)} |")
    if result.get("spread"):
        n = len(result.get("repeats", []))
        lines += ["", f"Spread over {n} repeats of the task set (each from fresh drafter state; the table above pools "
                  "them): min / median / max", "",
                  "| method | ms/token | speedup | e2e speedup | vs best other |", "|---|---|---|---|---|"]
        for name, st in result["spread"].items():
            cells = [" / ".join(_fmt(v) for v in st[k]) if st.get(k) else "-"
                     for k in ("ms_per_token", "speedup", "e2e_speedup", "vs_best_other")]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if cfg.get("dtype") in HALF_DTYPES and any(m["lossless"] is False for m in result["methods"].values()):
        lines += ["", f"{cfg['dtype']}: a forward over several tokens rounds differently from a one-token forward, so "
                  "where the model's top two logits (nearly) tie, its own greedy output depends on how many tokens "
                  "a forward carries, and a speculative method can leave `ar`'s tokens there (README, Lossless). "
                  "`--dtype float32` checks exactness."]
    lines += _headroom_markdown(result.get("headroom"))
    return "\n".join(lines) + "\n"


def _stop_note(result: dict) -> str:
    stops = sorted({s for t in result.get("tasks", []) for s in t.get("stop", [])})
    return f" (stop at {', '.join(repr(s) for s in stops)})" if stops else ""


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

