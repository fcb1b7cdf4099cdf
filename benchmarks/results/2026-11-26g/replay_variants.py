"""Fastcoder variants replayed against `ar`'s output with a given verify-cost curve (the H200's, say).

The replay (benchmarks/replay_methods.py) reproduces a greedy run's trees without the model; with
FASTCODER_VERIFY_COST=<a curve file> the decoder sizes its trees with that curve and the prediction scores them with
it, so a GPU's trees can be studied on this CPU (pluggy `function` with the H200 float32 curve: accepted length 4.274,
mean tree 11.48; the H200 run measured 4.29 and 11.4). Usage (repository root):

    FASTCODER_VERIFY_COST=benchmarks/results/2026-11-26g/gpu1/verify_cost/ed77620c97a87f1f.json \
    PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-26g/replay_variants.py \
        --repo .venv/lib/python3.11/site-packages/pluggy --task-kind function --tasks 10

Prints one JSON line per variant (replay_methods.replay_method's fields).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from measure_drafting import add_replay_arguments, replay_setup  # noqa: E402
from replay_methods import replay_method  # noqa: E402

VARIANTS = {
    "suffix": ("suffix", {}),
    "fastcoder": ("fastcoder", {}),
    "fastcoder-narrow": ("fastcoder", {"retrieve_beside_copy": False, "copy_factor": 3.0}),  # the settings of a steep curve
    "beside-copy": ("fastcoder", {"retrieve_beside_copy": True}),
    "matches-128": ("fastcoder", {"max_matches": 128}),
    "copy-min-prob-0.02": ("fastcoder", {"copy_min_prob": 0.02}),
    "copy-factor-6": ("fastcoder", {"copy_factor": 6.0}),
    "copy-factor-12": ("fastcoder", {"copy_factor": 12.0}),
    "beside-copy-factor-6": ("fastcoder", {"retrieve_beside_copy": True, "copy_factor": 6.0}),
    "cheap-matches-64": ("fastcoder", {"max_matches": 64}),
    "cheap-copy-factor-12": ("fastcoder", {"copy_factor": 12.0}),
    "cheap-copy-min-prob-0.05": ("fastcoder", {"copy_min_prob": 0.05}),
    "all": ("fastcoder", {"retrieve_beside_copy": True, "max_matches": 128, "copy_min_prob": 0.02}),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_replay_arguments(ap)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args(argv)
    import torch  # noqa: PLC0415

    torch.set_num_threads(1)
    from engine.bench import runner  # noqa: PLC0415
    from engine.cost_model import load_or_measure_verify_cost  # noqa: PLC0415

    loaded, tasks, refs, common, repos = replay_setup(args.model, args.repo, args.common, args.tasks, args.seed,
                                                      args.max_new_tokens, args.task_kind)
    cost = load_or_measure_verify_cost(loaded)
    for name in args.variants.split(","):
        runner.METHOD_SPECS[name] = VARIANTS[name]
        res = replay_method(loaded, name, tasks, refs, repos, common, cost)
        res.pop("calibration", None)
        print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
