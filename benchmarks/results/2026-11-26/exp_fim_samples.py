# Experiment (left out): FIM-form samples for the model-output D_c. Usage: PKGS N NEW_TOKENS OUT.npy (then add the
# documents to a store and replay with exp_replay.sh; benchmarks/README.md "Update 2026-11-26").
"""FIM-form model outputs: cursor at a line start, the next paragraph (up to a blank line) removed, the model writes the middle."""
import sys, random, time, numpy as np, torch
import os; ROOT = os.path.dirname(os.path.abspath(__file__)) + "/../../.."; sys.path.insert(0, ROOT)
from pathlib import Path
torch.set_num_threads(1)
from engine.model import load_model
from engine.bench.tasks import build_fim_ids
from engine.common_datastore import corpus_files
from engine.decoder import SpeculativeDecoder
import sysconfig; SP = sysconfig.get_paths()['purelib'] + '/'
PKGS = sys.argv[1].split(','); N = int(sys.argv[2]); NEW = int(sys.argv[3])
loaded = load_model(ROOT + '/../shared/models/tiny-py-coder'); tok = loaded.tokenizer
files = [f for p in PKGS for f in corpus_files(SP + p)[1] if f.suffix == '.py' and f.stat().st_size > 3000]
rng = random.Random(3); rng.shuffle(files)
dec = SpeculativeDecoder(loaded, method='fastcoder')
out = []; t0 = time.time()
for f in files:
    if len(out) >= N: break
    text = f.read_text(errors='ignore')
    lines = [i + 1 for i, c in enumerate(text) if c == '\n']
    if len(lines) < 40: continue
    for _ in range(3):
        start = rng.choice(lines[10:-10])
        end = text.find('\n\n', start)
        end = len(text) if end < 0 else end + 1
        ids, *_ = build_fim_ids(tok, text[:start], text[end:], 512)
        r = dec.generate(ids, max_new_tokens=NEW)
        out.append(ids[-24:] + list(r.token_ids))
print('done', len(out), sum(len(x) for x in out), round(time.time() - t0))
np.save(sys.argv[4], np.array(out, dtype=object), allow_pickle=True)
