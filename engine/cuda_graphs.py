"""CUDA graphs of a GPU model's decode-time forwards: a plain step and a draft tree's verification, replayed.

A step of a small model on a GPU is bound by the host, not the GPU: on a lent H200, one tiny-py-coder generation
spent 257 ms of CPU time issuing 9,426 kernel launches for 41 ms of GPU work (benchmarks/results/2026-11-27e,
``gpu-parts/``); a 7-row tree forward took ~4 ms where its kernels ran ~1 ms. :class:`GraphedForward` records the
whole forward (the embedding, the rotary lookup, the tree-attention mask, every decoder layer with its KV write,
the final norm and the LM head) once per shape as a CUDA graph and replays it: one launch a step.

Static shapes. A graph fixes every tensor's shape and address, so

- the rows are padded to a bucket (:data:`ROW_BUCKETS`: 1, 2, 4, ..., 64, 96); a padded row attends to the context
  and itself only, writes its KV entry past the tree's and is dropped (the cache's fill mark covers the real rows);
- the keys are the first ``keys`` positions of one preallocated KV buffer (``keys`` a power of two,
  :data:`MIN_KEYS` at least, that covers the context and the rows): the mask hides the positions past the tree's;
- the KV cache lives in that buffer: the cache a step runs on is *bound* to it (its layers' buffers become views
  of it, its entries copied in; the cache bound before gets its own copy back), so graphs recorded on one cache
  serve the next generation's too.

At install (:func:`install_cuda_graphs`) a probe checks a replayed plain step and an 8-row tree against the eager
forward (the same logits, less time) and then records every bucket up to :data:`RECORD_KEYS` keys, so a completion
never waits for a recording; longer contexts record theirs on first use.

The mask, the positions and the KV slots come from a few integers copied to the GPU once a step (the pending token
and the tree's tokens, positions, slots, the past length and the tree's ancestor matrix): nothing else crosses.

Same model, same arithmetic: each decoder layer is the model's own module (its norms, projections, rotary embedding
and attention function), called inside the capture. The outputs differ from an unpadded forward only by float
rounding of the attention over the longer, masked key range (bit-identical on a CPU replay of the same body in the
tests); every method on the GPU, ``ar`` included, decodes through the same graphs, so the lossless comparison holds
within a run. Not graphed (the eager forward runs): a prefill, a forward with a prompt prefix, a tree of more than
96 rows, a cache past :data:`TOKENS_ENV` tokens or of another layout.

Sources: CUDA graphs for LLM decoding as in vLLM's ``CUDAGraphRunner`` and gpt-fast (``torch.compile`` with
``mode="reduce-overhead"``); the tree-attention mask of SpecInfer/Medusa (:mod:`engine.verify`).
"""

from __future__ import annotations

import logging
import os
import time
import weakref

import numpy as np
import torch

from .draft_tree import DraftTree
from .kv_cache import PreallocatedLayer, _buffers_changed, new_kv_cache

log = logging.getLogger(__name__)

#: Row counts a graph is recorded for (a forward of n rows replays the smallest bucket >= n): up to the pending token,
#: a GPU's 64 draft tokens (engine.decoder.MAX_DRAFT_TOKENS) and SDSAT's adaptive ones.
ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96)
#: The fewest key positions a graph attends over (then 512, 1024, ... up to the buffer's capacity).
MIN_KEYS = 256
#: Keys up to which every bucket is recorded at install (longer contexts record theirs on first use).
RECORD_KEYS = 2048
#: Environment variable: ``0`` keeps a GPU model's forwards eager.
GRAPHS_ENV = "FASTCODER_CUDA_GRAPHS"
#: Environment variable: the KV buffer's capacity in tokens (default: the model's context, at most 4,096).
TOKENS_ENV = "FASTCODER_CUDA_GRAPH_TOKENS"
#: Model types whose decoder layers take ``(hidden, attention_mask, position_ids, past_key_values, use_cache,
#: position_embeddings)`` and whose inner model adds nothing between the embedding and the first layer.
SUPPORTED = ("llama", "qwen2", "qwen3", "mistral")
#: RoPE types whose tables depend on the position alone (a table made once holds what each call computes).
STATIC_ROPE = ("default", "linear", "llama3")
#: Set on the causal LM when installed: its :class:`GraphedForward`.
ATTR = "_fastcoder_cuda_graphs"
#: Set on a bound cache: the :class:`GraphedForward` whose buffer holds its entries.
BOUND_ATTR = "_fastcoder_graph_bound"


def _bucket(n: int) -> int | None:
    for r in ROW_BUCKETS:
        if n <= r:
            return r
    return None


class _StaticKV:
    """The cache a graphed forward's attention modules update: each layer's new keys and values written at
    ``slots`` ((R,) int64 positions) of that layer's buffer (1, H_kv, C, D), the first ``keys`` positions
    returned for the attention."""

    def __init__(self, k: list[torch.Tensor], v: list[torch.Tensor], slots: torch.Tensor, keys: int):
        self.k, self.v, self.slots, self.keys = k, v, slots, keys

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        k, v = self.k[layer_idx], self.v[layer_idx]
        k.index_copy_(2, self.slots, key_states)
        v.index_copy_(2, self.slots, value_states)
        return k[:, :, :self.keys], v[:, :, :self.keys]


def why_not(model) -> str:
    """Why :func:`install_cuda_graphs` would leave ``model`` alone ("" when it would install)."""
    config, base = getattr(model, "config", None), getattr(model, "model", None)
    if config is None or base is None or getattr(config, "model_type", None) not in SUPPORTED:
        return f"model type {getattr(config, 'model_type', None)!r} is not one of {SUPPORTED}"
    if any(t != "full_attention" for t in (getattr(config, "layer_types", None) or ())) \
            or getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return "sliding-window layers"
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(base, name):
            return f"the inner model has no {name}"
    if getattr(base.rotary_emb, "rope_type", "default") not in STATIC_ROPE:
        return f"RoPE type {base.rotary_emb.rope_type!r} (tables that depend on the sequence length)"
    if getattr(config, "_attn_implementation", None) not in ("sdpa", "eager"):
        return f"attention implementation {config._attn_implementation!r} (sdpa or eager are graphed)"
    if not all(hasattr(layer, "self_attn") and hasattr(layer.self_attn, "layer_idx") for layer in base.layers):
        return "a decoder layer of another structure"
    if getattr(model, "lm_head", None) is None:
        return "no LM head"
    return ""


class GraphedForward:
    """A GPU causal LM's decode-time forwards as CUDA graphs (see the module docstring).

    Args:
        model: a transformers causal LM (:func:`why_not` says which), in eval mode, on its device.
        capacity: the KV buffer's positions (tokens): the longest context a graphed step takes (a step needs its
            context plus a row bucket within it).
        capture: record graphs (True, a CUDA device) or run the same body eagerly at every call (False: the
            tests' CPU path, the same inputs, masks and buffers).

    Memory: the KV buffer, ``2 x layers x kv_heads x capacity x head_dim`` elements of the model's dtype (50 MB
    for tiny-py-coder at 4,096 tokens in float32), and one graph's activations and logits per (rows, keys)
    bucket used, in one shared memory pool.
    """

    def __init__(self, model, capacity: int, capture: bool | None = None):
        base = model.model
        config = model.config
        weight = model.lm_head.weight
        self.model, self.base = model, base
        self.device, self.dtype = weight.device, weight.dtype
        self.capture = self.device.type == "cuda" if capture is None else bool(capture)
        self.n_layers = int(config.num_hidden_layers)
        attn = base.layers[0].self_attn
        heads = int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
        head_dim = int(attn.head_dim)
        self.capacity = int(capacity)
        self.max_rows = ROW_BUCKETS[-1]
        if self.capacity < MIN_KEYS:
            raise ValueError(f"capacity must be at least {MIN_KEYS} tokens, got {capacity}")
        kw = dict(dtype=self.dtype, device=self.device)
        #: (layers, 2, 1, H_kv, capacity, D): every layer's keys (index 0) and values (1)
        self.kv = torch.zeros((self.n_layers, 2, 1, heads, self.capacity, head_dim), **kw)
        self.k = [self.kv[i, 0] for i in range(self.n_layers)]
        self.v = [self.kv[i, 1] for i in range(self.n_layers)]
        r = self.max_rows
        self._layout = (0, r, 2 * r, 3 * r, 3 * r + 1)  # ids, positions, slots, past, ancestors (R x R)
        size = 3 * r + 1 + r * r
        self.inputs = torch.zeros(size, dtype=torch.long, device=self.device)
        self.staged = torch.zeros(size, dtype=torch.long, pin_memory=self.device.type == "cuda")
        self.staged_np = self.staged.numpy()
        self.columns = torch.arange(self.capacity, device=self.device)
        self.zero = torch.zeros((), **kw)
        self.low = torch.full((), torch.finfo(self.dtype).min, **kw)
        with torch.inference_mode():
            like = torch.zeros((1, 1, config.hidden_size), **kw)
            cos, sin = base.rotary_emb(like, torch.arange(self.capacity, device=self.device)[None])
        self.cos, self.sin = cos[0].clone(), sin[0].clone()  # (capacity, D): each position's rotation
        self.graphs: dict[tuple[int, int], tuple] = {}
        if self.capture:
            with torch.cuda.device(self.device):
                self.pool = torch.cuda.graph_pool_handle()
        else:
            self.pool = None
        self._owner = None  # a weak reference to the bound cache
        self.broken = ""  # why graphs stopped serving (a recording failed), "" while they serve
        self._staged_read = torch.cuda.Event() if self.device.type == "cuda" else None  # the last copy's end
        self.replays = 0

    # ------------------------------------------------------------------------------------------ the graph's body
    def _inputs(self, rows: int):
        ids, pos, slots, past, anc = self._layout
        x = self.inputs
        return (x[ids:ids + rows], x[pos:pos + rows], x[slots:slots + rows], x[past:past + 1],
                x[anc:anc + rows * rows].view(rows, rows))

    def _body(self, rows: int, keys: int) -> torch.Tensor:
        """The forward of ``rows`` rows over the first ``keys`` KV positions, from :attr:`inputs`: (1, rows, V)
        logits. Recorded once per (rows, keys); nothing in it reads a value on the host."""
        ids, pos, slots, past, anc = self._inputs(rows)
        base = self.base
        x = base.embed_tokens(ids[None])
        cos, sin = self.cos.index_select(0, pos)[None], self.sin.index_select(0, pos)[None]
        rel = self.columns[:keys][None] - past  # (1, keys): a key's position less the pending token's
        in_tree = (rel >= 0) & (rel < rows)
        seen = anc.gather(1, rel.clamp(0, rows - 1).expand(rows, keys)).bool() & in_tree
        mask = torch.where((rel < 0) | seen, self.zero, self.low)[None, None]  # (1, 1, rows, keys)
        cache = _StaticKV(self.k, self.v, slots, keys)
        for layer in base.layers[:self.n_layers]:
            out = layer(x, attention_mask=mask, position_ids=pos[None], past_key_values=cache, use_cache=True,
                        position_embeddings=(cos, sin))
            x = out[0] if isinstance(out, tuple) else out
        return self.model.lm_head(base.norm(x))

    def _graph(self, rows: int, keys: int):
        """The (rows, keys) bucket's runner: ``(graph or None, logits)`` (None, None without ``capture``); recorded
        on first use (its warm-up and the recording run on the inputs already staged: the same KV writes the replay
        makes). None where the recording failed (:attr:`broken` says why; no graph is used after that)."""
        got = self.graphs.get((rows, keys))
        if got is not None:
            return got
        if not self.capture:
            got = (None, None)
        else:
            try:
                got = self._record(rows, keys)
            except RuntimeError as err:  # a capture this device or model does not allow: eager from now on
                self.broken = f"recording a graph of {rows} rows and {keys} keys failed: {err}"
                log.warning("CUDA graphs off: %s", self.broken)
                return None
        self.graphs[(rows, keys)] = got
        return got

    def _record(self, rows: int, keys: int):
        """Record the (rows, keys) bucket's graph: ``(graph, logits)``, on the model's device (which need not be the
        current one)."""
        with torch.cuda.device(self.device):
            stream = torch.cuda.Stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                self._body(rows, keys)  # the warm-up: library handles and workspaces made outside the capture
            torch.cuda.current_stream(self.device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                logits = self._body(rows, keys)
        log.debug("CUDA graph recorded: %d rows, %d keys", rows, keys)
        return graph, logits

    # ------------------------------------------------------------------------------------------ binding caches
    def bound(self, cache) -> bool:
        """Whether ``cache``'s layers keep their entries in this buffer."""
        layers = cache.layers
        return len(layers) == self.n_layers and all(
            layer._kbuf is k and layer._vbuf is v for layer, k, v in zip(layers, self.k, self.v))

    def bind(self, cache) -> bool:
        """Make this buffer ``cache``'s storage (its entries copied in; the cache bound before gets a copy of
        its own). False, nothing changed, where ``cache`` does not fit: another number of layers, a layer that is
        not a :class:`engine.kv_cache.PreallocatedLayer`, another shape, dtype or device, or no room left for a
        step."""
        if self.bound(cache):
            return True
        layers = cache.layers
        if len(layers) != self.n_layers:
            return False
        length = None
        for layer in layers:
            if type(layer) is not PreallocatedLayer or layer._kbuf is None or not layer.is_initialized:
                return False
            kb = layer._kbuf
            if (kb.dtype != self.dtype or kb.device != self.device or kb.shape[0] != 1
                    or kb.shape[1] != self.kv.shape[3] or kb.shape[3] != self.kv.shape[5]):
                return False
            if length is None:
                length = layer._len
            elif layer._len != length:
                return False
        if length is None or length >= self.capacity:
            return False
        previous = self._owner() if self._owner is not None else None
        if previous is not None and previous is not cache:
            self._unbind(previous)
        for layer, k, v in zip(layers, self.k, self.v):
            k[:, :, :length].copy_(layer._kbuf[:, :, :length])
            v[:, :, :length].copy_(layer._vbuf[:, :, :length])
            layer._kbuf, layer._vbuf = k, v
        _buffers_changed()
        setattr(cache, BOUND_ATTR, self)
        self._owner = weakref.ref(cache)
        return True

    def _unbind(self, cache) -> None:
        """Give ``cache`` buffers of its own holding its entries (a previous owner, before another binds)."""
        for layer, k, v in zip(cache.layers, self.k, self.v):
            if layer._kbuf is k:
                keep = min(self.capacity, max(layer._len + self.max_rows, MIN_KEYS))
                layer._kbuf, layer._vbuf = k[:, :, :keep].clone(), v[:, :, :keep].clone()
        _buffers_changed()
        setattr(cache, BOUND_ATTR, None)

    # ------------------------------------------------------------------------------------------ a step
    def tree_logits(self, cache, pending: int, tree, past_len: int) -> torch.Tensor | None:
        """:func:`engine.verify.tree_forward` of ``pending`` and ``tree`` (a :class:`engine.draft_tree.DraftTree`,
        empty for a plain step) on ``cache`` (holding ``past_len`` entries), replayed: (1 + N, V) logits, a view
        of the graph's output valid until the next call; the cache then holds ``past_len + 1 + N`` entries, as
        after the eager forward. None, nothing done, where the step is not graphed (more than 96 rows, past the
        capacity, a cache :meth:`bind` declines)."""
        n = 1 + len(tree)
        rows = _bucket(n)
        if rows is None or past_len + rows > self.capacity or self.broken:
            return None
        if cache.get_seq_length() != past_len or not self.bind(cache):
            return None
        keys = MIN_KEYS
        while keys < past_len + rows:
            keys *= 2
        keys = min(keys, self.capacity)
        self._stage(pending, tree, past_len, rows)
        got = self._graph(rows, keys)
        if got is None:  # the recording failed: this step (its inputs staged, nothing run) goes eager
            return None
        graph, logits = got
        if graph is None:
            logits = self._body(rows, keys)
        else:
            with torch.cuda.device(self.device):  # on the current stream of the model's device (~3 us)
                graph.replay()
        self.replays += 1
        for layer in cache.layers:
            layer._len = past_len + n
        return logits[0, :n]

    def _stage(self, pending: int, tree, past_len: int, rows: int) -> None:
        """Copy a step's inputs to :attr:`inputs`: ``pending`` and ``tree``'s tokens, positions, KV slots, the past
        length and the ancestor matrix, padded to ``rows`` rows."""
        n = 1 + len(tree)
        ids, pos, slots, past, anc = self._layout
        if self._staged_read is not None:  # the previous step's copy has read the staged inputs
            self._staged_read.synchronize()
        s = self.staged_np
        s[ids] = pending
        s[pos] = past_len
        if n > 1:
            s[ids + 1:ids + n] = tree.tokens
            s[pos + 1:pos + n] = past_len + tree.depths
        s[ids + n:ids + rows] = 0
        s[pos + n:pos + rows] = past_len
        s[slots:slots + rows] = np.arange(past_len, past_len + rows)
        s[past] = past_len
        block = s[anc:anc + rows * rows].reshape(rows, rows)
        block[...] = np.eye(rows, dtype=np.int64)
        block[:n, 0] = 1
        if n > 1:
            block[1:n, 1:n] = tree.ancestors
        used = anc + rows * rows
        self.inputs[:used].copy_(self.staged[:used], non_blocking=True)
        if self._staged_read is not None:
            self._staged_read.record(torch.cuda.current_stream(self.device))

    def record_buckets(self, cache, max_keys: int) -> int:
        """Record the graph of every row bucket and every key bucket up to ``max_keys`` not recorded yet, on
        ``cache`` (bound here; its entries untouched: each recording's warm-up writes its rows' KV past the fill
        mark), so no step of a generation waits for one. Returns how many were recorded (0 where ``cache`` cannot be
        bound; stops at a recording that fails)."""
        if not self.bind(cache):
            return 0
        past, made, keys = cache.get_seq_length(), 0, MIN_KEYS
        empty = DraftTree.empty()
        while keys <= min(max_keys, self.capacity):
            for rows in ROW_BUCKETS:
                if past + rows > self.capacity or (rows, keys) in self.graphs:
                    continue
                self._stage(0, empty, past, rows)
                if self._graph(rows, keys) is None:
                    return made
                made += 1
            keys *= 2
        return made

    def move_rows(self, cache, src: np.ndarray, lo: int) -> bool:
        """:func:`engine.kv_cache.move_rows` for a bound cache: the entries at positions ``src`` ((n,) int64) to
        ``lo, lo + 1, ...`` in every layer, two kernels over the whole buffer. False where ``cache`` is not
        bound here."""
        if getattr(cache, BOUND_ATTR, None) is not self or not self.bound(cache):
            return False
        index = torch.from_numpy(np.ascontiguousarray(src, dtype=np.int64)).to(self.device, non_blocking=True)
        self.kv[..., lo:lo + len(src), :] = self.kv.index_select(-2, index)
        return True


def graphed(model) -> GraphedForward | None:
    """``model``'s :class:`GraphedForward`, or None."""
    return model.__dict__.get(ATTR)


def graphed_tree_logits(model, cache, pending: int, tree, past_len: int) -> torch.Tensor | None:
    """:meth:`GraphedForward.tree_logits` of ``model``'s graphs, or None where it has none or they decline."""
    runner = model.__dict__.get(ATTR)
    if runner is None or torch.is_grad_enabled():
        return None
    return runner.tree_logits(cache, pending, tree, past_len)


def graphed_move_rows(cache, src, lo: int) -> bool:
    """:meth:`GraphedForward.move_rows` where ``cache`` is bound to a graphed model's buffer, else False."""
    runner = getattr(cache, BOUND_ATTR, None)
    return runner is not None and runner.move_rows(cache, src, lo)


def default_capacity(model) -> int:
    """The KV buffer's tokens: :data:`TOKENS_ENV`, else the model's context (``max_position_embeddings``), at most
    4,096. Raises ValueError for a value that is not a whole number of at least :data:`MIN_KEYS`."""
    raw = os.environ.get(TOKENS_ENV, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{TOKENS_ENV} must be a whole number of tokens, got {raw!r}") from None
        if value < MIN_KEYS:
            raise ValueError(f"{TOKENS_ENV} must be at least {MIN_KEYS} tokens, got {value}")
        return value
    limit = int(getattr(model.config, "max_position_embeddings", 0) or 4096)
    return max(MIN_KEYS, min(limit, 4096))


@torch.inference_mode()
def probe(runner: GraphedForward, context: int = 200, rows: int = 8, repeats: int = 5,
          require_faster: bool = True, record_keys: int = 0) -> str:
    """Check ``runner`` on its device before it serves: a plain step and a ``rows``-row draft chain on a random
    ``context``-token prompt, replayed and run through the model's eager forward on the same cache. Returns "" when
    the replayed logits match the eager ones (within 1e-3 of the largest logit in float32, 5e-2 in half precision)
    and, with ``require_faster``, the replays' median wall time (``repeats`` each, synchronised) is below the eager
    forward's; else why not. Any error a recording or a replay raises comes back as the reason. With ``record_keys``,
    a passing probe then records every bucket up to that many keys (:meth:`GraphedForward.record_buckets`)."""
    from .cost_model import _sync  # noqa: PLC0415  (the c(n) timer's: synchronise a CUDA device, else nothing)

    model, device = runner.model, runner.device
    vocab = int(model.lm_head.weight.shape[0])
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab, (1, context), generator=gen)
    chain = DraftTree.from_chain(torch.randint(0, vocab, (rows - 1,), generator=gen).tolist(), 0)
    pending = int(prompt[0, -1])
    cache = new_kv_cache(model, context + 2 * runner.max_rows)
    model(input_ids=prompt[:, :-1].to(device), past_key_values=cache, use_cache=True)
    past = context - 1
    tol = 1e-3 if runner.dtype == torch.float32 else 5e-2
    for tree in (DraftTree.empty(), chain):
        n = 1 + len(tree)
        positions, mask = tree.forward_inputs(past, runner.dtype, device)
        ids = torch.tensor([[pending, *tree.tokens.tolist()]], device=device)

        def eager():
            out = model(input_ids=ids, position_ids=positions, attention_mask=mask, past_key_values=cache,
                        use_cache=True).logits[0].float()
            cache.crop(-n)
            return out

        def replayed():
            out = runner.tree_logits(cache, pending, tree, past)
            if out is None:
                raise RuntimeError(runner.broken or "the graphed forward declined the probe's step")
            out = out.float()
            cache.crop(-n)
            return out

        try:
            times = {}
            for name, run in (("eager", eager), ("graphed", replayed)):
                got, spent = None, []
                for _ in range(max(1, repeats)):
                    _sync(device)
                    t = time.perf_counter()
                    got = run()
                    _sync(device)
                    spent.append(time.perf_counter() - t)
                times[name] = (got.clone(), sorted(spent)[len(spent) // 2] * 1e3)
        except RuntimeError as err:
            return f"the probe's {n}-row step failed: {err}"
        (want, eager_ms), (got, graphed_ms) = times["eager"], times["graphed"]
        diff = float((got - want).abs().max())
        if not diff <= tol * max(1.0, float(want.abs().max())):
            return f"a replayed {n}-row step's logits differ from the eager forward's by {diff:.3g}"
        if require_faster and graphed_ms >= eager_ms:
            return (f"a replayed {n}-row step is no faster than the eager forward ({graphed_ms:.3f} against "
                    f"{eager_ms:.3f} ms)")
        log.info("CUDA graph probe, %d rows: %.3f ms replayed, %.3f ms eager, logits within %.2g", n, graphed_ms,
                 eager_ms, diff)
    if record_keys:
        t = time.perf_counter()
        made = runner.record_buckets(cache, record_keys)
        if runner.broken:
            return runner.broken
        log.info("CUDA graphs: %d recorded in %.0f ms", made, (time.perf_counter() - t) * 1e3)
    return ""


def install_cuda_graphs(model, capacity: int | None = None, capture: bool | None = None) -> str:
    """Give ``model`` a :class:`GraphedForward` (its decode steps and tree verifications then replay CUDA graphs:
    :func:`engine.verify.tree_forward`, :func:`engine.steps.decode_one_token`). Returns "" when installed, else
    why not (``$FASTCODER_CUDA_GRAPHS=0``, a model :func:`why_not` declines, a CPU model without ``capture=False``,
    a bad :data:`TOKENS_ENV`, a :func:`probe` that finds the replays wrong or no faster on this device); never
    raises."""
    if os.environ.get(GRAPHS_ENV, "").strip() == "0":
        return f"{GRAPHS_ENV}=0"
    reason = why_not(model)
    if reason:
        return reason
    device = model.lm_head.weight.device
    if capture is None and device.type != "cuda":
        return f"a {device.type} model (CUDA graphs need a CUDA device)"
    try:
        runner = GraphedForward(model, capacity or default_capacity(model), capture)
    except (ValueError, RuntimeError) as err:
        return str(err)
    if runner.capture:  # recorded on this device: checked against the eager forward before it serves
        reason = probe(runner, record_keys=min(runner.capacity, RECORD_KEYS))
        if reason:
            return reason
    model.__dict__[ATTR] = runner
    return ""
