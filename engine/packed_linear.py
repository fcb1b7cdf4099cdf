"""Prepacked weights for the verify forward's small matrix products on a CPU (Intel MKL packed GEMM).

A tree-verification forward multiplies a few rows (the pending token and 1-64 draft tokens) by every
weight matrix of the model. For such small products MKL's ``sgemm`` copies the whole weight into its
internal blocked layout at every call, so on a CPU the first draft token cost ~30% of a plain decode
step: the LM head of tiny-py-coder (8192 x 256) took 1.1 ms for one row (``gemv``, no copy) and 2.2 ms
for two. MKL's packed GEMM (``cblas_sgemm_pack`` once, ``cblas_sgemm_compute`` per call) does that copy
once, at load; PyTorch exposes it as ``torch.ops.mkl._mkl_reorder_linear_weight`` /
``torch.ops.mkl._mkl_linear`` (what inductor's CPU weight prepacking calls).

Measured here (tiny-py-coder, 1 thread, 512 cached tokens, median ms of one forward; `none` = every
product unpacked, `head` = LM head packed, `all` = every linear packed)::

    rows     1     2      4      8      16
    none   7.61  10.41  11.99  13.44  15.71
    head   7.65   8.90  11.12  12.29  14.61
    all    7.91   9.96  10.55  11.57  13.52

One row (a plain decode step, and all of ``ar``) keeps the unpacked ``F.linear`` (a packed ``gemv`` was
no faster). MKL's packed buffer is larger than the weight: ~3x for the 8192 x 256 head, ~22x for a
256 x 256 projection (a fixed ~5.6 MB per matrix), about 1.1x for the matrices of billion-parameter
models; so matrices are packed largest first while the packed bytes stay within a budget
(:data:`DEFAULT_BUDGET_MB`, ``$FASTCODER_PACKED_WEIGHTS_MB``; 0 turns packing off) and at most
:data:`MAX_OVERHEAD` times the weight's own bytes. For tiny-py-coder that packs the head alone (25 MB).

Exactness: greedy verification stays lossless whatever kernel computes the products (the decoder's
output is compared with the model's own one-row steps by the lossless suite). A packed product differs
from ``F.linear``'s by float rounding only; :func:`pack_linear_weights` checks that on the first matrix
(and that one packed buffer serves every row count) before it swaps any layer, and a layer whose weight
changed after packing (``Tensor._version``), or a call that needs gradients, uses ``F.linear``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

#: Packed bytes allowed per model when nothing else is configured (MiB).
DEFAULT_BUDGET_MB = 512
#: Environment variable overriding the budget (MiB; 0 disables packing).
BUDGET_ENV = "FASTCODER_PACKED_WEIGHTS_MB"
#: A matrix whose packed buffer would exceed this many times its own bytes is left unpacked.
MAX_OVERHEAD = 4.0


@dataclass
class PackReport:
    """What :func:`pack_linear_weights` did.

    Attributes:
        layers: names of the packed ``nn.Linear`` modules, largest first.
        pack_bytes: bytes held by their packed buffers.
        weight_bytes: bytes of the same layers' own weights.
        reason: why nothing was packed ("" when something was).
    """

    layers: list[str] = field(default_factory=list)
    pack_bytes: int = 0
    weight_bytes: int = 0
    reason: str = ""

    def as_dict(self) -> dict:
        """Plain data (``fastcoder/status``, the benchmark JSON)."""
        return {"layers": len(self.layers), "pack_mb": round(self.pack_bytes / 2**20, 1),
                "weight_mb": round(self.weight_bytes / 2**20, 1), "reason": self.reason}


def mkl_packing_available() -> bool:
    """Whether this torch build has MKL and its packed-GEMM linear ops."""
    try:
        return bool(torch.backends.mkl.is_available()) and hasattr(torch.ops.mkl, "_mkl_linear") \
            and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")
    except (AttributeError, RuntimeError):
        return False


class PackedLinear(torch.nn.Linear):
    """An ``nn.Linear`` (same parameters, same ``state_dict``) whose products over >= 2 rows use a packed
    copy of its weight (``_pack``: MKL's opaque float32 buffer). One row, gradients, a weight changed
    since packing, or an input that is not float32 on the CPU fall back to ``F.linear``."""

    _pack: torch.Tensor
    _pack_version: int

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if rows < 2 or x.dtype != torch.float32 or x.device.type != "cpu" \
                or self.weight._version != self._pack_version \
                or (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)):
            return F.linear(x, self.weight, self.bias)
        out = torch.ops.mkl._mkl_linear(x.reshape(rows, x.shape[-1]), self._pack, self.weight, self.bias, rows)
        return out.view(*x.shape[:-1], out.shape[-1])


def _pack(weight: torch.Tensor) -> torch.Tensor:
    # the row count given here only sizes MKL's blocking; the buffer serves any count (checked below)
    return torch.ops.mkl._mkl_reorder_linear_weight(weight.detach(), 16)


def _self_check(weight: torch.Tensor, packed: torch.Tensor) -> str:
    """"" when the packed product matches ``F.linear`` and one buffer serves other row counts, else why."""
    gen = torch.Generator().manual_seed(0)
    for rows in (2, 3, 7):
        x = torch.randn(rows, weight.shape[1], generator=gen)
        got = torch.ops.mkl._mkl_linear(x, packed, weight, None, rows)
        again = torch.ops.mkl._mkl_linear(x, torch.ops.mkl._mkl_reorder_linear_weight(weight, rows), weight, None,
                                          rows)
        if not torch.equal(got, again):
            return f"a buffer packed for 16 rows gave other results at {rows} rows"
        if not torch.allclose(got, F.linear(x, weight), rtol=1e-4, atol=1e-4):
            return f"packed product differs from F.linear at {rows} rows"
    return ""


def packing_budget_bytes() -> int:
    """The budget from ``$FASTCODER_PACKED_WEIGHTS_MB`` (MiB), else :data:`DEFAULT_BUDGET_MB`; a value that
    is not a non-negative number is logged and ignored."""
    value = os.environ.get(BUDGET_ENV, "").strip()
    if value:
        try:
            mb = float(value)
            if mb >= 0:
                return int(mb * 2**20)
        except ValueError:
            pass
        log.warning("%s=%r is not a non-negative number of MiB; using %d", BUDGET_ENV, value, DEFAULT_BUDGET_MB)
    return DEFAULT_BUDGET_MB * 2**20


@torch.no_grad()
def pack_linear_weights(model: torch.nn.Module, budget_bytes: int | None = None,
                        max_overhead: float = MAX_OVERHEAD) -> PackReport:
    """Swap the model's float32 CPU ``nn.Linear`` layers to :class:`PackedLinear`, largest weight first,
    while the packed bytes fit ``budget_bytes`` (default :func:`packing_budget_bytes`).

    Returns:
        A :class:`PackReport`; ``reason`` says why nothing was packed (MKL missing, budget 0, no float32
        CPU linear layer, a failed self-check). Never raises for those: the model then runs unchanged.
    """
    budget = packing_budget_bytes() if budget_bytes is None else int(budget_bytes)
    report = PackReport()
    if budget <= 0:
        report.reason = "packing disabled (budget 0)"
        return report
    if not mkl_packing_available():
        report.reason = "this torch build has no MKL packed GEMM"
        return report
    layers = [(name, mod) for name, mod in model.named_modules()
              if type(mod) is torch.nn.Linear and mod.weight.dtype == torch.float32
              and mod.weight.device.type == "cpu" and mod.weight.dim() == 2 and mod.weight.numel()]
    if not layers:
        report.reason = "no float32 linear layer on the CPU"
        return report
    layers.sort(key=lambda item: -item[1].weight.numel())
    checked = False
    for name, mod in layers:
        weight = mod.weight.detach()
        packed = _pack(weight)
        size = packed.numel() * packed.element_size()
        own = weight.numel() * weight.element_size()
        if size > max_overhead * own or report.pack_bytes + size > budget:
            continue
        if not checked:
            problem = _self_check(weight, packed)
            if problem:
                report.reason = problem
                log.warning("MKL weight packing not used: %s", problem)
                return report
            checked = True
        mod.__class__ = PackedLinear
        mod._pack = packed
        mod._pack_version = mod.weight._version
        report.layers.append(name)
        report.pack_bytes += size
        report.weight_bytes += own
    if not report.layers:
        report.reason = "no linear layer fits the budget"
    else:
        log.info("packed %d linear layers for small-batch products (%.1f MiB)", len(report.layers),
                 report.pack_bytes / 2**20)
    return report
