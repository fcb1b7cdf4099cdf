"""A synthetic 28 MiB stream (stream_overlap.c) over 1, 2 or 4 regions, with 0 or 12 FMAs per 64-byte line and a
software prefetch 0 or 32 lines ahead, caches flushed before each call: does streaming overlap arithmetic here?
Usage: .venv/bin/python benchmarks/results/2026-11-26j/exp_stream_overlap.py"""
import ctypes, numpy as np, time, statistics
import pathlib, subprocess, tempfile
so = pathlib.Path(tempfile.mkdtemp()) / "bw.so"
subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(pathlib.Path(__file__).with_name("stream_overlap.c"))], check=True)
lib = ctypes.CDLL(str(so)); lib.run.restype = ctypes.c_float
lib.run.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int]
n = 28 * 1024 * 1024 // 4
w = np.random.rand(n).astype(np.float32); flush = np.ones(64 * 1024 * 1024 // 4, dtype=np.float32)
cfgs = [(s, f, pf) for s in (1, 2, 4) for f in (0, 1) for pf in (0, 32)]
T = {c: [] for c in cfgs}
for r in range(12):
    for c in cfgs:
        flush += 1
        t = time.perf_counter(); lib.run(w.ctypes.data, n, *c); T[c].append(time.perf_counter() - t)
for c in cfgs:
    t = statistics.median(T[c])
    print(f"streams {c[0]} fma/line {c[1]:2d} pf {c[2]:2d}: {t*1e3:6.3f} ms {28/1024/t:5.1f} GB/s")
