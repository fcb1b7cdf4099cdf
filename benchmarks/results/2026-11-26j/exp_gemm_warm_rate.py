"""small_gemm.c's arithmetic rate with the weight in L2 / L3 (256 x 256, 768 x 256, 8,192 x 256), 1-6 rows.
Usage (repository root): .venv/bin/python benchmarks/results/2026-11-26j/exp_gemm_warm_rate.py"""
import ctypes, subprocess, time, torch, statistics, tempfile
from pathlib import Path
SRC = Path("engine/native/small_gemm.c")
tmp = Path(tempfile.mkdtemp())
subprocess.run(["cc", "-O2", "-std=c99", "-shared", "-fPIC", "-ffp-contract=off", "-o", str(tmp/"g.so"), str(SRC), "-lm"], check=True)
lib = ctypes.CDLL(str(tmp/"g.so"))
i64, ptr = ctypes.c_int64, ctypes.c_void_p
lib.fc_gemm.restype = None; lib.fc_gemm.argtypes = [ptr, i64, i64, ptr, i64, ptr]
lib.fc_gemm_pack.argtypes = [ptr, i64, i64, ptr]
for (n, k) in [(256, 256), (768, 256), (8192, 256)]:
    w = torch.randn(n, k); panels = torch.empty(-(-n // 16) * 16 * k)
    lib.fc_gemm_pack(w.data_ptr(), n, k, panels.data_ptr())
    for m in (1, 2, 4, 6):
        x = torch.randn(m, k); y = torch.empty(m, n)
        reps = max(1, 20_000_000 // (n * k))
        ts = []
        for _ in range(7):
            t = time.perf_counter()
            for _ in range(reps):
                lib.fc_gemm(x.data_ptr(), m, k, panels.data_ptr(), n, y.data_ptr())
            ts.append((time.perf_counter() - t) / reps)
        t = statistics.median(ts)
        print(f"W {n}x{k} ({n*k*4/1024:.0f} KiB) rows {m}: {t*1e6:8.1f} us  {m*n*k/t/1e9:5.1f} GMAC/s  {n*k*4/t/1e9:5.1f} GB/s", flush=True)
