#!/bin/bash
site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
out=${OUT:-/tmp/s30/abb}; mkdir -p $out
for cell in "function pluggy" "fim-block pygls" "function jinja2" "fim-line pluggy"; do
  set -- $cell
  PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python -m engine bench \
    --model ../shared/models/tiny-py-coder --repo $site/$2 --common stdlib --tasks 10 --max-new-tokens 128 \
    --seed 0 --threads 1 --task-kind $1 --methods ar,fastcoder,fastcoder-step-by-step --no-headroom --repeats 2 \
    --json $out/$1_$2.json > $out/$1_$2.log 2>&1
done
