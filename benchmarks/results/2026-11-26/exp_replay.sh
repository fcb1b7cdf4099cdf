#!/bin/bash
# Oracle replay (benchmarks/compare_drafts.py: fastcoder's trajectory, SuffixDecoding drafting at the same
# contexts, c(n) of this machine) of the nine cells for each D_c given (default: stdlib and $OUT/ds_outputs):
# prints D_c, task kind, repository, fastcoder's tokens per step, draft tokens per step, tokens per unit of
# verify cost, SuffixDecoding's tokens per unit of verify cost, and their ratio.
source "$(dirname "$0")/../2026-11-25h/exp_env.sh"
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
cd "$ROOT"
for common in ${COMMONS:-stdlib $OUT/ds_outputs}; do
  for kind in function fim-line fim-block; do for repo in pluggy jinja2 pygls; do
    PYTHONPATH=$ROOT $PY benchmarks/compare_drafts.py --repo "$SITE/$repo" --task-kind $kind --tasks 10 \
      --common "$common" 2>/dev/null | $PY -c "
import json, sys; d = json.loads(sys.stdin.read()); f, s = d['fastcoder'], d['suffix']
print('$(basename $common)', '$kind', '$repo', f['tokens_per_step'], f['draft_tokens_per_step'], f['tokens_per_cost'],
      s['tokens_per_cost'], round(f['tokens_per_cost'] / s['tokens_per_cost'], 3))"
  done; done
done
