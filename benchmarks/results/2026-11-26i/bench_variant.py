"""`fastcoder bench` with one more method, ``fastcoder-oldcurve``: fastcoder sizing its trees with the curve in
$OLD_CURVE (a verify-cost JSON, e.g. a cache file from before format 5), the rest of the run as usual, so the two
curves are compared interleaved in one run. Usage: OLD_CURVE=old.json python bench_variant.py bench <bench args>"""
import os, sys, json
from pathlib import Path
sys.path[:0] = [str(Path(__file__).resolve().parents[3])]
from engine.bench import runner
from engine.cost_model import VerifyCost
old = VerifyCost.from_dict(json.load(open(os.environ["OLD_CURVE"])))
runner.METHOD_SPECS["fastcoder-oldcurve"] = ("fastcoder", {"verify_cost": old})
import json as _json  # the bench JSON records method options: the curve object as its repr
_dump, _dumps = _json.dump, _json.dumps
_json.dump = lambda *a, **k: _dump(*a, **{**k, "default": repr})
_json.dumps = lambda *a, **k: _dumps(*a, **{**k, "default": repr})
from engine.cli import main
sys.exit(main(sys.argv[1:]))
