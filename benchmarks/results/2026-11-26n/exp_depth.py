"""benchmarks/replay_methods.py with the sized trees' depth bound raised to $DEPTH (default 24: unchanged).

The bound is a module constant (engine.draft_tree.SIZED_MAX_DEPTH, imported by name into the native tree and propose
modules, and the default width of the native scratch); this patches every copy before the replay runs, so the same
command line replays the engine with deeper trees. Pair it with a variant that lets the sources draft that deep:
--variant deep=fastcoder:copy_max_depth=48,draft_len=48. Usage: DEPTH=48 python exp_depth.py <replay_methods args>.
"""
import os
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
depth = int(os.environ.get("DEPTH", "24"))
import engine.tree_builder as dt  # noqa: E402
import engine.native.propose as npr  # noqa: E402
import engine.native.tree as ntr  # noqa: E402

dt.SIZED_MAX_DEPTH = ntr.SIZED_MAX_DEPTH = npr.SIZED_MAX_DEPTH = depth
for obj in vars(ntr).values():  # scratch classes whose width defaults to the bound
    f = getattr(obj, "__init__", None)
    if isinstance(obj, type) and getattr(f, "__defaults__", None) and 24 in f.__defaults__ and obj.__module__ == ntr.__name__:
        f.__defaults__ = tuple(depth if d == 24 else d for d in f.__defaults__)
sys.argv = [str(ROOT / "benchmarks/replay_methods.py"), *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
