"""Does the model's confidence at the last verified position predict whether a tree's first level is accepted, beyond
the depth-1 estimates? Per fastcoder tree step of a bench run: the depth-1 estimates' sum (the chance of a hit the
builder assumed), whether a depth-1 node was accepted, and the model's top-1 minus top-2 logit at the position that
chose the pending token (teacher-forced afterwards over the generation's context with the plain model). Written to
$OUT (.npz) at exit. Usage: as `python -m engine bench ...` with `--methods fastcoder`."""
import atexit
import os
import sys

import numpy as np
import torch

import engine.generation as gen_module
from engine.native.step import BoundVerify

ROWS = []  # (est, hit, size, past) of the current generation
GENS = []  # (context, rows)
real_verify = BoundVerify.verify_draft


def verify_draft(self, pending, tree, past, ahead):
    t = tree.tree() if getattr(tree, "in_builder", False) else tree
    got = real_verify(self, pending, tree, past, ahead)
    if len(t):
        first = t.depths == 1
        ROWS.append((float(np.asarray(t.probs)[first].sum()), len(got[0]) > 0, len(t), past))
    return got


BoundVerify.verify_draft = verify_draft
real_run = gen_module.Generation.run
MODEL = {}


def run(self):
    ROWS.clear()
    res = real_run(self)
    if type(self.drafter).__name__ == "FastCoderDrafter" and ROWS:
        GENS.append((self.context[:len(self.ids) + len(self.out)].copy(), list(ROWS)))
        MODEL["m"] = self.model
    return res


gen_module.Generation.run = run


@atexit.register
def dump():
    model = MODEL.get("m")
    est, hit, size, margin = [], [], [], []
    with torch.inference_mode():
        for ctx, rows in GENS:
            ids = torch.tensor(ctx[None, :], dtype=torch.long)
            logits = model(input_ids=ids).logits[0].float()
            top = torch.topk(logits, 2, dim=-1).values
            m = (top[:, 0] - top[:, 1]).numpy()
            for e, h, s, past in rows:  # pending at index past; chosen by the logits at past - 1
                if past - 1 < len(m):
                    est.append(e), hit.append(h), size.append(s), margin.append(m[past - 1])
    np.savez(os.environ.get("OUT", "/tmp/margin.npz"), est=np.array(est), hit=np.array(hit), size=np.array(size),
             margin=np.array(margin))
    print(f"margin probe: {len(est)} tree steps from {len(GENS)} generations", file=sys.stderr)


from engine.cli import main  # noqa: E402

sys.argv = ["engine"] + sys.argv[1:]
main()
