"""The LM head's exact greedy choice by int8 screening (``screened_head.c``): packing and calls.

Greedy decoding reads only the argmax of each LM-head row. :class:`ScreenedHead` finds it from an int8 screen of
every token (AVX-512 VNNI, or AVX2 with 7-bit rows) and the exact float32 logits of the few tokens whose error bound
reaches the best exact one: the same index as the argmax of the full head's logits (numpy's rule), bit for bit,
reading a quarter of the head's bytes (tiny-py-coder, 1 thread: 42 against 123 us for one row, 106 against 262 us
for six; ``benchmarks/results/2026-11-26p/exp_screen.txt``). See ``screened_head.c`` for the bound.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import torch

from .. import huge_pages
from . import library
from .linear import sync_threads

#: Environment variable: ``0`` turns the screen off (the whole head serves every greedy step), ``avx2`` uses the AVX2
#: path on a CPU that also has AVX-512 VNNI (tests and A/B runs); unset: the best the CPU has.
SCREEN_ENV = "FASTCODER_SCREEN"
_ISA_NAMES = {"avx2": 1, "vnni": 2}
_CHOSEN: dict[str, int] = {}  # "isa": the instruction set screen_isa chose for this process
#: Attribute of an LM-head module: ``(weight, its version, ScreenedHead or None)`` when last looked at.
SCREEN_ATTR = "_fastcoder_screened_head"


class ScreenedHead:
    """An LM head's weight packed for :func:`argmax` (``fc_screen_pack``): int8 panels (V x K bytes, rounded up to
    16 tokens and 4 values), per token a float32 scale, an int32 sum and two float32 norms (~V x 16 bytes).

    Build with :meth:`for_weight`. Keeps a reference to the float32 weight, whose rows the exact logits read.
    """

    def __init__(self, lib, weight: torch.Tensor):
        self._lib = lib
        self.weight = weight  # (V, K) float32, contiguous: the exact logits' rows
        self.vocab, self.dim = int(weight.shape[0]), int(weight.shape[1])
        # read whole by every forward: on huge pages where the kernel gives them (engine.huge_pages)
        self._q = huge_pages.empty_bytes(int(lib.fc_screen_bytes(self.vocab, self.dim))).view(np.int8)
        self._scale = np.zeros(self.vocab, dtype=np.float32)
        self._sumq = np.zeros(self.vocab, dtype=np.int32)
        self._enorm = np.zeros(self.vocab, dtype=np.float32)
        self._wnorm = np.zeros(self.vocab, dtype=np.float32)
        vp = (self.vocab + 15) // 16 * 16
        self._scratch_bytes = 4 * vp * 4 + vp * 4 + 4 * int(lib.fc_screen_kpad(self.dim)) + 64
        self._local = threading.local()
        self.rows = 0  # rows screened so far
        self.exact = 0  # exact logits computed so far (>= rows)
        sync_threads(lib)  # packing splits the tokens over torch's threads
        self.ok = lib.fc_screen_pack(weight.data_ptr(), self.vocab, self.dim, self._q.ctypes.data,
                                     self._scale.ctypes.data, self._sumq.ctypes.data, self._enorm.ctypes.data,
                                     self._wnorm.ctypes.data) == 0
        self._args = (self._q.ctypes.data, self._scale.ctypes.data, self._sumq.ctypes.data, self._enorm.ctypes.data,
                      self._wnorm.ctypes.data, weight.data_ptr(), self.vocab)

    @classmethod
    def for_weight(cls, weight: torch.Tensor) -> "ScreenedHead | None":
        """A screened head for ``weight`` ((V, K) float32 CPU tensor, K <= 16,384), or None: no native library,
        a CPU without AVX2 and FMA, ``$FASTCODER_SCREEN=0``, another dtype or device, or a weight that is not
        finite."""
        lib = library()
        if (lib is None or screen_isa(lib) == 0 or weight.dim() != 2 or weight.dtype != torch.float32
                or weight.device.type != "cpu"):
            return None
        weight = weight.detach().contiguous()
        head = cls(lib, weight)
        return head if head.ok else None

    def _scratch(self):
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = (np.zeros(self._scratch_bytes, dtype=np.uint8),
                                     np.zeros(1, dtype=np.int64))
        return buf

    def argmax(self, hidden: torch.Tensor) -> list[int] | None:
        """Each row's argmax of ``hidden @ weight.T`` (numpy's rule: the first maximum), exact.

        Args:
            hidden: (R, K) float32 CPU tensor, the LM head's input rows (R >= 1).
        Returns:
            R token ids; None, with nothing computed, for a row that is not finite or all zero (the caller then
            computes the whole head).
        """
        x = hidden.detach()
        if not x.is_contiguous():
            x = x.contiguous()
        rows = int(x.shape[0])
        sync_threads(self._lib)  # the int8 product splits its panels over torch's threads, as fc_gemm does
        scratch, out = self._scratch()
        if out.shape[0] < rows:
            out = np.zeros(rows, dtype=np.int64)
            self._local.buf = (scratch, out)
        n = self._lib.fc_screen_argmax(x.data_ptr(), rows, self.dim, *self._args, out.ctypes.data,
                                       scratch.ctypes.data)
        if n < 0:
            return None
        self.rows += rows
        self.exact += int(n)
        return out[:rows].tolist()


def screen_isa(lib) -> int:
    """The instruction set the screen uses in ``lib`` (the native library): 2 AVX-512 VNNI, 1 AVX2, 0 none (no such
    CPU, or ``$FASTCODER_SCREEN=0``), chosen once per process from :data:`SCREEN_ENV`."""
    if "isa" not in _CHOSEN:
        want = os.environ.get(SCREEN_ENV, "").strip().lower()
        if want in ("0", "off", "false", "no"):
            _CHOSEN["isa"] = 0
        else:
            _CHOSEN["isa"] = int(lib.fc_screen_use(_ISA_NAMES.get(want, 0)))
    return _CHOSEN["isa"]


def active_isa() -> str | None:
    """The instruction set greedy steps screen with now: ``"vnni"``, ``"avx2"``, or None (no screen)."""
    lib = library()
    if lib is None or screen_isa(lib) == 0:
        return None
    return {code: name for name, code in _ISA_NAMES.items()}.get(int(lib.fc_screen_supported()))


def screened_head(head: torch.nn.Module) -> ScreenedHead | None:
    """``head``'s :class:`ScreenedHead` (an ``nn.Linear`` LM head without bias), built on first use and kept on the
    module, built again when the weight was replaced or changed in place since (``Tensor._version``, as
    :mod:`engine.packed_linear` checks its packs: training in the same process must not leave a stale screen);
    None where it cannot have one (see :meth:`ScreenedHead.for_weight`)."""
    weight = getattr(head, "weight", None)
    found = getattr(head, SCREEN_ATTR, None)
    if found is not None and (weight is not found[0] or weight._version != found[1]):
        found = None
    if found is None:
        ok = isinstance(head, torch.nn.Linear) and getattr(head, "bias", None) is None and weight is not None
        found = (weight, weight._version if weight is not None else 0,
                 ScreenedHead.for_weight(weight) if ok else None)
        setattr(head, SCREEN_ATTR, found)
    return found[2]
