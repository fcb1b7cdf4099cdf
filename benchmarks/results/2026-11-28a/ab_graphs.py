"""A/B inside one bench run on a GPU: the CUDA graphs (engine.cuda_graphs; `ar`, `suffix`, `fastcoder`) against the
eager forward (`ar-eager`, `suffix-eager`, `fastcoder-eager`: the model's graphs set aside around each of their
generations), interleaved per task. Every fastcoder sizes its trees on the same curve (measured with the graphs).
The lossless column of `ar-eager` compares the graphed `ar` with the eager forward's tokens.
Usage: as `python -m engine bench ...` with `--methods ar,ar-eager,suffix,suffix-eager,fastcoder,fastcoder-eager`."""
import sys

from engine.bench import runner
from engine.cuda_graphs import ATTR

for name in ("ar", "suffix", "fastcoder"):
    runner.METHOD_SPECS[f"{name}-eager"] = runner.METHOD_SPECS[name]
run_one = runner.run_one


def run_one_switched(decoder, method, *args, **kwargs):
    model = decoder.loaded.model
    held = model.__dict__.get(ATTR)
    if held is not None and method.endswith("-eager"):
        del model.__dict__[ATTR]
    try:
        return run_one(decoder, method, *args, **kwargs)
    finally:
        if held is not None:
            model.__dict__[ATTR] = held


runner.run_one = run_one_switched
from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
