#!/bin/bash
# The nine cells (ar,copyspec,suffix,fastcoder, 10 tasks, 128 tokens, 1 thread) with D_c = the model-output
# datastore (build_outputs.sh) and D_c = the standard library, alternating (SPECS, default below). Only fastcoder
# reads D_c: the other methods are the same in both.
source "$(dirname "$0")/../2026-11-25h/exp_env.sh"
OUTPUTS=${OUTPUTS:-$OUT/ds_outputs}
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
cd "$ROOT"
for spec in ${SPECS:-outputs-r1 stdlib-r1 outputs-r2}; do common=${spec%-*}
  [ "$common" = outputs ] && common=$OUTPUTS
  out=$OUT/${CELLS_DIR:-cells}/$spec; mkdir -p "$out"
  for kind in function fim-block fim-line; do for repo in jinja2 pluggy pygls; do
    PYTHONPATH=$ROOT $PY -m engine bench --model "$SHARED/models/tiny-py-coder" \
      --repo "$SITE/$repo" --common "$common" --tasks 10 --max-new-tokens 128 --seed 0 \
      --threads 1 --task-kind $kind --methods ar,copyspec,suffix,fastcoder --no-headroom \
      --json "$out/${kind}_$repo.json" --markdown "$out/${kind}_$repo.md" > "$out/${kind}_$repo.log" 2>&1
  done; done
  echo "$spec done $(date +%T)"
done
