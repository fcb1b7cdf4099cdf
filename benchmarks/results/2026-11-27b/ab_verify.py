"""A greedy verification's walk and KV compaction inside the one native call (fc_greedy_tree_verify) against the same
forward with the walk and the compaction in Python afterwards: methods ``suffix-walk`` and ``fastcoder-walk`` are
suffix and fastcoder with GreedyStep.verify declined for their generations, interleaved per task with the methods
themselves. Usage: as ab_inprocess.py, with --methods ar,suffix,suffix-walk,fastcoder,fastcoder-walk."""
import sys

from engine.bench import runner
from engine.native import step

for name in ("suffix", "fastcoder"):
    runner.METHOD_SPECS[f"{name}-walk"] = runner.METHOD_SPECS[name]
run_one, verify = runner.run_one, step.GreedyStep.verify


def run_one_toggled(decoder, method, *args, **kwargs):
    step.GreedyStep.verify = (lambda self, *a: None) if method.endswith("-walk") else verify
    try:
        return run_one(decoder, method, *args, **kwargs)
    finally:
        step.GreedyStep.verify = verify


runner.run_one = run_one_toggled
from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
