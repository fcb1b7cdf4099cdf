"""Proxy for the width-0 rule of engine.indent_shift: the context copy's draft (Python path) on 150 random cut
points per file of pluggy and six jinja2 files, the file's own next 16 tokens as the truth; accepted prefix tokens
without a shift, with the first rule (bare "\n" shifted too) and with the shipped one. Run from the repository root:
  PYTHONPATH=$PWD HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/results/2026-11-28e/width_rule_probe.py"""
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]  # the clone; ../shared beside it
MODEL = str(ROOT.parent / "shared" / "models" / "tiny-py-coder")
SITE = next((ROOT / ".venv" / "lib").glob("python3*/site-packages"))
import numpy as np, random
from transformers import AutoTokenizer
from engine.model import TokenInfo
from engine.context_match import SuffixMatchIndex
from engine import indent_shift as ish
tok = AutoTokenizer.from_pretrained(MODEL)
info = TokenInfo.from_tokenizer(tok, 8192)
class Old(ish.IndentTable):
    def line_width(self, toks, p):
        codes, v = self._codes, len(self._codes)
        for i in range(p - 1, max(p - 1 - ish.SCAN_LINE, 0) - 1, -1):
            t = toks[i]
            if 0 <= t < v and codes[t] >= 0:
                return int(codes[t]) & 255
        return -1
    def shifted(self, t, delta):
        v = len(self._codes)
        if delta == 0 or not 0 <= t < v or self._codes[t] < 0: return t
        code = int(self._codes[t]); nl, w = code >> 8, (code & 255) + delta
        if not 1 <= nl <= ish.MAX_NEWLINES or not 0 <= w <= ish.MAX_WIDTH: return -1
        return int(self.table[3 + v + (nl - 1) * (ish.MAX_WIDTH + 1) + w])
texts = tok.batch_decode([[i] for i in range(8192)])
old = Old(texts)
from engine import native
import glob
rng = random.Random(2)
stats = {"plain": 0, "old": 0, "new": 0}; nd = {"old": 0, "new": 0}; ex = []
for f in sorted(glob.glob(f"{SITE}/pluggy/*.py")) + sorted(glob.glob(f"{SITE}/jinja2/*.py"))[:6]:
    ids = tok(open(f).read())["input_ids"]
    if len(ids) < 200: continue
    for _ in range(150):
        cut = rng.randrange(100, len(ids) - 10)
        ctx = ids[max(0, cut - 900):cut]; truth = ids[cut:cut + 16]
        res = {}
        for name, table in (("plain", None), ("old", old), ("new", info.indent)):
            idx = SuffixMatchIndex(24, factor=3.0, min_prob=0.1, max_tokens=16, depth_bound=False, indent=table)
            idx._native_ok = lambda: False
            idx.reset(np.array(ctx)); d = idx.draft()[0]
            a = 0
            while a < len(d) and a < len(truth) and d[a] == truth[a]: a += 1
            res[name] = (d, a); stats[name] += a
        for k in ("old", "new"):
            if res[k][0] != res["plain"][0]:
                nd[k] += 1
                if k == "old" and len(ex) < 6: ex.append((tok.decode(res["plain"][0][:6]), tok.decode(res["old"][0][:6]), tok.decode(truth[:6]), res["plain"][1], res["old"][1]))
print("accepted prefix tokens", stats, "drafts changed", nd)
for e in ex: print(repr(e))
