"""A/B inside one bench run: each next step drafted inside the verification's native call (engine.native.propose.
DraftAhead, `fastcoder`) against drafting by the drafter's propose before each verification (`fastcoder-unfused`:
the drafter makes no DraftAhead), interleaved per task. The bench's own report gives each variant's speed and
drafting share; printed per variant at exit: the Python of a step's drafting (the bench's drafting time less the
native drafting inside it) is not separated here: compare `step_retrieval_ms_per_step` in the JSON.
Usage: as `python -m engine bench ...` with `--methods fastcoder,fastcoder-unfused`."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-27d"))
from ab_common import run  # noqa: E402

import engine.drafters as drafters_module  # noqa: E402

real = drafters_module.FastCoderDrafter.draft_ahead
current = ["fastcoder"]


def draft_ahead(self, eos, max_new):
    return None if current[0] == "fastcoder-unfused" else real(self, eos, max_new)


def switch(name):
    current[0] = name


drafters_module.FastCoderDrafter.draft_ahead = draft_ahead
run(["fastcoder-unfused"], switch, "unused")
