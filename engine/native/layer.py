"""Every decoder layer over a verify forward's few rows, and the final norm, in one native call
(``fc_fused_forward``, ``fc_fused_layer`` per layer, in ``decoder_layer.c``): which models qualify, and the call.
One call with packed arguments instead of one per layer (28 converted arguments each) plus torch's final norm:
140-230 us less per forward at 1,000 cached tokens (1 and 7 rows, both ways alternating in one process).

:mod:`engine.lean_forward` decides when a forward takes it; this module checks tensors and moves pointers.
"""

from __future__ import annotations

import contextlib
import ctypes
import operator
import os
import threading
import weakref

import numpy as np
import torch

from . import library
from .linear import sync_threads

#: Environment variable: ``0`` keeps the per-operation lean forward.
FUSED_ENV = "FASTCODER_FUSED_LAYER"
_SILU = ("SiLU", "SiLUActivation")
#: RMSNorm classes with LlamaRMSNorm's arithmetic: the C code applies them (the layers' and the final norm), and
#: :func:`engine.lean_forward._rms_norm` reproduces them (``engine.lean_forward.NORMS``).
RMS_NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm")
_WEIGHT = operator.itemgetter("weight")  # of a module's _parameters (nn.Module.__getattr__ costs more)
_VERSION = operator.attrgetter("_version")
_DATA_PTR = operator.methodcaller("data_ptr")


def fused_library():
    """The native library when its fused layer can run here (the few-row kernels run on this CPU and
    ``$FASTCODER_FUSED_LAYER`` is not ``0``), else None."""
    if os.environ.get(FUSED_ENV, "").strip() == "0":
        return None
    lib = library()
    if lib is None or not lib.fc_gemm_supported() or not lib.fc_attention_supported():
        return None
    return lib


class FusedPlan:
    """The fused layer's arguments for every layer of one model, read once (see :func:`plan_for`).

    ``max_rows``: the most rows every native-packed linear layer takes (the attention's own limit is read per
    forward: the load-time probe switches it); ``head_dim``: the attention heads' size (the rotary tables'
    width); ``layers``: per layer, the scalar and pointer arguments of ``fc_fused_layer`` but for the
    per-forward ones.
    """

    def __init__(self, lib, layers):
        self.lib = lib
        self.head_dim = int(layers[0].self_attn.head_dim)
        self.linears = []
        self.layers = []
        self.max_rows = 1 << 30
        for layer in layers:
            attn, mlp = layer.self_attn, layer.mlp
            lins = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
            self.linears += lins
            self.max_rows = min([self.max_rows, *(lin._max_rows for lin in lins)])
            n1, n2 = layer.input_layernorm, layer.post_attention_layernorm
            self.layers.append((n1.weight.data_ptr(), n2.weight.data_ptr(), float(n1.variance_epsilon),
                                *(lin._panels_ptr for lin in lins), mlp.gate_proj.out_features,
                                attn.q_proj.out_features // attn.head_dim, attn.k_proj.out_features // attn.head_dim,
                                attn.head_dim, float(attn.scaling)))
        # the norm modules: their weight is read per check (a replaced Parameter has another address)
        self.norms = [(layer.input_layernorm, layer.post_attention_layernorm) for layer in layers]
        # fc_fused_forward's packed arguments: per layer 16 int64 (the fields above but eps and scale, then the
        # cache buffers and capacity, filled per forward) and 2 float64 (eps, scale)
        self.ia = np.zeros((len(layers), 16), dtype=np.int64)
        self.da = np.zeros((len(layers), 2), dtype=np.float64)
        for i, (n1, n2, eps, *lins, inter, heads, kv_heads, d, scale) in enumerate(self.layers):
            self.ia[i, :13] = [n1, n2, *lins, inter, heads, kv_heads, d]
            self.da[i] = eps, scale
        self.buffers: list = [None] * len(layers)  # weak references to the cache buffers ia points at
        self.pointed = None  # the greedy step's weak reference to the cache view ia points at (engine.native.step)
        self.args = (self.ia.ctypes.data, self.da.ctypes.data, len(layers))
        self.final = None  # (module, weight address, eps) of the final norm the C code applies (set_final_norm)
        # what current() compares: the modules' parameter dicts (linear layers first, then norms); the weights
        # the panels were packed from (packed_linear's weak references and versions) and the norm weights held
        # now (weak references: a replaced weight is not kept alive) with their addresses
        self._dicts = [m._parameters for m in (*self.linears, *(n for pair in self.norms for n in pair))]
        self._n_linear = len(self.linears)
        self._versions = [lin._pack_version for lin in self.linears]
        self._remember()
        self._pinned = 0  # pinned() windows open whose entry check passed: current() answers without checking
        self._pin_lock = threading.Lock()

    def _remember(self) -> None:
        norms = list(map(_WEIGHT, self._dicts[self._n_linear:]))
        self._refs = [lin._pack_ref for lin in self.linears] + [weakref.ref(w) for w in norms]
        self._norm_ptrs = list(map(_DATA_PTR, norms))

    def set_final_norm(self, norm) -> None:
        """Let :func:`run_layers` apply ``norm`` (the model's final RMSNorm) too, when its weight is a float32
        contiguous CPU vector. ``final``: (the module, its weight's address, eps)."""
        w = getattr(norm, "weight", None)
        eps = getattr(norm, "variance_epsilon", None)
        if (type(norm).__name__ in RMS_NORMS and isinstance(w, torch.Tensor) and w.dtype == torch.float32
                and w.dim() == 1 and w.is_contiguous() and w.device.type == "cpu" and eps is not None):
            self.final = (norm, w.data_ptr(), float(eps))
            self._dicts.append(norm._parameters)
            self._remember()

    def current(self) -> bool:
        """Whether every weight is the Parameter the plan was made with, unchanged since its panels were packed
        (linear layers), with its storage where it was (norms). Iterates in C (``map``): a generator over the
        43 linear layers and 13 norms of tiny-py-coder cost ~120 us a forward, as much as its LM head's
        Python; still ~60 us a forward (2.8% of a plain decode step), so inside :meth:`pinned` it is checked
        once per generation instead."""
        if self._pinned:
            return True
        weights = list(map(_WEIGHT, self._dicts))
        return (all(map(operator.is_, weights, [r() for r in self._refs]))
                and list(map(_VERSION, weights[:self._n_linear])) == self._versions
                and list(map(_DATA_PTR, weights[self._n_linear:])) == self._norm_ptrs)


    @contextlib.contextmanager
    def pinned(self):
        """A window (one generation: :class:`engine.decoder.SpeculativeDecoder`) in which the weights are checked
        once, on entry, and every forward's :meth:`current` then answers True without checking. The caller
        promises that no weight changes inside it (weights are changed between generations: fine-tuning, a new
        adapter). Yields whether the entry check passed; when it did not, every forward checks as outside."""
        ok = self.current()
        if ok:
            with self._pin_lock:
                self._pinned += 1
        try:
            yield ok
        finally:
            if ok:
                with self._pin_lock:
                    self._pinned -= 1


def plan_for(base) -> FusedPlan | None:
    """The :class:`FusedPlan` of ``base`` (a Llama-family inner model whose layers the lean forward runs), or
    None when a layer does not qualify: every linear layer native-packed without bias, SiLU-gated MLPs,
    float32 contiguous norm weights, an even head size of at most 512."""
    lib = fused_library()
    if lib is None:
        return None
    layers = base.layers[:base.config.num_hidden_layers]
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        if type(mlp.act_fn).__name__ not in _SILU or not lib.fc_fused_layer_supported(int(attn.head_dim)):
            return None
        if attn.q_proj.out_features % attn.head_dim or attn.k_proj.out_features != attn.v_proj.out_features:
            return None
        for lin in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj):
            if getattr(lin, "_panels_ptr", None) is None or lin.bias is not None:
                return None
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            w = norm.weight
            if w.dtype != torch.float32 or not w.is_contiguous() or w.device.type != "cpu":
                return None
    plan = FusedPlan(lib, layers)
    plan.set_final_norm(getattr(base, "norm", None))
    return plan


def cache_ready(cache, n_layers: int, rows: int) -> bool:
    """Whether every layer of ``cache`` (a DynamicCache) is an initialised
    :class:`engine.kv_cache.PreallocatedLayer` with float32 contiguous batch-1 buffers, all holding as many
    entries (grown for ``rows`` more entries here when needed)."""
    layers = getattr(cache, "layers", None)
    if layers is None or len(layers) < n_layers:
        return False
    past = getattr(layers[0], "_len", None)
    for layer in layers[:n_layers]:
        kbuf = getattr(layer, "_kbuf", None)
        if (kbuf is None or kbuf.dtype != torch.float32 or kbuf.device.type != "cpu" or kbuf.shape[0] != 1
                or layer._len != past):
            return False
        layer._ensure(layer._len + rows, kbuf)
    return True


def mask_args(mask: torch.Tensor | None, rows: int, keys: int):
    """``(kind, pointer, strides, mask)`` of an attention mask for ``fc_fused_layer`` (kind 0: none, 1: bool,
    2: float32 added to the scores; strides over batch, row, column), or None for one the kernel does not take."""
    if mask is None:
        return 0, None, (ctypes.c_int64 * 3)(0, 0, 0), None
    if (mask.dim() != 4 or mask.dtype not in (torch.bool, torch.float32) or mask.device.type != "cpu"
            or mask.shape[0] != 1 or mask.shape[1] != 1 or mask.shape[2] != rows or mask.shape[3] < keys):
        return None
    strides = (ctypes.c_int64 * 3)(mask.stride(0), mask.stride(2), mask.stride(3))
    return (1 if mask.dtype == torch.bool else 2), mask.data_ptr(), strides, mask


def _point(plan: FusedPlan, layers) -> None:
    """Point the plan's per-layer cache fields (``ia[:, 13:16]``) at ``layers``' buffers where they point elsewhere
    (another cache, or grown); the greedy step's record of the cache pointed at is then dropped."""
    ia, held = plan.ia, plan.buffers
    for i, layer in enumerate(layers):
        kbuf, vbuf = layer._kbuf, layer._vbuf
        h = held[i]
        if h is None or h[0]() is not kbuf or h[1]() is not vbuf:
            ia[i, 13], ia[i, 14], ia[i, 15] = kbuf.data_ptr(), vbuf.data_ptr(), kbuf.shape[2]
            held[i] = (weakref.ref(kbuf), weakref.ref(vbuf))  # not kept alive: a freed cache is not held
            plan.pointed = None


def point_at_cache(plan: FusedPlan, cache, rows: int) -> bool:
    """:func:`cache_ready` for ``rows`` more entries (growing the buffers when needed), then the plan pointed at
    ``cache``'s buffers. False, with nothing pointed, for a cache the fused layer does not take."""
    if not cache_ready(cache, len(plan.layers), rows):
        return False
    _point(plan, cache.layers[:len(plan.layers)])
    return True


def run_layers(plan: FusedPlan, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache, mask
               ) -> torch.Tensor | None:
    """Every decoder layer over ``x`` ((1, m, hidden) float32, contiguous; updated in place), each layer's keys
    and values appended to ``cache`` (:func:`cache_ready` said yes), in one native call (``fc_fused_forward``).
    ``cos``/``sin``: (1, m, head_dim) float32, contiguous; ``mask``: :func:`mask_args`'s tuple.

    Returns the model's final norm of ``x`` ((1, m, hidden) float32, row by row as the layers' norms) when the
    plan has it (:meth:`FusedPlan.set_final_norm`), else None. Raises MemoryError when scratch memory is
    short."""
    kind, mptr, strides, _ = mask
    m, hidden = x.shape[1], x.shape[2]
    layers = cache.layers
    past = layers[0]._len
    held = plan.buffers
    _point(plan, layers[:len(held)])
    final = plan.final
    out = torch.empty_like(x) if final is not None else None
    sync_threads(plan.lib)
    rc = plan.lib.fc_fused_forward(*plan.args, x.data_ptr(), m, hidden, cos.data_ptr(), sin.data_ptr(), past, mptr,
                                   kind, strides, int(m > 1 and kind == 0),
                                   final[1] if final is not None else None, final[2] if final is not None else 0.0,
                                   out.data_ptr() if out is not None else None)
    if rc != 0:
        raise MemoryError("the fused decoder layer could not allocate its scratch memory")
    for layer in layers[:len(held)]:
        layer._len = past + m
    return out
