"""Verify cost c(n) of the model on the device it runs on (DESIGN.md: "verify cost").

c(n) is the time of one forward over ``1 + n`` tokens (the pending token and n draft-tree tokens) on a
warm KV cache of typical prompt length, over the time of one plain decode step (one token), measured
for the model, device, dtype and torch thread count it actually runs with. On a GPU c(n) stays near 1
up to tens of tokens (REST/FastCoder verify 64); on a CPU it grows with n (tiny-py-coder, 2 cores:
c(16) ~ 1.7), so a draft tree must be sized against it (Sequoia; vLLM adaptive verification;
``../shared/notes/speculative-decoding-anchors.md``, update of 2026-11-22). No device-type constants:
the curve is measured once and cached per (model, device, dtype, threads) in the user cache folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from .cache_paths import cache_root
from .probe_cache import device_name

log = logging.getLogger(__name__)

#: Draft-tree sizes (tokens) at which c(n) is measured; others are interpolated. Every size up to 16: on a
#: CPU c(n) has steps where a row-blocked kernel needs one more block (tiny-py-coder with the native linear
#: kernel: 6 rows per block, so a forward over 7 rows costs ~0.6 ms more than over 6), which interpolating
#: between 4 and 8 smoothed away, pricing trees of 6-7 tokens as cheaper than they were.
SIZES = (*range(1, 17), 20, 24, 32, 48, 64)
#: 11: a greedy verification's LM head screens only the rows its walk reads (engine/native/step.c: a chain of random
#: tokens, rejected at its first node, reads at most 4 rows, one screen pass); 10: the plain step and sizes up to
#: SMALL_SIZES sampled SMALL_SAMPLES times a round; 9: greedy steps timed
#: through the generation's bound verification (engine.verify.greedy_verifier), plain steps as an empty tree's; 8: a
#: tree step's inputs in reused buffers (engine.verify._cpu_step_tree_inputs); 7: greedy steps' calls where the LM
#: head screens its argmax (engine.lean_forward.forward_greedy); 6: the plain step given its position; 5: timed
#: through the decoder's own calls; 4: a second curve at LONG_CONTEXT; 3: every size to 16; 2: rounds within
#: MEASURE_BUDGET_S
FORMAT = 11
#: KV-cache lengths (tokens) the two curves are measured at: a typical short prompt, and the prompt budget
#: of the editor and the benchmark (1,024 tokens). Attention over a longer cache makes every extra row
#: dearer: tiny-py-coder, 1 thread, c(6) 1.44-1.56 at 512 tokens and 1.64-1.72 at 1,024, c(12) 1.77-1.83
#: and 2.09-2.11 (two measurements each), and most FIM prompts fill the budget.
SHORT_CONTEXT, LONG_CONTEXT = 512, 1024
#: Context lengths are bucketed to this many tokens for the interpolated curves (:meth:`VerifyCost.at`).
CONTEXT_BUCKET = 32
#: Seconds the measurement at first load may take in all: after its first 7 rounds, more rounds while
#: within this (steadier medians on a shared machine).
MEASURE_BUDGET_S = 4.0


@dataclass
class VerifyCost:
    """A measured verify-cost curve.

    Attributes:
        sizes: draft-tree sizes n (tokens), ascending.
        ratios: c(n) for each size: forward over 1 + n tokens / forward over 1 token (floats >= ~1).
        decode_ms: one plain decode step (1 token) in ms, at ``context`` tokens of KV cache.
        context: KV-cache length (tokens) the curve was measured at.
        key: what it was measured for (model, device, dtype, threads).
        rounds: how many timed rounds the medians are over (0: not measured here).
        long_ratios: c(n) for the same sizes at ``long_context`` tokens of KV cache (empty: one curve for
            every context length).
        long_context: KV-cache length (tokens) of ``long_ratios``.
        long_decode_ms: one plain decode step at ``long_context`` tokens, in ms.
    """

    sizes: list[int]
    ratios: list[float]
    decode_ms: float
    context: int
    key: dict = field(default_factory=dict)
    rounds: int = 0
    long_ratios: list[float] = field(default_factory=list)
    long_context: int = 0
    long_decode_ms: float = 0.0

    @classmethod
    def from_dict(cls, data: dict, key: dict | None = None) -> "VerifyCost":
        """A curve from plain data (a cache file, a ``$FASTCODER_VERIFY_COST`` file): ``sizes`` and
        ``ratios`` required, every other field optional. Raises KeyError, TypeError or ValueError for data
        that is not a curve."""
        return cls(list(data["sizes"]), list(data["ratios"]), float(data.get("decode_ms", 0.0)),
                   int(data.get("context", 0)), data.get("key", {}) if key is None else key,
                   int(data.get("rounds", 0)), list(data.get("long_ratios", [])), int(data.get("long_context", 0)),
                   float(data.get("long_decode_ms", 0.0)))

    def at(self, context: int) -> "VerifyCost":
        """The curve for a KV cache of ``context`` tokens: ``ratios`` up to ``self.context``,
        ``long_ratios`` from ``long_context`` on, linear in the context length between (attention's
        work grows linearly with it). Bucketed to :data:`CONTEXT_BUCKET` tokens and kept, so the
        per-step lookups (:meth:`upto`) stay cached. ``self`` when there is no second curve."""
        if not self.long_ratios or self.long_context <= self.context or len(self.long_ratios) != len(self.ratios):
            return self
        bucket = min(max(int(context), self.context), self.long_context) // CONTEXT_BUCKET
        cache = self.__dict__.setdefault("_at_cache", {})
        curve = cache.get(bucket)
        if curve is None:
            t = (bucket * CONTEXT_BUCKET - self.context) / (self.long_context - self.context)
            t = min(max(t, 0.0), 1.0)
            ratios = [round((1 - t) * a + t * b, 4) for a, b in zip(self.ratios, self.long_ratios)]
            curve = cache[bucket] = VerifyCost(list(self.sizes), ratios, self.decode_ms, bucket * CONTEXT_BUCKET,
                                               self.key, self.rounds)
        return curve

    def c(self, n: int | np.ndarray) -> np.ndarray | float:
        """c(n) for draft-tree sizes ``n`` (int or int array): 1 at n = 0, linear interpolation between
        measured sizes, linear extrapolation past the largest (never below 1)."""
        xs, ys = self._curve()
        n_arr = np.asarray(n, dtype=np.float64)
        out = np.interp(n_arr, xs, ys)
        slope = (ys[-1] - ys[-2]) / max(xs[-1] - xs[-2], 1.0)
        out = np.where(n_arr > xs[-1], ys[-1] + slope * (n_arr - xs[-1]), out)
        return float(out) if np.ndim(out) == 0 else out

    def _curve(self) -> tuple[np.ndarray, np.ndarray]:
        """(xs, ys) of the interpolated curve, computed once per (sizes, ratios)."""
        key = (tuple(self.sizes), tuple(self.ratios))
        cached = self.__dict__.get("_curve_cache")
        if cached is not None and cached[0] == key:
            return cached[1]
        xs = np.concatenate([[0], np.asarray(self.sizes, dtype=np.float64)])
        ys = np.concatenate([[1.0], np.asarray(self.ratios, dtype=np.float64)])
        ys = np.maximum.accumulate(np.maximum(ys, 1.0))  # a larger tree never costs less
        self.__dict__["_curve_cache"] = (key, (xs, ys))  # not a dataclass field: not in as_dict()
        return xs, ys

    def upto(self, n: int) -> np.ndarray:
        """(n + 1,) float64 c(0), c(1), ..., c(n), the same values as ``c(np.arange(n + 1))``, from a
        table kept per (sizes, ratios) (the draft-tree chooser asks for it every decode step)."""
        key = (tuple(self.sizes), tuple(self.ratios))
        cached = self.__dict__.get("_table_cache")
        if cached is None or cached[0] != key or len(cached[1]) <= n:
            size = max(int(n) + 1, 128)
            table = np.asarray(self.c(np.arange(size)), dtype=np.float64).reshape(-1)
            table.setflags(write=False)
            self.__dict__["_table_cache"] = cached = (key, table)
        return cached[1][:n + 1]

    def prepare_tables(self, n: int) -> None:
        """Make :meth:`upto`'s table up to ``n`` for the curve of every context bucket (:meth:`at`) now: ~0.1-0.2
        ms each the first time, which the first decode step of a prompt in a new bucket paid otherwise."""
        if not self.long_ratios or self.long_context <= self.context or len(self.long_ratios) != len(self.ratios):
            self.upto(n)
            return
        for bucket in range(self.context // CONTEXT_BUCKET, self.long_context // CONTEXT_BUCKET + 1):
            self.at(bucket * CONTEXT_BUCKET).upto(n)

    @classmethod
    def flat(cls) -> "VerifyCost":
        """A curve where verification is free (c(n) = 1): accelerators at small n; tests."""
        return cls(list(SIZES), [1.0] * len(SIZES), 0.0, 0, {"kind": "flat"})

    def as_dict(self) -> dict:
        """Plain data for ``fastcoder/status`` and the benchmark JSON: the fields, plus ``c`` (and ``c_long``
        with a second curve): ``{size: c(size)}``."""
        out = {**asdict(self), "c": {str(n): round(float(r), 3) for n, r in zip(self.sizes, self.ratios)}}
        if self.long_ratios:
            out["c_long"] = {str(n): round(float(r), 3) for n, r in zip(self.sizes, self.long_ratios)}
        return out


def _kernel_name(packing) -> str:
    """The packed layers' kernel; the native one with its forward kernels' version and instruction set (a changed
    C kernel, or ``$FASTCODER_ISA``, measures again; the drafting code's C does not)."""
    if not packing:
        return ""
    if packing.kernel == "native":
        from . import native  # noqa: PLC0415

        isa = native.packed_kernels_isa(packing)
        return f"native-{native.forward_version()}" + (f"-{isa}" if isa else "")
    return str(packing.kernel)


def cost_key(loaded) -> dict:
    """What a c(n) curve depends on: the model (name and parameter count), device and the processor behind it
    (:func:`engine.probe_cache.device_name`: a curve cached on another machine is measured again), dtype, threads, and
    the linear layers with packed weights and their kernel (:mod:`engine.packed_linear`), whether the
    native attention serves (:mod:`engine.native_attention`), whether the lean forward does
    (:mod:`engine.lean_forward`), whether it runs the native fused layer and whether greedy forwards take one
    native call (:mod:`engine.native.step`, off with ``$FASTCODER_GREEDY_STEP=0``), and whether the packed weights sit
    on huge pages (:mod:`engine.huge_pages`), and whether a GPU model's steps replay CUDA graphs
    (:mod:`engine.cuda_graphs`): they change c(n)."""
    from .lean_forward import STEP_ENV, fused_layer_serves  # noqa: PLC0415

    model = loaded.model
    params = sum(p.numel() for p in model.parameters())
    name = str(loaded.name)
    if name and os.path.exists(name):  # one local model, one curve, however its path was spelled
        name = os.path.realpath(name)
    return {"model": name, "params": int(params), "device": str(loaded.device),
            "processor": device_name(loaded.device),
            "dtype": str(loaded.dtype).removeprefix("torch."), "threads": int(torch.get_num_threads()),
            "packed_layers": len(packing.layers) if (packing := getattr(loaded, "packing", None)) else 0,
            "kernel": _kernel_name(packing),
            "attention": "native" if (att := getattr(loaded, "attention", None)) and att.installed else "",
            "lean_forward": getattr(loaded, "lean_forward", None) == "",
            "fused_layer": fused_layer_serves(model),
            "greedy_step": fused_layer_serves(model) and os.environ.get(STEP_ENV, "").strip() != "0",
            "huge_pages": bool(getattr(packing, "huge_page_bytes", 0)),
            "format": FORMAT, **({"cuda_graphs": True} if getattr(loaded, "cuda_graphs_status", None) is True else {})}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: Sizes up to this many draft tokens (and the plain step) are timed SMALL_SAMPLES times a round (the round's value
#: their median): a CPU's trees are mostly this small, and one sample a round left c(1)-c(8) of tiny-py-coder
#: 5-10% apart between measurements of the same kernels (benchmarks/results/2026-11-28b/curve_noise.txt).
SMALL_SIZES, SMALL_SAMPLES = 8, 3


@torch.inference_mode()
def measure_verify_cost(loaded, context: int = 512, sizes: tuple[int, ...] = SIZES, repeats: int = 7,
                        budget_s: float = 0.0, max_repeats: int = 31) -> VerifyCost:
    """Measure c(n) for ``loaded`` (a :class:`engine.model.LoadedModel`) on its device.

    A random prompt of ``context`` tokens (capped by the model's context) is prefilled once; then, for
    each size n, the decoder's own call for a step with n draft tokens is timed on that cache: the plain
    step (:func:`engine.steps.decode_one_token`) for n = 0, :func:`engine.verify.tree_forward` over a
    chain of n draft tokens (positions and tree mask made as a decode step makes them; the mask's shape
    does not change the work) otherwise, or, where the LM head screens its argmax, greedy decoding's own call for
    both: the generation's verification (:func:`engine.verify.greedy_verifier`: an empty tree for n = 0, the chain
    walked and compacted as a step is); in shuffled rounds, the cache cropped back after each:
    ``repeats`` rounds, then more while the whole measurement has taken less than ``budget_s`` seconds,
    ``max_repeats`` rounds at most. Each round times every size once, and n = 0 and the sizes up to
    :data:`SMALL_SIZES` :data:`SMALL_SAMPLES` times (the round's value the median of its samples). c(n) is the
    median over rounds of the round's value for n over its value for n = 0 (robust to other load). Cost: ~0.2 s a
    round on a 2-core CPU for tiny-py-coder; for a model whose 7 rounds already take longer than the budget, 7
    rounds.

    Before format 5 every size was one causal forward without a mask (transformers built it in Python) and
    n = 0 a forward with explicit positions: at 512 tokens (tiny-py-coder, 1 thread, two runs of 75 paired
    rounds) c(1) read 1.25 / 1.30 where the decoder's calls cost 1.15 / 1.17, c(5) 1.60 / 1.58 against
    1.46 / 1.48; at 1,024 tokens the two agree within 3%.
    """
    from .steps import decode_one_token  # noqa: PLC0415
    from .draft_tree import DraftTree  # noqa: PLC0415
    from .kv_cache import new_kv_cache  # noqa: PLC0415
    from .lean_forward import greedy_ready, weights_pinned  # noqa: PLC0415
    from .verify import greedy_verifier, tree_forward  # noqa: PLC0415

    model, device = loaded.model, loaded.device
    context = max(8, min(context, loaded.max_positions - max(sizes) - 8))
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, loaded.vocab_size, (1, context), generator=gen).to(device)
    cache = new_kv_cache(model, context + max(sizes) + 1)  # the decoder's cache, so c(n) is its cost
    model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    # greedy decoding's calls where the LM head screens its argmax (the editor's and the benchmark's default)
    greedy = greedy_ready(model)
    if greedy:  # the generation's verification, bound to this cache (the weights pinned for the measurement)
        bound = greedy_verifier(model, cache)
        empty = DraftTree.empty()

        def step(model, cache, token, past):
            return bound(token, empty, past)

        def verify(model, cache, token, tree, past):
            return bound(token, tree, past)
    else:
        step, verify = decode_one_token, tree_forward
    all_sizes = (0, *sizes)
    times = {n: [] for n in all_sizes}
    order = [n for n in all_sizes for _ in range(SMALL_SAMPLES if n <= SMALL_SIZES else 1)]
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    rounds = 0
    with weights_pinned(model):  # as a generation holds them: the bound verification's promise
        while rounds < repeats or (rounds < max_repeats and time.perf_counter() - start < budget_s):
            rounds += 1
            rng.shuffle(order)
            samples = {n: [] for n in all_sizes}
            for n in order:
                ids = torch.randint(0, loaded.vocab_size, (1 + n,), generator=gen).tolist()
                tree = DraftTree.from_chain(ids[1:], 0) if n else None
                _sync(device)
                t0 = time.perf_counter()
                if n:  # the decoder's calls (engine.decoder.SpeculativeDecoder._generate)
                    verify(model, cache, ids[0], tree, context)
                else:
                    step(model, cache, ids[0], context)
                _sync(device)
                samples[n].append(time.perf_counter() - t0)
                cache.crop(context - cache.get_seq_length())
            for n, got in samples.items():
                times[n].append(float(np.median(got)))
    # Ratios per round, then the median over rounds: a round's sizes ran back to back, so load that
    # comes and goes hits numerator and denominator alike (independent minima did not: under a
    # competing job one lucky plain step made c(1) read 5.8).
    base = np.asarray(times[0])
    ratios = isotonic_curve([float(np.median(np.asarray(times[n]) / base)) for n in sizes])
    return VerifyCost(list(sizes), [round(r, 4) for r in ratios], round(float(np.min(base)) * 1000, 4), context,
                      cost_key(loaded), rounds)


def isotonic_curve(ratios) -> list[float]:
    """The non-decreasing curve closest (least squares) to measured ``ratios`` (c(n) at ascending n),
    floored at 1.0: pool-adjacent-violators. A forward over more tokens never costs less, but a
    measurement on a loaded machine can read c(1) 1.63 > c(2) 1.48 > c(4) 1.36 (seen here); taken
    as is, such a curve makes one draft token look dearer than four and skews every tree choice."""
    blocks: list[list[float]] = []  # [mean, weight]
    for r in (max(float(x), 1.0) for x in ratios):
        blocks.append([r, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2 = blocks.pop()
            m1, w1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    return [m for m, w in blocks for _ in range(int(w))]


#: A c(1) above this is taken for a measurement spoiled by other load (one more token costs at most a
#: few tens of percent on any device this project has met: 1.05-1.37 on a 2-core CPU).
PLAUSIBLE_C1 = 2.0
#: A cached curve is checked against the device at each process's first load of it (:func:`drifted`): c(DRIFT_SIZE)
#: timed at the curve's short context in DRIFT_ROUNDS rounds (~0.28 s for tiny-py-coder on a 2-core CPU); where it is
#: off the cached value by more than DRIFT_TOLERANCE (relative), the whole curve is measured again and cached. The
#: device a curve was measured on changes under it: on this project's shared 2-core VM a plain step took 1.42 ms at
#: 512 cached tokens at 04:09 and 2.19-2.42 ms at 14:00 the same day, c(8) 2.30 then and 1.83-1.88 now
#: (benchmarks/results/2026-11-29f/): trees sized by the morning's curve were too small for the afternoon's machine.
DRIFT_SIZE, DRIFT_ROUNDS, DRIFT_TOLERANCE = 8, 5, 0.12
#: Environment variable naming a c(n) curve (JSON with "sizes" and "ratios", as the cache files hold)
#: or ``flat``, used instead of measuring (tests use it so decoding does not depend on timing).
COST_ENV = "FASTCODER_VERIFY_COST"


#: Verification is cheap when a forward over 16 more draft tokens costs at most this much more (in plain decode
#: steps) than one over a single token, on each measured curve: c(16) - c(1) <= 0.25. The H200 running
#: tiny-py-coder: 0.06 (float32) and 0.01-0.03 (bfloat16); this 2-core CPU: 0.84-1.73.
CHEAP_VERIFY_EXTRA = 0.25
#: FastCoder settings where verification is cheap (:func:`verification_is_cheap`): D_r and D_c searched at every
#: cache miss, beside the context copy, and copies drafted up to 6x their match length (SuffixDecoding's
#: max_spec_factor; 3 otherwise). Oracle replay with the H200's float32 curve, 10 tasks per cell, predicted speedup
#: over ``ar`` with the drafting time measured on the 2-core CPU, before -> after: ``function`` pluggy / jinja2 /
#: pygls 3.43 / 3.90 / 4.43 -> 3.56 / 4.33 / 4.70, ``fim-line`` 1.54 / 1.53 / 4.04 -> 1.61 / 1.70 / 4.20,
#: ``fim-block`` 3.41 / 4.14 / 4.85 -> 3.93 / 4.68 / 4.99; accepted length +4-18%, trees 1.4-3x wider
#: (benchmarks/results/2026-11-26g/replay_variants.py, replay_h200_curve/). The replay gave the H200's measured
#: trees (pluggy ``function``: accepted length 4.27 vs 4.29 measured, 11.5 vs 11.4 draft tokens). With the CPU's
#: curve the same settings gave -3% / +1% / +2% on ``function`` without the drafting time, less with it.
#: Trees, copies and continuations 48 tokens deep instead of 24 (measured H100 float32 curve, the same replay, predicted
#: speedup without drafting time, 24 -> 48): ``function`` pluggy / jinja2 / pygls 4.135 / 4.856 / 5.317 -> 4.176 /
#: 5.001 / 5.608, ``fim-block`` 4.377 / 5.351 / 5.415 -> 4.554 / 5.686 / 5.886 (benchmarks/results/2026-11-26n/).
#: Measured on the H100 against ``fastcoder-depth24`` (four cells, one run, benchmarks/results/2026-11-26g/h100c/):
#: accepted length +3-9% as replayed, 3-8% fewer steps, forwards 1-3% dearer (16% in one cell), decode speed paired
#: per task run 1.013 (0.976-1.052), ``function`` 1.033 (0.981-1.085): a small gain, not yet beyond one run's noise.
#: Nine cells twice more, two repeats each (h100d/, h100e/): accepted length +0-9% per cell, as many fewer forwards,
#: decode speed paired 1.004 (0.978-1.029); kept for the fewer forwards, which a model whose forward is not bound
#: by kernel launches turns into time.
CHEAP_VERIFY_DRAFTING = {"retrieve_beside_copy": True, "copy_factor": 6.0,
                         "tree_max_depth": 48, "copy_max_depth": 48, "draft_len": 48}


def verification_is_cheap(cost: VerifyCost) -> bool:
    """Whether ``cost`` (and its long-context curve, if any) has c(16) - c(1) <= :data:`CHEAP_VERIFY_EXTRA`: a
    device where a wider draft tree costs next to nothing (a GPU running a model too small to fill it), so the
    drafters should offer more candidates (:data:`CHEAP_VERIFY_DRAFTING`)."""
    # at() gives the long-context curve, or ``cost`` itself where there is none
    return all(float(c.c(16)) - float(c.c(1)) <= CHEAP_VERIFY_EXTRA for c in (cost, cost.at(cost.long_context)))


def plausible(cost: VerifyCost) -> bool:
    """Whether a measured curve looks like a device's, not like noise (c(1) <= :data:`PLAUSIBLE_C1`, for
    the long-context curve too)."""
    return bool(cost.ratios) and float(cost.c(1)) <= PLAUSIBLE_C1 \
        and (not cost.long_ratios or float(cost.at(cost.long_context).c(1)) <= PLAUSIBLE_C1)


def measure_curves(loaded, budget_s: float = MEASURE_BUDGET_S) -> VerifyCost:
    """c(n) at :data:`SHORT_CONTEXT` and at :data:`LONG_CONTEXT` tokens of KV cache (both capped by the
    model's context; one curve when they meet), each within half of ``budget_s`` seconds (at least 7
    rounds each): the curve :func:`load_or_measure_verify_cost` caches."""
    short = measure_verify_cost(loaded, context=SHORT_CONTEXT, budget_s=budget_s / 2)
    long_context = min(LONG_CONTEXT, loaded.max_positions - max(SIZES) - 8)
    if long_context <= short.context:
        return short
    long = measure_verify_cost(loaded, context=long_context, budget_s=budget_s / 2)
    return replace(short, long_ratios=long.ratios, long_context=long.context, long_decode_ms=long.decode_ms,
                   rounds=min(short.rounds, long.rounds))


def drifted(loaded, cost: VerifyCost) -> bool:
    """Whether the device no longer runs ``loaded`` as ``cost`` says: c(:data:`DRIFT_SIZE`) measured now
    (:func:`measure_verify_cost` at ``cost.context``, :data:`DRIFT_ROUNDS` rounds) is off ``cost``'s by more than
    :data:`DRIFT_TOLERANCE` of it. False without a check (no rounds, a curve without a context)."""
    if DRIFT_ROUNDS <= 0 or not cost.ratios or cost.context <= 0:
        return False
    want = float(cost.c(DRIFT_SIZE))
    now = float(measure_verify_cost(loaded, context=cost.context, sizes=(DRIFT_SIZE,), repeats=DRIFT_ROUNDS)
                .c(DRIFT_SIZE))
    if abs(now / want - 1.0) <= DRIFT_TOLERANCE:
        return False
    log.info("verify cost drifted: c(%d) %.3f now, %.3f cached; measuring the curve again", DRIFT_SIZE, now, want)
    return True


def _from_env() -> VerifyCost | None:
    value = os.environ.get(COST_ENV, "").strip()
    if not value:
        return None
    if value == "flat":
        return VerifyCost.flat()
    try:
        data = json.loads(Path(value).read_text())
        return replace(VerifyCost.from_dict(data, {"kind": "env", "path": value}), rounds=0)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("%s=%s unusable (%s); measuring instead", COST_ENV, value, exc)
        return None


def default_cost_cache() -> Path:
    """Folder of cached curves: ``platformdirs.user_cache_dir("fastcoder")/verify_cost``
    (``FASTCODER_CACHE_DIR`` overrides the user cache part)."""
    return cache_root() / "verify_cost"


#: Curves read from the cache in this process: file -> (its text, the curve). Every decoder of the same model then
#: shares one object, and with it the per-context-bucket curves and tables it keeps (:meth:`VerifyCost.at`).
_LOADED: dict[str, tuple[str, VerifyCost]] = {}


def load_or_measure_verify_cost(loaded, cache_dir: str | os.PathLike | None = None) -> VerifyCost:
    """The cached curve for this (model, device, dtype, threads), measured and cached on first use.

    The file is written to a temporary and renamed into place; an unreadable or mismatching file is
    measured again, and so is a curve the device has drifted from (:func:`drifted`, checked once per process); an
    implausible measurement (:func:`plausible`) is retried twice and never cached.
    ``$FASTCODER_VERIFY_COST`` (a curve file, or ``flat``) replaces the measurement when no
    ``cache_dir`` is given. Never raises for cache problems (they are logged)."""
    if cache_dir is None and (fixed := _from_env()) is not None:
        return fixed
    key = cost_key(loaded)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    folder = Path(cache_dir) if cache_dir is not None else default_cost_cache()
    path = folder / f"{digest}.json"
    try:
        text = path.read_text()
        held = _LOADED.get(str(path))
        if held is not None and held[0] == text:  # one curve object per process: its bucket curves and tables too
            return held[1]
        data = json.loads(text)
        if data.get("key") == key:
            cost = VerifyCost.from_dict(data)
            if not drifted(loaded, cost):
                _LOADED[str(path)] = (text, cost)
                return cost
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("verify-cost cache %s unusable (%s); measuring again", path, exc)
    cost = measure_curves(loaded)
    for _ in range(2):  # other load spoiled it: measure again, and never cache a spoiled curve
        if plausible(cost):
            break
        log.warning("verify cost looks spoiled by other load (c(1) = %.2f); measuring again", cost.c(1))
        cost = measure_curves(loaded)
    if not plausible(cost):
        log.warning("verify cost still implausible (c(1) = %.2f): used for this process, not cached", cost.c(1))
        return cost
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
        with os.fdopen(fd, "w") as fh:
            json.dump(asdict(cost), fh)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not cache the verify cost at %s: %s", path, exc)
    return cost
