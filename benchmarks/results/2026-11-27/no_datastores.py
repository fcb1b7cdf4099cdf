"""fastcoder against fastcoder without D_r and D_c searches (an ablation added here: use_repo and use_common off) on
one-line completions: does the 5% drafting bound on fim-line cost wall-clock time? Usage, per repository:
PYTHONPATH=. OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/results/2026-11-27/no_datastores.py bench
--model ../shared/models/tiny-py-coder --repo .venv/lib/python3.11/site-packages/REPO --common stdlib --tasks 10
--max-new-tokens 128 --seed 0 --threads 1 --task-kind fim-line --methods ar,fastcoder,fastcoder-no-ds --no-headroom
--repeats 3 --json benchmarks/results/2026-11-27/no_datastores/REPO.json"""
import sys
from engine.bench import runner
runner.METHOD_SPECS["fastcoder-no-ds"] = ("fastcoder", {"use_repo": False, "use_common": False})
from engine.cli import main
sys.argv = ["engine"] + sys.argv[1:]
main()
