"""Few-row attention with the native kernel (``fc_attention`` in ``tree_attention.c``): checks and calls.

:mod:`engine.native_attention` decides when a forward uses it; this module only moves tensors in and out.
"""

from __future__ import annotations

import ctypes

import torch

from . import library
from .linear import sync_threads


def attention_library():
    """The native library when its attention kernel runs on this CPU (x86-64 with AVX2 and FMA), else None."""
    lib = library()
    if lib is None or not lib.fc_attention_supported():
        return None
    return lib


def _strides(t: torch.Tensor, dims: tuple[int, ...]):
    return (ctypes.c_int64 * len(dims))(*(int(t.stride(d)) for d in dims))


def supported(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """Whether :func:`attention` takes these tensors: float32 CPU ``(B, H, M, D)`` query and ``(B, Hkv, S, D)``
    key/value with the last axis contiguous, ``D`` a multiple of 8, ``H`` a multiple of ``Hkv``, and a mask
    that is None or a bool/float32 ``(B or 1, 1, M, >= S)`` tensor (one mask for all heads)."""
    if query.dim() != 4 or key.dim() != 4 or value.shape != key.shape:
        return False
    b, h, m, d = query.shape
    if key.shape[0] != b or key.shape[3] != d or d % 8 or h % key.shape[1]:
        return False
    for t in (query, key, value):
        if t.dtype != torch.float32 or t.device.type != "cpu" or t.stride(3) != 1:
            return False
    if mask is not None:
        if mask.dim() != 4 or mask.dtype not in (torch.bool, torch.float32) or mask.device.type != "cpu":
            return False
        if mask.shape[0] not in (1, b) or mask.shape[1] != 1 or mask.shape[2] != m or mask.shape[3] < key.shape[2]:
            return False
    return True


def attention(lib, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
              scale: float, causal: bool) -> torch.Tensor:
    """``softmax(q k^T * scale + mask) v`` per head, for inputs :func:`supported` accepts.

    Args:
        query: (B, H, M, D) float32; key, value: (B, Hkv, S, D) float32 (head h reads kv head
            ``h // (H // Hkv)``).
        mask: None (every key visible; with ``causal``, row i sees keys ``0 .. S - M + i``), bool
            (B or 1, 1, M, >= S) with True = visible, or float32 of that shape added to the scaled scores
            (entries <= -1e30, such as ``finfo.min`` or -inf, mean not visible). Columns past S are ignored.
    Returns:
        (B, M, H, D) float32, contiguous (what transformers' attention functions return). A row's result
        depends only on its query and the keys and values it sees, in cache order (bit for bit).
    Raises:
        MemoryError: the kernel could not allocate its scratch memory.
    """
    b, h, m, d = query.shape
    s = key.shape[2]
    out = torch.empty((b, m, h, d), dtype=torch.float32)
    sync_threads(lib)  # heads split over torch's threads for enough work: the same bits on any count
    if mask is None:
        kind, mptr, ms = 0, None, (ctypes.c_int64 * 3)(0, 0, 0)
    else:
        mask = mask.expand(b, 1, m, mask.shape[3])
        kind = 1 if mask.dtype == torch.bool else 2
        mptr, ms = mask.data_ptr(), _strides(mask, (0, 2, 3))
    rc = lib.fc_attention(query.data_ptr(), _strides(query, (0, 1, 2)), key.data_ptr(), _strides(key, (0, 1, 2)),
                          value.data_ptr(), _strides(value, (0, 1, 2)), b, h, key.shape[1], m, s, d,
                          mptr, kind, ms, int(bool(causal)), float(scale), out.data_ptr())
    if rc != 0:
        raise MemoryError("native attention could not allocate its scratch memory")
    return out
