from exp_paths import DATA, HERE as _HERE, MODEL, ROOT  # noqa: F401 (also sets sys.path)
import pickle, sys, numpy as np, torch
from exp_sim import rate, cfun
from engine.acceptance import SOURCE_STRIDE, ALTERNATIVE_STRIDE, DEPTH_BUCKETS, SHARE_EDGES, MATCH_EDGES
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(MODEL)
V = len(tok)
strs = tok.convert_ids_to_tokens(list(range(V)))
def cls(t):
    s = tok.convert_tokens_to_string([strs[t]]) if 0 <= t < V else ""
    return [("\n" in s), s.strip() == "" and "\n" not in s, s.strip().isidentifier(), (s.strip() != "" and not any(ch.isalnum() for ch in s)), s.startswith(" ")]
CLS = np.array([cls(t) for t in range(V)], dtype=np.float32)
NS, NM = len(SHARE_EDGES) + 1, len(MATCH_EDGES) + 1
def feats(s):
    n = len(s["tokens"])
    if n == 0: return np.zeros((0, 1), np.float32)
    q = s["probs"] if s["probs"] is not None else np.full(n, 0.5)
    q = np.clip(q, 1e-4, 1 - 1e-4)
    keys = s["keys"] if s["keys"] is not None else np.zeros(n, np.int64)
    alt = keys >= ALTERNATIVE_STRIDE; k = keys % ALTERNATIVE_STRIDE
    m = k % NM; sh = (k // NM) % NS
    par = s["parents"]
    nchild = np.bincount(par + 1, minlength=n + 1)
    sib = nchild[par + 1]; kids = nchild[1:]
    # descendants count
    desc = np.zeros(n)
    for i in range(n - 1, -1, -1):
        if par[i] >= 0: desc[par[i]] += 1 + desc[i]
    src = s["sources"].astype(np.int64)
    bits = np.stack([(src >> b) & 1 for b in (0, 1, 2, 3, 6)], 1).astype(np.float32)
    pop = bits.sum(1, keepdims=True)
    last = int(s["last"][-1])
    parent_tok = np.where(par >= 0, s["tokens"][np.maximum(par, 0)], last)
    F = [np.log(q / (1 - q))[:, None], np.minimum(s["depths"], 12)[:, None] / 12, (s["depths"] == 1)[:, None],
         alt[:, None], np.eye(NM)[m], np.eye(NS)[sh], np.log1p(sib)[:, None], np.log1p(kids)[:, None],
         np.log1p(desc)[:, None], bits, pop, CLS[s["tokens"]], CLS[parent_tok], np.full((n, 1), np.log(s["ctx_len"]) / 7),
         s["weights"][:, None]]
    return np.concatenate([np.asarray(f, np.float32).reshape(n, -1) for f in F], 1)
def dataset(steps):
    X, y = [], []
    for s in steps:
        n = len(s["tokens"])
        if not n: continue
        reached = {-1, *s["path"]}
        F = feats(s)
        for i in range(n):
            if int(s["parents"][i]) in reached:
                X.append(F[i]); y.append(i in s["path"])
    return np.array(X), np.array(y, np.float32)
def fit(X, y, hidden=0, l2=1e-3, epochs=300):
    X = torch.tensor(X); y = torch.tensor(y)
    mu, sd = X.mean(0), X.std(0) + 1e-6
    Xn = ((X - mu) / sd).clamp(-5, 5)
    if hidden:
        net = torch.nn.Sequential(torch.nn.Linear(X.shape[1], hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
    else:
        net = torch.nn.Linear(X.shape[1], 1)
    opt = torch.optim.Adam(net.parameters(), lr=0.01, weight_decay=l2)
    for e in range(epochs):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(net(Xn)[:, 0], y)
        loss.backward(); opt.step()
    return lambda F: torch.sigmoid(net(((torch.tensor(F) - mu) / sd).clamp(-5, 5))[:, 0]).detach().numpy()
repos = ["pluggy", "jinja2", "pygls"]
data = {r: pickle.load(open(f"{DATA}/wide-{r}-function.pkl", "rb")) for r in repos}
DS = {r: dataset(data[r]) for r in repos}
def ll(p, y):
    p = np.clip(p, 1e-4, 1 - 1e-4); return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
for hidden in ():
    for r in repos:
        tr = [x for x in repos if x != r]
        X = np.concatenate([DS[x][0] for x in tr]); y = np.concatenate([DS[x][1] for x in tr])
        torch.manual_seed(0)
        model = fit(X, y, hidden)
        Xt, yt = DS[r]
        cur_p = 1 / (1 + np.exp(-Xt[:, 0]))
        def qf(s):
            if not len(s["tokens"]): return np.zeros(0)
            return model(feats(s))
        print(f"hidden={hidden} {r}: nodes {len(yt)} base rate {yt.mean():.3f} logloss current {ll(cur_p, yt):.4f} new {ll(model(Xt), yt):.4f}"
              f" | rate current {rate(data[r], lambda s: s['probs']):.3f} new {rate(data[r], qf):.3f}", flush=True)

# ablation: drop groups of columns (logistic), mean new rate over held-out repos
F0 = feats(data["pluggy"][5])
groups = {"q": [0], "depth": [1, 2], "alt": [3], "match": list(range(4, 4 + NM)), "share": list(range(4 + NM, 4 + NM + NS))}
c = 4 + NM + NS
groups["sib"] = [c]; groups["kids"] = [c + 1]; groups["desc"] = [c + 2]; c += 3
groups["srcbits"] = list(range(c, c + 6)); c += 6
groups["tokcls"] = list(range(c, c + 5)); c += 5
groups["parcls"] = list(range(c, c + 5)); c += 5
groups["ctx"] = [c]; groups["weight"] = [c + 1]
assert c + 2 == F0.shape[1], (c, F0.shape)
import sys as _s
only = _s.argv[1:] 
for name, cols in [("none", [])] + list(groups.items()):
    keep = [i for i in range(F0.shape[1]) if i not in cols]
    rates = []
    for r in repos:
        tr = [x for x in repos if x != r]
        X = np.concatenate([DS[x][0] for x in tr])[:, keep]; y = np.concatenate([DS[x][1] for x in tr])
        torch.manual_seed(0); model = fit(X, y, 0)
        rates.append(rate(data[r], lambda s: model(feats(s)[:, keep]) if len(s["tokens"]) else np.zeros(0)))
    print("drop", name, " ".join("%.3f" % x for x in rates), flush=True)
