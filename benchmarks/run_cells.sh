#!/usr/bin/env bash
# The benchmark's nine cells: task kinds (KINDS) x third-party repositories (REPOS), 10 tasks x 128 new tokens each,
# greedy, 1 torch thread, D_c the standard library, every method of METHODS in one `fastcoder bench` run per cell
# (interleaved per task), each task set REPEATS times; EXTRA: more bench options (e.g. --token-healing). One JSON and
# log per cell into OUT/. The table:
#   python benchmarks/summarize_runs.py OUT/*.json
# $1, optional: a Python script run in place of `python -m engine` (an A/B variant of the engine; it gets the same
# arguments). ~6 minutes with the defaults on a 2-core CPU. SuffixDecoding needs `scripts/setup_suffix.sh` first.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-benchmarks/results/$(date -u +%F)/cells}; mkdir -p "$out"
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
if [ -n "${1:-}" ]; then run=("$1"); else run=(-m engine); fi
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for kind in ${KINDS:-function fim-block fim-line}; do for repo in ${REPOS:-jinja2 pluggy pygls}; do
  .venv/bin/python "${run[@]}" bench --model "${MODEL:-../shared/models/tiny-py-coder}" \
    --repo "$site/$repo" --common stdlib --tasks 10 --max-new-tokens 128 --seed 0 \
    --threads 1 --task-kind "$kind" --methods "${METHODS:-ar,suffix,fastcoder}" --no-headroom \
    --repeats "${REPEATS:-2}" ${EXTRA:-} --json "$out/${kind}_$repo.json" > "$out/${kind}_$repo.log" 2>&1
done; done
echo "done $(date +%T): $out"
