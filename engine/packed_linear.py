"""Prepacked weights for the verify forward's small matrix products on a CPU.

A decode step multiplies one row (a plain step) or a few rows (the pending token and 1-64 draft-tree tokens)
by every weight matrix of the model. BLAS libraries tune for large products; for a few rows they leave most
of a CPU idle. Two packings, tried in this order at load (float32 on a CPU):

1. **Native** (:mod:`engine.native.linear`, ``small_gemm.c``): the weight in 16-output panels and an AVX2/FMA
   kernel that reads each panel once for all rows. Every output is one FMA chain over k in order, so a row's
   result is the same bits whatever the number of rows: a plain decode step and the same token inside a
   verified draft tree get identical outputs from every linear layer. Used for 1 to ``max_rows`` rows, where
   ``max_rows`` comes from a timing probe at load against ``F.linear`` on this machine (no CPU-type
   constants); more rows (a prefill) keep ``F.linear``. Measured here (tiny-py-coder, 1 thread, the 43
   products of one forward with weights streamed from memory as in a real forward, ms)::

       rows        1     2     4     5     9     17    33
       F.linear  2.77  4.47  5.53  6.36  6.68  8.03  10.45
       native    1.31  1.62  1.62  1.95  2.63  3.84   6.41

   The packed copy has the weight's own size (rounded up to 16 rows).
2. **MKL packed GEMM** where the native kernel is unavailable (no C compiler, not x86-64 with AVX2/FMA,
   ``FASTCODER_NATIVE=0``) or slower: ``cblas_sgemm_pack`` once, ``cblas_sgemm_compute`` per call, through
   ``torch.ops.mkl._mkl_reorder_linear_weight`` / ``torch.ops.mkl._mkl_linear`` (what inductor's CPU weight
   prepacking calls). For a few rows MKL's ``sgemm`` otherwise copies the whole weight into its blocked
   layout at every call (the LM head of tiny-py-coder, 8192 x 256: 1.1 ms for one row, 2.2 ms for two).
   One row keeps ``F.linear``. MKL's packed buffer is larger than the weight (~3x for the 8192 x 256 head,
   ~22x for a 256 x 256 projection, ~1.1x for billion-parameter models' matrices), so matrices are packed
   largest first within :data:`MAX_OVERHEAD` times their own bytes.

Either way layers are packed largest first while the packed bytes stay within a budget
(:data:`DEFAULT_BUDGET_MB`, ``$FASTCODER_PACKED_WEIGHTS_MB``; 0 turns packing off).

Exactness: greedy verification stays lossless whatever kernel computes the products (the decoder's output is
compared with the model's own one-row steps by the lossless suite). A packed product differs from
``F.linear``'s by float rounding only; a self-check on the first matrix gates each packing, and a layer whose
weight changed after packing (``Tensor._version``), or a call that needs gradients, uses ``F.linear``.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from . import huge_pages
from .native.linear import gemm as native_gemm
from .native.linear import gemm_argmax, gemm_library, pack_panels, panel_floats

log = logging.getLogger(__name__)

#: Packed bytes allowed per model when nothing else is configured (MiB).
DEFAULT_BUDGET_MB = 512
#: Environment variable overriding the budget (MiB; 0 disables packing).
BUDGET_ENV = "FASTCODER_PACKED_WEIGHTS_MB"
#: Environment variable choosing the packed layers' kernel at load (:func:`packing_kernel`): "auto" (the default:
#: the native kernel where its load-time probe finds it no slower than ``F.linear``), "native" (whatever the timing),
#: "mkl". The test suite sets "native": on a busy machine the probe once chose MKL and a server test read no native
#: forward kernels.
KERNEL_ENV = "FASTCODER_PACKED_KERNEL"
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
        kernel: ``"native"`` (:class:`NativeLinear`), ``"mkl"`` (:class:`PackedLinear`) or ``""`` (none).
        max_rows: native only: the most rows a product may have to use the kernel (from the timing probe).
        probe_ms: native only: ``{rows: [F.linear ms, native ms]}`` measured by the probe.
        probe_cached: native only: the probe's timings were read from the probe cache (:mod:`engine.probe_cache`),
            measured at an earlier load, not timed at this one.
        huge_page_bytes: native only: bytes of the packed buffer the kernel put on 2 MB pages
            (:mod:`engine.huge_pages`; 0 where it gave none or they are off).
    """

    layers: list[str] = field(default_factory=list)
    pack_bytes: int = 0
    weight_bytes: int = 0
    reason: str = ""
    kernel: str = ""
    max_rows: int = 0
    probe_ms: dict = field(default_factory=dict)
    probe_cached: bool = False
    huge_page_bytes: int = 0

    def as_dict(self) -> dict:
        """Plain data (``fastcoder/status``, the benchmark JSON)."""
        return {"layers": len(self.layers), "pack_mb": round(self.pack_bytes / 2**20, 1),
                "weight_mb": round(self.weight_bytes / 2**20, 1), "reason": self.reason, "kernel": self.kernel,
                "max_rows": self.max_rows, "probe_ms": self.probe_ms, "probe_cached": self.probe_cached,
                "huge_page_mb": weights_on_huge_pages_mb(self)}


def weights_on_huge_pages_mb(packing: "PackReport | None") -> float:
    """MB (1 decimal) of a loaded model's packed weights on 2 MB pages, from its :class:`PackReport`
    (``loaded.packing``; 0.0 for None or nothing packed natively): what ``fastcoder/status`` and the benchmark JSON
    report."""
    return round(getattr(packing, "huge_page_bytes", 0) / 2**20, 1)


def mkl_packing_available() -> bool:
    """Whether this torch build has MKL and its packed-GEMM linear ops."""
    try:
        return bool(torch.backends.mkl.is_available()) and hasattr(torch.ops.mkl, "_mkl_linear") \
            and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")
    except (AttributeError, RuntimeError):
        return False


def _repacked(mod) -> bool:
    """Whether ``mod``'s weight is not the one its packed copy was made from: another Parameter (assigned
    since), or the same one changed in place (its version counter moved)."""
    weight = mod._parameters["weight"]
    return weight is not mod._pack_ref() or weight._version != mod._pack_version


class PackedLinear(torch.nn.Linear):
    """An ``nn.Linear`` (same parameters, same ``state_dict``) whose products over >= 2 rows use a packed
    copy of its weight (``_pack``: MKL's opaque float32 buffer). One row, gradients, a weight changed
    since packing, or an input that is not float32 on the CPU fall back to ``F.linear``."""

    _pack: torch.Tensor
    _pack_version: int
    _pack_ref: "weakref.ref"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if rows < 2 or x.dtype != torch.float32 or x.device.type != "cpu" \
                or _repacked(self) \
                or (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)):
            return F.linear(x, self.weight, self.bias)
        out = torch.ops.mkl._mkl_linear(x.reshape(rows, x.shape[-1]), self._pack, self.weight, self.bias, rows)
        return out.view(*x.shape[:-1], out.shape[-1])


class NativeLinear(torch.nn.Linear):
    """An ``nn.Linear`` (same parameters, same ``state_dict``) whose products over 1 to ``_max_rows`` rows use
    the native few-row kernel on a panel-packed copy of its weight (``_panels``, :mod:`engine.native.linear`).
    More rows, gradients, a weight changed since packing, or an input that is not float32 on the CPU fall
    back to ``F.linear``."""

    _panels: torch.Tensor
    _panels_ptr: int
    _pack_version: int
    _pack_ref: "weakref.ref"
    _max_rows: int
    _lib: object
    #: (max_rows,) int64 numpy buffer where the LM head's call also writes each row's argmax
    #: (:func:`enable_greedy_head`); None for every other layer.
    _argmax = None
    _argmax_ptr = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = x.shape[-1]
        rows = x.numel() // k if k else 0
        if not 0 < rows <= self._max_rows or x.dtype != torch.float32 or x.device.type != "cpu" \
                or _repacked(self) \
                or (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)):
            return F.linear(x, self.weight, self.bias)
        x2 = x.reshape(rows, k)
        if not x2.is_contiguous():
            x2 = x2.contiguous()
        if self._argmax is not None and rows <= len(self._argmax):  # the LM head: its greedy choice too
            return gemm_argmax(self._lib, x2, self._panels_ptr, self.out_features, self._argmax,
                               self._argmax_ptr).view(*x.shape[:-1], self.out_features)
        out = native_gemm(self._lib, x2, self._panels_ptr, self.out_features)
        if self.bias is not None:
            out += self.bias
        return out.view(*x.shape[:-1], self.out_features)


def enable_greedy_head(model: torch.nn.Module) -> bool:
    """Let ``model``'s LM head (``get_output_embeddings()``), when it is a :class:`NativeLinear` without bias, take
    each output row's argmax in its own native call (``fc_gemm_argmax``): :func:`engine.verify.argmax_rows` then
    reads it instead of running numpy's argmax over the logits. The logits are the same bits. Returns whether
    it was enabled."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if type(head) is not NativeLinear or head.bias is not None:
        return False
    lib = head._lib
    if getattr(lib, "fc_gemm_argmax", None) is None:
        return False
    head._argmax = np.zeros(max(int(head._max_rows), 1), dtype=np.int64)
    head._argmax_ptr = head._argmax.ctypes.data
    return True


#: Row counts at which the load-time probe times the native kernel against ``F.linear``; the kernel serves
#: up to the largest count where it was no slower at that count and every smaller one.
PROBE_ROWS = (1, 4, 16, 64)
#: The probe runs on the largest layer with at most this many weights (a billion-parameter model's LM head
#: would make the probe slow).
PROBE_MAX_NUMEL = 4 * 2**20


def _best_ms(fn, reps: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def _probe_inputs(weight: torch.Tensor, panels: torch.Tensor) -> tuple[int, int, torch.Tensor]:
    """(output width, the panels' address, (max(PROBE_ROWS), k) float32 random rows, seed 0) for the probes."""
    x = torch.randn(max(PROBE_ROWS), weight.shape[1], generator=torch.Generator().manual_seed(0))
    return weight.shape[0], panels.data_ptr(), x


@torch.no_grad()
def _check_native(lib, weight: torch.Tensor, panels: torch.Tensor) -> str:
    """"" unless the native kernel's products on ``weight`` differ from ``F.linear``'s beyond rounding or a row's
    result depends on the row count (then why)."""
    n, ptr, x = _probe_inputs(weight, panels)
    full = native_gemm(lib, x, ptr, n)
    if not torch.allclose(full, F.linear(x, weight), rtol=1e-4, atol=1e-4):
        return "native product differs from F.linear"
    for rows in (1, 3, 7):
        if not torch.equal(native_gemm(lib, x[:rows].contiguous(), ptr, n), full[:rows]):
            return f"native rows changed with the row count ({rows})"
    return ""


@torch.no_grad()
def _time_native(lib, weight: torch.Tensor, panels: torch.Tensor) -> tuple[int, dict]:
    """(max_rows, {rows: [F.linear ms, native ms]}): the largest of :data:`PROBE_ROWS` where the native kernel
    is no slower than ``F.linear`` on ``weight`` (within 5%) there and at every smaller count; 0 when slower at
    one row."""
    n, ptr, x = _probe_inputs(weight, panels)
    max_rows, probe = 0, {}
    for rows in PROBE_ROWS:
        xr = x[:rows].contiguous()
        blas = _best_ms(lambda: F.linear(xr, weight))
        mine = _best_ms(lambda: native_gemm(lib, xr, ptr, n))
        probe[rows] = [round(blas, 4), round(mine, 4)]
        if mine > blas * 1.05:
            break
        max_rows = rows
    return max_rows, probe


def _probe_native(lib, weight: torch.Tensor, panels: torch.Tensor,
                  probe_key: dict | None = None) -> tuple[int, dict, str, bool]:
    """(max_rows, {rows: [F.linear ms, native ms]}, problem, cached): :func:`_check_native`, then where it passes
    :func:`_time_native`, whose result is read from and kept in the probe cache (:mod:`engine.probe_cache`) under
    ``probe_key`` plus the weight's shape when ``probe_key`` is given (``cached``: it was read)."""
    problem = _check_native(lib, weight, panels)
    if problem:
        return 0, {}, problem, False
    if probe_key is None:
        return (*_time_native(lib, weight, panels), "", False)
    from .probe_cache import cached_row_limit  # noqa: PLC0415

    max_rows, probe, cached = cached_row_limit("packed-linear", {**probe_key, "shape": list(weight.shape)},
                                               lambda: _time_native(lib, weight, panels), max(PROBE_ROWS))
    return max_rows, probe, "", cached


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


def packing_kernel() -> str:
    """The ``kernel`` argument of :func:`pack_linear_weights` from ``$FASTCODER_PACKED_KERNEL`` ("auto", "native" or
    "mkl"), else "auto"; another value is logged and ignored."""
    value = os.environ.get(KERNEL_ENV, "").strip().lower()
    if value in ("auto", "native", "mkl"):
        return value
    if value:
        log.warning("%s=%r is not auto, native or mkl; using auto", KERNEL_ENV, value)
    return "auto"


@torch.no_grad()
def _linear_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Linear]]:
    """The model's float32 CPU ``nn.Linear`` layers, largest weight first."""
    layers = [(name, mod) for name, mod in model.named_modules()
              if type(mod) is torch.nn.Linear and mod.weight.dtype == torch.float32
              and mod.weight.device.type == "cpu" and mod.weight.dim() == 2 and mod.weight.numel()]
    layers.sort(key=lambda item: -item[1].weight.numel())
    return layers


@torch.no_grad()
def _pack_native(layers: list, budget: int, report: PackReport, force: bool = False,
                 probe_key: dict | None = None) -> bool:
    """Swap layers to :class:`NativeLinear` within ``budget`` when the kernel runs here and the probe finds
    it no slower than ``F.linear`` at one row at least (``force``: whatever the timing, up to the largest
    probed row count; ``probe_key``: see :func:`pack_linear_weights`); fills ``report``. False when nothing was
    swapped (``report.reason`` says why), so the caller can try MKL."""
    lib = gemm_library()
    if lib is None:
        report.reason = "no native few-row kernel (no C compiler, FASTCODER_NATIVE=0, or no AVX2/FMA)"
        return False
    probe_layer = next((mod for _, mod in layers if mod.weight.numel() <= PROBE_MAX_NUMEL), layers[-1][1])
    weight = probe_layer.weight.detach().contiguous()
    max_rows, probe, problem, cached = _probe_native(lib, weight, pack_panels(lib, weight), probe_key)
    report.probe_ms, report.probe_cached = probe, cached
    if force and not problem:
        max_rows = max(PROBE_ROWS)
    if problem or not max_rows:
        report.reason = problem or "F.linear was faster than the native kernel at one row"
        if problem:
            log.warning("native few-row kernel not used: %s", problem)
        return False
    chosen, total = [], 0  # (name, module, own bytes, first float, floats) within the budget
    for name, mod in layers:
        own = mod.weight.numel() * mod.weight.element_size()
        if 4 * total + own > budget:
            continue
        chosen.append((name, mod, own, total, panel_floats(mod.weight)))
        total += chosen[-1][-1]
    # every layer's panels in one buffer, on huge pages where the kernel gives them (engine.huge_pages: a forward
    # streams all of them; 4 KB pages cost it TLB misses and prefetches cut at every page)
    arena = torch.from_numpy(huge_pages.empty_bytes(4 * total)).view(torch.float32) if total else None
    for name, mod, own, start, count in chosen:
        panels = pack_panels(lib, mod.weight, out=arena[start:start + count])
        mod.__class__ = NativeLinear
        mod._panels, mod._panels_ptr, mod._lib = panels, panels.data_ptr(), lib
        mod._pack_version, mod._max_rows = mod.weight._version, max_rows
        mod._pack_ref = weakref.ref(mod.weight)
        report.layers.append(name)
        report.pack_bytes += panels.numel() * panels.element_size()
        report.weight_bytes += own
    if not report.layers:
        report.reason = "no linear layer fits the budget"
        return False
    report.kernel, report.max_rows, report.reason = "native", max_rows, ""
    report.huge_page_bytes = min(huge_pages.huge_bytes(arena.data_ptr()), report.pack_bytes)
    log.info("native few-row kernel for %d linear layers, 1-%d rows (%.1f MiB)", len(report.layers), max_rows,
             report.pack_bytes / 2**20)
    return True


def pack_linear_weights(model: torch.nn.Module, budget_bytes: int | None = None,
                        max_overhead: float = MAX_OVERHEAD, kernel: str = "auto",
                        probe_key: dict | None = None) -> PackReport:
    """Swap the model's float32 CPU ``nn.Linear`` layers to :class:`NativeLinear` (``kernel`` "auto": where
    the load-time probe finds it faster; "native": whatever the timing) or else :class:`PackedLinear` ("auto"
    or "mkl"), largest weight first, while the packed bytes
    fit ``budget_bytes`` (default :func:`packing_budget_bytes`) and, for MKL, ``max_overhead`` times the
    weight's own bytes. ``probe_key`` (what the model's timings depend on beyond the machine, e.g. its name): the
    native kernel's timing probe is read from and kept in the probe cache (:mod:`engine.probe_cache`); None
    times it here.

    Returns:
        A :class:`PackReport`; ``reason`` says why nothing was packed (no kernel, budget 0, no float32 CPU
        linear layer, a failed self-check). Never raises for those: the model then runs unchanged.
    Raises:
        ValueError: ``kernel`` is not "auto", "native" or "mkl".
    """
    if kernel not in ("auto", "native", "mkl"):
        raise ValueError(f"kernel must be 'auto', 'native' or 'mkl', got {kernel!r}")
    budget = packing_budget_bytes() if budget_bytes is None else int(budget_bytes)
    report = PackReport()
    if budget <= 0:
        report.reason = "packing disabled (budget 0)"
        return report
    layers = _linear_layers(model)
    if not layers:
        report.reason = "no float32 linear layer on the CPU"
        return report
    if kernel != "mkl" and (_pack_native(layers, budget, report, force=kernel == "native",
                                            probe_key=probe_key) or kernel == "native"):
        enable_greedy_head(model)
        return report
    native_reason = report.reason
    report = PackReport(probe_ms=report.probe_ms, probe_cached=report.probe_cached)
    if not mkl_packing_available():
        report.reason = "this torch build has no MKL packed GEMM" + (f"; {native_reason}" if native_reason else "")
        return report
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
        mod._pack_ref = weakref.ref(mod.weight)
        report.layers.append(name)
        report.pack_bytes += size
        report.weight_bytes += own
    if not report.layers:
        report.reason = "no linear layer fits the budget"
    else:
        report.kernel = "mkl"
        log.info("packed %d linear layers for small-batch products (%.1f MiB)", len(report.layers),
                 report.pack_bytes / 2**20)
    return report
