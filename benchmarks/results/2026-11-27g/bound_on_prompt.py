"""What `accepted_vs_random.py` and `chain_vs_tree.py` share: tiny-py-coder (1 thread) with a real 700-token prompt of
third-party code prefilled into a KV cache, and the generation's bound greedy verification on it."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from conftest import TINY_CODER, third_party_sources  # noqa: E402

from engine import load_model  # noqa: E402
from engine.kv_cache import new_kv_cache  # noqa: E402
from engine.verify import greedy_verifier  # noqa: E402


def bound_on_prompt(room: int = 80):
    """``(loaded, ids, context, cache, bound)``: the model, the prompt's 701 ids, the 700 prefilled (``context``), the
    cache (``room`` positions past them) and ``greedy_verifier`` bound to it."""
    torch.set_num_threads(1)
    loaded = load_model(str(TINY_CODER), device="cpu")
    text = third_party_sources(1)[0].read_text(encoding="utf-8")
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"][:701]
    context = len(ids) - 1
    cache = new_kv_cache(loaded.model, context + room)
    with torch.inference_mode():
        loaded.model(input_ids=torch.tensor([ids[:-1]]), past_key_values=cache, use_cache=True, logits_to_keep=1)
    return loaded, ids, context, cache, greedy_verifier(loaded.model, cache)
