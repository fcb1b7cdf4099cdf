"""`python -m engine` with one more bench method: fastcoder-bare, without the draft head and without the node model
(the A/B of benchmarks/results/2026-11-27d/ab_cells.sh: `bash .../ab_cells.sh ab_variants.py` with HERE set to this
folder)."""
import sys

from engine.cli import main
from engine.bench.runner import METHOD_SPECS

METHOD_SPECS["fastcoder-bare"] = ("fastcoder", {"draft_head": False, "node_model": False})
sys.exit(main())
