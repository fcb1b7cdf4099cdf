#!/bin/bash
# A/B: the previous session's head (ea4c745, worktree $BASE) vs the working tree, alternating; ar + fastcoder.
# KINDS and ROUNDS select the cells (default: fim-line fim-block, 1 round).
source "$(dirname "$0")/exp_env.sh"
base_worktree
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
for round in $(seq 1 ${ROUNDS:-1}); do for repo in pluggy jinja2 pygls; do for kind in ${KINDS:-fim-line fim-block}; do for tree in base new; do
  if [ $tree = base ]; then dir=$BASE; else dir=$ROOT; fi
  out=$OUT/ab/${repo}_${kind}_${tree}_r$round.json
  mkdir -p $OUT/ab
  (cd $dir && PYTHONPATH=$dir $PY -m engine bench --model $SHARED/models/tiny-py-coder --repo $SITE/$repo --common stdlib --tasks 10 --max-new-tokens 128 --seed 0 --threads 1 --task-kind $kind --methods ar,fastcoder --no-headroom --json $out > /dev/null 2>&1)
  $PY -c "
import json; d=json.load(open('$out'))['methods']; f=d['fastcoder']; a=d['ar']
print('$repo $kind $tree r$round', 'ar %.3f fc %.3f speedup %.3f step_share %.2f%% step_ms %.3f acc %.3f lossless %s' % (a['ms_per_token'], f['ms_per_token'], f['speedup'], 100*f['step_retrieval_share'], f['step_retrieval_ms_per_step'], f['mean_accepted_length'], f['lossless']))"
done; done; done; done
