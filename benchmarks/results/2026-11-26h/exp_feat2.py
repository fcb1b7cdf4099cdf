from exp_paths import DATA, HERE as _HERE, MODEL, ROOT  # noqa: F401 (also sets sys.path)
exec(open(_HERE / "exp_feat.py").read().split("# ablation")[0].replace("for hidden in ():", "for hidden in []:"))
F0 = feats(data["pluggy"][5])
c = 4 + NM + NS
cols = {"q": [0], "depth": [1, 2], "alt": [3], "match": list(range(4, 4 + NM)), "share": list(range(4 + NM, c)),
        "sib": [c], "kids": [c + 1], "desc": [c + 2], "srcbits": list(range(c + 3, c + 9)), "tokcls": list(range(c + 9, c + 14)),
        "parcls": list(range(c + 14, c + 19)), "ctx": [c + 19], "weight": [c + 20]}
def run(names, hidden=0):
    keep = sorted(sum((cols[n] for n in names), []))
    rates = []
    for r in repos:
        tr = [x for x in repos if x != r]
        X = np.concatenate([DS[x][0] for x in tr])[:, keep]; y = np.concatenate([DS[x][1] for x in tr])
        torch.manual_seed(0); model = fit(X, y, hidden)
        rates.append(rate(data[r], lambda s: model(feats(s)[:, keep]) if len(s["tokens"]) else np.zeros(0)))
    return " ".join("%.3f" % x for x in rates)
keyonly = ["depth", "alt", "match", "share", "srcbits"]
print("key-only", run(keyonly))
print("key-only+q", run(keyonly + ["q"]))
print("key+tree (sib,kids,desc)", run(keyonly + ["sib", "kids", "desc"]))
print("key+tree+tok", run(keyonly + ["sib", "kids", "desc", "tokcls", "parcls"]))
print("all-but-ctx", run([k for k in cols if k != "ctx"]))
print("all-but-ctx mlp16", run([k for k in cols if k != "ctx"], 16))
