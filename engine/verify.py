"""One-forward verification of a draft tree with tree attention, acceptance and KV compaction.

The pending token (chosen last step, not yet in the KV cache) and the flattened draft tree go
through the model in one forward pass with a 4D additive mask (each node sees the context, the
pending token and its own ancestors: SpecInfer/Medusa/REST tree attention). Acceptance walks the
tree from the pending token: greedy descends while a child equals the argmax; sampling draws one
token per visited node from the warped distribution and descends while the draw is a child
(exact: the emitted tokens are ancestral samples of the model; see DESIGN.md, "Verification").
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from . import native
from .acceptance import ALTERNATIVE_STRIDE, SOURCE_STRIDE
from .draft_tree import DraftTree
from .cuda_graphs import graphed_move_rows, graphed_tree_logits
from .kv_cache import move_rows
from .lean_forward import (bind_greedy_verify, forward_greedy, forward_logits, greedy_tree_step,
                           greedy_tree_verify)
from .native.linear import known_argmax


@dataclass(frozen=True)
class SamplingParams:
    """Logit warping as transformers applies it: temperature, then top-k, then top-p.

    ``temperature == 0`` means greedy (argmax); ``top_k == 0`` and ``top_p == 1`` disable those.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self):
        if not (0.0 <= self.temperature < math.inf) or not (0.0 < self.top_p <= 1.0) or self.top_k < 0:
            raise ValueError(f"invalid sampling parameters: temperature={self.temperature} "
                             f"(finite, >= 0), top_p={self.top_p} (in (0, 1]), top_k={self.top_k} (>= 0)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def warp_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities after temperature, top-k and top-p (transformers' logits-processor order).

    Args:
        logits: (..., V) float tensor.
    Returns:
        (..., V) float32 probabilities summing to 1 over the last axis.
    """
    scores = logits.float() / params.temperature
    vocab = scores.shape[-1]
    if 0 < params.top_k < vocab:
        kth = torch.topk(scores, params.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, sorted_idx = torch.sort(scores, descending=False, dim=-1)
        cum = sorted_scores.softmax(-1).cumsum(-1)
        remove_sorted = cum <= (1 - params.top_p)
        remove_sorted[..., -1:] = False  # always keep the most likely token
        remove = remove_sorted.scatter(-1, sorted_idx, remove_sorted)
        scores = scores.masked_fill(remove, float("-inf"))
    return scores.softmax(-1)


def argmax_rows(logits: torch.Tensor) -> list[int]:
    """The argmax of each row of (R, V) logits (the first maximum; a NaN counts as the maximum), as a list.

    On a CPU float32 tensor through numpy: the same indices as ``logits.argmax(-1)``, ~10x cheaper (7 rows
    x 8,192: 6 us against 71 us for torch's reduction, whose fixed cost is most of it). Logits straight from an
    LM head that took their argmax in its own native call (:func:`engine.packed_linear.enable_greedy_head`) are
    not read again: that call's answer, the same indices (:func:`engine.native.linear.known_argmax`)."""
    if logits.device.type == "cpu" and logits.dtype == torch.float32 and not logits.requires_grad:
        known = known_argmax(logits)  # taken inside the LM head's native call (engine.packed_linear)
        if known is not None:
            return known
        return logits.numpy().argmax(-1).tolist()
    return logits.argmax(-1).tolist()


def choose_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """One token from (V,) logits: argmax when greedy, else a draw from :func:`warp_probs`."""
    if params.greedy:
        return argmax_rows(logits[None])[0]
    return int(torch.multinomial(warp_probs(logits, params), 1, generator=generator))


def model_device(model) -> torch.device:
    """The device of ``model``'s LM head, else ``model.device`` (which walks every parameter: ~10 us a call)."""
    weight = getattr(getattr(model, "lm_head", None), "weight", None)
    return weight.device if isinstance(weight, torch.Tensor) else model.device


def model_dtype(model) -> torch.dtype:
    """The dtype of ``model``'s LM head when it is a floating-point one, else ``model.dtype`` (which walks every
    parameter: ~8 us a call)."""
    weight = getattr(getattr(model, "lm_head", None), "weight", None)
    return weight.dtype if isinstance(weight, torch.Tensor) and weight.is_floating_point() else model.dtype


def tree_forward(model, cache, pending: int, tree: DraftTree, past_len: int,
                 prefix: Sequence[int] = ()) -> torch.Tensor:
    """Run ``prefix + [pending] + tree.tokens`` through the model in one pass with tree attention.

    Args:
        model: a transformers causal LM.
        cache: its ``DynamicCache`` holding ``past_len - len(prefix)`` tokens; grows by
            ``len(prefix) + 1 + len(tree)``.
        pending: the token chosen last step (position ``past_len``), or a prompt's last token.
        tree: the draft tree below it.
        prefix: prompt tokens not yet in the cache, before ``pending`` (causal among themselves): a
            prefill that also verifies a draft of the first new tokens.
    Returns:
        (1 + N, V) logits: row 0 predicts the token after ``pending``, row 1 + i the token after node i.

    A GPU model with CUDA graphs (:mod:`engine.cuda_graphs`) replays one for a decode step (no ``prefix``): the
    logits are then a view valid until its next forward.
    """
    if not prefix:
        logits = graphed_tree_logits(model, cache, pending, tree, past_len)
        if logits is not None:
            return logits
    ids, positions, mask = _tree_inputs(model, pending, tree, past_len, prefix)
    return forward_logits(model, ids, cache, positions, mask, 1 + len(tree) if mask is not None else 0)[0]


def _tree_inputs(model, pending: int, tree: DraftTree, past_len: int, prefix: Sequence[int] = ()):
    """A tree forward's inputs: ``(ids, positions, mask)``, ids (1, len(prefix) + 1 + N) int64 and the tree's
    positions and mask (:meth:`DraftTree.forward_inputs`), or None for both when there is one row only (nothing to
    mask; its position follows the cache). A decode step of a float32 CPU model gets them in this thread's reused
    buffers (:func:`_cpu_step_tree_inputs`)."""
    device = model_device(model)
    if not prefix and device.type == "cpu" and model_dtype(model) == torch.float32:
        got = _cpu_step_tree_inputs(pending, tree, past_len)
        if got is not None:
            return got
    ids = torch.tensor([[*prefix, pending, *tree.tokens.tolist()]], dtype=torch.long, device=device)
    if not prefix and len(tree) == 0:
        return ids, None, None
    positions, mask = tree.forward_inputs(past_len, model_dtype(model), device, len(prefix))
    return ids, positions, mask


#: Per thread: the buffers a decode step's tree inputs are written into on a CPU (:func:`_cpu_step_tree_inputs`).
_TREE_INPUTS = threading.local()
_LOW = float(torch.finfo(torch.float32).min)  # a masked-out entry, as DraftTree.attention_mask writes it


class _TreeInputBuffers:
    """One thread's ids ((1, rows) int64), positions ((rows,) int64), parents ((rows,) int64) and flat float32 mask
    buffers with their addresses, at least ``rows`` rows and ``floats`` mask entries."""

    def __init__(self, rows: int, floats: int):
        self.rows, self.floats = rows, floats
        self.ids = torch.zeros((1, rows), dtype=torch.long)
        self.ids_np = self.ids.numpy()
        self.positions = torch.zeros(rows, dtype=torch.long)
        self.parents = np.zeros(rows, dtype=np.int64)
        self.mask = torch.empty(floats, dtype=torch.float32)
        self.addresses = (self.parents.ctypes.data, self.mask.data_ptr(), self.positions.data_ptr())


def _cpu_step_tree_inputs(pending: int, tree: DraftTree, past_len: int):
    """:func:`_tree_inputs`' tensors for a decode step (no prefix) of a float32 CPU model, written by one native
    call (``fc_tree_inputs``, the same values as :meth:`DraftTree.forward_inputs`) into this thread's buffers and
    returned as views of them: valid until this thread's next call. Making them (a tensor from a list, two empty
    tensors, numpy's ``ctypes``, the views) cost ~100-150 us a 7-row step with the caches cold after the previous
    forward; ``ar``'s plain steps reuse their buffers the same way (:func:`engine.steps.decode_one_token`). None
    where the native library is missing or the tree's parents are not a tree (the caller's path then raises)."""
    lib = native.library()
    n = len(tree)
    rows, keys = n + 1, past_len + n + 1
    if lib is None or past_len < 0:
        return None
    buf = getattr(_TREE_INPUTS, "buffers", None)
    if buf is None or buf.rows < rows or buf.floats < rows * keys:  # grown by doubling: a few times per process
        size = (32, 1 << 15) if buf is None else (2 * buf.rows, 2 * buf.floats)
        buf = _TREE_INPUTS.buffers = _TreeInputBuffers(max(rows, size[0]), max(rows * keys, size[1]))
    buf.ids_np[0, 0] = pending
    if not n:
        return buf.ids[:, :1], None, None
    buf.ids_np[0, 1:rows] = tree.tokens
    buf.parents[:n] = tree.parents
    parents, mask, positions = buf.addresses
    if lib.fc_tree_inputs(parents, n, int(past_len), _LOW, mask, positions) != 0:
        return None
    return buf.ids[:, :rows], buf.positions[:rows][None], buf.mask[:rows * keys].view(1, 1, rows, keys)


def accept(logits: torch.Tensor, tree: DraftTree, params: SamplingParams,
           generator: torch.Generator | None,
           choose: Callable[[torch.Tensor], int] | None = None) -> tuple[list[int], int]:
    """Walk the tree and choose the accepted path and the model's own next token.

    Args:
        logits: (1 + N, V) from :func:`tree_forward`.
        choose: the token at each visited position from its (V,) logits, called root first along the
            walk (default :func:`choose_token`); token healing passes a constrained chooser
            (:func:`engine.healing.accept_constrained`).
    Returns:
        ``(path, bonus)``: node indices of the accepted draft tokens (root to leaf, possibly empty)
        and the token the model chose after the last accepted node. Greedy: each accepted node
        equals the argmax at its parent. Sampling: one draw per visited node; descend when the draw
        is a child, else the draw is the bonus token (exact; REST's resampling rule is not).
    """
    if choose is None and params.greedy:
        return walk_greedy(argmax_rows(logits), tree)
    children = tree.children
    path: list[int] = []
    node = -1
    if choose is None:
        def choose(row: torch.Tensor) -> int:
            return choose_token(row, params, generator)
    while True:
        token = choose(logits[node + 1])
        child = children.get((node, token))
        if child is None:
            return path, token
        path.append(child)
        node = child


def walk_greedy(best: list[int], tree: DraftTree) -> tuple[list[int], int]:
    """Greedy acceptance from each row's argmax: ``best`` (1 + N token ids; row 0 follows the pending token, row
    1 + i node i) walked from the root as :func:`accept` walks logits. Returns ``(path, bonus)`` as it does."""
    children = tree.children
    path: list[int] = []
    node = -1
    while True:
        token = best[node + 1]
        child = children.get((node, token))
        if child is None:
            return path, token
        path.append(child)
        node = child


def tree_forward_greedy(model, cache, pending: int, tree: DraftTree, past_len: int) -> list[int]:
    """:func:`tree_forward` without a prompt prefix, for greedy decoding: each row's argmax instead of its logits
    (:func:`engine.lean_forward.forward_greedy`, which requires :func:`engine.lean_forward.greedy_ready`; the
    same indices as ``argmax_rows(tree_forward(...))``). Returns 1 + N token ids, for :func:`walk_greedy`.

    A float32 CPU model on the native stack takes one native call from the tree's arrays
    (:func:`engine.lean_forward.greedy_tree_step`)."""
    chosen = greedy_tree_step(model, cache, pending, tree, past_len)
    if chosen is not None:
        return chosen
    return _tree_forward_greedy_calls(model, cache, pending, tree, past_len)


def _tree_forward_greedy_calls(model, cache, pending: int, tree: DraftTree, past_len: int) -> list[int]:
    """:func:`tree_forward_greedy` through the tensors' path (:func:`engine.lean_forward.forward_greedy`)."""
    ids, positions, mask = _tree_inputs(model, pending, tree, past_len)
    return forward_greedy(model, ids, cache, positions, mask)


def verify_greedy(model, cache, pending: int, tree: DraftTree, past_len: int) -> tuple[list[int], list[int]]:
    """A greedy decode step's verification of ``tree``: :func:`tree_forward_greedy`, :func:`walk_greedy` and
    :func:`compact_cache` (the cache then holds ``past_len + 1 + len(path)`` entries). Returns ``(path, committed)``:
    the accepted node indices and their tokens followed by the model's own next token.

    A float32 CPU model on the native stack does all three in one native call
    (:func:`engine.lean_forward.greedy_tree_verify`: ~60 us less a step than the walk's dict and the compaction's
    Python with the caches cold after the forward)."""
    got = greedy_tree_verify(model, cache, pending, tree, past_len)
    if got is not None:
        return got
    # the one-call step declined: the same checks would decline tree_forward_greedy's, so the tensors' path
    return walk_and_compact(_tree_forward_greedy_calls(model, cache, pending, tree, past_len), tree, past_len, cache)


def greedy_verifier(model, cache, estimator=None, hits: np.ndarray | None = None, head=None
                    ) -> Callable[[int, DraftTree, int], tuple[list[int], list[int], bool]]:
    """:func:`verify_greedy` on ``cache`` for one generation: ``verify(pending, tree, past_len) -> (path, committed,
    learned)``, ``learned`` as below (False where nothing was learned in the call).
    A float32 CPU model on the native stack gets :class:`engine.native.bound_verify.BoundVerify` (the one-call step with
    its checks made once, not at every step: ~45 us less Python a step with the caches cold), everything else
    :func:`verify_greedy` itself. Call it inside :func:`engine.lean_forward.weights_pinned` (no weight changes during
    the generation), on the thread that decodes.

    With ``hits`` ((256,) int64: accepted nodes per source bitmask), the bound step also counts each step's accepted
    nodes there, updates ``estimator``'s counts (an :class:`engine.acceptance.AcceptanceEstimator`, or None) from
    trees with ``keys`` and runs the draft head's step (``head``, an :class:`engine.draft_head.DepthOneFeature`, or
    None; the verifier's ``head`` attribute is the head it feeds, None where it feeds none), in the same native
    call, and returns ``learned`` True where it did (the caller then need not); where it did not, it did none of it."""
    def fallback(pending: int, tree: DraftTree, past_len: int) -> tuple[list[int], list[int], bool]:
        return (*verify_greedy(model, cache, pending, tree, past_len), False)

    learn = None if hits is None else (estimator, hits, ALTERNATIVE_STRIDE, SOURCE_STRIDE, head)
    bound = bind_greedy_verify(model, cache, fallback, learn)
    return fallback if bound is None else bound


def walk_and_compact(best: list[int], tree: DraftTree, past_len: int, cache) -> tuple[list[int], list[int]]:
    """:func:`walk_greedy` over the rows' greedy tokens ``best``, then :func:`compact_cache`. Returns
    ``(path, committed)`` as :func:`verify_greedy`."""
    path, bonus = walk_greedy(best, tree)
    compact_cache(cache, past_len, path, len(tree))
    return path, tree.tokens[path].tolist() + [bonus]


#: KV-cache dtypes :func:`compact_cache` moves through numpy (bfloat16 has no numpy dtype).
_NUMPY_DTYPES = (torch.float32, torch.float16, torch.float64)


def compact_cache(cache, past_len: int, path: list[int], tree_size: int) -> None:
    """Keep the context, the pending token and the accepted path in the KV cache; drop the rest.

    Before: ``past_len + 1 + tree_size`` entries (context, pending, all nodes). After:
    ``past_len + 1 + len(path)`` entries, the accepted nodes moved into contiguous slots.
    transformers >= 5: per-layer ``keys``/``values`` are (B, H_kv, S, D); ``crop`` takes a
    non-positive count of entries to remove.
    """
    base = past_len + 1
    first = next((j for j, node in enumerate(path) if node != j), len(path))  # path[:first] is in place
    src_np = None
    if first < len(path) and not move_rows(cache, [base + node for node in path[first:]], base + first):
        src_np = np.asarray(path[first:], dtype=np.int64) + base
        if graphed_move_rows(cache, src_np, base + first):  # a GPU cache bound to CUDA graphs' buffer
            src_np = None
    if src_np is not None:
        lo, hi = base + first, base + len(path)
        src = None
        for layer in cache.layers:
            kbuf, vbuf = getattr(layer, "_kbuf", None), getattr(layer, "_vbuf", None)
            if kbuf is not None and kbuf.device.type == "cpu" and kbuf.dtype in _NUMPY_DTYPES:
                # the preallocated buffers through numpy: 2 calls a layer (torch's 4 cost ~3x more)
                for buf in (kbuf.numpy(), vbuf.numpy()):
                    buf[..., lo:hi, :] = buf[..., src_np, :]
                continue
            if src is None:
                src = torch.from_numpy(src_np)
            # a slice assignment (copy_): index_put_ with a tensor index was ~1.6x slower
            src_d = src.to(layer.keys.device)
            layer.keys[..., lo:hi, :] = layer.keys.index_select(-2, src_d)
            layer.values[..., lo:hi, :] = layer.values.index_select(-2, src_d)
    drop = tree_size - len(path)
    if drop:
        cache.crop(-drop)


def prune_after_stop(tree, stop_tokens):
    """``tree`` without the nodes whose token contains a stop string, and without their descendants.

    The generation ends at such a token (its text is cut there), so whatever the tree drafts below it could
    only be verified for nothing: in line mode (stop ``"\n"``) a tree of the rest of a line and the next line
    costs the rows of the next line. The stop token's own node buys nothing either: accepted, it commits the
    token that the bonus token at its parent (the model's choice there, the same token) commits without it, in
    the same step; the row only costs verification (on a CPU c(n) grows with every row). Lossless: the output
    text and token ids up to the stop are unchanged. An SDSAT adaptive branch is kept as is
    (:meth:`engine.draft_tree.DraftTree.keep`).

    Args:
        tree: a :class:`engine.draft_tree.DraftTree`.
        stop_tokens: the token ids whose text contains a stop string: a frozenset (the decoder's, kept per stop
            set by :meth:`engine.healing.TokenBytes.containing_ids`) or a (V,) bool array.

    A tree has a few to a few dozen nodes: plain list and set operations (the eight numpy calls this took
    before cost ~60 us a step with the caches cold after a forward, ~20% of a line completion's drafting).
    """
    n = len(tree)
    if not n or tree.n_adaptive:
        return tree
    if not isinstance(stop_tokens, (set, frozenset)):
        stop_tokens = frozenset(np.flatnonzero(np.asarray(stop_tokens, dtype=bool)).tolist())
    tokens = tree.tokens.tolist()
    if stop_tokens.isdisjoint(tokens):
        return tree
    return tree.keep([t not in stop_tokens for t in tokens])  # keep() drops their descendants too
