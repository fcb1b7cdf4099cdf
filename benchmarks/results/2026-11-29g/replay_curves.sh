#!/usr/bin/env bash
# The oracle replay (benchmarks/replay_methods.py) of the nine cells for SuffixDecoding and fastcoder, the drafters
# sizing and every step scored on a given c(n) curve: this session's (curve_1647.json, a plain step 2.10 ms at 512
# cached tokens) and the faster-memory morning's (2026-11-29f/stale_curve/curve_cached_0409.json, 1.42 ms). What the
# ratio would be on the machine of each curve, without its run-to-run noise. One JSON line a method per cell into
# OUT/<curve>/<kind>_<repo>.jsonl; the table: python replay_curves_table.py OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
here=benchmarks/results/2026-11-29g
out=${OUT:-$here/replay}
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for curve in "1647=$here/curve_1647.json" "0409=benchmarks/results/2026-11-29f/stale_curve/curve_cached_0409.json"; do
  name=${curve%%=*}; file=${curve#*=}; mkdir -p "$out/$name"
  for kind in function fim-block fim-line; do for repo in jinja2 pluggy pygls; do
    FASTCODER_VERIFY_COST=$file .venv/bin/python benchmarks/replay_methods.py --repo "$site/$repo" \
      --task-kind "$kind" --tasks 10 --methods suffix,fastcoder > "$out/$name/${kind}_$repo.jsonl" 2> "$out/$name/${kind}_$repo.log"
  done; done
done
echo "done $(date +%T): $out"
