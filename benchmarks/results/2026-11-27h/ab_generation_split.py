"""A/B inside one bench run: the decode loop as engine.generation.Generation (`fastcoder`, this commit) against the
one-function loop it replaced (`fastcoder-3abca2d`: SpeculativeDecoder._generate and its helpers as at 3abca2d,
compiled here over today's modules), interleaved per task. The split must cost nothing measurable per step: compare
the JSON's `ms_per_token`, `decode_ms` and `step_other_share`.
Usage: as `python -m engine bench ...` with `--methods fastcoder,fastcoder-3abca2d` (run from the repository root)."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-27d"))
from ab_common import old_function, run  # noqa: E402

import engine.decoder as decoder_module  # noqa: E402
import engine.generation as generation_module  # noqa: E402
import engine.steps as steps_module  # noqa: E402
import engine.verify as verify_module  # noqa: E402
from engine import stops as stops_module  # noqa: E402

OLD = "3abca2d"
D = decoder_module.SpeculativeDecoder


class Namespace:
    """The old decoder module's names, from the modules they now live in."""


ns = Namespace()
for module in (verify_module, steps_module, stops_module, generation_module, decoder_module):
    for k, v in vars(module).items():
        if not k.startswith("__"):
            setattr(ns, k, v)
ns.time = time
ns.greedy_ready = generation_module.greedy_ready
old = {}
for name, end in (("_generate", "    def _stop_tokens("), ("_verifiable", "    def _accept("),
                  ("_accept", "    def _learn("), ("_learn", "    def _hit_stop("), ("_choose", "    @torch.inference_mode()\n    def _generate(")):
    start = f"    def {name}(" if name != "_generate" else "    @torch.inference_mode()\n    def _generate("
    old[name] = old_function(OLD, "engine/decoder.py", start, end, ns)
new_generate = D._generate
for name in ("_verifiable", "_accept", "_learn", "_choose"):
    setattr(D, name, old[name])


def switch(name):
    D._generate = old["_generate"] if name == "fastcoder-3abca2d" else new_generate


run(["fastcoder-3abca2d"], switch, "unused")
