#!/usr/bin/env bash
# Prepares .device/ (git-ignored, carried to the lent GPU machine by the device tool's `carry`): the model, the
# stdlib D_c's tokens (its suffix array is rebuilt there: 17 MB carried instead of 50), the three repositories,
# arctic-inference's SuffixDecoding sources (built there against that machine's Python) and the two wheels the
# GPU image lacks. Run from the repository root after scripts/setup.sh and scripts/setup_suffix.sh.
set -euo pipefail
grep -qx "/.device/" .git/info/exclude 2>/dev/null || echo "/.device/" >> .git/info/exclude
rm -rf .device && mkdir -p .device/whl .device/stdlib .device/repos .device/arctic/pkg/arctic_inference/suffix_decoding
cp -r ../shared/models/tiny-py-coder .device/model && chmod -R u+w .device/model
# the stdlib D_c of this model's tokenizer (built here first if missing: ~1 min)
ds=$(HF_HUB_OFFLINE=1 PYTHONPATH=$PWD .venv/bin/python - <<'PY'
from transformers import AutoTokenizer
from engine.common_datastore import (corpus_files, corpus_fingerprint, default_cache_dir, load_common_datastore,
                                     tokenizer_fingerprint)
tok = AutoTokenizer.from_pretrained("../shared/models/tiny-py-coder")
load_common_datastore(tok, "stdlib", progress=False)
root, files = corpus_files(None)
print(default_cache_dir() / f"{tokenizer_fingerprint(tok)}-{corpus_fingerprint(root, files)}")
PY
)
cp "$ds/tokens.npy" "$ds/meta.json" .device/stdlib/
for r in pluggy jinja2 pygls; do cp -r .venv/lib/python3.11/site-packages/$r .device/repos/; done
find .device/repos -name __pycache__ -prune -exec rm -rf {} +
tmp=$(mktemp -d)
.venv/bin/python -m pip download -q --no-deps --no-build-isolation arctic-inference==0.3.0 -d "$tmp"
tar xzf "$tmp"/arctic_inference-0.3.0.tar.gz -C "$tmp"
cp -r "$tmp"/arctic_inference-0.3.0/csrc/suffix_decoding .device/arctic/csrc
cp "$tmp"/arctic_inference-0.3.0/arctic_inference/__init__.py .device/arctic/pkg/arctic_inference/
cp "$tmp"/arctic_inference-0.3.0/arctic_inference/suffix_decoding/*.py .device/arctic/pkg/arctic_inference/suffix_decoding/
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .device/whl pydivsufsort==0.0.20 platformdirs==4.14.8
du -sh .device
