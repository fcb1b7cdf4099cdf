"""Time the native few-row kernel (engine/native/small_gemm.c) on a model's linear layers, per row count.

Builds the kernel once per ``--groups`` value (``-DPANEL_GROUP=G``: panels per group when a product has more
than 6 rows) and, optionally, once from an older source file (``--baseline FILE``, e.g. ``git show
REV:engine/native/small_gemm.c > old.c``) and once per ``--defines`` entry (other compile-time switches, e.g.
``PF_AVX2=64``, the AVX2 kernels' prefetch distance; ``PF`` is the AVX-512 ones'); checks that every build gives the
same bits at every row count; then times all the model's linear products (43 for tiny-py-coder) per row count,
builds interleaved, with the weights warm or evicted from the caches first (``--cold``). Prints the median
(25th-75th percentile) in ms.

Usage (from the repository root)::

    .venv/bin/python benchmarks/measure_gemm.py --model ../shared/models/tiny-py-coder --groups 2,4,8 \\
        [--baseline old.c] [--defines "PF_AVX2=32;PF_AVX2=64"] [--cold] [--repeats 15]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "engine" / "native" / "small_gemm.c"
FLAGS = ["-O2", "-std=c99", "-shared", "-fPIC", "-ffp-contract=off"]  # as engine.native.CFLAGS


def build(source: Path, out: Path, defines: list[str]) -> ctypes.CDLL:
    subprocess.run(["cc", *FLAGS, *defines, "-o", str(out), str(source), "-lm"], check=True)
    lib = ctypes.CDLL(str(out))
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.fc_gemm.restype = None
    lib.fc_gemm.argtypes = [ptr, i64, i64, ptr, i64, ptr]
    lib.fc_gemm_pack.argtypes = [ptr, i64, i64, ptr]
    return lib


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT.parent / "shared" / "models" / "tiny-py-coder"))
    ap.add_argument("--groups", default="4", help="comma list of PANEL_GROUP values to build")
    ap.add_argument("--defines", default="", help="semicolon list of extra builds, each space-separated -D flags "
                    "(e.g. 'PF_AVX2=64;PF_AVX2=96 PANEL_GROUP=8'), built with the first --groups value")
    ap.add_argument("--baseline", type=Path, help="an older small_gemm.c to build beside them")
    ap.add_argument("--rows", default="1,2,4,6,7,8,9,12,13,16")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--cold", action="store_true", help="evict the weights from the caches before each call")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from safetensors.torch import load_file  # noqa: PLC0415

    tmp = Path(tempfile.mkdtemp(prefix="fastcoder-gemm-"))
    libs = {f"G{g}": build(SOURCE, tmp / f"g{g}.so", [f"-DPANEL_GROUP={g}"]) for g in args.groups.split(",")}
    g0 = args.groups.split(",")[0]
    for i, spec in enumerate(d for d in args.defines.split(";") if d.strip()):
        flags = [f"-D{f}" for f in spec.split()]
        libs[spec.strip()] = build(SOURCE, tmp / f"d{i}.so", [f"-DPANEL_GROUP={g0}", *flags])
    if args.baseline:
        libs = {"baseline": build(args.baseline, tmp / "baseline.so", []), **libs}
    state = {}
    for f in sorted(Path(args.model).glob("*.safetensors")):
        state.update(load_file(str(f)))
    weights = [w.float().contiguous() for w in state.values() if w.dim() == 2]
    first = next(iter(libs.values()))
    packed = []
    for w in weights:
        n, k = w.shape
        panels = torch.empty(-(-n // 16) * 16 * k)
        first.fc_gemm_pack(w.data_ptr(), n, k, panels.data_ptr())
        packed.append((panels, n, k))
    rows = [int(r) for r in args.rows.split(",")]
    xs = {k: torch.randn(max(rows), k) for k in {k for _, _, k in packed}}
    ys = {(m, n): torch.empty(m, n) for m in rows for n in {n for _, n, _ in packed}}

    def run(lib, m):
        for panels, n, k in packed:
            lib.fc_gemm(xs[k].data_ptr(), m, k, panels.data_ptr(), n, ys[(m, n)].data_ptr())

    for m in rows:  # every build: the same bits
        ref = None
        for name, lib in libs.items():
            run(lib, m)
            got = [ys[(m, n)].clone() for _, n, _ in packed]
            if ref is None:
                ref = got
            elif not all(torch.equal(a, b) for a, b in zip(ref, got)):
                print(f"{name} differs at {m} rows", file=sys.stderr)
                return 1
    flush = torch.empty(64 * 2**20 // 4)
    times: dict = {}
    for _ in range(args.repeats):
        for m in rows:
            for name, lib in libs.items():
                if args.cold:
                    flush.add_(1)
                t = time.perf_counter()
                run(lib, m)
                times.setdefault((m, name), []).append((time.perf_counter() - t) * 1000)
    print(f"{len(packed)} products, {'cold' if args.cold else 'warm'} weights, ms: median (p25-p75)")
    print("rows " + "".join(f"{name:>22}" for name in libs))
    for m in rows:
        cells = []
        for name in libs:
            q = statistics.quantiles(times[(m, name)], n=4)
            cells.append(f"{statistics.median(times[(m, name)]):7.3f} ({q[0]:.2f}-{q[2]:.2f})")
        print(f"{m:<4} " + "".join(f"{c:>22}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
