# Experiment script (2026-11-25 session i): run from the repository root. One plain decode forward of
# tiny-py-coder on a 600-token KV cache, timed with and without the fused plan's weights pinned, alternating
# blocks of 5 forwards in one process (150 blocks each) (1 torch thread); medians per block, spread over blocks.
import contextlib, os, sys, time
import numpy as np
import torch
sys.path.insert(0, os.getcwd())
torch.set_num_threads(1)
from engine.decoder import SpeculativeDecoder, decode_one_token
from engine.lean_forward import weights_pinned
from engine.model import load_model
from engine.kv_cache import new_kv_cache

loaded = load_model("../shared/models/tiny-py-coder", device="cpu")
model = loaded.model
SpeculativeDecoder(loaded, "ar").generate(list(range(100, 700)), max_new_tokens=4)  # plans, packs, installs
cache = new_kv_cache(model)
ids = torch.tensor([list(range(100, 700))])
with torch.inference_mode():
    model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    past = cache.get_seq_length()
    blocks = {True: [], False: []}
    for b in range(150):
        for pin in (b % 2 == 0, b % 2 == 1):
            ctx = weights_pinned(model) if pin else contextlib.nullcontext()
            ts = []
            with ctx:
                for _ in range(5):
                    t = time.perf_counter()
                    decode_one_token(model, cache, 123)
                    ts.append(time.perf_counter() - t)
                    cache.crop(-1)  # drop the entry just added
            blocks[pin].append(np.median(ts) * 1e3)
for pin, v in blocks.items():
    print(f"pinned={pin}: forward median of block medians {np.median(v):.3f} ms (p10 {np.percentile(v, 10):.3f}, "
          f"p90 {np.percentile(v, 90):.3f}) over {len(v)} blocks")
d = np.array(blocks[False]) - np.array(blocks[True])
print(f"unpinned - pinned, paired blocks: median {np.median(d) * 1e3:.1f} us (p10 {np.percentile(d, 10) * 1e3:.1f}, "
      f"p90 {np.percentile(d, 90) * 1e3:.1f})")
