"""A KV cache whose layers write into preallocated buffers instead of concatenating.

transformers' ``DynamicLayer.update`` runs ``torch.cat([keys, new], dim=-2)`` for keys and values of every
layer at every forward: the whole cache is copied each step. For tiny-py-coder on this project's 2-core CPU
(6 layers, 512 cached tokens) the copies were 41% of a plain decode step in a torch.profiler trace
(``aten::cat`` 3.7 ms of 8.9 ms). :class:`PreallocatedLayer` keeps one buffer per tensor of shape
``(batch, kv_heads, capacity, head_dim)``, writes the new entries in place and exposes ``keys``/``values`` as
views of the filled part, so a step copies only its own new entries. Capacity grows by doubling (amortised
O(1) per token); CPU buffers of 2 MB or more are whole huge pages (:mod:`engine.huge_pages`: a forward reads the
whole cache, and 4 KB pages cost it TLB misses and prefetches cut at every page). Cropping (rejected draft
tokens) only moves the fill mark; compaction of accepted tree nodes (:func:`engine.verify.compact_cache`) writes
through the views into the buffer.

The cache object is transformers' own :class:`~transformers.DynamicCache` with its layers replaced, so the
model's attention, mask construction and ``get_seq_length``/``crop`` work unchanged.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from . import huge_pages, native

#: Initial capacity (tokens) of a layer's buffers when the first update is smaller.
MIN_CAPACITY = 256

#: The last value :func:`buffers_epoch` returned for a change, and the numbers it takes them from.
_EPOCH = [0]
_EPOCHS = itertools.count(1)


def buffers_epoch() -> int:
    """A number that changes whenever the key or value buffer of any :class:`PreallocatedLayer` is allocated,
    replaced or dropped (a new layer, growth, a reset, a batch reorder, a new tensor assigned to ``keys`` or
    ``values``), never back to a value it had. A native step that checked one cache's buffers at one value need not
    check them again while it holds (:class:`engine.native.bound_verify.BoundVerify`: ~15 us a step of Python with
    the caches cold after a forward). Moving the fill mark (updates that fit, crops, compaction) does not change it."""
    return _EPOCH[0]


def _buffers_changed() -> None:
    _EPOCH[0] = next(_EPOCHS)  # a fresh number even where two threads change buffers at once


class _FilledView:
    """``PreallocatedLayer.keys``/``values``: the view ``(B, H_kv, S, D)`` of the buffer's first ``_len``
    positions, made when read. Assignments are DynamicLayer's: None or an empty tensor before any buffer (kept
    as is); a new tensor later (``reorder_cache``, ``offload``) becomes the buffer, so later reads and updates
    see it."""

    def __init__(self, buffer: str, held: str):
        self.buffer, self.held = buffer, held

    def __get__(self, layer, owner=None):
        if layer is None:
            return self
        buf = getattr(layer, self.buffer)
        return layer.__dict__.get(self.held) if buf is None else buf[..., :layer._len, :]

    def __set__(self, layer, value) -> None:
        if getattr(layer, self.buffer) is not None:
            setattr(layer, self.buffer, value)
            _buffers_changed()
            if value is not None:
                layer._len = int(value.shape[-2])
        layer.__dict__[self.held] = value


class PreallocatedLayer(DynamicLayer):
    """A :class:`~transformers.cache_utils.DynamicLayer` backed by growable buffers (see the module docstring).

    ``keys``/``values``: views ``(B, H_kv, S, D)`` of the buffers' first S positions, made when read (a forward
    through the fused layer, a crop or a compaction only moves the fill mark: rebuilding the twelve views of a
    6-layer cache cost ~23 us each time); ``capacity``: positions allocated (tokens). Behaves as DynamicLayer
    for ``update``, ``crop``, ``get_seq_length`` and ``reset``.
    """

    _kbuf = _vbuf = None  # class defaults: DynamicLayer.__init__ assigns keys/values before ours runs
    _len = 0

    def __init__(self, capacity: int = 0):
        super().__init__()
        self._want = int(capacity)
        self._kbuf = self._vbuf = None
        self._len = 0
        _buffers_changed()

    keys = _FilledView("_kbuf", "_keys")
    values = _FilledView("_vbuf", "_values")

    @property
    def capacity(self) -> int:
        return 0 if self._kbuf is None else int(self._kbuf.shape[-2])

    @property
    def buffer_nbytes(self) -> int:
        """Bytes held by the two buffers (what the cache really occupies)."""
        if self._kbuf is None:
            return 0
        return int(self._kbuf.numel() * self._kbuf.element_size() * 2)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._kbuf = self._vbuf = None
        self._len = 0
        _buffers_changed()

    def _ensure(self, need: int, like: torch.Tensor) -> None:
        cap = self.capacity
        if need <= cap:
            return
        new_cap = max(need, 2 * cap, self._want, MIN_CAPACITY)
        b, h, _, d = like.shape
        if like.device.type == "cpu":  # on huge pages: whole pages of them (engine.huge_pages)
            new_cap = huge_pages.round_up(new_cap, b * h * d * like.element_size())
            kbuf = huge_pages.empty((b, h, new_cap, d), like.dtype)
            vbuf = huge_pages.empty((b, h, new_cap, d), like.dtype)
        else:
            kbuf = like.new_empty((b, h, new_cap, d))
            vbuf = like.new_empty((b, h, new_cap, d))
        if self._len:
            kbuf[..., :self._len, :] = self._kbuf[..., :self._len, :]
            vbuf[..., :self._len, :] = self._vbuf[..., :self._len, :]
        self._kbuf, self._vbuf = kbuf, vbuf
        _buffers_changed()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``(B, H_kv, n, D)`` new keys/values after the filled part; returns the filled views."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        self._ensure(self._len + n, key_states)
        self._kbuf[..., self._len:self._len + n, :] = key_states
        self._vbuf[..., self._len:self._len + n, :] = value_states
        self._len += n
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._len if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``-tokens_to_remove`` entries (a non-positive count, as DynamicLayer)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a non-positive count of entries to remove, got {tokens_to_remove}")
        if tokens_to_remove == 0 or not self.is_initialized or self._kbuf is None:
            return
        self._len = max(0, self._len + int(tokens_to_remove))

    def reset(self) -> None:
        self._kbuf = self._vbuf = None
        self._len = 0
        _buffers_changed()
        super().reset()

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every batch row ``repeats`` times (as DynamicLayer), on the buffers so the views stay theirs."""
        if self._kbuf is not None:
            self._kbuf = self._kbuf.repeat_interleave(repeats, dim=0)
            self._vbuf = self._vbuf.repeat_interleave(repeats, dim=0)
            _buffers_changed()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the batch rows ``indices`` (as DynamicLayer), on the buffers so the views stay theirs."""
        if self._kbuf is not None:
            self._kbuf = self._kbuf[indices, ...]
            self._vbuf = self._vbuf[indices, ...]
            _buffers_changed()


#: Per thread: the row indices :func:`move_rows` hands the C code ((MOVE_ROWS_MAX,) int64) and their address.
_MOVE_SCRATCH = threading.local()
MOVE_ROWS_MAX = 256


def move_rows(cache, src: list[int], lo: int) -> bool:
    """Move the KV entries at positions ``src`` (ascending, ``src[j] >= lo + j``: a draft tree's accepted path,
    parents first) to positions ``lo, lo + 1, ...`` in every layer of ``cache``, in one native call
    (``fc_kv_move``, engine/native/kv_cache.c: the bytes as they are). The buffers' table is kept on the cache
    and rebuilt when a layer's buffers change (growth, batch reordering).

    Returns False, having moved nothing, where the call does not apply: no native library, a layer that is not a
    :class:`PreallocatedLayer` with CPU buffers, non-contiguous buffers or more than :data:`MOVE_ROWS_MAX` rows;
    the caller then moves them itself (:func:`engine.verify.compact_cache`).
    """
    n = len(src)
    if n > MOVE_ROWS_MAX:
        return False
    held = getattr(cache, "_fc_move_table", None)
    if held is False:  # a cache the call never applies to (its layers' kind, device)
        return False
    layers = cache.layers
    if held is None or len(held[0]) != len(layers) or not all(
            layer._kbuf is k and layer._vbuf is v for layer, (k, v) in zip(layers, held[0])):
        held = _move_table(cache)
        if not held:
            return False
    lib = native.library()
    scratch = getattr(_MOVE_SCRATCH, "rows", None)
    if scratch is None:
        rows = np.zeros(MOVE_ROWS_MAX, dtype=np.int64)
        scratch = _MOVE_SCRATCH.rows = (rows, rows.ctypes.data)
    scratch[0][:n] = src
    lib.fc_kv_move(held[2], held[3], scratch[1], n, lo)
    return True


def _move_table(cache):
    """((key, value) buffers per layer, the table array, its address, buffer count) for :func:`move_rows`, stored
    on ``cache`` (the buffers held, so the addresses stay theirs). None where the call does not apply to the
    buffers as they are (not allocated yet, not contiguous); False, also stored, where it never will (no native
    library, a layer of another kind, buffers off the CPU)."""
    lib = native.library()
    rows, buffers = [], []
    for layer in cache.layers:
        if lib is None or type(layer) is not PreallocatedLayer or (
                layer._kbuf is not None and layer._kbuf.device.type != "cpu"):
            cache._fc_move_table = False
            return False
        if layer._kbuf is None:
            return None
        buffers.append((layer._kbuf, layer._vbuf))
        for buf in (layer._kbuf, layer._vbuf):
            if not buf.is_contiguous() or buf.dim() != 4:
                return None
            b, h, cap, d = buf.shape
            rows.append((buf.data_ptr(), b * h, cap, d * buf.element_size()))
    table = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
    held = (tuple(buffers), table, table.ctypes.data, len(rows))
    cache._fc_move_table = held
    return held


def new_kv_cache(model, capacity: int = 0) -> DynamicCache:
    """A :class:`~transformers.DynamicCache` for ``model`` whose full-attention layers are
    :class:`PreallocatedLayer` (``capacity``: tokens to allocate at the first update, e.g. prompt + new
    tokens + one draft tree; it grows past it when needed). Sliding-window or other special layers keep
    transformers' own classes."""
    cache = DynamicCache(config=model.config)
    if all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [PreallocatedLayer(capacity) for _ in cache.layers]
    return cache
