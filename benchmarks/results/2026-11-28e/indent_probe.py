"""Proxy: would indentation-relative retrieval draft more accepted tokens than exact-token retrieval?
Truth = the file's own tokens (held out); datastore = the other files of the package. Greedy draft: longest suffix
match (1..MAXN tokens) -> the continuation after its most recent occurrence, up to DRAFT tokens; accepted = common
prefix with the truth. Relative stream: every newline token that carries indentation becomes (NL, indent delta),
and the following tokens are unchanged."""
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]  # the clone; ../shared beside it
MODEL = str(ROOT.parent / "shared" / "models" / "tiny-py-coder")
SITE = next((ROOT / ".venv" / "lib").glob("python3*/site-packages"))
import glob, sys, re
from collections import defaultdict
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(MODEL)
pkg = sys.argv[1]
files = sorted(glob.glob(f"{SITE}/{pkg}/**/*.py", recursive=True))
vocab = tok.convert_ids_to_tokens(list(range(tok.vocab_size)))
texts = {i: tok.decode([i]) for i in range(tok.vocab_size)}
nl_indent = {}  # token id -> indent width (for tokens that are "\n" + spaces only)
for i, s in texts.items():
    if re.fullmatch(r"\n+ *", s) and s:
        nl_indent[i] = len(s) - len(s.rstrip(" ")) if s.strip(" ") else 0
        nl_indent[i] = len(s) - len(s.rstrip(" "))
by_width = {}
for i, w in nl_indent.items():
    s = texts[i]
    if s.count("\n") == 1: by_width[w] = i
def relative(ids):
    """(NL, delta) for newline-indent tokens (delta vs the previous newline's width), else the id."""
    out, cur = [], 0
    for t in ids:
        if t in nl_indent and texts[t].count("\n") == 1:
            w = nl_indent[t]; out.append(("NL", w - cur)); cur = w
        else: out.append(t)
    return out
MAXN, DRAFT = 8, 8
SELF = len(sys.argv) > 3
MODE = sys.argv[2] if len(sys.argv) > 2 else 'recent'
def build(streams):
    idx = defaultdict(list)  # n-gram tuple -> list of (stream, end position)
    for si, s in enumerate(streams):
        for e in range(1, len(s)):
            for n in range(1, MAXN + 1):
                if e - n < 0: break
                idx[tuple(s[e - n:e])].append((si, e))
    return idx
def width_at(s, e):
    for i in range(e - 1, -1, -1):
        if s[i] in nl_indent: return nl_indent[s[i]]
    return 0
def draft(idx, streams, ctx, shift=False):
    for n in range(min(MAXN, len(ctx)), 0, -1):
        occ = idx.get(tuple(ctx[-n:]))
        if occ and SELF:
            occ = [(si, e) for si, e in occ if e < len(ctx)]
        if occ:
          counts = defaultdict(int)
          for si, e in occ[-64:]:
            d = streams[si][e:min(e + DRAFT, len(ctx))] if SELF else streams[si][e:e + DRAFT]
            if shift:
                delta = width_at(ctx, len(ctx)) - width_at(streams[si], e)
                out = []
                for t in d:
                    if t in nl_indent and texts[t].count("\n") == 1:
                        t = by_width.get(nl_indent[t] + delta)
                        if t is None: break
                    out.append(t)
                d = out
            if MODE == "freq":
                counts[tuple(d[:4])] += 1
                continue
            return d, n
          best = max(counts, key=counts.get)
          return list(best), n
    return [], 0
tot = {"exact": 0, "relative": 0}; positions = 0; both = 0
toks = {f: tok(open(f).read())["input_ids"] for f in files}
toks = {f: v for f, v in toks.items() if len(v) > 50}
fs = list(toks)
for hold in fs[:min(len(fs), 12)]:
    others = [toks[hold]] if SELF else [toks[f] for f in fs if f != hold]
    rel_others = [relative(s) for s in others]
    ie, ir = build(others), build(rel_others)
    truth = toks[hold]; rtruth = relative(truth)
    for t in range(16, len(truth) - 1, 3):
        positions += 1
        d, n = draft(ie, others, truth[:t])
        a = 0
        while a < len(d) and t + a < len(truth) and d[a] == truth[t + a]: a += 1
        dr, nr = draft(ir, rel_others, rtruth[:t])
        b = 0
        while b < len(dr) and t + b < len(rtruth) and dr[b] == rtruth[t + b]: b += 1
        ds, _ = draft(ie, others, truth[:t], shift=True)
        c = 0
        while c < len(ds) and t + c < len(truth) and ds[c] == truth[t + c]: c += 1
        tot["shift"] = tot.get("shift", 0) + c
        tot["exact"] += a; tot["relative"] += b
print(pkg, "positions", positions, "accepted tokens per position: exact %.3f relative %.3f shifted %.3f" % (
    tot["exact"] / positions, tot["relative"] / positions, tot["shift"] / positions))
