"""A lean decoder forward for Llama-family models at decode time: the same modules, fewer wrappers.

A decode step of tiny-py-coder on this project's CPU spends ~0.6 ms of ~3.8 ms outside the model's own
arithmetic: transformers' per-forward machinery (input/output capture decorators, kwargs merging, per-layer
module hooks and keyword plumbing). :func:`install_lean_forward` replaces the inner model's ``forward`` (the
``LlamaModel`` of a ``LlamaForCausalLM``) with one that, for the calls the decoder makes (token ids, batch 1,
a KV cache, inference mode, no extra outputs), runs the same computation directly: the embedding, the model's
own rotary module, then per layer the RMSNorm arithmetic of ``LlamaRMSNorm`` (float32), the layer's
``q/k/v/o_proj`` and MLP modules, the modeling module's own ``apply_rotary_pos_emb``, the cache's ``update``
and the attention function the model is configured with (:mod:`engine.native_attention` or ``sdpa``), with
the mask transformers' ``create_causal_mask`` builds. Any other call (gradients, ``inputs_embeds``, a batch,
``output_hidden_states``, no cache) goes to the original ``forward``.

The outputs are bit-identical to the original forward's (tested on random Llama and Qwen2 models and on
tiny-py-coder: prefill, plain steps and draft trees). Measured on tiny-py-coder (1 thread, 512 cached tokens):
one token 3.80 -> 3.24 ms, 9 tokens 5.62 -> 5.06 ms. The causal LM's own forward is replaced the same way (the
inner forward, then the LM head over the last ``logits_to_keep`` positions).

Fused layers. Where every decoder layer qualifies (:func:`engine.native.layer.plan_for`: native-packed linear
layers without bias, SiLU MLPs, the native attention) and a forward is small enough for those kernels (a decode
step or a verified draft tree, a preallocated KV cache), each layer runs as one C call
(:mod:`engine.native.layer`, ``decoder_layer.c``) instead of ~150 torch operations: one token at 1,000 cached
tokens 6.3 -> 3.6 ms. Those forwards then differ from transformers' by float rounding (<1e-5 in the logits of the
tests), and every row stays independent of the others, so a verified tree node still equals the same token
decoded alone bit for bit. ``$FASTCODER_FUSED_LAYER=0`` keeps the per-operation path.

Supported: ``model_type`` ``llama`` and ``qwen2`` without sliding-window layers, float32 RMSNorms of those
classes. Anything else keeps transformers' forward (:func:`install_lean_forward` says why).
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref

import torch

from .native import layer as native_layer
from .native.screened_head import active_isa, screened_head
from .native.step import GreedyStep
from .native_attention import NAME as NATIVE_ATTENTION
from .native_attention import ROWS_ATTR

#: Model types whose decoder layers have exactly the structure the lean forward replays.
SUPPORTED = ("llama", "qwen2")
#: RMSNorm classes whose arithmetic :func:`_rms_norm` reproduces bit for bit (the fused layer's too).
NORMS = native_layer.RMS_NORMS
#: Set on the inner model when installed (tests and status read it).
INSTALLED_ATTR = "_fastcoder_lean_forward"


def _rms_norm(norm, x: torch.Tensor) -> torch.Tensor:
    """``LlamaRMSNorm.forward`` for a float32 ``x``: the same operations in the same order."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return norm.weight * (x * torch.rsqrt(variance + norm.variance_epsilon))


#: Attribute of the inner model: its :class:`engine.native.layer.FusedPlan`, or False when it has none.
PLAN_ATTR = "_fastcoder_fused_plan"


def _plan(base):
    """The inner model's :class:`engine.native.layer.FusedPlan` (made on first use), or False."""
    plan = getattr(base, PLAN_ATTR, None)
    if plan is None:
        plan = native_layer.plan_for(base) or False
        setattr(base, PLAN_ATTR, plan)
    return plan


def fused_layer_serves(model) -> bool:
    """Whether ``model``'s decode steps run through the native fused layer (:mod:`engine.native.layer`): the
    lean forward is installed and every layer qualifies (per forward, the row count and cache decide too)."""
    base = getattr(model, "model", None)
    return bool(base is not None and getattr(base, INSTALLED_ATTR, False) and _plan(base))


def weights_pinned(model):
    """A context manager for one generation on ``model``: its fused plan checks the weights once on entry
    instead of at every forward (:meth:`engine.native.layer.FusedPlan.pinned`; ~60 us a forward on
    tiny-py-coder). No weight may change inside it. A no-op where the fused layer does not serve ``model``."""
    base = getattr(model, "model", None)
    plan = _plan(base) if base is not None and getattr(base, INSTALLED_ATTR, False) else False
    return plan.pinned() if plan else contextlib.nullcontext(False)


#: Positions past which the rotary table is not kept (cos and sin: 2 x positions x head_dim float32).
ROTARY_TABLE_MAX = 1 << 16


def _rotary(base, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``base.rotary_emb(x, position_ids)``: cos and sin (1, rows, head_dim) in ``x``'s dtype, read from a
    table of every position the model takes, made once by that same module (default RoPE only: its values
    depend on the position alone, each an elementwise function of ``position x inv_freq``, so the table holds
    the very bits a call computes). The module's ~8 torch operations cost ~40 us a forward; the lookup ~24.
    Other RoPE types, devices and dtypes call the module."""
    rope = base.rotary_emb
    table = getattr(rope, "_fastcoder_table", None)
    if table is None:
        limit = int(getattr(base.config, "max_position_embeddings", 0) or 0)
        ok = (getattr(rope, "rope_type", None) == "default" and 0 < limit <= ROTARY_TABLE_MAX
              and x.device.type == "cpu")
        table = False
        if ok:
            positions = torch.arange(limit, device=x.device)[None]
            table = tuple(t[0].contiguous() for t in rope(x, position_ids=positions))
        rope._fastcoder_table = table
    if not table or table[0].dtype != x.dtype or position_ids.device.type != "cpu" or position_ids.shape[0] != 1:
        return rope(x, position_ids=position_ids)
    pos = position_ids[0]
    try:  # a position past the table (or negative) raises here: then the module computes it
        return table[0].index_select(0, pos)[None], table[1].index_select(0, pos)[None]
    except (IndexError, RuntimeError):
        return rope(x, position_ids=position_ids)


#: Attribute of the inner model: what :func:`_gathered` reads (library, embedding Parameter, its address and
#: shape, the rotary tables), or False when its inputs are not gathered natively.
GATHER_ATTR = "_fastcoder_gather"


def _gathered(base, input_ids: torch.Tensor, position_ids: torch.Tensor):
    """``(base.embed_tokens(input_ids), *_rotary(...))`` from one native call (``fc_gather_inputs``: the same
    bits, copies), or None: a plain float32 ``nn.Embedding`` and the rotary table (made by the first
    :func:`_rotary` call) are needed, and ids and positions within range. The embedding module's call and the two
    table lookups cost ~80-100 us a forward with the caches cold after the previous one."""
    plan = getattr(base, GATHER_ATTR, None)
    if plan is None:
        emb, table = base.embed_tokens, getattr(base.rotary_emb, "_fastcoder_table", None)
        if table is None:
            return None  # not made yet: ask again after the first _rotary call
        w = getattr(emb, "weight", None)
        lib = native_layer.fused_library()
        ok = (lib is not None and table and type(emb) is torch.nn.Embedding and emb.max_norm is None
              and isinstance(w, torch.Tensor) and w.dtype == torch.float32 and w.device.type == "cpu"
              and w.dim() == 2 and w.is_contiguous() and table[0].dtype == torch.float32)
        plan = (lib, emb._parameters, weakref.ref(w), w.data_ptr(), w.shape[0], w.shape[1], table) if ok else False
        setattr(base, GATHER_ATTR, plan)  # a weak reference: a replaced embedding weight is not kept alive
    if not plan:
        return None
    lib, params, ref, ptr, vocab, hidden, (cos_t, sin_t) = plan
    w = params["weight"]
    if (w is not ref() or w.data_ptr() != ptr or input_ids.dtype != torch.int64
            or position_ids.dtype != torch.int64 or input_ids.device.type != "cpu" or position_ids.device.type != "cpu"
            or position_ids.shape != input_ids.shape or not input_ids.is_contiguous()
            or not position_ids.is_contiguous()):
        return None
    rows, d = input_ids.shape[1], cos_t.shape[1]
    x = torch.empty((1, rows, hidden), dtype=torch.float32)
    cos, sin = torch.empty((1, rows, d), dtype=torch.float32), torch.empty((1, rows, d), dtype=torch.float32)
    if lib.fc_gather_inputs(input_ids.data_ptr(), rows, ptr, vocab, hidden, position_ids.data_ptr(), cos_t.data_ptr(),
                            sin_t.data_ptr(), cos_t.shape[0], d, x.data_ptr(), cos.data_ptr(), sin.data_ptr()) != 0:
        return None
    return x, cos, sin


def _fused(base, rows: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache, mask
           ) -> torch.Tensor | None:
    """Run every decoder layer over ``x`` in place with the native fused layer (:mod:`engine.native.layer`)
    when this forward qualifies: few enough rows for the native kernels (the packed linear layers' and the
    native attention's limits), a preallocated float32 KV cache, a mask the kernel takes. Returns the last
    hidden state (the final norm of ``x``), or None: nothing was done, the per-operation path runs."""
    plan = _plan(base)
    if not plan or rows > plan.max_rows or x.dtype != torch.float32 or not x.is_contiguous():
        return None
    first = base.layers[0].self_attn
    if base.config._attn_implementation != NATIVE_ATTENTION or rows > getattr(first, ROWS_ATTR, 0) \
            or not plan.current():
        return None
    past = cache.get_seq_length()
    margs = native_layer.mask_args(mask, rows, past + rows)
    if margs is None or not native_layer.cache_ready(cache, len(plan.layers), rows):
        return None
    cos, sin = cos.contiguous(), sin.contiguous()
    if cos.dtype != torch.float32 or cos.shape[-1] != plan.head_dim:
        return None
    last = native_layer.run_layers(plan, x, cos, sin, cache, margs)
    return last if last is not None else _rms_norm(base.norm, x)


def why_not(model) -> str:
    """Why :func:`install_lean_forward` would leave ``model`` alone ("" when it would install)."""
    config = getattr(model, "config", None)
    base = getattr(model, "model", None)
    if config is None or base is None or getattr(config, "model_type", None) not in SUPPORTED:
        return f"model type {getattr(config, 'model_type', None)!r} is not one of {SUPPORTED}"
    if any(t != "full_attention" for t in (getattr(config, "layer_types", None) or ())):
        return "sliding-window layers"
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(base, name):
            return f"the inner model has no {name}"
    for layer in base.layers:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if attn is None or mlp is None or getattr(attn, "sliding_window", None) is not None:
            return "a decoder layer of another structure"
        if not all(hasattr(attn, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling")):
            return "an attention module of another structure"
        if not all(hasattr(mlp, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn")):
            return "an MLP of another structure"
        if type(layer.input_layernorm).__name__ not in NORMS or type(layer.post_attention_layernorm).__name__ not in NORMS:
            return "a norm of another class"
    if type(base.norm).__name__ not in NORMS:
        return "a final norm of another class"
    module = sys.modules.get(type(base).__module__)
    if module is None or not all(hasattr(module, f) for f in ("apply_rotary_pos_emb", "create_causal_mask",
                                                               "eager_attention_forward")):
        return "the modeling module lacks apply_rotary_pos_emb, create_causal_mask or eager_attention_forward"
    if any(p.dtype != torch.float32 for p in model.parameters()):
        return "not float32"
    return ""


#: Environment variable: ``0`` keeps transformers' forward.
LEAN_ENV = "FASTCODER_LEAN_FORWARD"


def install_lean_forward(model) -> str:
    """Give ``model.model`` the lean forward (see the module docstring). Returns "" when installed, else the
    reason it was not (``$FASTCODER_LEAN_FORWARD=0``, or :func:`why_not`); never raises for an unsupported
    model."""
    if os.environ.get(LEAN_ENV, "").strip() == "0":
        return f"{LEAN_ENV}=0"
    reason = why_not(model)
    if reason:
        return reason
    base = model.model
    if getattr(base, INSTALLED_ATTR, False):
        return ""
    module = sys.modules[type(base).__module__]
    original = base.forward
    rotary, make_mask, eager = module.apply_rotary_pos_emb, module.create_causal_mask, module.eager_attention_forward
    from transformers.modeling_outputs import BaseModelOutputWithPast  # noqa: PLC0415
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # noqa: PLC0415

    one_row_unmasked = [False]  # create_causal_mask gave None for one row without an attention mask

    def forward(input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, inputs_embeds=None,
                use_cache=None, **kwargs):
        if (kwargs or input_ids is None or inputs_embeds is not None or past_key_values is None
                or input_ids.shape[0] != 1 or base.training or torch.is_grad_enabled()):
            return original(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache,
                            **kwargs)
        return BaseModelOutputWithPast(last_hidden_state=hidden(input_ids, attention_mask, position_ids,
                                                                past_key_values), past_key_values=past_key_values)

    def hidden(input_ids, attention_mask, position_ids, past_key_values) -> torch.Tensor:
        """The last hidden state (1, rows, hidden) of a call the lean forward takes (checked by the caller)."""
        rows = input_ids.shape[1]
        if position_ids is None:
            start = past_key_values.get_seq_length()
            position_ids = torch.arange(start, start + rows, device=input_ids.device)[None]
        gathered = _gathered(base, input_ids, position_ids)
        if gathered is not None:
            x, cos, sin = gathered
        else:
            x = base.embed_tokens(input_ids)
            cos = sin = None
        if attention_mask is not None and attention_mask.dim() == 4:
            mask = attention_mask  # create_causal_mask returns a prepared 4D mask as it is
        elif attention_mask is None and rows == 1 and one_row_unmasked[0]:
            mask = None
        else:
            mask = make_mask(config=base.config, inputs_embeds=x, attention_mask=attention_mask,
                             past_key_values=past_key_values, position_ids=position_ids)
            if attention_mask is None and rows == 1 and mask is None:
                one_row_unmasked[0] = True  # one row sees the whole cache: no mask (~40 us a step to learn it)
        if cos is None:
            cos, sin = _rotary(base, x, position_ids)
        last = _fused(base, rows, x, cos, sin, past_key_values, mask)
        if last is not None:
            return last
        attend = ALL_ATTENTION_FUNCTIONS.get_interface(base.config._attn_implementation, eager)
        shape = (1, rows, -1)
        for layer in base.layers[:base.config.num_hidden_layers]:
            attn, mlp = layer.self_attn, layer.mlp
            h = _rms_norm(layer.input_layernorm, x)
            hidden_shape = (1, rows, -1, attn.head_dim)
            q = attn.q_proj(h).view(hidden_shape).transpose(1, 2)
            k = attn.k_proj(h).view(hidden_shape).transpose(1, 2)
            v = attn.v_proj(h).view(hidden_shape).transpose(1, 2)
            q, k = rotary(q, k, cos, sin)
            k, v = past_key_values.update(k, v, attn.layer_idx)
            out, _ = attend(attn, q, k, v, mask, dropout=0.0, scaling=attn.scaling)
            x = x + attn.o_proj(out.reshape(shape).contiguous())
            h = _rms_norm(layer.post_attention_layernorm, x)
            x = x + mlp.down_proj(mlp.act_fn(mlp.gate_proj(h)) * mlp.up_proj(h))
        return _rms_norm(base.norm, x)

    base.forward = forward
    _install_outer(model, base, hidden)
    setattr(base, INSTALLED_ATTR, True)
    return ""


#: Set on the causal LM when installed: its logits function (see :func:`forward_logits`).
LOGITS_ATTR = "_fastcoder_logits"
#: Set on the causal LM when installed: its greedy-choice function (see :func:`forward_greedy`).
GREEDY_ATTR = "_fastcoder_greedy"
#: Set on the causal LM when installed: a one-item list holding the last :func:`forward_logits` call's final hidden
#: states, the LM head's input ((1, rows kept, d), valid until the next forward; :func:`hidden_rows`).
HIDDEN_ATTR = "_fastcoder_hidden"


def hidden_rows(model) -> list | None:
    """The one-item list that holds the last :func:`forward_logits` call's final hidden states ((1, rows kept, d)
    tensor, or None before the first call), or None without the lean forward (:data:`HIDDEN_ATTR`)."""
    return getattr(model, HIDDEN_ATTR, None)


def _install_outer(model, base, hidden) -> None:
    """The causal LM's own forward for the same calls: the lean inner forward's hidden state (``hidden``, no
    ``nn.Module.__call__``, no output object), then the LM head over the last ``logits_to_keep`` positions, as
    ``LlamaForCausalLM.forward`` computes them; any other call (labels, a tuple output, extra arguments) goes
    to transformers' forward. The logits alone are :data:`LOGITS_ATTR` (:func:`forward_logits`)."""
    from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: PLC0415

    original = model.forward
    kept = [None]  # the last call's LM-head input (HIDDEN_ATTR)

    def logits(input_ids, past_key_values, position_ids=None, attention_mask=None, logits_to_keep=0):
        last = hidden(input_ids, attention_mask, position_ids, past_key_values)
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        kept[0] = rows = last[:, keep, :]
        return model.lm_head(rows)

    def forward(input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, inputs_embeds=None,
                labels=None, use_cache=None, logits_to_keep=0, **kwargs):
        if (kwargs or labels is not None or input_ids is None or inputs_embeds is not None or past_key_values is None
                or input_ids.shape[0] != 1 or model.training or torch.is_grad_enabled()):
            return original(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            past_key_values=past_key_values, inputs_embeds=inputs_embeds, labels=labels,
                            use_cache=use_cache, logits_to_keep=logits_to_keep, **kwargs)
        return CausalLMOutputWithPast(logits=logits(input_ids, past_key_values, position_ids, attention_mask,
                                                    logits_to_keep), past_key_values=past_key_values)

    holder = [None]  # the model's GreedyStep; False: none (see _step_of)
    setattr(model, STEP_ATTR, (holder, base, base.layers[0].self_attn))

    def greedy(input_ids, past_key_values, position_ids=None, attention_mask=None):
        one = _step_of(model, input_ids.shape[1])
        if one is not None and position_ids is not None and (attention_mask is None or attention_mask.dim() == 4):
            chosen = one.run(input_ids, position_ids, attention_mask, past_key_values, kept)
            if chosen is not None:
                return chosen
            if one.stale():  # the embedding or the head was replaced: a new step for the next call
                holder[0] = None
        kept[0] = last = hidden(input_ids, attention_mask, position_ids, past_key_values)
        screen = screened_head(model.lm_head)
        rows = last[0]
        chosen = screen.argmax(rows) if screen is not None else None
        if chosen is None:  # no screen, or a row it does not take: the whole head, its argmax
            from .verify import argmax_rows  # noqa: PLC0415  (verify imports this module)

            chosen = argmax_rows(model.lm_head(rows))
        return chosen

    model.forward = forward
    setattr(model, LOGITS_ATTR, logits)
    setattr(model, GREEDY_ATTR, greedy)
    setattr(model, HIDDEN_ATTR, kept)


#: Environment variable: ``0`` keeps greedy forwards on their three native calls (no :mod:`engine.native.step`).
STEP_ENV = "FASTCODER_GREEDY_STEP"
#: Set on the causal LM when installed: ``([GreedyStep, False or None], inner model, first attention module)``.
STEP_ATTR = "_fastcoder_greedy_step"


def _step_of(model, rows: int):
    """``model``'s :class:`engine.native.step.GreedyStep` (made on first use) when a greedy forward of ``rows`` rows
    can take it now (the native attention serves the model and takes that many rows), else None."""
    held = getattr(model, STEP_ATTR, None)
    if held is None:
        return None
    holder, base, first_attn = held
    if holder[0] is None:
        holder[0] = _make_greedy_step(model, base)
    one = holder[0]
    if not one or rows > getattr(first_attn, ROWS_ATTR, 0) or _attn_implementation(base.config) != NATIVE_ATTENTION:
        return None
    return one


def greedy_step_serves(model, make: bool = False) -> bool:
    """Whether ``model``'s greedy steps take the one native call (:mod:`engine.native.step`). The step is made at the
    first greedy forward, or here with ``make`` (on the model's thread: the server's load); without it this only reads
    (False before the step was made). For reports: the benchmark's JSON and the server's status."""
    held = getattr(model, STEP_ATTR, None)
    if held is None:
        return False
    if make and held[0][0] is None:
        held[0][0] = _make_greedy_step(model, held[1])
    return bool(held[0][0])


def _attn_implementation(config) -> str | None:
    """``config._attn_implementation``: the value its property returns, read from the instance's dict where it is
    there (the property costs ~3 us a read through PretrainedConfig's attribute lookup, ~10x that with the caches
    cold after a forward)."""
    value = config.__dict__.get("_attn_implementation_internal", _MISSING)
    return config._attn_implementation if value is _MISSING else value


_MISSING = object()


def greedy_tree_step(model, cache, pending: int, tree, past: int) -> list[int] | None:
    """:func:`engine.verify.tree_forward_greedy` (a plain step for an empty ``tree``) in one native call from the
    tree's own arrays (:meth:`engine.native.step.GreedyStep.tree`: no tensors made for the inputs): the 1 + N greedy
    tokens, the cache extended, :func:`hidden_rows` set; None with nothing done where that step does not serve
    (no lean forward, no native stack or screen, autograd or training, a cache it does not take): the caller's
    own path then runs the forward."""
    return _with_step(model, GreedyStep.tree, pending, tree, past, cache)


def greedy_tree_verify(model, cache, pending: int, tree, past: int) -> tuple[list[int], list[int]] | None:
    """:func:`engine.verify.verify_greedy` in one native call (:meth:`engine.native.step.GreedyStep.verify`): the
    forward, the greedy walk and the cache's compaction. Returns ``(path, committed)``, or None with nothing done
    where :func:`greedy_tree_step` would (the caller's own path then runs)."""
    return _with_step(model, GreedyStep.verify, pending, tree, past, cache)


def bind_greedy_verify(model, cache, fallback, learn=None):
    """:func:`greedy_tree_verify` for one generation on ``cache`` (:meth:`engine.native.step.GreedyStep.bind`: the
    checks made once, then only where something they covered changed), or None where no step serves ``model`` now.
    ``fallback(pending, tree, past)`` runs the steps it does not take; ``learn``: as
    :class:`engine.native.bound_verify.BoundVerify`'s. Use it inside :func:`weights_pinned`: the weights are not checked
    again after the first call."""
    if model.training or torch.is_grad_enabled():
        return None
    one = _step_of(model, 1)
    if one is None:
        return None
    first_attn = getattr(model, STEP_ATTR)[2]
    return one.bind(cache, model.__dict__[HIDDEN_ATTR], getattr(first_attn, ROWS_ATTR, 0), fallback, learn)


def _with_step(model, method, pending: int, tree, past: int, cache):
    """``method`` (:meth:`GreedyStep.tree` or :meth:`GreedyStep.verify`) of ``model``'s step for ``tree``, or None
    where no step serves; a step that finds the embedding or the head replaced is made again on the next call."""
    if model.training or torch.is_grad_enabled():
        return None
    one = _step_of(model, len(tree) + 1)
    if one is None:
        return None
    got = method(one, pending, tree, past, cache, model.__dict__[HIDDEN_ATTR])
    if got is None and one.stale():
        model.__dict__[STEP_ATTR][0][0] = None
    return got


def _make_greedy_step(model, base):
    """``model``'s :class:`engine.native.step.GreedyStep` (the rotary table made first where no forward made it yet),
    or False where it cannot serve: ``$FASTCODER_GREEDY_STEP=0``, no fused plan with a final norm, no screened LM head,
    an embedding or rotary table the native gather does not take (None: not made, ask again)."""
    if os.environ.get(STEP_ENV, "").strip() == "0":
        return False
    plan, emb, head = _plan(base), base.embed_tokens, getattr(model, "lm_head", None)
    w = getattr(emb, "weight", None)
    table = getattr(base.rotary_emb, "_fastcoder_table", None)
    if table is None and isinstance(w, torch.Tensor):  # made as the first forward makes it (_rotary)
        with torch.inference_mode():
            _rotary(base, w.new_zeros((1, 1, w.shape[-1])), torch.zeros((1, 1), dtype=torch.long, device=w.device))
        table = getattr(base.rotary_emb, "_fastcoder_table", None)
    if table is None:
        return None
    if (not plan or not table or plan.final is None or head is None or type(emb) is not torch.nn.Embedding
            or emb.max_norm is not None or not isinstance(w, torch.Tensor) or w.device.type != "cpu"
            or table[0].device.type != "cpu"):
        return False
    screen = screened_head(head)
    if screen is None:
        return False
    from .verify import argmax_rows, walk_and_compact  # noqa: PLC0415  (verify imports this module)

    def whole_head(rows: torch.Tensor) -> list[int]:
        return argmax_rows(head(rows))

    try:
        return GreedyStep(plan.lib, plan, emb, table, head, screen, whole_head, walk_and_compact)
    except ValueError:
        return False


def forward_logits(model, input_ids: torch.Tensor, past_key_values, position_ids: torch.Tensor | None = None,
                   attention_mask: torch.Tensor | None = None, logits_to_keep: int = 0) -> torch.Tensor:
    """``model(input_ids=..., past_key_values=..., use_cache=True, ...).logits``: (1, rows kept, V) logits of a
    decoding forward (``input_ids`` (1, rows) int64; ``past_key_values`` a cache, extended in place;
    ``logits_to_keep`` 0: every row). With the lean forward installed, and outside training and autograd, the
    same computation without transformers' two output objects and ``nn.Module.__call__`` (~25 us each warm;
    170-230 us less a tiny-py-coder forward at 1,000 cached tokens, measured alternating in one process, with the
    caches cold after the previous forward); otherwise the model's own call."""
    direct = getattr(model, LOGITS_ATTR, None)
    if direct is not None and input_ids.shape[0] == 1 and not model.training and not torch.is_grad_enabled():
        return direct(input_ids, past_key_values, position_ids, attention_mask, logits_to_keep)
    return model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                 past_key_values=past_key_values, use_cache=True, logits_to_keep=logits_to_keep).logits


def greedy_ready(model) -> bool:
    """Whether :func:`forward_greedy` takes ``model``'s decoding forwards: the lean forward is installed and its LM
    head has an int8 screen (:func:`engine.native.screened_head.screened_head`: the native library, a float32
    ``nn.Linear`` head without bias on an x86-64 CPU with AVX2), outside training and autograd."""
    if getattr(model, GREEDY_ATTR, None) is None or model.training or torch.is_grad_enabled():
        return False
    head = getattr(model, "lm_head", None)
    return head is not None and screened_head(head) is not None


def greedy_screen(model) -> str | None:
    """The instruction set greedy steps of ``model`` screen the LM head's argmax with (``"vnni"``, ``"avx2"``; packing
    the screen on first use), or None where they compute the whole head (:func:`greedy_ready` says no). For reports:
    the benchmark's JSON and the server's status."""
    with torch.inference_mode():
        return active_isa() if greedy_ready(model) else None


def forward_greedy(model, input_ids: torch.Tensor, past_key_values, position_ids: torch.Tensor | None = None,
                   attention_mask: torch.Tensor | None = None) -> list[int]:
    """The greedy token after each row of a decoding forward: ``forward_logits(...)[0].argmax(-1)`` (numpy's rule,
    the first maximum) for ``input_ids`` (1, rows) int64, the cache extended in place the same way, without the
    logits: the LM head's argmax by int8 screening and exact rescoring (``native/screened_head.c``), the same
    indices bit for bit, at ~1/3 of the head's time (tiny-py-coder, 1 thread: 42 against 123 us for one row,
    106 against 262 us for 6 rows; a plain step at 512 cached tokens 1.65 -> 1.28 ms). A row the screen does not
    take (not finite) gets the whole head. The final hidden states are :func:`hidden_rows`' content afterwards,
    as after :func:`forward_logits`.

    Requires :func:`greedy_ready` (raises RuntimeError otherwise). Returns ``rows`` token ids."""
    direct = getattr(model, GREEDY_ATTR, None)
    if direct is None or input_ids.shape[0] != 1 or model.training or torch.is_grad_enabled():
        raise RuntimeError("forward_greedy needs the lean forward (install_lean_forward), batch 1 and no autograd")
    return direct(input_ids, past_key_values, position_ids, attention_mask)
