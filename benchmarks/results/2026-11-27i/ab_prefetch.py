"""A/B inside one bench run: the AVX2 kernels prefetching 48 lines ahead (this commit's default: `fastcoder`, `suffix`)
against 16 (the distance before it: `fastcoder-pf16`, `suffix-pf16`, fc_gemm_prefetch(16) around each of their
generations), interleaved per task. Both fastcoders size their trees on the same curve (the one measured at 48).
Usage: as `python -m engine bench ...` with `--methods ar,suffix,suffix-pf16,fastcoder,fastcoder-pf16`."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_kernel import run_with  # noqa: E402

from engine import native  # noqa: E402
from engine.bench import runner  # noqa: E402

lib = native.library()
for name in ("fastcoder", "suffix"):
    runner.METHOD_SPECS[f"{name}-pf16"] = runner.METHOD_SPECS[name]
run_with(lambda method: lib.fc_gemm_prefetch(16 if method and method.endswith("-pf16") else 48))
