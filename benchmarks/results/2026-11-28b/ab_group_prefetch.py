"""A/B inside one bench run: the few-row products' passes over a cached panel group prefetching the next group (this
commit's default: `fastcoder`, `suffix`) against not (`fastcoder-nogp`, `suffix-nogp`: fc_gemm_group_prefetch(0)
around each of their generations), interleaved per task. Both fastcoders size their trees on the same curve (the one
measured with the prefetch). Usage: as `python -m engine bench ...` with
`--methods ar,suffix,suffix-nogp,fastcoder,fastcoder-nogp`."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-11-27i"))
from ab_kernel import run_with  # noqa: E402

from engine import native  # noqa: E402
from engine.bench import runner  # noqa: E402

lib = native.library()
for name in ("fastcoder", "suffix"):
    runner.METHOD_SPECS[f"{name}-nogp"] = runner.METHOD_SPECS[name]
run_with(lambda method: lib.fc_gemm_group_prefetch(0 if method and method.endswith("-nogp") else 1))
