#!/bin/bash
# usage: ab2.sh tag rounds "repos"
tag=$1; rounds=$2; repos=$3
mkdir -p /tmp/fc/ab_$tag
for r in $(seq 1 $rounds); do for repo in $repos; do for w in a b; do
  cd /tmp/wt_$w && HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 PYTHONPATH=. timeout 1200 .venv/bin/python /tmp/fc/steps.py bench --model /work/shared/models/tiny-py-coder --repo /work/main/.venv/lib/python3.11/site-packages/$repo --common stdlib --tasks 10 --max-new-tokens 128 --seed 0 --threads 1 --task-kind function --methods fastcoder --no-headroom --no-progress --json /tmp/fc/ab_$tag/${w}_${repo}_$r.json > /tmp/fc/ab_$tag/${w}_${repo}_$r.log 2>&1
done; done; done
