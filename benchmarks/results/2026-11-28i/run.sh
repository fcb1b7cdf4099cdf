#!/usr/bin/env bash
# The probes of 2026-11-28i, from the repository root (~6 min on the 2-core machine). Pickles go to /tmp.
set -euo pipefail
HERE=benchmarks/results/2026-11-28i
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
for cell in pluggy:function jinja2:function click:function pluggy:fim-block click:fim-block; do
  repo=${cell%%:*}; kind=${cell##*:}
  .venv/bin/python $HERE/exp_lens.py --repo .venv/lib/python3.11/site-packages/$repo --task-kind $kind --tasks 10 \
    /tmp/lens_${repo}_$kind.pkl
done
.venv/bin/python $HERE/analyze_lens.py --oracle /tmp/lens_*_*.pkl > $HERE/oracle.txt
.venv/bin/python $HERE/analyze_lens.py /tmp/lens_pluggy_function.pkl /tmp/lens_jinja2_function.pkl > $HERE/raw_lens.txt
.venv/bin/python $HERE/tuned_lens.py 2>/dev/null | grep -v Loading > $HERE/tuned_lens.txt
gcc -O2 -mavx2 -o /tmp/l3_stream $HERE/l3_stream.c && gcc -O2 -mavx2 -o /tmp/l3_alternate $HERE/l3_alternate.c
for s in 8 16 20 24 28 32 40 48; do /tmp/l3_stream $s 40; done
for i in 1 2; do /tmp/l3_stream 40 60 0 0; /tmp/l3_stream 40 60 1 16; /tmp/l3_stream 40 60 1 24; done
for i in 1 2; do for s in 32 40 48; do /tmp/l3_alternate $s 60 0; /tmp/l3_alternate $s 60 1; done; done
