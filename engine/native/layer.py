"""A whole decoder layer over a verify forward's few rows in one native call (``fc_fused_layer`` in
``decoder_layer.c``): which models qualify, and the calls.

:mod:`engine.lean_forward` decides when a forward takes it; this module checks tensors and moves pointers.
"""

from __future__ import annotations

import ctypes
import os

import torch

from . import library

#: Environment variable: ``0`` keeps the per-operation lean forward.
FUSED_ENV = "FASTCODER_FUSED_LAYER"
_SILU = ("SiLU", "SiLUActivation")


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
        self.norms = [(layer.input_layernorm.weight, layer.post_attention_layernorm.weight) for layer in layers]

    def current(self) -> bool:
        """Whether the weights are still those the panels were packed from (and the norms where they were)."""
        # _parameters, not .weight: nn.Module.__getattr__ cost ~35 us a forward over 43 layers
        return (all(lin._parameters["weight"]._version == lin._pack_version for lin in self.linears)
                and all(a.data_ptr() == p[0] and b.data_ptr() == p[1] for (a, b), p in zip(self.norms, self.layers)))


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
    return FusedPlan(lib, layers)


def cache_ready(cache, n_layers: int, rows: int) -> bool:
    """Whether every layer of ``cache`` (a DynamicCache) is an initialised
    :class:`engine.kv_cache.PreallocatedLayer` with float32 contiguous batch-1 buffers (grown for ``rows``
    more entries here when needed)."""
    layers = getattr(cache, "layers", None)
    if layers is None or len(layers) < n_layers:
        return False
    for layer in layers[:n_layers]:
        kbuf = getattr(layer, "_kbuf", None)
        if kbuf is None or kbuf.dtype != torch.float32 or kbuf.device.type != "cpu" or kbuf.shape[0] != 1:
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


def run_layers(plan: FusedPlan, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache, mask) -> None:
    """Every decoder layer over ``x`` ((1, m, hidden) float32, contiguous; updated in place), each layer's keys
    and values appended to ``cache`` (:func:`cache_ready` said yes). ``cos``/``sin``: (1, m, head_dim) float32,
    contiguous; ``mask``: :func:`mask_args`'s tuple. Raises MemoryError when scratch memory is short."""
    kind, mptr, strides, _ = mask
    m, hidden = x.shape[1], x.shape[2]
    causal = int(m > 1 and kind == 0)
    xp, cp, sp = x.data_ptr(), cos.data_ptr(), sin.data_ptr()
    fused = plan.lib.fc_fused_layer
    for args, cache_layer in zip(plan.layers, cache.layers):
        n1, n2, eps, wq, wk, wv, wo, wg, wu, wd, inter, heads, kv_heads, d, scale = args
        past, kbuf = cache_layer._len, cache_layer._kbuf
        rc = fused(xp, m, hidden, n1, n2, eps, wq, wk, wv, wo, wg, wu, wd, inter, heads, kv_heads, d, cp, sp,
                   kbuf.data_ptr(), cache_layer._vbuf.data_ptr(), kbuf.shape[2], past, mptr, kind, strides, causal,
                   scale)
        if rc != 0:
            raise MemoryError("the fused decoder layer could not allocate its scratch memory")
        cache_layer._len = past + m
        cache_layer._views()
