"""`python -m engine` with one more bench method for the A/B of the draft head: `fastcoder-medusa`, fastcoder with
the head packaged before 2026-11-28f (Medusa's, on the hidden state alone: medusa-head.npz here) where `fastcoder`
runs the packaged Hydra head (which also reads the pending token). Used as ab_cells.sh's A/B script."""
import sys
from pathlib import Path

from engine.bench import runner

# and `fastcoder-lines`: the packaged head on one-line completions too (the decoder's default leaves it out there)
runner.METHOD_SPECS["fastcoder-lines"] = ("fastcoder", {"draft_head_lines": True})
runner.METHOD_SPECS["fastcoder-medusa"] = ("fastcoder", {"draft_head": str(Path(__file__).with_name("medusa-head.npz"))})
from engine.cli import main  # noqa: E402

sys.exit(main())
