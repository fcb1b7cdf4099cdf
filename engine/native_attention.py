"""Native attention for the verify forward's few query rows on a CPU, as a transformers attention function.

A plain decode step has 1 query row and a draft-tree forward 2-65, each against a KV cache of hundreds of
tokens. torch's CPU flash attention (what transformers' ``sdpa`` calls) is built for long query sequences;
``tree_attention.c`` (:mod:`engine.native.attention`) computes the same attention row by row with AVX2/FMA.
Measured in tiny-py-coder's forward on a 512-token cache (the load-time probe, 1 thread, ms, native / sdpa):
1 row 3.98 / 4.35, 8 rows 5.61 / 6.00, 16 rows 6.97 / 7.01, 32 rows 10.48 / 9.82. Alone on warm caches
the two tie at one row; in the forward, where the weights stream through the caches between two layers'
attention, the kernel is faster up to ~16 rows.

:func:`install_native_attention` registers ``"fastcoder_native"`` with transformers' ``AttentionInterface``
(and ``sdpa``'s mask builder under that name, so masks are made as for ``sdpa``) and switches the model to
it. Each call uses the kernel for 1 to ``max_rows`` query rows with float32 CPU tensors and a mask shared by
all heads; anything else (a prefill, dropout, softcap, sliding windows, attention sinks, gradients) goes to
transformers' own ``sdpa_attention_forward`` unchanged. ``max_rows`` comes from a probe at load that checks
the kernel against ``sdpa`` (correctness, then time at 1-64 rows on a 512-token cache) on this machine and
thread count; where the kernel is not faster at one row it is not installed.

Exactness: a row's output depends only on its query and the keys and values it may see, in cache order,
bit for bit (see ``tree_attention.c``). With the row-independent linear kernel
(:mod:`engine.packed_linear`), a node of a verified draft tree gets the same logits as the same token decoded
alone after the same accepted tokens.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

import torch

from .native.attention import attention as native_attention
from .native.attention import attention_library, supported

log = logging.getLogger(__name__)

#: The name registered with transformers' ``AttentionInterface``.
NAME = "fastcoder_native"
#: Environment variable: ``0`` keeps transformers' ``sdpa``.
ATTENTION_ENV = "FASTCODER_NATIVE_ATTENTION"
#: Environment variable: the query rows the kernel takes, fixed instead of probed (0: keep ``sdpa``).
ROWS_ENV = "FASTCODER_NATIVE_ATTENTION_ROWS"
#: Query-row counts the probe times (the largest bounds ``max_rows``).
PROBE_ROWS = (1, 8, 16, 32, 64)
#: Cached tokens in the probe (a typical prompt).
PROBE_CONTEXT = 512
#: The kernel counts as no slower within this fraction of sdpa's time (at 16 rows of tiny-py-coder the two
#: tie, and a tie decided by noise flipped max_rows between 8 and 16 from one load to the next; at a tie
#: the kernel's exactness decides).
TOLERANCE = 0.05
#: Seconds the timing probe may take beyond its first 3 rounds.
PROBE_BUDGET_S = 0.3

#: Attribute set on every module of an installed model: the query rows the kernel takes there.
ROWS_ATTR = "_fastcoder_attention_rows"


@dataclass
class AttentionReport:
    """What :func:`install_native_attention` decided: ``installed``, ``max_rows`` (query rows the kernel
    takes), ``probe_ms`` (rows -> [native, sdpa] ms for the model's forward), ``probe_cached`` (those timings
    were read from the probe cache, :mod:`engine.probe_cache`, not timed at this load) and ``reason`` when not."""

    installed: bool = False
    max_rows: int = 0
    probe_ms: dict[int, list[float]] = field(default_factory=dict)
    probe_cached: bool = False
    reason: str = ""

    def as_dict(self) -> dict:
        return {"installed": self.installed, "max_rows": self.max_rows, "reason": self.reason,
                "probe_ms": {str(k): [round(x, 4) for x in v] for k, v in self.probe_ms.items()},
                "probe_cached": self.probe_cached}


def _sdpa():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: PLC0415

    return sdpa_attention_forward


def fastcoder_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                        is_causal=None, **kwargs):
    """transformers attention function (``AttentionInterface`` signature): the native kernel for few query
    rows (see the module docstring), else ``sdpa_attention_forward`` with the same arguments.

    Returns:
        ``(attn_output (B, M, H, D), None)``.
    """
    max_rows = getattr(module, ROWS_ATTR, 0)
    native = (max_rows and query.shape[2] <= max_rows and not dropout and kwargs.get("softcap") is None
              and kwargs.get("sliding_window") is None and kwargs.get("s_aux") is None
              and kwargs.get("position_bias") is None and not kwargs.get("output_attentions")
              and not (torch.is_grad_enabled() and query.requires_grad)
              and supported(query, key, value, attention_mask))
    if not native:
        return _sdpa()(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                       is_causal=is_causal, **kwargs)
    lib = attention_library()
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    causal = query.shape[2] > 1 and attention_mask is None and (
        is_causal if is_causal is not None else getattr(module, "is_causal", True))
    return native_attention(lib, query, key, value, attention_mask, scale, causal), None


def _register() -> None:
    from transformers import AttentionInterface  # noqa: PLC0415
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask  # noqa: PLC0415

    AttentionInterface.register(NAME, fastcoder_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def _kernel_agrees(lib, heads: int, kv_heads: int, head_dim: int) -> bool:
    """The kernel against torch's SDPA on random inputs with a tree-like mask, at every probe row count."""
    gen = torch.Generator().manual_seed(0)
    s = 96
    for m in PROBE_ROWS:
        q = torch.randn(1, heads, m, head_dim, generator=gen)
        k = torch.randn(1, kv_heads, s + m, head_dim, generator=gen)
        v = torch.randn(1, kv_heads, s + m, head_dim, generator=gen)
        visible = torch.ones(1, 1, m, s + m, dtype=torch.bool).tril(s)
        visible[..., s:] &= torch.rand(m, m, generator=gen) < 0.5
        visible[..., torch.arange(m), s + torch.arange(m)] = True
        mask = torch.zeros(visible.shape).masked_fill_(~visible, torch.finfo(torch.float32).min)
        rep = heads // kv_heads
        want = torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1), attn_mask=visible).transpose(1, 2)
        if not torch.allclose(native_attention(lib, q, k, v, mask, head_dim ** -0.5, False), want,
                              rtol=1e-4, atol=1e-5):
            return False
    return True


def _set_rows(model, rows: int) -> None:
    for sub in model.modules():
        setattr(sub, ROWS_ATTR, rows)


def _probe_forwards(model, report: AttentionReport) -> int:
    """Time the model's own forward over m query rows (a chain) on a cache of :data:`PROBE_CONTEXT` tokens,
    with the kernel and with ``sdpa``, interleaved, for m in :data:`PROBE_ROWS` (at least 3 rounds, more while
    under :data:`PROBE_BUDGET_S`); returns the largest m where the kernel's median was no slower (within
    :data:`TOLERANCE`) there and at every smaller m (0: slower at one row). In the forward, not alone:
    between two layers' attention the weights stream through the caches, so a kernel timed alone on warm
    caches misjudges (alone, the kernel and SDPA tied at one row; in the forward the kernel saved 0.2-0.5 ms
    of 4-7 ms)."""
    from .kv_cache import new_kv_cache  # noqa: PLC0415

    vocab = int(model.config.vocab_size)
    limit = int(getattr(model.config, "max_position_embeddings", 0) or 2048)
    context = max(8, min(PROBE_CONTEXT, limit - max(PROBE_ROWS) - 8))
    gen = torch.Generator().manual_seed(0)
    cache = new_kv_cache(model, context + max(PROBE_ROWS) + 1)
    _set_rows(model, 0)
    model(input_ids=torch.randint(0, vocab, (1, context), generator=gen), past_key_values=cache, use_cache=True,
          logits_to_keep=1)
    times: dict[tuple[int, int], list[float]] = {}
    start, rounds = time.perf_counter(), 0
    while rounds < 3 or (rounds < 15 and time.perf_counter() - start < PROBE_BUDGET_S):
        rounds += 1
        for m in PROBE_ROWS:
            ids = torch.randint(0, vocab, (1, m), generator=gen)
            pos = torch.arange(context, context + m)[None]
            for rows in (0, max(PROBE_ROWS)):
                _set_rows(model, rows)
                t0 = time.perf_counter()
                model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True, logits_to_keep=1)
                times.setdefault((m, rows), []).append(time.perf_counter() - t0)
                cache.crop(context - cache.get_seq_length())
    _set_rows(model, 0)
    best = 0
    for m in PROBE_ROWS:  # the fastest round of each: another job's load only adds time (a median taken while
        # the test suite ran beside it found the kernel slower at 8 rows and kept it to 1 row for the process)
        native = 1000 * min(times[(m, max(PROBE_ROWS))])
        sdpa = 1000 * min(times[(m, 0)])
        report.probe_ms[m] = [native, sdpa]
        if native > sdpa * (1 + TOLERANCE):
            break
        best = m
    return best


def _probe_rows(model, report: AttentionReport, probe_key: dict | None) -> int:
    """:func:`_probe_forwards`, through the probe cache under ``probe_key`` when it is given."""
    if probe_key is None:
        return _probe_forwards(model, report)
    from .probe_cache import cached_row_limit  # noqa: PLC0415

    rows, timings, report.probe_cached = cached_row_limit(
        "native-attention", probe_key, lambda: (_probe_forwards(model, report), report.probe_ms), max(PROBE_ROWS))
    report.probe_ms = {k: [float(x) for x in v] for k, v in timings.items()}
    return rows


def _fixed_rows() -> int | None:
    """``$FASTCODER_NATIVE_ATTENTION_ROWS``: the query rows the kernel takes without the timing probe (a run that
    must not depend on the machine's load at start-up: the test suite), or None (unset, or not a non-negative
    integer: logged)."""
    value = os.environ.get(ROWS_ENV, "").strip()
    if not value:
        return None
    if value.isdigit():
        return int(value)
    log.warning("%s=%r is not a non-negative integer; the probe decides", ROWS_ENV, value)
    return None


def install_native_attention(model, probe_key: dict | None = None) -> AttentionReport:
    """Switch a float32 CPU transformers model to :func:`fastcoder_attention` when the probe finds the kernel
    correct and faster than ``sdpa`` for at least one query row.

    ``probe_key``: what the model's forward time depends on beyond the machine (its name and parameter count, the
    linear layers' kernel and row limit); given, the timing probe (:func:`_probe_forwards`) is read from and kept
    in the probe cache (:mod:`engine.probe_cache`); None times it here. The correctness check always runs.

    The model keeps its own attention when the kernel is unavailable (no C compiler, not x86-64 with
    AVX2/FMA, ``FASTCODER_NATIVE=0`` or ``FASTCODER_NATIVE_ATTENTION=0``), when its config has no plain head
    layout (``num_attention_heads``, ``num_key_value_heads``, ``head_dim``), or when it uses an attention
    other than ``sdpa`` (eager, flash, flex: chosen by the model or the user; the fallback is ``sdpa``).

    Returns:
        An :class:`AttentionReport`; never raises for an unsupported model.
    """
    report = AttentionReport()
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if os.environ.get(ATTENTION_ENV, "").strip() == "0":
        report.reason = f"{ATTENTION_ENV}=0"
        return report
    if current not in ("sdpa", NAME):
        report.reason = f"the model uses {current!r} attention"
        return report
    lib = attention_library()
    if lib is None:
        report.reason = "native code unavailable or no AVX2/FMA"
        return report
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or (getattr(config, "hidden_size", 0) // (heads or 1))
    if not heads or not head_dim or head_dim % 8 or heads % kv_heads:
        report.reason = "no plain head layout in the config"
        return report
    if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in model.parameters()):
        report.reason = "not a float32 CPU model"
        return report
    with torch.no_grad():
        if not _kernel_agrees(lib, heads, kv_heads, head_dim):
            report.reason = "native attention disagrees with sdpa"
            return report
        _register()
        model.set_attn_implementation(NAME)
        fixed = _fixed_rows()
        report.max_rows = fixed if fixed is not None else _probe_rows(model, report, probe_key)
    if not report.max_rows:
        model.set_attn_implementation(current)
        report.reason = "not faster than sdpa in the model's forward at one query row"
        return report
    _set_rows(model, report.max_rows)
    report.installed = True
    log.info("native attention for 1-%d query rows (probe ms native/sdpa: %s)", report.max_rows,
             {k: [round(x, 3) for x in v] for k, v in report.probe_ms.items()})
    return report
