"""Buffers that every forward streams, on 2 MB pages (Linux transparent huge pages).

A decode step or a verify forward reads the packed weights (tiny-py-coder: 29 MB in 43 panels), the LM head's
screen (2 MB) and the KV cache (12 MB at 1,000 tokens) from memory each time. On 4 KB pages that is ~10,000 page
translations a forward, more than the core's TLB holds, and the hardware prefetchers stop at every 4 KB page
boundary. Allocated here instead, these buffers sit on 2 MB pages where the kernel can give them (``madvise`` with
``MADV_HUGEPAGE``, which works when ``/sys/kernel/mm/transparent_hugepage/enabled`` is ``always`` or ``madvise``).

Measured (the project's 2-core AMD EPYC, 1 thread, tiny-py-coder at 1,000 cached tokens, a 24 MB sweep between
forwards; two models in one process, one loaded with ``FASTCODER_HUGE_PAGES=0``, forwards alternating, the same
tokens checked; 3 runs x 300 rounds, ``benchmarks/results/2026-11-27c/exp_huge.py``): plain decode step
x0.951-0.965, tree forwards of 3 / 7 / 15 draft tokens x0.908-0.922 / x0.925-0.936 / x0.953-0.967 (paired medians).

Nothing changes in what is computed: same bytes, other pages. ``FASTCODER_HUGE_PAGES=0`` turns it off; where the
platform has no ``madvise`` (not Linux) or the kernel gives no huge page, the buffers are ordinary memory.
"""

from __future__ import annotations

import mmap
import os

import numpy as np
import torch

#: Bytes of one huge page (x86-64 and arm64 with 4 KB base pages).
HUGE_PAGE = 2 << 20
#: Environment variable: ``0`` allocates every buffer the ordinary way.
ENV = "FASTCODER_HUGE_PAGES"
_THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def enabled() -> bool:
    """Whether large buffers are asked for on huge pages: Linux's ``madvise(MADV_HUGEPAGE)`` exists, the kernel's
    transparent huge pages are not ``never`` and ``FASTCODER_HUGE_PAGES`` is not ``0``."""
    if os.environ.get(ENV, "1") == "0" or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        with open(_THP_ENABLED) as f:
            return "[never]" not in f.read()
    except OSError:
        return False


def _aligned_zeros(nbytes: int) -> np.ndarray:
    """``nbytes`` zero bytes starting on a 64-byte (cache line) boundary, from torch's allocator (numpy's would
    ask for huge pages itself from 4 MB up; this is the ordinary memory :func:`enabled` false promises)."""
    whole = torch.zeros(nbytes + 64, dtype=torch.uint8).numpy()
    start = (-whole.ctypes.data) % 64
    return whole[start:start + nbytes]


def empty_bytes(nbytes: int) -> np.ndarray:
    """A zero-filled, writable ``(nbytes,)`` uint8 array, 2 MB-aligned on huge pages when :func:`enabled` and
    ``nbytes >= HUGE_PAGE``, else ordinary memory aligned to 64 bytes. The array keeps its memory alive.

    Raises:
        ValueError: ``nbytes`` is negative.
    """
    nbytes = int(nbytes)
    if nbytes < 0:
        raise ValueError(f"a buffer of {nbytes} bytes")
    if nbytes < HUGE_PAGE or not enabled():
        return _aligned_zeros(nbytes)
    size = -(-nbytes // HUGE_PAGE) * HUGE_PAGE
    try:
        # private anonymous memory (shared anonymous memory follows shmem's huge page setting, often never);
        # one page of slack so the buffer can start on a 2 MB boundary (untouched, it is never backed)
        mm = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        mm.madvise(mmap.MADV_HUGEPAGE)
    except (OSError, ValueError):
        return _aligned_zeros(nbytes)
    whole = np.frombuffer(mm, dtype=np.uint8)
    start = (-whole.ctypes.data) % HUGE_PAGE
    return whole[start:start + nbytes]


def empty(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A zero-filled contiguous CPU tensor of ``shape`` and ``dtype``, on the memory :func:`empty_bytes` gives
    (huge pages from 2 MB up where the kernel has them).

    Raises:
        ValueError: a negative dimension.
    """
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"shape {shape}")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    nbytes = count * torch.empty((), dtype=dtype).element_size()
    return torch.from_numpy(empty_bytes(nbytes)).view(dtype).view(shape)


def round_up(count: int, item_bytes: int) -> int:
    """``count`` items of ``item_bytes`` each, rounded up so that they fill whole huge pages when they take at
    least one (the rest of the last page would be allocated anyway); ``count`` itself below that or when
    :func:`enabled` is false."""
    count, item_bytes = int(count), int(item_bytes)
    if item_bytes <= 0 or count * item_bytes < HUGE_PAGE or not enabled():
        return count
    return -(-count * item_bytes // HUGE_PAGE) * HUGE_PAGE // item_bytes


def huge_bytes(address: int) -> int:
    """Bytes on huge pages (``AnonHugePages`` in ``/proc/self/smaps``) of the mapping that holds ``address``;
    0 where there is none or the file cannot be read (not Linux)."""
    try:
        with open("/proc/self/smaps") as f:
            inside = False
            for line in f:
                head = line.split(None, 1)[0]
                if "-" in head and not head.endswith(":"):
                    lo, _, hi = head.partition("-")
                    inside = int(lo, 16) <= address < int(hi, 16)
                elif inside and head == "AnonHugePages:":
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0
