"""Held-out replay: fastcoder whose acceptance estimator starts from a logistic model of the bucket features
(trained on the other repositories' wide trees), as alpha pseudo-observations per bucket."""
from exp_paths import DATA, HERE as _HERE, MODEL, ROOT  # noqa: F401 (also sets sys.path)
import sys, copy, pickle, numpy as np, torch
torch.set_num_threads(1)
import replay_methods as RM
from measure_drafting import replay_setup
from engine.bench import runner
from engine.cost_model import load_or_measure_verify_cost
from engine.acceptance import (AcceptanceEstimator, ALTERNATIVE_STRIDE, DEPTH_BUCKETS, SHARE_EDGES, MATCH_EDGES,
                               NUM_BUCKETS, SOURCE_SLOTS)
NS, NM, D = len(SHARE_EDGES) + 1, len(MATCH_EDGES) + 1, DEPTH_BUCKETS
def key_features(keys):
    keys = np.asarray(keys, np.int64)
    alt = keys >= ALTERNATIVE_STRIDE
    k = keys % ALTERNATIVE_STRIDE
    m = k % NM; s = (k // NM) % NS; d = (k // (NM * NS)) % D; src = k // (NM * NS * D)
    bits = np.stack([(src >> b) & 1 for b in range(7)], 1)
    F = np.concatenate([np.eye(D)[d], np.eye(NS)[s], np.eye(NM)[m], alt[:, None], bits, bits.sum(1, keepdims=True),
                        alt[:, None] * np.eye(NS)[s]], 1)
    return F.astype(np.float32)
def nodes(steps):
    K, y = [], []
    for st in steps:
        if st["keys"] is None or not len(st["tokens"]): continue
        reached = {-1, *st["path"]}
        for i in range(len(st["tokens"])):
            if int(st["parents"][i]) in reached:
                K.append(int(st["keys"][i])); y.append(i in st["path"])
    return np.array(K), np.array(y, np.float32)
def fit(X, y, l2=1e-3, epochs=400):
    X, y = torch.tensor(X), torch.tensor(y)
    net = torch.nn.Linear(X.shape[1], 1)
    opt = torch.optim.Adam(net.parameters(), lr=0.02, weight_decay=l2)
    for _ in range(epochs):
        opt.zero_grad(); torch.nn.functional.binary_cross_entropy_with_logits(net(X)[:, 0], y).backward(); opt.step()
    return lambda F: torch.sigmoid(net(torch.tensor(F))[:, 0]).detach().numpy().astype(np.float64)
if __name__ == "__main__":
    kind = sys.argv[1]; alphas = [float(a) for a in sys.argv[2].split(",")]
    if len(sys.argv) > 3 and sys.argv[3] == "cheap":
        import engine.cost_model as CM
        CM.verification_is_cheap = lambda cost: True
    repos = ["pluggy", "jinja2", "pygls"]
    data = {} if len(sys.argv) > 4 else {r: nodes(pickle.load(open(f"{DATA}/wide-{r}-{kind}.pkl", "rb"))) for r in repos}
    allkeys = np.arange(NUM_BUCKETS)
    FK = key_features(allkeys)
    tables = {}
    train = sys.argv[4].split(",") if len(sys.argv) > 4 else None
    if train:
        data.update({t: nodes(pickle.load(open(f"{DATA}/wide-{t}.pkl", "rb"))) for t in train})
    for r in repos:
        src = train or [o for o in repos if o != r]
        K = np.concatenate([data[o][0] for o in src]); y = np.concatenate([data[o][1] for o in src])
        torch.manual_seed(0)
        tables[r] = fit(key_features(K), y)(FK)
    setups = {r: replay_setup(MODEL, f".venv/lib/python3.11/site-packages/{r}", "stdlib", 10, int(__import__("os").environ.get("SEED", "0")), 128, kind) for r in repos}
    cost = load_or_measure_verify_cost(setups[repos[0]][0])
    orig_new = runner._new_estimator
    for alpha in [0.0] + alphas:
        out = []
        for r in repos:
            loaded, tasks, refs, common, rp = setups[r]
            warm = AcceptanceEstimator()
            warm.accepted[:] = alpha * tables[r]; warm.tried[:] = alpha
            runner._new_estimator = lambda warm=warm: copy.deepcopy(warm)
            res = RM.replay_method(loaded, "fastcoder", tasks, refs, rp, common, cost)
            out.append((res["predicted_speedup_without_drafting"], res["accepted_length"], res["mean_tree"]))
        runner._new_estimator = orig_new
        print(kind, "alpha", alpha, out, flush=True)
