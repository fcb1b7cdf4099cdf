"""Paths shared by this folder's experiment scripts (imported first: it puts the repository and benchmarks/ on
sys.path). ROOT: the clone; MODEL: tiny-py-coder beside it; DATA: where exp_collect.py writes its trees
($CEILING_DATA, default /tmp/fastcoder-ceiling)."""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
MODEL = str(ROOT.parent / "shared" / "models" / "tiny-py-coder")
DATA = os.environ.get("CEILING_DATA", "/tmp/fastcoder-ceiling")
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(HERE)]
