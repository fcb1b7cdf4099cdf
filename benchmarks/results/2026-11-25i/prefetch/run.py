# Times fc_sa_rows cold, before (old.so) and after (new.so) the prefetching; see README.md in this folder.
import ctypes
import glob
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../../../.."))
sys.path.insert(0, ROOT)
from engine.datastore import Datastore  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

tok = AutoTokenizer.from_pretrained(os.path.join(ROOT, "../shared/models/tiny-py-coder"))
ds = Datastore.load(glob.glob(os.path.expanduser("~/.cache/fastcoder/datastores/*"))[0])  # the stdlib D_c
junk = np.ones(64 << 20, np.uint8)
libs = {k: ctypes.CDLL(os.path.join(HERE, f"{k}.so")) for k in ("old", "new")}
i64, p = ctypes.c_int64, ctypes.c_void_p
for lib in libs.values():
    lib.bench.argtypes = [p, i64, i64, p, ctypes.c_int, i64, i64, i64, i64, p, p, i64]
for text in ["        self.", "    def ", "import os\n", "        return self._"]:
    q = np.asarray(tok(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
    n, left, cnt = ds.longest_match(q, 2)
    res = {}
    for rep in range(3):
        for k, lib in libs.items():
            out = np.zeros(20)
            lib.bench(ds._bytes.ctypes.data, ds._n, ds._width, ds._sa.ctypes.data, int(ds._sa.dtype == np.int64), n,
                      left, cnt, 20, out.ctypes.data, junk.ctypes.data, junk.size)
            res.setdefault(k, []).extend(out[1:] / 1e3)
    print(repr(text), "cnt", cnt, "  ".join(f"{k} median {np.median(v):.1f} us (p10 {np.percentile(v, 10):.1f}, "
                                            f"p90 {np.percentile(v, 90):.1f})" for k, v in res.items()))
