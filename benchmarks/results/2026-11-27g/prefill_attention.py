"""The prefill's attention on this CPU: torch's scaled_dot_product_attention, causal, 1 x 4 heads x L x 64 float32, 1 thread,
its flash and math backends and a plain matmul-softmax-matmul, at L = 300, 700, 1000 (ms and GFLOP/s of the causal
work). Usage: python benchmarks/results/2026-11-27g/prefill_attention.py"""
import torch, time
import torch.nn.functional as F
torch.set_num_threads(1)
from torch.nn.attention import sdpa_kernel, SDPBackend
for L in (300, 700, 1000):
    q = torch.randn(1, 4, L, 64); k = torch.randn(1, 4, L, 64); v = torch.randn(1, 4, L, 64)
    res = {}
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("math", SDPBackend.MATH)):
        with sdpa_kernel(be):
            for _ in range(3): F.scaled_dot_product_attention(q, k, v, is_causal=True)
            t = time.perf_counter()
            for _ in range(10): o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            res[name] = (time.perf_counter() - t) / 10 * 1e3
    # manual: matmul + mask + softmax
    mask = torch.full((L, L), float('-inf')).triu(1)
    for _ in range(2): torch.softmax(q @ k.transpose(-1, -2) * 0.125 + mask, -1) @ v
    t = time.perf_counter()
    for _ in range(10): o2 = torch.softmax(q @ k.transpose(-1, -2) * 0.125 + mask, -1) @ v
    res["bmm"] = (time.perf_counter() - t) / 10 * 1e3
    flops = 4 * L * L / 2 * 64 * 4
    print(L, {k: "%.2f ms %.1f GF/s" % (v, flops / v / 1e6) for k, v in res.items()})
