"""Trees cut to the tokens left (SpeculativeDecoder._verifiable's ``left``) against uncut trees, inside one bench
run: methods ``suffix-uncut`` and ``fastcoder-uncut`` are suffix and fastcoder with the cut off for their
generations, interleaved per task with the methods themselves. Usage as ab_inprocess.py of 2026-11-27b with
--methods ar,suffix,suffix-uncut,fastcoder,fastcoder-uncut."""
import sys

from engine.bench import runner
from engine.decoder import SpeculativeDecoder

for name in ("suffix", "fastcoder"):
    runner.METHOD_SPECS[f"{name}-uncut"] = runner.METHOD_SPECS[name]
run_one = runner.run_one
cut = SpeculativeDecoder._verifiable


def uncut(self, tree, remaining, stop_tokens, left):
    return cut(self, tree, remaining, stop_tokens, 1 << 30)


def run_one_toggled(decoder, method, *args, **kwargs):
    SpeculativeDecoder._verifiable = uncut if method.endswith("-uncut") else cut
    try:
        return run_one(decoder, method, *args, **kwargs)
    finally:
        SpeculativeDecoder._verifiable = cut


runner.run_one = run_one_toggled
from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
