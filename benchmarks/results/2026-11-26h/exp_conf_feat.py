"""Do step-level features separate hit steps from misses? The model's confidence in the last committed token
(exp_conf.py) and the previous step's accepted length, added to the bucket features of exp_feat.py;
leave-one-repository-out logistic fits scored by exp_sim.py's best-first selection (predicted tokens per unit cost)."""
from exp_paths import DATA, HERE as _HERE, MODEL, ROOT  # noqa: F401 (also sets sys.path)
import sys
exec(open(_HERE / "exp_feat.py").read().split("# ablation")[0].replace("for hidden in ():", "for hidden in []:"))
CONF = {r: pickle.load(open(f"{DATA}/conf-{r}-function.pkl", "rb")) for r in repos}
for r in repos:
    prev = {}
    for s in data[r]:
        c = CONF[r][s["task"]]; n = s["ctx_len"]
        assert (c["ids"][n - 8:n] == s["last"]).all()
        pm = c["pmax"][n - 5:n - 1]
        s["step"] = np.array([np.log(pm[-1] / (1 - pm[-1] + 1e-6) + 1e-6), c["ent"][n - 2], pm.mean(), pm.min(),
                              np.log1p(prev.get(s["task"], 0)), float(prev.get(s["task"], 0) > 0)], np.float32)
        prev[s["task"]] = len(s["path"])
base_feats = feats
STEPCOLS = {"conf": [0, 1], "conf4": [2, 3], "prev": [4, 5]}
def run(names, step_names=(), hidden=0):
    keep = sorted(sum((cols[n] for n in names), []))
    sc = sorted(sum((STEPCOLS[n] for n in step_names), []))
    def F(s):
        f = base_feats(s)[:, keep]
        return np.concatenate([f, np.repeat(s["step"][sc][None], len(f), 0)], 1)
    DSk = {}
    for r in repos:
        X, y = [], []
        for s in data[r]:
            if not len(s["tokens"]): continue
            reached = {-1, *s["path"]}; f = F(s)
            for i in range(len(f)):
                if int(s["parents"][i]) in reached: X.append(f[i]); y.append(i in s["path"])
        DSk[r] = (np.array(X), np.array(y, np.float32))
    rates = []
    for r in repos:
        tr = [x for x in repos if x != r]
        X = np.concatenate([DSk[x][0] for x in tr]); y = np.concatenate([DSk[x][1] for x in tr])
        torch.manual_seed(0); model = fit(X, y, hidden)
        rates.append(rate(data[r], lambda s: model(F(s)) if len(s["tokens"]) else np.zeros(0)))
    return " ".join("%.3f" % x for x in rates)
c = 4 + NM + NS
cols = {"q": [0], "depth": [1, 2], "alt": [3], "match": list(range(4, 4 + NM)), "share": list(range(4 + NM, c)),
        "sib": [c], "kids": [c + 1], "desc": [c + 2], "srcbits": list(range(c + 3, c + 9)), "tokcls": list(range(c + 9, c + 14)),
        "parcls": list(range(c + 14, c + 19)), "ctx": [c + 19], "weight": [c + 20]}
keyonly = ["depth", "alt", "match", "share", "srcbits"]
print("engine estimates", " ".join("%.3f" % rate(data[r], lambda s: s["probs"]) for r in repos))
def orc(s):
    q = np.zeros(len(s["tokens"])); q[s["path"]] = 1.0; return q
print("oracle", " ".join("%.3f" % rate(data[r], orc) for r in repos))
print("key-only", run(keyonly), flush=True)
print("key+conf", run(keyonly, ["conf"]), flush=True)
print("key+conf+conf4", run(keyonly, ["conf", "conf4"]), flush=True)
print("key+prev", run(keyonly, ["prev"]), flush=True)
print("key+conf+prev", run(keyonly, ["conf", "conf4", "prev"]), flush=True)
print("key+q+conf+prev", run(keyonly + ["q"], ["conf", "conf4", "prev"]), flush=True)
