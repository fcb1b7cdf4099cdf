"""Non-temporal prefetches of the KV cache in the attention (fc_attention_kv_nta) against the default, inside one
bench run: methods ``ar-nta``, ``suffix-nta``, ``fastcoder-nta`` are ar, suffix and fastcoder with the switch on for
their generations, interleaved per task with the methods themselves. Usage as ab_inprocess.py of 2026-11-27b with
--methods ar,ar-nta,suffix,suffix-nta,fastcoder,fastcoder-nta."""
import sys

from engine import native
from engine.bench import runner

for name in ("ar", "suffix", "fastcoder"):
    runner.METHOD_SPECS[f"{name}-nta"] = runner.METHOD_SPECS[name]
run_one = runner.run_one


def run_one_toggled(decoder, method, *args, **kwargs):
    lib = native.library()
    was = lib.fc_attention_kv_nta(1 if method.endswith("-nta") else 0)
    try:
        return run_one(decoder, method, *args, **kwargs)
    finally:
        lib.fc_attention_kv_nta(was)


runner.run_one = run_one_toggled
from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
