#!/bin/bash
# A/B: FASTCODER_NATIVE_PROPOSE=0 vs 1, alternating, fastcoder + ar
source "$(dirname "$0")/exp_env.sh"
cd $ROOT; export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
for round in 1 2; do for repo in pluggy jinja2 pygls; do for kind in function fim-line; do for np_ in 0 1; do
  out=$OUT/ab/${repo}_${kind}_np${np_}_r$round.json
  FASTCODER_NATIVE_PROPOSE=$np_ .venv/bin/python -m engine bench --model $SHARED/models/tiny-py-coder --repo $SITE/$repo --common stdlib --tasks 10 --max-new-tokens 128 --seed 0 --threads 1 --task-kind $kind --methods ar,fastcoder --no-headroom --json $out > /dev/null 2>&1
  .venv/bin/python -c "
import json; d=json.load(open('$out'))['methods']; f=d['fastcoder']; a=d['ar']
print('$repo $kind np=$np_ r$round', 'ar %.3f fc %.3f speedup %.3f step_share %.2f%% step_ms %.3f acc %.3f lossless %s' % (a['ms_per_token'], f['ms_per_token'], f['speedup'], 100*f['step_retrieval_share'], f['step_retrieval_ms_per_step'], f['mean_accepted_length'], f['lossless']))"
done; done; done; done
