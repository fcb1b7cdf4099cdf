"""Measure the datastores: D_c build/load/memory/search latency and D_r build/update time.

Usage (from the repository root)::

    .venv/bin/python benchmarks/measure_datastore.py [--model PATH] [--rebuild] [--json OUT]

- D_c: the running interpreter's standard library, built into the normal cache location
  (``--rebuild`` forces a fresh build; otherwise an existing cache entry is reused and its build time
  reported as ``null``). Load time and resident memory (VmRSS from /proc/self/status) are taken in a
  fresh child process that imports only ``engine.datastore`` (not torch), before and after load and
  after the search run has paged the arrays in.
- Search latency: ``Datastore.search`` with the defaults (n_max 16, n_min 2, draft_len 16, max_matches
  128) on ``--contexts`` contexts of 64 tokens cut at random positions from third-party code installed
  in the venv (requests, jinja2, pluggy, transformers; not the stdlib), wall clock and thread CPU time.
- D_r: ``RepoDatastore.build`` over ``--repo`` (default: the installed ``transformers`` package without
  ``models/``), then ``update`` of one changed file (an edited line in the middle of the largest file
  and of a median-size file), ``--updates`` times each.

Prints one JSON object and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SITE = Path(sysconfig.get_paths()["purelib"])
THIRD_PARTY = ["requests", "jinja2", "pluggy", "transformers/generation", "transformers/pipelines",
               "click", "pygls", "hypothesis/strategies"]


def vmrss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(xs, q):
    return float(np.percentile(np.asarray(xs), q))


# ------------------------------------------------------------------------------------ contexts


def sample_contexts(tokenizer, n: int, length: int = 64, seed: int = 0) -> list[list[int]]:
    from engine.repo_datastore import iter_source_files, read_source_text

    files = []
    for pkg in THIRD_PARTY:
        root = SITE / pkg
        if root.is_dir():
            files += [f for f in iter_source_files(root) if f.suffix == ".py"]
    rng = random.Random(seed)
    rng.shuffle(files)
    texts = [t for t in (read_source_text(f) for f in files[:300]) if t]
    streams = [s for s in tokenizer(texts, add_special_tokens=False)["input_ids"] if len(s) > length + 1]
    out = []
    for _ in range(n):
        s = rng.choice(streams)
        end = rng.randrange(length, len(s))
        out.append(s[end - length:end])
    return out


# ------------------------------------------------------------------------------------ D_c


CHILD = r"""
import json, sys, time
from pathlib import Path
def rss():
    for line in Path('/proc/self/status').read_text().splitlines():
        if line.startswith('VmRSS:'): return int(line.split()[1]) / 1024
sys.path.insert(0, sys.argv[1])
import engine.datastore as mod  # engine's __init__ imports torch lazily: this loads numpy and the datastore only
assert 'torch' not in sys.modules
import numpy as np
contexts = json.loads(Path(sys.argv[3]).read_text())
before = rss()
t0 = time.perf_counter(); ds = mod.Datastore.load(sys.argv[2], tokenizer_fingerprint=sys.argv[4]); load_s = time.perf_counter() - t0
after_load = rss()
for c in contexts: ds.search(c)
wall, cpu, hits = [], [], 0
for c in contexts:
    t = time.perf_counter(); c0 = time.thread_time()
    r = ds.search(c)
    cpu.append(time.thread_time() - c0); wall.append(time.perf_counter() - t)
    hits += r.match_length > 0
print(json.dumps({"load_s": load_s, "rss_before_mb": before, "rss_after_load_mb": after_load,
                  "rss_after_search_mb": rss(), "wall": wall, "cpu": cpu, "hits": hits,
                  "num_tokens": ds.num_tokens, "nbytes": ds.nbytes}))
"""


def measure_common(tokenizer, contexts, rebuild: bool) -> dict:
    from engine.common_datastore import (build_common_datastore, corpus_files, corpus_fingerprint,
                                         default_cache_dir, tokenizer_fingerprint)

    fp = tokenizer_fingerprint(tokenizer)
    root, files = corpus_files(None)
    path = default_cache_dir() / f"{fp}-{corpus_fingerprint(root, files)}"
    build_s = None
    if rebuild or not (path / "meta.json").is_file():
        t0 = time.perf_counter()
        build_common_datastore(tokenizer, None, path, progress=True)
        build_s = time.perf_counter() - t0
    ctx_file = Path("/tmp/fastcoder_measure_contexts.json")
    ctx_file.write_text(json.dumps(contexts))
    out = subprocess.run([sys.executable, "-c", CHILD, str(REPO), str(path),
                          str(ctx_file), fp], capture_output=True, text=True, check=True)
    child = json.loads(out.stdout)
    wall_ms = [x * 1e3 for x in child["wall"]]
    cpu_ms = [x * 1e3 for x in child["cpu"]]
    return {
        "path": str(path), "files": len(files), "num_tokens": child["num_tokens"],
        "nbytes_mb": child["nbytes"] / 2**20, "build_s": build_s, "load_s": child["load_s"],
        "rss_before_load_mb": child["rss_before_mb"], "rss_after_load_mb": child["rss_after_load_mb"],
        "rss_after_search_mb": child["rss_after_search_mb"],
        "search_contexts": len(contexts), "search_hit_rate": child["hits"] / max(1, len(contexts)),
        "search_wall_ms": {"p50": percentile(wall_ms, 50), "p90": percentile(wall_ms, 90),
                           "p99": percentile(wall_ms, 99), "max": max(wall_ms)},
        "search_cpu_ms": {"p50": percentile(cpu_ms, 50), "p99": percentile(cpu_ms, 99)},
    }


# ------------------------------------------------------------------------------------ D_r


def edit_middle(text: str, i: int) -> str:
    lines = text.splitlines(keepends=True)
    mid = len(lines) // 2
    lines.insert(mid, f"_measure_edit_{i} = {i}  # edited\n")
    return "".join(lines)


def measure_repo(tokenizer, root: Path, exclude: list[str], updates: int) -> dict:
    from engine.repo_datastore import RepoDatastore, iter_source_files

    files = iter_source_files(root, exclude)
    lines = sum(f.read_bytes().count(b"\n") for f in files)
    rss0 = vmrss_mb()
    t0 = time.perf_counter()
    c0 = time.process_time()
    repo = RepoDatastore.build(root, tokenizer, exclude=exclude)
    build = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
             "rss_growth_mb": vmrss_mb() - rss0, "nbytes_mb": repo.nbytes / 2**20}
    py = sorted((f for f in files if f.suffix == ".py"), key=lambda f: f.stat().st_size)
    targets = {"largest": py[-1], "median": py[len(py) // 2]}
    result = {"root": str(root), "exclude": exclude, "files": repo.num_files, "lines": lines,
              "num_tokens": repo.num_tokens, "build": build, "update": {}}
    for name, f in targets.items():
        text = f.read_text()
        wall, cpu = [], []
        for i in range(updates):
            new = edit_middle(text, i)
            t = time.perf_counter()
            c = time.process_time()  # includes libdivsufsort's OpenMP threads
            repo.update(f, new)
            cpu.append((time.process_time() - c) * 1e3)
            wall.append((time.perf_counter() - t) * 1e3)
        repo.update(f, text)
        result["update"][name] = {
            "file": str(f.relative_to(root)), "lines": text.count("\n"),
            "wall_ms": {"p50": statistics.median(wall), "max": max(wall)},
            "process_cpu_ms": {"p50": statistics.median(cpu), "max": max(cpu)},
        }
    return result


# ------------------------------------------------------------------------------------ main


def markdown(res: dict) -> str:
    c, r = res["common"], res["repo"]
    rows = [
        ("D_c (stdlib) tokens / files", f"{c['num_tokens']:,} / {c['files']:,}"),
        ("D_c build", "cached (use --rebuild)" if c["build_s"] is None else f"{c['build_s']:.1f} s"),
        ("D_c load", f"{c['load_s'] * 1e3:.0f} ms"),
        ("D_c arrays", f"{c['nbytes_mb']:.1f} MB"),
        ("VmRSS before load / after load / after searches",
         f"{c['rss_before_load_mb']:.0f} / {c['rss_after_load_mb']:.0f} / {c['rss_after_search_mb']:.0f} MB"),
        (f"search wall p50 / p90 / p99 ({c['search_contexts']} contexts)",
         f"{c['search_wall_ms']['p50']:.3f} / {c['search_wall_ms']['p90']:.3f} / "
         f"{c['search_wall_ms']['p99']:.3f} ms"),
        ("search thread-CPU p50 / p99", f"{c['search_cpu_ms']['p50']:.3f} / {c['search_cpu_ms']['p99']:.3f} ms"),
        ("search hit rate", f"{c['search_hit_rate']:.1%}"),
        ("D_r repo", f"{r['root']} (exclude {r['exclude']}): {r['files']} files, {r['lines']:,} lines, "
                     f"{r['num_tokens']:,} tokens"),
        ("D_r build wall / CPU", f"{r['build']['wall_s']:.1f} s / {r['build']['cpu_s']:.1f} s"),
        ("D_r arrays / process RSS growth during build",
         f"{r['build']['nbytes_mb']:.1f} MB / {r['build']['rss_growth_mb']:.0f} MB"),
    ]
    for name, u in r["update"].items():
        rows.append((f"D_r update, {name} file ({u['file']}, {u['lines']} lines) wall p50 / max",
                     f"{u['wall_ms']['p50']:.1f} / {u['wall_ms']['max']:.1f} ms "
                     f"(process CPU p50 {u['process_cpu_ms']['p50']:.1f} ms)"))
    rows.append(("load average (1 min) at end", f"{res['loadavg']:.2f} on {res['cpus']} CPUs"))
    return "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)


def main(argv=None) -> int:
    import os

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(Path(__file__).resolve().parents[2] / "shared" / "models" / "tiny-py-coder"),
                    help="model folder (default: ../shared/models/tiny-py-coder beside the clone)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the stdlib D_c even if cached")
    ap.add_argument("--contexts", type=int, default=2000)
    ap.add_argument("--repo", type=Path, default=SITE / "transformers")
    ap.add_argument("--exclude", nargs="*", default=["models/"])
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--json", type=Path, help="also write the JSON here")
    args = ap.parse_args(argv)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    contexts = sample_contexts(tokenizer, args.contexts)
    res = {"model": args.model,
           "common": measure_common(tokenizer, contexts, args.rebuild),
           "repo": measure_repo(tokenizer, args.repo, list(args.exclude), args.updates),
           "loadavg": os.getloadavg()[0], "cpus": os.cpu_count()}
    text = json.dumps(res, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)
    print()
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
