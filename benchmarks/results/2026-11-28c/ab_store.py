"""A/B inside one bench run: fastcoder with its completion history warmed by the output store (`fastcoder`, the
store that $FASTCODER_OUTPUT_STORE or the caches give) against the same engine with the history starting empty
(`fastcoder-cold`, as before this commit), interleaved per task.
Usage: as `python -m engine bench ...` with `--methods ar,suffix,fastcoder,fastcoder-cold`."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-11-27i"))
from ab_kernel import run_with  # noqa: E402

from engine.bench import runner  # noqa: E402
from engine.history import CompletionHistory  # noqa: E402

runner.METHOD_SPECS["fastcoder-cold"] = runner.METHOD_SPECS["fastcoder"]
real_make_decoder = runner.make_decoder


def make_decoder(loaded, method, *args, **kwargs):
    if method.endswith("-cold"):
        runner._HISTORIES.setdefault((id(loaded), method), CompletionHistory())
    return real_make_decoder(loaded, method, *args, **kwargs)


runner.make_decoder = make_decoder
run_with(lambda method: None)
