"""Replay: the estimator's buckets get alpha pseudo-observations at a logistic model's rate, the model refit every
`every` verifications on this run's own bucket counts (no offline data)."""
from exp_paths import DATA, HERE as _HERE, MODEL, ROOT  # noqa: F401 (also sets sys.path)
import sys, os, copy, numpy as np, torch
torch.set_num_threads(1)
import replay_methods as RM
from measure_drafting import replay_setup
from engine.bench import runner
from engine.cost_model import load_or_measure_verify_cost
from engine.acceptance import AcceptanceEstimator, NUM_BUCKETS
from exp_logit_prior import key_features
FK = None
def refit(acc, tried, l2, w0=None):
    idx = np.nonzero(tried)[0]
    X = torch.tensor(FK[idx]); a = torch.tensor(acc[idx], dtype=torch.float32); n = torch.tensor(tried[idx], dtype=torch.float32)
    net = torch.nn.Linear(X.shape[1], 1)
    if w0 is not None: net.load_state_dict(w0)
    opt = torch.optim.LBFGS(net.parameters(), max_iter=50)
    def closure():
        opt.zero_grad()
        z = net(X)[:, 0]
        loss = (-(a * torch.nn.functional.logsigmoid(z) + (n - a) * torch.nn.functional.logsigmoid(-z))).sum() / n.sum() \
               + l2 * (net.weight ** 2).sum()
        loss.backward(); return loss
    opt.step(closure)
    with torch.no_grad():
        return torch.sigmoid(net(torch.tensor(FK))[:, 0]).numpy().astype(np.float64), net.state_dict()
class Online(AcceptanceEstimator):
    alpha = 8.0; every = 16; min_obs = 50; l2 = 1e-3
    def __init__(self):
        super().__init__()
        self.real_acc = np.zeros(NUM_BUCKETS); self.real_tried = np.zeros(NUM_BUCKETS)
        self.n_updates = 0; self.w = None
    def update(self, keys, parents, path):
        before_a, before_t = self.accepted.copy(), self.tried.copy()
        super().update(keys, parents, path)
        self.real_acc += self.accepted - before_a; self.real_tried += self.tried - before_t
        self.n_updates += 1
        if self.n_updates % self.every == 0 and self.real_tried.sum() >= self.min_obs:
            t, self.w = refit(self.real_acc, self.real_tried, self.l2, self.w)
            self.accepted[:] = self.real_acc + self.alpha * t
            self.tried[:] = self.real_tried + self.alpha
if __name__ == "__main__":
    kind = sys.argv[1]
    FK = key_features(np.arange(NUM_BUCKETS))
    repos = ["pluggy", "jinja2", "pygls"]
    seed = int(os.environ.get("SEED", "0"))
    setups = {r: replay_setup(MODEL, f".venv/lib/python3.11/site-packages/{r}", "stdlib", 10, seed, 128, kind) for r in repos}
    cost = load_or_measure_verify_cost(setups[repos[0]][0])
    for variant in sys.argv[2].split(","):
        out = []
        for r in repos:
            loaded, tasks, refs, common, rp = setups[r]
            if variant == "base":
                runner._new_estimator = lambda: AcceptanceEstimator()
            else:
                a, e = variant.split("/")
                Online.alpha, Online.every = float(a), int(e)
                runner._new_estimator = lambda: Online()
            res = RM.replay_method(loaded, "fastcoder", tasks, refs, rp, common, cost)
            out.append((res["predicted_speedup_without_drafting"], res["accepted_length"], res["mean_tree"]))
        print(kind, seed, variant, out, flush=True)
