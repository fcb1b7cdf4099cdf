"""A/B inside one bench run: a product of two rows alone streamed one panel at a time (this commit's fc_gemm, methods
`fastcoder`, `suffix`) against kern2x2 (the kernel before it, `fastcoder-kern2x2`, `suffix-kern2x2`: fc_gemm_two_rows(0)
around each of their generations), interleaved per task. fastcoder-kern2x2 sizes its trees with the verify-cost curve
measured with kern2x2 ($OLD_CURVE, a cached curve file of the engine before the change), fastcoder with the current
one. Only AVX2 machines differ (AVX-512 runs kz2 for two rows either way).
Usage: as `python -m engine bench ...` with `--methods ar,suffix,suffix-kern2x2,fastcoder,fastcoder-kern2x2`."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_kernel import run_with  # noqa: E402

from engine import native
from engine.bench import runner
from engine.cost_model import VerifyCost
from engine.decoder import MAX_DRAFT_TOKENS

lib = native.library()
old = VerifyCost.from_dict(json.load(open(os.environ["OLD_CURVE"])))
old.prepare_tables(MAX_DRAFT_TOKENS)
runner.METHOD_SPECS["fastcoder-kern2x2"] = runner.METHOD_SPECS["fastcoder"]
runner.METHOD_SPECS["suffix-kern2x2"] = runner.METHOD_SPECS["suffix"]
make_decoder = runner.make_decoder


def make_decoder_old_curve(loaded, method, *args, **kwargs):
    decoder = make_decoder(loaded, method, *args, **kwargs)
    if method == "fastcoder-kern2x2":
        decoder.cost = old
    return decoder


runner.make_decoder = make_decoder_old_curve
run_with(lambda method: lib.fc_gemm_two_rows(0 if method and method.endswith("-kern2x2") else 1))
