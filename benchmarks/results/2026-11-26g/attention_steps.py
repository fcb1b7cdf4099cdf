"""ar decode steps of a half-precision model on a GPU with and without cuDNN attention (issue #9's bf16 cells).

Run on the lent GPU machine by device_run.sh (MICRO=1): load_model turns cuDNN attention off for a bf16 model
(engine.model.avoid_per_shape_attention_plans); this times 96 greedy decode steps after a 400-token prompt
that way, then with cuDNN attention back on, then off again, and prints ms per step of each.
"""

from __future__ import annotations

import sys
import time

import torch
from transformers import DynamicCache

from engine import load_model
from engine.decoder import decode_one_token, prefill


def steps_ms(loaded, prompt: torch.Tensor, steps: int) -> float:
    cache = DynamicCache()
    logits = prefill(loaded.model, cache, prompt)
    token = int(logits.argmax())
    sync = torch.cuda.synchronize if loaded.device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        token = int(decode_one_token(loaded.model, cache, token).argmax())
    sync()
    return (time.perf_counter() - t0) * 1e3 / steps


def main(model: str, device: str = "cuda") -> None:
    loaded = load_model(model, device=device, dtype="bfloat16")
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(5, 8000, (1, 400), generator=g).to(loaded.device)
    steps_ms(loaded, prompt, 8)  # warm-up
    for label, cudnn in (("cuDNN attention off (load_model's choice)", False), ("cuDNN attention on", True),
                         ("cuDNN attention off again", False)):
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
        print(f"{label}: {steps_ms(loaded, prompt, 96):.2f} ms per decode step", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
