"""The model's confidence along the reference (teacher forcing over prompt + ``ar`` output): per task, the max
probability and entropy of the next-token distribution at every position. A step at context length n knows the
distribution that produced its last committed token (position n - 2): a feature for the acceptance estimate."""
from exp_paths import DATA, HERE as _HERE, MODEL, ROOT  # noqa: F401 (also sets sys.path)
import os, sys, pickle
import numpy as np, torch
torch.set_num_threads(1)
from measure_drafting import replay_setup
repo, kind, out = sys.argv[1], sys.argv[2], sys.argv[3]
loaded, tasks, refs, common, repos = replay_setup(MODEL, repo, "stdlib", 10, 0, 128, kind)
res = {}
with torch.no_grad():
    for t in tasks:
        ids = list(t.prompt_ids) + list(refs[t.task_id])
        logits = loaded.model(torch.tensor([ids])).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        p = lp.exp()
        res[t.task_id] = dict(n_prompt=len(t.prompt_ids), pmax=p.max(-1).values.numpy(),
                              ent=(-(p * lp).sum(-1)).numpy(), ids=np.array(ids))
pickle.dump(res, open(out, "wb"))
print(repo, kind, len(res))
