"""The model's two plain steps, shaped after gpt-fast's generate.py: small functions with explicit tensors and
positions. :func:`prefill` fills a KV cache with a prompt; :func:`decode_one_token` appends one token. A draft
tree's forward is :func:`engine.verify.tree_forward`; the decoding loop that uses all three is
:mod:`engine.decoder`.
"""

from __future__ import annotations

import threading

import torch

from .draft_tree import DraftTree
from .cuda_graphs import graphed, graphed_tree_logits
from .lean_forward import forward_greedy, forward_logits, greedy_tree_step
from .verify import model_device


@torch.inference_mode()
def prefill(model, cache, prompt: torch.Tensor) -> torch.Tensor:
    """Fill ``cache`` with ``prompt`` ((1, T) int64); returns the (V,) logits after its last token.

    Only the last position's logits are computed (``logits_to_keep=1``): the LM head over every
    prompt position was ~30% of a 1,024-token prefill on CPU.
    """
    return forward_logits(model, prompt, cache, logits_to_keep=1)[0, -1]


#: Per thread: the (1, 1) int64 CPU tensors of a plain step's token and position, and numpy views of them
#: (:func:`decode_one_token`).
_STEP_INPUTS = threading.local()


def _step_inputs(token: int, position: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(1, 1) int64 CPU tensors holding ``token`` and ``position``: this thread's two buffers, written through
    numpy views (two torch calls a plain step, ~50 us with the caches cold after the previous forward, were
    what made the ids and positions). A caller uses them before its next call on the same thread."""
    held = getattr(_STEP_INPUTS, "held", None)
    if held is None:
        ids, pos = torch.zeros((1, 1), dtype=torch.long), torch.zeros((1, 1), dtype=torch.long)
        held = _STEP_INPUTS.held = (ids, pos, ids.numpy(), pos.numpy())
    held[2][0, 0] = token
    held[3][0, 0] = position
    return held[0], held[1]


@torch.inference_mode()
def decode_one_token(model, cache, token: int, position: int | None = None) -> torch.Tensor:
    """Append one token to ``cache``; returns the (V,) logits that follow it.

    ``position``: the token's position, i.e. the number of tokens ``cache`` holds (the decoder knows it);
    given, a CPU model's step makes no torch call for its inputs (6% of a plain step of tiny-py-coder on one
    thread, 512 and 1,000 cached tokens: :func:`_step_inputs`); None: read from the cache.
    """
    if graphed(model) is not None:  # a GPU model's CUDA graph (engine.cuda_graphs)
        logits = graphed_tree_logits(model, cache, token, _NO_TREE,
                                     cache.get_seq_length() if position is None else position)
        if logits is not None:
            return logits[0]
    device = model_device(model)
    if position is not None and device.type == "cpu":
        ids, pos = _step_inputs(token, position)
        return forward_logits(model, ids, cache, pos)[0, -1]
    ids = torch.tensor([[token]], dtype=torch.long, device=device)
    return forward_logits(model, ids, cache)[0, -1]


_NO_TREE = DraftTree.empty()  # a plain step's (greedy_tree_step)


def decode_one_token_greedy(model, cache, token: int, position: int) -> int:
    """:func:`decode_one_token` for greedy decoding: the argmax of the logits that follow ``token``, without the
    logits (:func:`engine.lean_forward.forward_greedy`: the LM head's argmax by int8 screening, the same token;
    requires :func:`engine.lean_forward.greedy_ready` and a CPU model). ``position``: as for
    :func:`decode_one_token`. Returns a token id. On the native stack, called where autograd is off (the decoder's
    generation), one native call (:func:`engine.lean_forward.greedy_tree_step` with no draft tree)."""
    chosen = greedy_tree_step(model, cache, token, _NO_TREE, position)
    if chosen is not None:
        return chosen[0]
    return _decode_one_token_greedy(model, cache, token, position)


@torch.inference_mode()
def _decode_one_token_greedy(model, cache, token: int, position: int) -> int:
    ids, pos = _step_inputs(token, position)
    return forward_greedy(model, ids, cache, pos)[0]
