"""Does drafting slow the forward after it (its memory evicting the weights)? A/B inside one bench run: fastcoder
whose every verification is given an empty tree while the drafter still drafts each next tree in the call
(`fastcoder-empty`: each step a plain step plus fastcoder's drafting), against `ar` and `fastcoder` in the same run,
interleaved per task. Compare `forward_ms_per_step` of `fastcoder-empty` with `ar`'s (the same forwards).
Usage: as `python -m engine bench ...` with `--methods ar,fastcoder,fastcoder-empty`."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-27d"))
from ab_common import run  # noqa: E402

from engine.draft_tree import DraftTree  # noqa: E402
from engine.native.step import BoundVerify  # noqa: E402

real = BoundVerify.verify_draft
current = ["fastcoder"]
EMPTY = DraftTree.empty()


def verify_draft(self, pending, tree, past, ahead):
    return real(self, pending, EMPTY if current[0] == "fastcoder-empty" else tree, past, ahead)


def switch(name):
    current[0] = name


BoundVerify.verify_draft = verify_draft
run(["fastcoder-empty"], switch, "unused")
