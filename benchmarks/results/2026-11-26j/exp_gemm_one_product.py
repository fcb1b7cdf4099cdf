"""small_gemm.c on one 28 MiB weight (28,672 x 256), 1 / 2 / 4 / 6 rows, weights evicted (64 MB streamed) or warm:
ms, GB/s of weights and GMAC/s. Extra arguments are compiler flags (e.g. -DPF=48).
Usage (repository root): .venv/bin/python benchmarks/results/2026-11-26j/exp_gemm_one_product.py [-DPF=48]"""
import ctypes, subprocess, time, torch, statistics, tempfile, sys
from pathlib import Path
SRC = Path("engine/native/small_gemm.c")
tmp = Path(tempfile.mkdtemp())
defs = sys.argv[1:]
subprocess.run(["cc", "-O2", "-std=c99", "-shared", "-fPIC", "-ffp-contract=off", *defs, "-o", str(tmp/"g.so"), str(SRC), "-lm"], check=True)
lib = ctypes.CDLL(str(tmp/"g.so"))
i64, ptr = ctypes.c_int64, ctypes.c_void_p
lib.fc_gemm.restype = None; lib.fc_gemm.argtypes = [ptr, i64, i64, ptr, i64, ptr]
lib.fc_gemm_pack.argtypes = [ptr, i64, i64, ptr]
flush = torch.ones(64 * 2**20 // 4)
n, k = 28672, 256   # 28 MiB, one product
w = torch.randn(n, k); panels = torch.empty(-(-n // 16) * 16 * k)
lib.fc_gemm_pack(w.data_ptr(), n, k, panels.data_ptr())
T = {}
for r in range(15):
    for m in (1, 2, 4, 6):
        x = torch.randn(m, k); y = torch.empty(m, n)
        for mode in ("cold", "warm"):
            if mode == "cold": flush.add_(1)
            else: lib.fc_gemm(x.data_ptr(), m, k, panels.data_ptr(), n, y.data_ptr())
            t = time.perf_counter(); lib.fc_gemm(x.data_ptr(), m, k, panels.data_ptr(), n, y.data_ptr())
            T.setdefault((m, mode), []).append(time.perf_counter() - t)
for key, v in sorted(T.items()):
    t = statistics.median(v)
    print(f"rows {key[0]} {key[1]}: {t*1e3:6.3f} ms  {28/1024/t:5.1f} GB/s  {key[0]*n*k/t/1e9:5.1f} GMAC/s")
