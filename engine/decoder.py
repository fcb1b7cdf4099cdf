"""The speculative decoder: prefill, then draft -> verify (one forward, tree attention) -> accept.

:class:`SpeculativeDecoder` holds what outlives a generation (the model, the method's drafter settings, the
acceptance estimates, the verify-cost model, the documents' prompt KV caches) and checks a request's arguments; one
generation's loop is :class:`engine.generation.Generation`, shaped after gpt-fast's generate.py: small functions with
explicit tensors and positions (:func:`engine.steps.prefill`, :func:`engine.steps.decode_one_token`,
:func:`engine.verify.tree_forward`), and the statistics returned as plain data. Output is token-for-token the model's
own (greedy) output, or distributed exactly as the model's own samples (see :mod:`engine.verify`).
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections import OrderedDict
from typing import Sequence

import numpy as np
import torch
from transformers import DynamicCache

from .drafters import FastCoderCache, make_drafter
from .generation import PREFILL_DRAFT_MAX_TOKENS, Generation  # noqa: F401  (PREFILL_DRAFT_MAX_TOKENS: re-exported)
from .generation_result import GenerationResult, generation_result
from .hf_baseline import generate_prompt_lookup
from .kv_cache import new_kv_cache
from .lean_forward import hidden_rows, weights_pinned
from .model import LoadedModel
from .prompt_ids import prompt_ids
from .stops import hit_stop, one_line, stop_end, stop_tokens, stop_touching
from .verify import SamplingParams

log = logging.getLogger(__name__)

#: Decoding methods: two baselines without drafting, three retrieval drafters, SDSAT (adaptive tokens;
#: needs an SDSAT fine-tune, :mod:`engine.sdsat`), SDSAT merged with fastcoder's retrieval, and
#: SuffixDecoding (arctic-inference's own drafter, optional install: :mod:`engine.suffix_drafter`).
METHODS = ("ar", "hf-prompt-lookup", "rest", "copyspec", "fastcoder", "sdsat", "fastcoder+sdsat", "suffix")
#: Adaptive tokens per SDSAT branch at most (the paper measures k up to 13).
MAX_ADAPTIVE_TOKENS = 16
#: Methods that draft with SDSAT adaptive tokens.
SDSAT_METHODS = ("sdsat", "fastcoder+sdsat")
#: Methods whose trees are sized by the verify-cost model by default.
COST_SIZED_METHODS = ("fastcoder", "sdsat", "fastcoder+sdsat")


#: Draft tokens per tree at most when the verify-cost model sizes trees (a cap, rarely reached on a CPU).
MAX_DRAFT_TOKENS = 64
#: KV positions allocated past the prompt when a generation starts (new tokens + one draft tree; the
#: buffers of :mod:`engine.kv_cache` double when a longer generation needs more).
KV_HEADROOM = 256 + MAX_DRAFT_TOKENS
#: Retrieval settings when trees are sized by cost: occurrences sampled per datastore query and tokens
#: per continuation (REST's 128 and 16 cost ~0.3 ms a step more for nodes the cost model drops; 24 tokens,
#: engine.tree_builder.SIZED_MAX_DEPTH, so that a long copy can be verified whole in one forward).
SIZED_MAX_MATCHES = 32
SIZED_DRAFT_LEN = 24


def default_draft_budget(device: torch.device) -> int:
    """Draft tokens per tree when none is configured: 64 on an accelerator (REST and FastCoder's
    setting; verifying 64 tokens costs about as much as one), 16 on a CPU, where the verify cost
    c(n) grows with n (tiny-py-coder, 2 cores: c(16) ~ 1.3-1.9, c(64) ~ 2.9-4; budget 16 made
    fastcoder 1.81-2.07x faster than ar on three repositories, budget 64 1.38-1.76x)."""
    return 64 if device.type in ("cuda", "xpu") else 16


class SpeculativeDecoder:
    """Lossless speculative decoding with retrieval drafters.

    Args:
        loaded: a :class:`~engine.model.LoadedModel`.
        method: one of :data:`METHODS`.
        repo_datastore: D_r (``RepoDatastore``) or None.
        common_datastore: D_c (``Datastore``) or None.
        **options: drafter options (see :func:`engine.drafters.make_drafter`), e.g.
            ``use_cache=False`` for the FastCoder ablations, ``draft_budget=64`` (default:
            :func:`default_draft_budget`, or a cap of :data:`MAX_DRAFT_TOKENS` when trees are sized by
            cost), ``screened_head`` (default True, every method: greedy steps take the LM head's argmax
            by int8 screening and exact rescoring where the model allows it,
            :func:`engine.lean_forward.forward_greedy`, the same tokens; False: the whole head's logits),
            ``step_loop`` (default True: fastcoder's greedy steps run back to back in one native call where
            Python has nothing to do between them, :meth:`engine.native.bound_verify.BoundVerify.verify_loop`, the same
            tokens and trees; ``$FASTCODER_STEP_LOOP=0`` switches it off for every decoder).
            fastcoder only: ``size_by_cost`` (default True: each tree is sized against the
            measured verify cost with online acceptance estimates, :mod:`engine.acceptance`),
            ``verify_cost`` (a :class:`engine.cost_model.VerifyCost`; default: measured and cached
            for this model/device/dtype/threads) and ``acceptance_estimator`` (one to share, e.g.
            across the decoders of a server's workspace folders); ``completion_history`` (a
            :class:`engine.history.CompletionHistory` to share across decoders; default: one per decoder,
            so every generation's output becomes a draft source for the later ones, any document);
            ``draft_head`` (default True: the head trained for this model, :func:`engine.draft_head.find_draft_head`;
            False: none; a path: that head file, where the estimator has no head yet); ``node_model`` (default
            False: the bucket estimates alone; True: the learned per-node estimate that comes with the model's
            acceptance prior, :mod:`engine.node_model`, where it has one; opt-in: no faster on this project's CPU).
            sdsat and fastcoder+sdsat (:mod:`engine.sdsat.drafter`): ``adaptive_tokens`` (k, default
            the model's trained window L; a cap when sized by cost), ``adaptive_width`` (candidates
            per adaptive position; default 1 when greedy, 3 when sampling), ``adaptive_every_step``
            (default False for sdsat, the paper's two-step loop; True for fastcoder+sdsat).
            suffix (:func:`engine.suffix_drafter.make_suffix_drafter`): SuffixDecoding settings (vLLM's
            defaults) and ``suffix_cache`` (a ``SuffixDecodingCache`` to share across decoders); the
            decoder keeps one drafter, so its global tree learns from every generation, as vLLM keeps
            one per engine (one generation at a time).

    Raises:
        ValueError: unknown method; :class:`engine.sdsat.NotAnSdsatModel` (a ValueError): an SDSAT
            method with a model that has no adaptive-token metadata; TypeError: an option the
            method does not take; OSError or ValueError: a ``draft_head`` file that cannot be read or is not a
            draft head; :class:`engine.suffix_drafter.SuffixDecodingUnavailable` (an
            ImportError): method suffix without arctic-inference installed.
    """

    def __init__(self, loaded: LoadedModel, method: str = "fastcoder", repo_datastore=None,
                 common_datastore=None, **options):
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
        self.loaded = loaded
        self.method = method
        self.repo_datastore = repo_datastore
        self.common_datastore = common_datastore
        self.options = dict(options)
        if method in SDSAT_METHODS and loaded.sdsat is None:
            from .sdsat import NotAnSdsatModel  # noqa: PLC0415

            raise NotAnSdsatModel(
                f"method {method!r} needs an SDSAT model (fine-tuned with adaptive tokens, with an sdsat.json "
                f"beside its weights); {loaded.name or 'this model'} has none: make one with "
                "`fastcoder train-sdsat`, or choose another method")
        verify_cost = self.options.pop("verify_cost", None)
        shared_estimator = self.options.pop("acceptance_estimator", None)
        self.history = self.options.pop("completion_history", None)
        if self.history is None and method == "fastcoder":
            from .output_store import new_completion_history  # noqa: PLC0415

            self.history = new_completion_history(loaded.model)
        self.size_by_cost = bool(self.options.pop("size_by_cost", method in COST_SIZED_METHODS))
        use_head = self.options.pop("draft_head", True)  # True: the model's own (find_draft_head), or a file
        use_nodes = bool(self.options.pop("node_model", False))  # True: the prior's node model (engine.node_model)
        self.screened = bool(self.options.pop("screened_head", True))
        self.step_loop = bool(self.options.pop("step_loop", True))
        self.estimator = self.cost = None
        self.depth_one = None  # the draft head's depth-1 adjustment the decode loop feeds (engine.draft_head)
        self.sdsat_options = {k: self.options.pop(k) for k in ("adaptive_tokens", "adaptive_width",
                                                                "adaptive_every_step") if k in self.options}
        if method in COST_SIZED_METHODS and self.size_by_cost:
            from .acceptance import AcceptanceEstimator  # noqa: PLC0415
            from .cost_model import CHEAP_VERIFY_DRAFTING, load_or_measure_verify_cost, verification_is_cheap  # noqa: PLC0415

            from .acceptance_prior import find_prior  # noqa: PLC0415

            self.estimator = (shared_estimator if shared_estimator is not None
                              else AcceptanceEstimator(prior=find_prior(loaded.model)))
            if use_nodes:
                self.estimator.node_model = getattr(self.estimator.prior, "node_model", None)
            if use_head and method in ("fastcoder", "fastcoder+sdsat"):
                self.depth_one = self._attach_draft_head(None if use_head is True else use_head)
            self.cost = verify_cost if verify_cost is not None else load_or_measure_verify_cost(loaded)
            if hasattr(self.cost, "prepare_tables"):  # every context bucket's table now, not in a decode step
                self.cost.prepare_tables(MAX_DRAFT_TOKENS)
            self.options.setdefault("draft_budget", MAX_DRAFT_TOKENS)  # a cap: the cost model sizes trees
            if method == "fastcoder" and verification_is_cheap(self.cost):  # more candidates where they cost nothing
                for key, value in CHEAP_VERIFY_DRAFTING.items():
                    self.options.setdefault(key, value)
            if method != "sdsat":  # trees keep ~4-16 nodes: sample fewer matches, shorter continuations
                self.options.setdefault("max_matches", SIZED_MAX_MATCHES)
                self.options.setdefault("draft_len", SIZED_DRAFT_LEN)
        if method in ("rest", "fastcoder", "fastcoder+sdsat") and "draft_budget" not in self.options \
                and "budget" not in self.options:
            self.options["draft_budget"] = default_draft_budget(loaded.device)
        self.max_prompt_kv_documents = 4  # documents whose prompt KV cache is kept (memory bound)
        self._kv_owners: OrderedDict[int, FastCoderCache] = OrderedDict()
        self._suffix_drafter = None
        if method in ("rest", "copyspec", "fastcoder", "suffix", *SDSAT_METHODS):  # validate the options now
            self._make_drafter(None)
        elif self.options or self.sdsat_options:
            raise TypeError(f"options not understood by method {method!r}: {', '.join(sorted(options))}")

    def _attach_draft_head(self, path=None):
        """The estimator's :class:`engine.draft_head.DepthOneFeature` (made for this model when it has none and a
        draft head was trained for it, or from the head file ``path``), or None. Raises OSError or ValueError for a
        ``path`` that is not a draft head."""
        if self.estimator.depth_one is None:
            from .draft_head import DraftHead, depth_one_feature, find_draft_head  # noqa: PLC0415

            head = find_draft_head(self.loaded.model) if path is None else DraftHead.load(path)
            self.estimator.depth_one = depth_one_feature(self.loaded, head)
        self._hidden_rows = hidden_rows(self.loaded.model)  # the lean forward's last hidden states (a holder)
        return self.estimator.depth_one

    def _feed_head(self, path: list[int], first: int, pending: int) -> None:
        """After a verification that accepted ``path`` and committed ``first`` after the pending token (-1: none,
        the prefill): the draft head learns from it and gets the final hidden state of the last forward's row that
        chose the new pending token (row 0: the pending token's own, row 1 + i: node i's) and that token,
        ``pending``."""
        self.depth_one.step(self._hidden_rows, path[-1] + 1 if path else 0, first, pending)

    def new_cache(self) -> FastCoderCache:
        """A fresh per-document FastCoder cache, to pass to :meth:`generate` across requests."""
        return FastCoderCache(n_min=self.options.get("n_min", 2))

    def _make_drafter(self, cache, greedy: bool = True, line: bool = False):
        if self.method == "suffix":  # one drafter: its SuffixDecodingCache outlives a generation
            if self._suffix_drafter is None:
                self._suffix_drafter = make_drafter("suffix", None, **self.options)
            return self._suffix_drafter
        if self.method in SDSAT_METHODS:
            from .sdsat.drafter import make_adaptive_drafter  # noqa: PLC0415

            return make_adaptive_drafter(self.method, self.loaded, self.repo_datastore, self.common_datastore,
                                         cache, self.estimator, self.cost, greedy, self.sdsat_options,
                                         self.options)
        token_info = self.loaded.token_info if self.method == "fastcoder" else None
        history = self.history.for_completion(line) if self.history is not None else None
        extra = {"history": history} if self.method == "fastcoder" else {}
        return make_drafter(self.method, token_info, self.repo_datastore, self.common_datastore,
                            cache=cache, estimator=self.estimator, cost=self.cost, **extra, **self.options)

    # ----------------------------------------------------------------------------- public API
    def generate(self, prompt: str | Sequence[int], max_new_tokens: int = 128, temperature: float = 0.0,
                 top_p: float = 1.0, top_k: int = 0, seed: int | None = None,
                 stop: Sequence[str] | None = None, cache: FastCoderCache | None = None,
                 cancel: threading.Event | None = None, deadline: float | None = None,
                 constraint: str | bytes | None = None) -> GenerationResult:
        """Generate up to ``max_new_tokens`` tokens after ``prompt``.

        Args:
            prompt: text, or token ids (list of int). An empty prompt starts from BOS.
            max_new_tokens: tokens to generate at most (>= 0).
            temperature, top_p, top_k: sampling (temperature 0 = greedy); warped as transformers does.
            seed: seeds the sampler (and nothing else); same seed, same output.
            stop: strings that end the generation; ``text`` is cut before the first one.
            cache: per-document warm state from :meth:`new_cache`: FastCoder's CACHE (fastcoder
                method) and, for every method, the prompt's KV cache, so the next prompt of the
                same document prefills only what follows the longest common prefix.
            cancel: checked before every forward pass; once set, returns what was generated so far.
            deadline: a ``time.monotonic()`` instant, checked before every forward pass; once past,
                returns what was generated so far with ``finish_reason == "deadline"``.
            constraint: token healing (:mod:`engine.healing`): text (or UTF-8 bytes) the output must
                start with. Until the generated bytes cover it, every token inconsistent with what
                remains is masked out: draft nodes that contradict it are pruned before verification,
                and each verified position chooses among the consistent tokens only. The output is the
                model's own greedy (or sampled) output under that hard constraint; ``text`` includes it.

        Returns:
            A :class:`GenerationResult`.

        Raises:
            ValueError: bad sampling parameters, negative max_new_tokens, an empty prompt for a
                model without BOS, or a text prompt without a tokenizer.
        """
        params = SamplingParams(float(temperature), float(top_p), int(top_k))
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        ids, truncated = self._prompt_ids(prompt, max_new_tokens)
        remaining = constraint.encode("utf-8") if isinstance(constraint, str) else bytes(constraint or b"")
        if self.method == "hf-prompt-lookup":
            if remaining:
                raise ValueError("method 'hf-prompt-lookup' (transformers' generate) takes no constraint")
            return self._generate_hf(ids, max_new_tokens, params, seed, stop, truncated)
        generator = None
        if not params.greedy:
            generator = torch.Generator(device=self.loaded.device)
            generator.manual_seed(seed if seed is not None else secrets.randbits(63))
        drafter = None if self.method == "ar" else self._make_drafter(cache, params.greedy, one_line(stop))
        with weights_pinned(self.loaded.model):  # the fused layer's weight check once, not at every forward
            return self._generate(ids, max_new_tokens, params, generator, drafter, stop, cancel, truncated, cache,
                                  deadline, remaining)

    @torch.inference_mode()
    def warm(self, prompt: str | Sequence[int], cache: FastCoderCache, max_new_tokens: int = 128,
             cancel: threading.Event | None = None, chunk_tokens: int = 128) -> int:
        """Prefill ``prompt`` into the document's prompt KV cache ahead of a request (warm cache).

        The prompt (truncated as :meth:`generate` would with ``max_new_tokens``) is run through the
        model in chunks of ``chunk_tokens`` tokens on top of whatever prefix the cache already holds;
        ``cancel`` is checked between chunks, so a completion that needs the model waits at most one
        chunk's forward. What was filled stays in ``cache`` (``prompt_ids``/``prompt_kv``), and a later
        :meth:`generate` with ``cache`` prefills only past the longest common prefix. Output is
        unchanged by warming (the KV entries are the ones a cold prefill computes).

        Returns:
            The number of prompt tokens (int) the cache holds afterwards.
        """
        if self.method == "hf-prompt-lookup":
            return 0
        ids, _ = self._prompt_ids(prompt, max_new_tokens)
        target = len(ids) - 1  # generate() always re-runs the last prompt token for its logits
        kv, filled = self._reuse_prompt_kv(cache, ids)
        model = self.loaded.model
        while filled < target and not (cancel is not None and cancel.is_set()):
            end = min(target, filled + max(1, int(chunk_tokens)))
            chunk = torch.tensor([ids[filled:end]], dtype=torch.long, device=self.loaded.device)
            model(input_ids=chunk, past_key_values=kv, use_cache=True, logits_to_keep=1)
            filled = end
        if filled >= 16:
            self._keep_prompt_kv(cache, ids[:filled], kv)
        return filled if filled >= 16 else 0

    # ----------------------------------------------------------------------------- internals
    def _prompt_ids(self, prompt, max_new_tokens: int) -> tuple[list[int], bool]:
        """:func:`engine.prompt_ids.prompt_ids` with room for one draft tree of this decoder's budget (the same for
        every method at default settings, so all methods see the same prompt) and an SDSAT adaptive branch."""
        tree_room = max(64, int(self.options.get("draft_budget", 64))) + 1 + MAX_ADAPTIVE_TOKENS
        return prompt_ids(self.loaded, prompt, max_new_tokens, tree_room)

    def _reuse_prompt_kv(self, doc: FastCoderCache | None, ids: list[int]) -> tuple[DynamicCache, int]:
        """A KV cache holding the first ``start`` prompt tokens, taken from the document's last
        prompt when they share a prefix; returns ``(cache, start)`` with start <= len(ids) - 1."""
        model = self.loaded.model
        if doc is None or doc.prompt_kv is None:
            return new_kv_cache(model, len(ids) + KV_HEADROOM), 0
        kv, old = doc.prompt_kv, doc.prompt_ids
        doc.drop_prompt_kv()  # taken; given back only after a clean finish
        n = min(len(old), len(ids) - 1, kv.get_seq_length())
        same = np.asarray(old[:n]) == np.asarray(ids[:n])
        start = int(n if same.all() else np.argmin(same))
        if start < 16:
            return new_kv_cache(model, len(ids) + KV_HEADROOM), 0
        kv.crop(start - kv.get_seq_length())
        return kv, start

    def _keep_prompt_kv(self, doc: FastCoderCache | None, ids: list[int], kv: DynamicCache) -> None:
        if doc is None:
            return
        kv.crop(len(ids) - kv.get_seq_length())
        doc.prompt_ids, doc.prompt_kv = list(ids), kv
        self._kv_owners[id(doc)] = doc
        self._kv_owners.move_to_end(id(doc))
        while len(self._kv_owners) > self.max_prompt_kv_documents:
            _, oldest = self._kv_owners.popitem(last=False)
            oldest.drop_prompt_kv()

    @property
    def token_bytes(self):
        """The model's :class:`engine.healing.TokenBytes` (shared by every decoder of the model)."""
        return self.loaded.token_bytes

    def _generate(self, ids: list[int], max_new: int, params: SamplingParams, generator, drafter,
                  stop, cancel, truncated: bool, doc: FastCoderCache | None = None,
                  deadline: float | None = None, remaining: bytes = b"") -> GenerationResult:
        """One generation (:class:`engine.generation.Generation`) with the arguments :meth:`generate` checked."""
        return Generation(self, ids, max_new, params, generator, drafter, stop, cancel, truncated, doc, deadline,
                          remaining).run()

    def _stop_tokens(self, stop: Sequence[str] | None) -> frozenset[int] | None:
        """:func:`engine.stops.stop_tokens` for this model."""
        return stop_tokens(stop, self.loaded)

    def _stop_touching(self, stop: Sequence[str] | None) -> frozenset[int] | None:
        """:func:`engine.stops.stop_touching` for this model (None: every step searches)."""
        return stop_touching(stop, self.loaded)

    def _hit_stop(self, out: list[int], stop: Sequence[str], skip: int = 0) -> bool:
        """:func:`engine.stops.hit_stop` with this model's tokenizer."""
        return hit_stop(self.loaded.tokenizer, out, stop, skip)

    def _result(self, ids, out, finish, t0, t_prefill, t_end, accepted_lengths, hits, retrieval_s,
                truncated, stop, skip: int = 0) -> GenerationResult:
        """:func:`engine.generation_result.generation_result` with this decoder's tokenizer and method."""
        return generation_result(self.loaded.tokenizer, self.method, ids, out, finish, t0, t_prefill, t_end,
                                 accepted_lengths, hits, retrieval_s, truncated, stop, skip)

    def _generate_hf(self, ids, max_new, params: SamplingParams, seed, stop, truncated) -> GenerationResult:
        """Baseline: transformers' own prompt lookup decoding (:func:`engine.hf_baseline.generate_prompt_lookup`)."""
        # transformers' own stop_strings match across the prompt's end (a prompt ending in a newline stops "\n\n" at
        # the first new newline): it runs to max_new and its tokens past the first stop in the new text are cut
        run = generate_prompt_lookup(self.loaded, ids, max_new, params, seed)
        new = run.new
        if stop and new and self._hit_stop(new, stop):  # the tokens up to the one that completed it, as ar stops
            new = new[:stop_end(self.loaded.tokenizer, new, stop)]
        res = self._result(ids, new, run.finish, run.t0, run.t_prefill, run.t_end, [],
                           [0] * 256, 0.0, truncated, stop)
        # transformers does not expose per-step acceptance: only the totals are known
        res.stats.update(forward_passes=run.passes, accepted_lengths=[], draft_sizes=[],
                         mean_accepted_length=round((len(run.new) - 1) / run.passes, 4) if run.passes else 0.0)
        return res
