"""Few-row products ``x @ W^T`` with the native kernel (``fc_gemm`` in ``small_gemm.c``): packing and calls.

:mod:`engine.packed_linear` decides which layers use it; this module only moves tensors in and out.
"""

from __future__ import annotations

import threading

import torch

from . import library

#: Output features per packed panel (``NR`` in small_gemm.c).
PANEL = 16

_THREADS = {"set": 1}  # the thread count fc_gemm was last given (its own default: 1)


def sync_threads(lib) -> None:
    """Let ``fc_gemm`` split its panels over ``torch.get_num_threads()`` threads (a library built with OpenMP;
    otherwise it stays on one), telling the library only when the count changed (~0.3 us a call). The split
    takes whole panels per thread: the same bits at any count. The verify-cost curve is measured per thread
    count (:func:`engine.cost_model.cost_key`)."""
    n = torch.get_num_threads()
    if n != _THREADS["set"]:
        lib.fc_set_threads(n)
        _THREADS["set"] = n


def gemm_library():
    """The native library when its few-row kernel runs on this CPU (x86-64 with AVX2 and FMA), else None."""
    lib = library()
    if lib is None or not lib.fc_gemm_supported():
        return None
    return lib


def panel_floats(weight: torch.Tensor) -> int:
    """Floats (4 bytes each) :func:`pack_panels` writes for a ``(N, K)`` weight: ``ceil(N / 16) * 16 * K``."""
    n, k = weight.shape
    return -(-int(n) // PANEL) * PANEL * int(k)


def pack_panels(lib, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Pack a ``(N, K)`` float32 CPU weight into 16-output panels for :func:`gemm`, into ``out`` when given (a
    contiguous float32 CPU tensor of :func:`panel_floats` elements, e.g. a slice of one buffer for every layer).

    Returns:
        ``out`` or a new float32 tensor of ``ceil(N / 16) * 16 * K`` elements (the weight's bytes, rounded up to
        16 rows).
    Raises:
        ValueError: the weight is not a 2-D float32 CPU tensor, or ``out`` is not as above.
    """
    if weight.dim() != 2 or weight.dtype != torch.float32 or weight.device.type != "cpu":
        raise ValueError(f"expected a 2-D float32 CPU weight, got {tuple(weight.shape)} {weight.dtype} "
                         f"on {weight.device}")
    w = weight.detach().contiguous()
    n, k = w.shape
    if out is None:
        out = torch.empty(panel_floats(w), dtype=torch.float32)
    elif out.dtype != torch.float32 or out.device.type != "cpu" or not out.is_contiguous() \
            or out.numel() != panel_floats(w):
        raise ValueError(f"pack_panels: out must be a contiguous float32 CPU tensor of {panel_floats(w)} elements")
    lib.fc_gemm_pack(w.data_ptr(), n, k, out.data_ptr())
    return out


#: Per thread: the last LM-head output whose rows' argmax ``fc_gemm_argmax`` took (:func:`gemm_argmax`).
_GREEDY = threading.local()


def gemm_argmax(lib, x2: torch.Tensor, panels_ptr: int, n: int, argmax_buf, argmax_ptr: int) -> torch.Tensor:
    """:func:`gemm`, and each output row's argmax taken in the same call (``fc_gemm_argmax``, greedy.c) into
    ``argmax_buf`` ((>= M,) int64 numpy array at ``argmax_ptr``), for :func:`known_argmax`. The LM head's product:
    the greedy choice then costs no numpy call, which after a forward took ~57 us a step on this project's CPU.

    Returns:
        ``(M, n)`` float32, the same bits as :func:`gemm`.
    """
    rows, k = x2.shape
    y = torch.empty((rows, n), dtype=torch.float32)
    sync_threads(lib)
    lib.fc_gemm_argmax(x2.data_ptr(), rows, k, panels_ptr, n, y.data_ptr(), argmax_ptr)
    _GREEDY.last = (y.data_ptr(), n, rows, argmax_buf, y)  # y held: its memory cannot be another tensor's meanwhile
    return y


def known_argmax(logits: torch.Tensor) -> list[int] | None:
    """The argmax of each row of ``logits`` ((R, V) float32) when they are the first R rows of this thread's last
    :func:`gemm_argmax` output (the same memory, shape and strides) and no argmax was asked of it yet, else None.
    Used once: the registration is cleared, so a later call computes afresh. The answer is that of the logits as
    the LM head wrote them: a caller that changes them in place must ask before (the decoder never changes
    them). numpy's rule: the first maximum, a NaN counting as the maximum."""
    last = getattr(_GREEDY, "last", None)
    if last is None:
        return None
    ptr, n, rows, buf, _ = last
    if logits.data_ptr() != ptr or logits.dtype != torch.float32:
        return None
    shape = logits.shape
    if len(shape) != 2 or shape[1] != n or shape[0] > rows or logits.stride() != (n, 1):
        return None
    _GREEDY.last = None
    return buf[:shape[0]].tolist()


def gemm(lib, x2: torch.Tensor, panels_ptr: int, n: int) -> torch.Tensor:
    """``x2 @ W^T`` for a contiguous ``(M, K)`` float32 CPU ``x2`` and a weight packed by :func:`pack_panels`
    (``panels_ptr``: its ``data_ptr()``; the caller keeps the tensor alive).

    Returns:
        ``(M, n)`` float32. Row i is bit-identical whatever M is (one FMA chain per output, k in order).
    """
    rows, k = x2.shape
    y = torch.empty((rows, n), dtype=torch.float32)
    sync_threads(lib)
    lib.fc_gemm(x2.data_ptr(), rows, k, panels_ptr, n, y.data_ptr())
    return y
