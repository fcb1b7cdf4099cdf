"""`python -m engine` with one more bench method, `fastcoder-refit`: fastcoder whose acceptance estimator starts from
the prior refitted at 7e305ed (`fit-acceptance-prior` on click, rich, markdown-it: prior-refit.json here) instead of
the packaged one (fitted on 2026-11-26 at an older engine). Used as ab_cells.sh's A/B script."""
import sys
from pathlib import Path

from engine.acceptance import AcceptanceEstimator
from engine.acceptance_prior import AcceptancePrior
from engine.bench import runner

PRIOR = AcceptancePrior.load(Path(__file__).with_name("prior-refit.json"))
runner.METHOD_SPECS["fastcoder-refit"] = ("fastcoder", {})
_make, _new = runner.make_decoder, runner._new_estimator


def make_decoder(loaded, method, *args, **kwargs):
    """runner.make_decoder, the refit method's estimator made from PRIOR."""
    if method != "fastcoder-refit":
        return _make(loaded, method, *args, **kwargs)
    runner._new_estimator = lambda loaded=None: AcceptanceEstimator(prior=PRIOR)
    try:
        return _make(loaded, method, *args, **kwargs)
    finally:
        runner._new_estimator = _new


runner.make_decoder = make_decoder
from engine.cli import main  # noqa: E402

sys.exit(main())
