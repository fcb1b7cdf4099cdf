import time, torch, numpy as np
torch.set_num_threads(1)
from transformers import AutoModelForCausalLM
from engine.native.screened_head import screened_head
m = AutoModelForCausalLM.from_pretrained("../shared/models/tiny-py-coder")
h = screened_head(m.lm_head)
ids = torch.randint(0, 8192, (1, 300))
with torch.no_grad():
    hs = m.model(ids).last_hidden_state[0]
for rows in [1,2,3,4,5,8,12,16]:
    x = hs[:rows].contiguous()
    ts=[]
    for _ in range(300):
        t=time.perf_counter(); h.argmax(x); ts.append(time.perf_counter()-t)
    ts.sort()
    print(rows, "min %.1f us  p50 %.1f us" % (ts[0]*1e6, ts[len(ts)//2]*1e6))
t=time.perf_counter()
for _ in range(300): m.lm_head(hs[:1])
print("float head 1 row", (time.perf_counter()-t)/300*1e6)
