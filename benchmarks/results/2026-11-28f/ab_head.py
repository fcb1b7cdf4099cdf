"""`python -m engine` with two more bench methods for the A/B of the draft head, used as ab_cells.sh's A/B script:
`fastcoder-medusa` (the head packaged before and after this session: Medusa's, on the hidden state alone,
medusa-head.npz here) and `fastcoder-hydra` (Hydra's, which also reads the pending token: hydra-head.npz here).

The runs ab1-ab3 were made at b402a5d, where the packaged head was hydra-head.npz (so `fastcoder` was Hydra's) and
ab3's `fastcoder-lines` was the decoder option `draft_head_lines=True` (the head on one-line completions too), since
removed. At a later commit, compare `fastcoder-hydra` with `fastcoder` (or `fastcoder-medusa`)."""
import sys
from pathlib import Path

from engine.bench import runner

HERE = Path(__file__).resolve().parent
runner.METHOD_SPECS["fastcoder-medusa"] = ("fastcoder", {"draft_head": str(HERE / "medusa-head.npz")})
runner.METHOD_SPECS["fastcoder-hydra"] = ("fastcoder", {"draft_head": str(HERE / "hydra-head.npz")})
from engine.cli import main  # noqa: E402

sys.exit(main())
