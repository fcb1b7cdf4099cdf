#!/bin/bash
# The first A/B of the step loop (ab_first/; ab_second/ ran fim-block pygls and function jinja2 with --repeats 3).
site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
out=${OUT:-benchmarks/results/2026-11-29d/ab_first}; mkdir -p $out
for cell in "function pluggy" "fim-block pygls" "function jinja2" "fim-line pluggy"; do
  set -- $cell
  PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python -m engine bench \
    --model ../shared/models/tiny-py-coder --repo $site/$2 --common stdlib --tasks 10 --max-new-tokens 128 \
    --seed 0 --threads 1 --task-kind $1 --methods ar,fastcoder,fastcoder-step-by-step --no-headroom --repeats 2 \
    --json $out/$1_$2.json > $out/$1_$2.log 2>&1
done
