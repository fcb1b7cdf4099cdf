"""Why each native step loop call ended (fastcoder bench in-process, one repeat). Usage: loop_reasons.py KIND REPO"""
import os, sys, collections, sysconfig
sys.path.insert(0, ".")
import torch; torch.set_num_threads(1)
from engine.native import step as S, draft_ahead as DA, step_loop as L
kind, repo = sys.argv[1], sys.argv[2]
site = sysconfig.get_paths()["purelib"]
why = collections.Counter(); per = []
real = S.BoundVerify.verify_loop
def vl(self, pending, tree, past, ahead, loop):
    got = real(self, pending, tree, past, ahead, loop)
    per.append(len(got[4]) + 1)
    vp, lp = ahead.vp, loop.lp
    if len(got[4]) + 1 >= loop.max_steps: r = "max_steps"
    elif not got[3]: r = f"not drafted (found {int(vp[DA.VP_FOUND])})"
    elif vp[DA.VP_RETRIEVED]: r = f"turn {int(vp[DA.VP_RETRIEVED])}"
    elif vp[DA.VP_NEXT_N] < 0: r = "uncut"
    elif vp[DA.VP_CACHE_LEN_OUT] < 0: r = "cache_len_out"
    elif lp[L.LP_NEED_COUNTED] and not self.la[11]: r = "not counted"
    elif vp[DA.VP_CTX_LEN] + len(got[1]) >= vp[DA.VP_BUCKET_END]: r = "bucket"
    else: r = "other (rows/touch/capacity)"
    why[r] += 1
    return got
S.BoundVerify.verify_loop = vl
import tempfile
from engine import cli
cli.main(["bench", "--model", "../shared/models/tiny-py-coder", "--repo", f"{site}/{repo}", "--common", "stdlib",
          "--tasks", "10", "--max-new-tokens", "128", "--seed", "0", "--threads", "1", "--task-kind", kind,
          "--methods", "fastcoder", "--no-headroom", "--repeats", "1", "--json", os.path.join(tempfile.mkdtemp(), "b.json")])
print(kind, repo, "calls", len(per), "steps", sum(per), "mean steps/call %.2f" % (sum(per) / len(per)), why.most_common())
