# Experiment script (2026-11-25 session i): run from the repository root as
# `python benchmarks/results/2026-11-25i/exp_pinned.py bench ...` (the arguments of `fastcoder bench`).
# EXP_PINNED=0: every forward checks the fused plan's weights again (the decoder's weights_pinned made a no-op).
import contextlib, os, runpy, sys
import engine.decoder as dec

if os.environ.get("EXP_PINNED", "1") == "0":
    dec.weights_pinned = lambda model: contextlib.nullcontext(False)
sys.argv = ["engine"] + sys.argv[1:]
runpy.run_module("engine", run_name="__main__")
