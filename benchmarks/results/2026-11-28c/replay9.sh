#!/bin/bash
# usage: replay9.sh TAG COMMON [extra args]
TAG=$1; COMMON=$2; shift 2
cd "$(dirname "$0")/../../.."
for kind in function fim-line fim-block; do for repo in jinja2 pluggy pygls; do
PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/replay_methods.py \
  --repo .venv/lib/python3.11/site-packages/$repo --task-kind $kind --tasks 10 --common $COMMON \
  --methods fastcoder "$@" --json benchmarks/results/2026-11-28c/replay/${TAG}_${kind}_${repo}.json > benchmarks/results/2026-11-28c/replay/${TAG}_${kind}_${repo}.log 2>&1
done; done
