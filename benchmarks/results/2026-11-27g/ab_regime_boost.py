"""EXPERIMENT A/B inside one bench run (with the uncommitted `regime_boost.patch` applied): after a step whose tree's
deepest path was accepted whole, the next tree's estimates raised, q -> 1 - (1 - q) x FACTOR (`fastcoder-boost`),
against the estimates as learned (`fastcoder`), interleaved per task. FACTOR from $BOOST (default 0.6); after a step that accepted
nothing of a non-empty tree, q -> q x $SHRINK (default 1: unchanged).
Usage: as `python -m engine bench ...` with `--methods fastcoder,fastcoder-boost`."""
import ctypes
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-27d"))
from ab_common import run  # noqa: E402

from engine.native import library  # noqa: E402

lib = library()
on = ctypes.c_int64.in_dll(lib, "fc_boost_on")
ctypes.c_double.in_dll(lib, "fc_boost_factor").value = float(os.environ.get("BOOST", "0.6"))
ctypes.c_double.in_dll(lib, "fc_shrink_factor").value = float(os.environ.get("SHRINK", "1.0"))


def switch(name):
    on.value = int(name == "fastcoder-boost")


run(["fastcoder-boost"], switch, "unused")
