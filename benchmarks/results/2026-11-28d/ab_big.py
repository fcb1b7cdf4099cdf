"""A/B inside one bench run: fastcoder with the grown output store (`fastcoder`: the store $FASTCODER_OUTPUT_STORE
names) against the same engine warmed by the packaged store of 2854ad4 (`fastcoder-small`), interleaved per task.
Usage: as `python -m engine bench ...` with `--methods ar,suffix,fastcoder,fastcoder-small`."""
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-11-27i"))
from ab_kernel import run_with  # noqa: E402

from engine.bench import runner  # noqa: E402
from engine.output_store import OutputStore, WarmHistory  # noqa: E402

PACKAGED = Path(__file__).resolve().parents[3] / "engine" / "data" / "output_store" / "tiny-py-coder.npz"
runner.METHOD_SPECS["fastcoder-small"] = runner.METHOD_SPECS["fastcoder"]
real_make_decoder = runner.make_decoder


def make_decoder(loaded, method, *args, **kwargs):
    if method.endswith("-small"):
        runner._HISTORIES.setdefault((id(loaded), method), WarmHistory(OutputStore.load(PACKAGED)))
    return real_make_decoder(loaded, method, *args, **kwargs)


runner.make_decoder = make_decoder
run_with(lambda method: None)
