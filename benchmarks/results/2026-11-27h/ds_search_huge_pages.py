"""Fresh D_c searches (fc_ds_search: the longest matching suffix, binary search over the match length, each probe a
suffix-array search) with the caches evicted between them (a 64 MB sweep, as a verify forward streams ~45 MB): the
store's arrays on 4 KB pages (as loaded) against copies on 2 MB pages (engine.huge_pages), interleaved. Queries: 64-token
windows of jinja2's source. Needs D_c built (any `fastcoder bench --common stdlib` run) in the user cache.
Usage (repository root): .venv/bin/python benchmarks/results/2026-11-27h/ds_search_huge_pages.py [rounds]"""
import glob
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from engine.datastore.store import Datastore
from engine import huge_pages
from engine.native import library

from engine.cache_paths import cache_root  # noqa: E402

path = sorted(glob.glob(str(cache_root() / "datastores" / "*")))[0]
a = Datastore.load(path)
def on_huge(arr):
    buf = huge_pages.empty_bytes(arr.nbytes)
    out = buf.view(arr.dtype)[: arr.size]
    out[:] = arr
    return out
b = Datastore(on_huge(a._tokens), on_huge(a._sa), a.vocab_size, a.num_documents, a.tokenizer_fingerprint)
print("huge pages:", open("/proc/self/smaps_rollup").read().split("AnonHugePages:")[1].split("\n")[0].strip())
lib = library()
fn = lib.fc_ds_search
# queries: windows of jinja2's tokens
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(str(ROOT.parent / "shared" / "models" / "tiny-py-coder"))
src = "".join(open(f).read() for f in sorted(glob.glob(str(ROOT / ".venv/lib/python3.11/site-packages/jinja2/*.py"))))
ids = np.array(tok(src)["input_ids"], dtype=np.int64)
rng = np.random.default_rng(0)
sweep = np.ones((64 << 20) // 8)
st = np.zeros(8 + 64, np.int64)
T = {"4k": [], "2m": []}
N = int(sys.argv[1]) if len(sys.argv) > 1 else 400
for r in range(N):
    at = int(rng.integers(64, len(ids)))
    ctx = np.ascontiguousarray(ids[at - 64: at])
    for name, ds in (("4k", a), ("2m", b)) if r % 2 else (("2m", b), ("4k", a)):
        sweep += 1.0  # evict (a forward streams ~45 MB)
        args = ds._native_match_search()[2]
        t = time.perf_counter_ns()
        n = fn(args.ctypes.data, st.ctypes.data, ctx.ctypes.data, 64, 64, 2, 16, 1)
        T[name].append(time.perf_counter_ns() - t)
for k, v in T.items():
    v = np.array(v) / 1e3
    print(k, f"median {np.median(v):.1f} us mean {v.mean():.1f} p90 {np.percentile(v, 90):.1f} max {v.max():.0f}")
