#!/usr/bin/env bash
# Oracle replay, fastcoder sized by the format-5 curve (user cache) vs by $OLD_CURVE, both scored on the format-5
# curve; 9 cells x task seeds 0 and 1. Output: curve_replay.txt
cd "$(dirname "$0")/../../.."
SP=.venv/lib/python3.11/site-packages
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 PYTHONPATH=$PWD
for seed in 0 1; do
for kind in function fim-block fim-line; do for r in pluggy jinja2 pygls; do
  new=$(.venv/bin/python benchmarks/replay_methods.py --repo $SP/$r --task-kind $kind --tasks 10 --methods fastcoder --seed $seed 2>/dev/null | tail -1)
  old=$(FASTCODER_VERIFY_COST=$OLD_CURVE .venv/bin/python benchmarks/replay_methods.py --repo $SP/$r --task-kind $kind --tasks 10 --methods fastcoder --seed $seed --score-measured 2>/dev/null | tail -1)
  python3 -c "
import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2])
print('$seed $kind $r', 'old-curve %.3f (%.3f) tree %.2f' % (b['predicted_speedup'], b['predicted_speedup_without_drafting'], b['mean_tree']), 'new-curve %.3f (%.3f) tree %.2f' % (a['predicted_speedup'], a['predicted_speedup_without_drafting'], a['mean_tree']), 'gain %.4f' % (a['predicted_speedup']/b['predicted_speedup']))" "$new" "$old"
done; done; done
