#!/usr/bin/env bash
# Alternating A/B per cell of the nine: arms $A and $B (default old, new), the order swapped every cell, each arm's
# run with its engine worktree /tmp/ab/$TREE_<arm> (default /tmp/ab/<arm>) and its c(n): the curve file $CURVE_<arm>
# (FASTCODER_VERIFY_COST), or measured afresh before the cell where unset. This session's runs:
#   OUT=/tmp/ab/run1 bash ab_cells.sh; OUT=/tmp/ab/run2 bash ab_cells.sh          # 0e9aae0 (old) vs 806e4bf (new)
#   A=stale B=fresh TREE_stale=new TREE_fresh=new CURVE_stale=stale_curve/curve_cached_0409.json \
#     OUT=/tmp/ab/stale bash ab_cells.sh                                         # the curve of 04:09 vs a fresh one
# Set-up (from the repository root): git worktree add /tmp/ab/old 0e9aae0; git worktree add /tmp/ab/new 806e4bf;
# ln -s $PWD/.venv /tmp/ab/old/.venv (and new); ln -s $PWD/../shared /tmp/ab/shared; a cache folder /tmp/ab/cache
# holding links to the user cache's datastores, native and probes folders and an empty verify_cost folder.
# Per-cell ratios: python pair_cells.py old new /tmp/ab/run1 /tmp/ab/run2.
set -u
here=$(cd "$(dirname "$0")" && pwd)
a=${A:-old}; b=${B:-new}; out=${OUT:-/tmp/ab/out}; mkdir -p "$out/$a" "$out/$b"
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 FASTCODER_CACHE_DIR=/tmp/ab/cache
site=$(cd /tmp/ab/${TREE_old:-old} && .venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
i=0
for kind in ${KINDS:-function fim-block fim-line}; do for repo in ${REPOS:-jinja2 pluggy pygls}; do
  if [ $((i % 2)) -eq 0 ]; then arms="$a $b"; else arms="$b $a"; fi; i=$((i+1))
  for arm in $arms; do
    rm -f /tmp/ab/cache/verify_cost/*
    tree_var=TREE_$arm; curve_var=CURVE_$arm; curve=${!curve_var:-}
    [ -n "$curve" ] && curve=$(cd "$here" && realpath "$curve")
    (cd /tmp/ab/${!tree_var:-$arm} && FASTCODER_VERIFY_COST=$curve PYTHONPATH=$PWD .venv/bin/python -m engine bench \
      --model ../shared/models/tiny-py-coder --repo "$site/$repo" --common stdlib --tasks 10 --max-new-tokens 128 \
      --seed 0 --threads 1 --task-kind "$kind" --methods ar,suffix,fastcoder --no-headroom --repeats ${REPEATS:-2} \
      --json "$out/$arm/${kind}_$repo.json" > "$out/$arm/${kind}_$repo.log" 2>&1)
  done
done; done
echo "done $(date +%T)"
