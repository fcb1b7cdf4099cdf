#!/usr/bin/env bash
# Replay: fastcoder's trees sized on the stale cached curve (A) or on today's (B), both scored on today's curve.
cd "$(dirname "$0")/../../.."
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
for kind in function fim-block fim-line; do for repo in jinja2 pluggy pygls; do
  for v in cached now; do
    FASTCODER_VERIFY_COST=benchmarks/results/2026-11-29b/cost_$v.json .venv/bin/python benchmarks/replay_methods.py --repo $site/$repo \
      --task-kind $kind --tasks 10 --methods suffix,fastcoder --score-measured 2>/dev/null \
      | grep '^{' | sed "s/^/$kind $repo $v /"
  done
done; done
