"""A blocked causal attention kernel for the prefill (exp_prefill_attention.c) against torch's SDPA, one layer of
tiny-py-coder's shape (4 heads x 64, 1,024 tokens), 1 thread: maximum difference on a few shapes, then the median
time of 7 calls. Tried and not kept (9.0 against 10.0 ms a layer after three rounds of tuning).

Build and run (from the repository root):
    gcc -O2 -std=c99 -shared -fPIC -ffp-contract=off -fopenmp -I engine/native -o /tmp/fc_prefill_attention.so \
        benchmarks/results/2026-11-26p/exp_prefill_attention.c engine/native/small_gemm.c -lm
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/results/2026-11-26p/exp_prefill_attention.py
"""
import ctypes, torch, time, torch.nn.functional as F
torch.set_num_threads(1)
lib = ctypes.CDLL('/tmp/fc_prefill_attention.so')
i64, ptr = ctypes.c_int64, ctypes.c_void_p
lib.fc_prefill_attention.argtypes = [ptr, ptr, ptr, ptr, ptr, ptr, i64, i64, i64, i64, i64, ctypes.c_float, ptr]
def run(q, k, v, scale):
    h, m, d = q.shape[1], q.shape[2], q.shape[3]; s = k.shape[2]
    out = torch.empty(m, h, d)
    st = lambda t: (ctypes.c_int64*2)(t.stride(1), t.stride(2))
    rc = lib.fc_prefill_attention(q.data_ptr(), st(q), k.data_ptr(), st(k), v.data_ptr(), st(v), h, k.shape[1], m, s, d, scale, out.data_ptr())
    assert rc == 0, rc
    return out
def t(f, n=7):
    f(); ts=[]
    for _ in range(n):
        a=time.perf_counter(); f(); ts.append(time.perf_counter()-a)
    return sorted(ts)[n//2]*1e3
g = torch.Generator().manual_seed(0)
with torch.inference_mode():
    for (m, s) in ((1024, 1024), (7, 7), (37, 100), (500, 1024), (1000, 1000)):
        q=torch.randn(1,4,m,64,generator=g)*2; k=torch.randn(1,4,s,64,generator=g)*2; v=torch.randn(1,4,s,64,generator=g)
        mask = torch.ones(m, s, dtype=torch.bool).tril(s-m)[None,None]
        ref = F.scaled_dot_product_attention(q,k,v,attn_mask=mask).transpose(1,2)[0]
        out = run(q,k,v,0.125)
        print(m, s, 'maxdiff', (ref-out).abs().max().item())
    q=torch.randn(1,4,1024,64); k=torch.randn(1,4,1024,64); v=torch.randn(1,4,1024,64)
    print('sdpa causal ms', t(lambda: F.scaled_dot_product_attention(q,k,v,is_causal=True)))
    print('prefill kernel ms', t(lambda: run(q,k,v,0.125)))
