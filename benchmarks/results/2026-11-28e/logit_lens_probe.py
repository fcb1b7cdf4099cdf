"""Could a tree be pruned inside the forward? The logit lens (final norm, then the tied output embedding) of each
layer's hidden state, scored on whether the file's next token is the model's own greedy choice: AUC of its
log-probability and top-1 agreement with the final layer, 12 files of a package (pluggy). Usage:
  HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/results/2026-11-28e/logit_lens_probe.py pluggy"""
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]  # the clone; ../shared beside it
MODEL = str(ROOT.parent / "shared" / "models" / "tiny-py-coder")
SITE = next((ROOT / ".venv" / "lib").glob("python3*/site-packages"))
"""Offline: how well does an early layer's logit lens predict whether a candidate next token is the model's argmax?"""
import glob, sys, torch, numpy as np
from transformers import AutoModelForCausalLM, AutoTokenizer
torch.set_num_threads(1)
M = MODEL
tok = AutoTokenizer.from_pretrained(M); model = AutoModelForCausalLM.from_pretrained(M).eval()
pkg = sys.argv[1]
files = sorted(glob.glob(f"{SITE}/{pkg}/**/*.py", recursive=True))
rows = []
E = model.lm_head.weight  # (V, d)
norm = model.model.norm
for f in files[:12]:
    ids = tok(open(f).read())["input_ids"][:1024]
    if len(ids) < 64: continue
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model(x, output_hidden_states=True)
        final = out.logits[0].argmax(-1)  # (T,)
        nxt = x[0, 1:]
        for k, h in enumerate(out.hidden_states[1:-1], start=1):
            lg = norm(h[0]) @ E.T  # logit lens
            lp = torch.log_softmax(lg, -1)
            sc = lp[:-1].gather(1, nxt[:, None])[:, 0]
            top = lg.argmax(-1)
            rows.append((k, sc.numpy(), (nxt == final[:-1]).numpy(), (top[:-1] == final[:-1]).numpy()))
        lpf = torch.log_softmax(out.logits[0], -1)[:-1].gather(1, nxt[:, None])[:, 0]
        rows.append((6, lpf.numpy(), (nxt == final[:-1]).numpy(), np.ones(len(nxt), bool)))
from scipy.stats import rankdata
def roc_auc_score(y, s):
    r = rankdata(s); p = y.sum(); n = len(y) - p
    return (r[y].sum() - p * (p + 1) / 2) / (p * n)
for k in range(1, 7):
    s = np.concatenate([r[1] for r in rows if r[0] == k]); y = np.concatenate([r[2] for r in rows if r[0] == k])
    t = np.concatenate([r[3] for r in rows if r[0] == k])
    print(f"layer {k}: n={len(y)} text==argmax {y.mean():.3f} AUC {roc_auc_score(y, s):.3f} top1 agree {t.mean():.3f}")
