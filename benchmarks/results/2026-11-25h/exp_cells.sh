#!/bin/bash
# The nine cells, the clone's head and a base commit (BASE_COMMIT, default the session's start 51cd1a6; worktree base) alternating (SPECS, default below): ar,copyspec,suffix,fastcoder, 10 tasks, 1 thread
source "$(dirname "$0")/exp_env.sh"
base_worktree
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
for spec in ${SPECS:-final-r1 base-r3 final-r2}; do tree=${spec%-*}; round=${spec#*-};
  if [ $tree = base ]; then src=$BASE; else src=$ROOT; fi
  out=$OUT/${CELLS_DIR:-cells3}/$spec; mkdir -p $out
  cd $src
  for kind in function fim-block fim-line; do for repo in jinja2 pluggy pygls; do
    PYTHONPATH=$src $PY -m engine bench --model $SHARED/models/tiny-py-coder \
      --repo $SITE/$repo --common stdlib --tasks 10 --max-new-tokens 128 --seed 0 \
      --threads 1 --task-kind $kind --methods ar,copyspec,suffix,fastcoder --no-headroom \
      --json $out/${kind}_$repo.json --markdown $out/${kind}_$repo.md > $out/${kind}_$repo.log 2>&1
  done; done
  echo "$spec done $(date +%T)"
done
