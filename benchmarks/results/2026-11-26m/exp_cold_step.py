"""Does drafting between forwards make the forward slower? Time decode_one_token steps alone (as ar) and with a
fastcoder drafter.propose before each (its tree discarded), interleaved in blocks."""
import sys, time
from pathlib import Path
import numpy as np, torch
ROOT = Path(__file__).resolve().parents[3]; sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from measure_drafting import replay_setup
from engine.bench import runner
from engine.decoder import decode_one_token, prefill
from engine.kv_cache import new_kv_cache
torch.set_num_threads(1)
repo = sys.argv[1] if len(sys.argv) > 1 else "jinja2"
MODEL = str(ROOT.parent / "shared" / "models" / "tiny-py-coder")
SITE = ROOT / ".venv" / "lib" / "python3.11" / "site-packages"
loaded, tasks, refs, common, repos = replay_setup(MODEL, str(SITE / repo), "stdlib", 10, 0, 128, "function")
m = loaded.model
res = {"plain": [], "after_propose": [], "after_touch": [], "propose_ms": []}
junk = np.zeros(24 * 2**20 // 8)
for task in tasks[:6]:
    ref = refs[task.task_id]
    dec = runner.make_decoder(loaded, "fastcoder-no-head", repos[task.task_id], common)
    drafter = dec._make_drafter(dec.new_cache())
    prompt = list(task.prompt_ids)
    ctx = np.array(prompt + ref, dtype=np.int64)
    drafter.reset(ctx[:len(prompt)])
    with torch.inference_mode():
        cache = new_kv_cache(m)
        prefill(m, cache, torch.tensor([prompt]))
        pos = len(prompt)
        for i, tok in enumerate(ref[:90]):
            mode = ("plain", "after_propose", "after_touch")[(i // 5) % 3]
            if mode == "after_propose":
                t = time.perf_counter(); drafter.propose(ctx[:pos + 1]); res["propose_ms"].append(time.perf_counter() - t)
            elif mode == "after_touch":
                junk += 1.0  # 24 MB written: the caches evicted
            t = time.perf_counter(); decode_one_token(m, cache, tok, pos); dt = time.perf_counter() - t
            res[mode].append(dt); pos += 1
for k, v in res.items():
    print(f"{k:14s} n={len(v):4d} median {np.median(v)*1e3:.3f} ms  p25 {np.percentile(v,25)*1e3:.3f}  p75 {np.percentile(v,75)*1e3:.3f}")
