"""A/B inside one bench run: a generation's first tree (and any step the call before did not draft) drafted by
fc_draft_ahead in the fused step's fields (engine.native.draft_ahead.DraftAhead.draft_first, `fastcoder`) against the
drafter's propose there (`fastcoder-propose-first`: draft_first declines, nothing primed before the prefill), interleaved per task. Compare the JSON's
`step_retrieval_ms_per_step`, `ms_per_token` and `decode_ms`.
Usage: as `python -m engine bench ...` with `--methods fastcoder,fastcoder-propose-first`."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-27d"))
from ab_common import run  # noqa: E402

from engine.native import draft_ahead as da  # noqa: E402

real, real_prime = da.DraftAhead.draft_first, da.DraftAhead.prime
current = ["fastcoder"]


def draft_first(self, context, out_len):
    return (None, False) if current[0] == "fastcoder-propose-first" else real(self, context, out_len)


def prime(self, n_ctx, out_len):
    return None if current[0] == "fastcoder-propose-first" else real_prime(self, n_ctx, out_len)


def switch(name):
    current[0] = name


da.DraftAhead.draft_first = draft_first
da.DraftAhead.prime = prime
run(["fastcoder-propose-first"], switch, "unused")
