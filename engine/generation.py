"""One generation of the speculative decoder: prefill, then draft -> verify (one forward, tree attention) -> accept,
step after step until an end.

Shaped after gpt-fast's generate.py: :meth:`Generation.run` is prefill then decode; a step is either plain
(:meth:`Generation.plain_step`: ``ar``, one token per forward) or speculative (:meth:`Generation.tree_step`: a draft
tree from the drafter, verified in one forward, the accepted path and the model's own next token committed). The
decoder (:class:`engine.decoder.SpeculativeDecoder`) holds what outlives a generation (the model, the drafters'
settings, the documents' prompt KV caches); a :class:`Generation` holds one call's state (the output, the context
buffer, the KV cache, the timers) and is used once.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import torch

from .draft_tree import DraftTree
from .generation_result import GenerationResult
from .generation_result import ms as _ms
from .lean_forward import greedy_ready
from .steps import decode_one_token, prefill
from .stops import one_line, stop_end, stop_table
from .verify import SamplingParams, accept, choose_token, compact_cache, greedy_verifier, prune_after_stop, tree_forward

if TYPE_CHECKING:
    from .decoder import SpeculativeDecoder
    from .drafters import FastCoderCache

#: The draft tree of a plain step (read only).
_NO_DRAFT = DraftTree.empty()

#: A prefill of at most this many uncached prompt tokens (a warm prompt KV cache: the editor's next request
#: in the same document) also verifies a draft of the first new tokens in the same forward, so a draft
#: accepted there saves a decode forward. Longer prefills run alone: causal attention over a long prompt
#: is cheaper than the tree mask's full one (a 500-token prefill: 112 ms causal, 119 ms with a mask).
PREFILL_DRAFT_MAX_TOKENS = 64


class Generation:
    """One :meth:`engine.decoder.SpeculativeDecoder.generate` call past its argument checks.

    Args:
        decoder: the :class:`~engine.decoder.SpeculativeDecoder` (model, method, estimator, prompt KV caches).
        ids: the prompt's token ids (already truncated to fit), the last one re-run for its logits.
        max_new: tokens to generate at most (>= 0).
        params, generator: sampling (:class:`engine.verify.SamplingParams`; a seeded ``torch.Generator`` or None
            when greedy).
        drafter: the method's drafter, None for ``ar`` (plain steps).
        stop, cancel, deadline, doc: as :meth:`~engine.decoder.SpeculativeDecoder.generate` (``doc``: its ``cache``).
        truncated: the prompt was cut to fit the model's context (reported in the result).
        remaining: the token-healing constraint's bytes still to spell (b"": none).

    State while it runs: ``out`` (the generated ids), ``context`` ((len(ids) + max_new + 128,) int64: the prompt
    then the output, the pending token last, ``n_ctx`` of it used), ``accepted_lengths`` (tokens committed per decode
    forward), ``draft_sizes`` (nodes verified per tree step), ``hits`` ((256,) int64: accepted draft nodes per source
    bitmask), ``retrieval_s`` / ``forward_s`` (s: drafting; the decode steps' forwards).
    """

    def __init__(self, decoder: SpeculativeDecoder, ids: list[int], max_new: int, params: SamplingParams, generator,
                 drafter, stop, cancel, truncated: bool, doc: FastCoderCache | None = None,
                 deadline: float | None = None, remaining: bytes = b""):
        self.decoder, self.ids, self.max_new, self.params, self.generator = decoder, ids, max_new, params, generator
        self.drafter, self.stop, self.cancel, self.truncated, self.doc = drafter, stop, cancel, truncated, doc
        self.deadline, self.remaining = deadline, remaining
        loaded = decoder.loaded
        self.loaded, self.model, self.eos = loaded, loaded.model, loaded.eos_token_ids
        self.estimator = decoder.estimator
        self.out: list[int] = []
        self.accepted_lengths: list[int] = []
        self.draft_sizes: list[int] = []
        self.hits = np.zeros(256, dtype=np.int64)
        self.retrieval_s = self.forward_s = 0.0
        self.skip = len(remaining.decode("utf-8", errors="ignore"))  # stop strings apply after the constraint
        self.searched = 0  # tokens of ``out`` the last stop search covered
        self.context = np.empty(len(ids) + max_new + 128, dtype=np.int64)  # prompt + generated, pending last
        self.context[:len(ids)] = ids
        self.n_ctx = len(ids)
        self.cache = self.verify = self.ahead = self.head = None
        self.held_ahead = None  # the draft-ahead fields, made at set-up, taken into use where no constraint holds
        self.loop = None  # the native step loop's fields (engine.native.step.StepLoop), where steps can run in it
        self.stop_tokens = self.stop_touch = None
        self.argmax_only = self.head_in_verify = False
        self.drafted = False  # the last verification drafted this step's tree (ahead.next_tree has it)
        self.prefill_accepted = 0  # draft tokens the prefill's forward verified and committed

    # ----------------------------------------------------------------------------- the whole run
    @torch.inference_mode()
    def run(self) -> GenerationResult:
        """Prefill, steps until an end, then the result (:class:`GenerationResult`; its stats add the drafting
        done in the prefill phase, the decode forwards' time, the reused prompt tokens, the draft tokens the
        prefill accepted and the tree sizes)."""
        decoder = self.decoder
        t0 = time.perf_counter()
        if self.max_new == 0:
            return decoder._result(self.ids, self.out, "length", t0, t0, t0, [], self.hits, 0.0, self.truncated,
                                   self.stop)
        self.cache, start = decoder._reuse_prompt_kv(self.doc, self.ids)
        try:
            self._set_up()
            pending, finish = self._prefill(start)
            t_prefill = time.perf_counter()
            # drafting done within the prefill phase: the drafter's reset, the prefill's draft
            setup_s = self.retrieval_s
            if finish is None:
                finish = self._decode(pending)
        finally:
            if self.loop is not None:
                self.loop.unwatch()
        self._cut_at_stop(finish)
        done = getattr(self.drafter, "finish", None)
        if done is not None:  # drafting work: timed with retrieval
            t = time.perf_counter()
            done(self.context[:self.n_ctx])
            self.retrieval_s += time.perf_counter() - t
        t_end = time.perf_counter()
        decoder._keep_prompt_kv(self.doc, self.ids, self.cache)
        res = decoder._result(self.ids, self.out, finish, t0, t_prefill, t_end, self.accepted_lengths, self.hits,
                              self.retrieval_s, self.truncated, self.stop, self.skip)
        res.stats["retrieval_prefill_ms"] = _ms(setup_s)
        res.stats["forward_ms"] = _ms(self.forward_s)  # the decode steps' forwards alone (the rest of a step: "other")
        res.stats["reused_prompt_tokens"] = start
        res.stats["prefill_draft_accepted"] = self.prefill_accepted
        res.stats["draft_sizes"] = self.draft_sizes
        return res

    def _set_up(self) -> None:
        """The drafter's reset and stop tokens, the greedy verifier, the fused step's drafting and the draft head."""
        decoder, drafter, stop = self.decoder, self.drafter, self.stop
        self.stop_tokens = decoder._stop_tokens(stop) if drafter is not None else None
        # greedy steps without a token-healing constraint take each row's argmax without the logits
        self.argmax_only = decoder.screened and self.params.greedy and greedy_ready(self.model)
        # the stop strings are searched for only after a token that shares a byte with one of them
        self.stop_touch = decoder._stop_touching(stop)
        if drafter is not None:
            t = time.perf_counter()
            drafter.reset(self.context[:self.n_ctx])
            set_stop = getattr(drafter, "set_stop_tokens", None)
            if set_stop is not None and self.remaining:  # no stop tokens while a healing constraint holds (a stop
                set_stop(None)  # string counts only after it, as _verifiable's pruning does): see _draft_unconstrained
            self.retrieval_s += time.perf_counter() - t
        # the draft head serves completions that may span lines: on one-line completions (a stop at the newline:
        # a few steps each) it lost up to 13% in wall clock, in 5 of 6 cell-runs (benchmarks/results/2026-11-26k,
        # fim-line), where longer ones gained (function +4%), so those draft without it
        self.head = decoder.depth_one if drafter is not None and not one_line(stop) else None
        # a greedy step's verification for this generation's cache, its checks made once (generate() pins the
        # weights), the acceptance counts, per-source hits and the draft head's step done in the same native call
        # where it can; a plain step (ar) is the verification of an empty tree: the same forward, without ~55 us of
        # per-call checks
        if self.argmax_only:
            self.verify = (greedy_verifier(self.model, self.cache, self.estimator, self.hits, self.head)
                           if drafter is not None else greedy_verifier(self.model, self.cache))
        self.head_in_verify = self.head is not None and getattr(self.verify, "head", None) is self.head
        if drafter is not None:  # made now, in the set-up, whether or not a constraint holds (then used once spelled)
            t = time.perf_counter()
            make = getattr(drafter, "draft_ahead", None)
            if make is not None and self.verify is not None and hasattr(self.verify, "verify_draft"):
                self.held_ahead = make(self.eos, self.max_new)
            self.retrieval_s += time.perf_counter() - t
        # fastcoder's steps back to back in one native call while Python has nothing to do between them (the draft
        # head fed in the call, the stop strings' tokens known)
        make_loop = getattr(self.verify, "step_loop", None)
        if self.held_ahead is not None and make_loop is not None and decoder.step_loop \
                and (self.head is None or self.head_in_verify) \
                and (not stop or self.stop_touch is not None):
            touch = stop_table(self.stop_touch, self.loaded.vocab_size) if stop else None
            self.loop = make_loop(self.head is not None, touch)
            if self.loop is not None:  # a cancel or deadline ends a call after the step under way
                self.loop.watch(self.cancel, self.deadline)
        if not self.remaining:
            self._draft_unconstrained()
        shared = self.estimator.depth_one if self.estimator is not None else None
        if shared is not None:  # no hidden state of this prompt yet (and none at all where this decoder has no head)
            shared.disable()

    @property
    def token_bytes(self):
        """The model's :class:`engine.healing.TokenBytes` (made on first use: only a constraint needs it)."""
        return self.loaded.token_bytes

    # ----------------------------------------------------------------------------- committing tokens
    def push(self, tok: int) -> None:
        """One committed token: the output, the drafting context, the constraint."""
        self.out.append(tok)
        self.context[self.n_ctx] = tok
        self.n_ctx += 1
        if self.remaining:
            self.remaining = self.token_bytes.advance(self.remaining, tok)
            if not self.remaining:
                self._draft_unconstrained()

    def _draft_unconstrained(self) -> None:
        """Drafting where no token-healing constraint holds: from the set-up, or from the moment a constraint is
        spelled (between two steps). The drafter drafts nothing below a stop token, and each next tree is drafted
        inside the verification's native call (the fastcoder drafter's native step on a CPU): verified in place by
        the next call, ~100 us of Python a step fewer. The draft-ahead fields were made in the set-up (``held_ahead``, the
        first step's primed before the prefill's forward) and the stop table is kept per stop strings
        (:func:`engine.stops.stop_table`): taking them into use costs no step time."""
        drafter = self.drafter
        if drafter is None:
            return
        set_stop = getattr(drafter, "set_stop_tokens", None)
        if set_stop is not None:
            set_stop(stop_table(self.stop_tokens, self.loaded.vocab_size) if self.stop_tokens else None)
        self.ahead = self.held_ahead

    def commit(self, tokens: list[int]) -> bool:
        """Accepted draft tokens (already in the KV cache); False where an EOS or ``max_new`` cut them."""
        for tok in tokens:
            if tok in self.eos or len(self.out) >= self.max_new:
                return False
            self.push(tok)
        return True

    # ----------------------------------------------------------------------------- prefill
    def _prefill(self, start: int) -> tuple[int, str | None]:
        """The prompt's forward from position ``start`` (the prompt KV cache holds the ones before). Returns the
        pending token (the model's next, not yet in the KV cache) and the finish reason when the generation already
        ended there (None: decode on)."""
        ids, drafter = self.ids, self.drafter
        from .decoder import SDSAT_METHODS  # noqa: PLC0415  (the decoder imports this module)

        if drafter is not None and self.decoder.method not in SDSAT_METHODS \
                and len(ids) - start <= PREFILL_DRAFT_MAX_TOKENS:
            return self._prefill_with_draft(start)
        if self.held_ahead is not None:  # the first step's fields made ready now, while the drafter is in the caches
            t = time.perf_counter()  # (held: where the pending token spells a constraint, the step after uses them)
            self.held_ahead.prime(len(ids) + 1, 1)
            self.retrieval_s += time.perf_counter() - t
        prompt = torch.tensor([ids[start:]], dtype=torch.long, device=self.decoder.loaded.device)
        pending = self._choose(prefill(self.model, self.cache, prompt))
        if self.head is not None:
            self.decoder._feed_head([], -1, pending)
        return pending, None

    def _prefill_with_draft(self, start: int) -> tuple[int, str | None]:
        """A short (warm) prefill that verifies a draft of the first new tokens in the same forward."""
        ids, drafter, ahead = self.ids, self.drafter, self.ahead
        context = self.context[:self.n_ctx]
        t = time.perf_counter()
        tree = ahead.draft_first(context, 0)[0] if ahead is not None else None
        if tree is None:
            tree = drafter.propose(context)
        elif getattr(tree, "in_builder", False):
            tree = tree.tree()  # the prefill's forward reads a DraftTree
        tree = self._verifiable(tree, self.max_new)
        self.retrieval_s += time.perf_counter() - t
        past_len = len(ids) - 1
        logits = tree_forward(self.model, self.cache, ids[-1], tree, past_len, prefix=ids[start:-1])
        path, pending = self._accept(logits, tree)
        compact_cache(self.cache, past_len, path, len(tree))
        committed = tree.tokens[path].tolist() + [pending]
        self.retrieval_s += self._learn(context, tree, path, committed)
        if self.head is not None:
            self.decoder._feed_head(path, committed[0], pending)
        ended = not self.commit(committed[:-1])
        self.prefill_accepted = len(self.out)
        if ended:
            return pending, "eos" if len(self.out) < self.max_new else "length"
        if self.prefill_accepted and self.cancel is not None and self.cancel.is_set():
            # the prefill's forward may already hold the whole answer (stop included): a request
            # cancelled meanwhile (superseded by the next keystroke's) still ends as cancelled
            return pending, "cancelled"
        return pending, None

    # ----------------------------------------------------------------------------- decode
    def _decode(self, pending: int) -> str:
        """Steps from ``pending`` until an end; returns the finish reason."""
        step = self.plain_step if self.drafter is None else self.tree_step
        while True:
            finish = self._end_before_step(pending)
            if finish is not None:
                return finish
            pending = step(pending)
            if pending is None:  # a committed token was an EOS, or the output is full
                return "eos" if len(self.out) < self.max_new else "length"

    def _end_before_step(self, pending: int) -> str | None:
        """Commits ``pending`` unless the generation ends first; the finish reason where it ends (max_new, EOS, a
        stop string, cancel, deadline), else None."""
        out = self.out
        if len(out) >= self.max_new:  # before the EOS test: a step that filled the output may end on an EOS bonus
            return "length"  # token, which ar, stopping at max_new, never computes ("length", as ar)
        if pending in self.eos:
            return "eos"
        self.push(pending)
        if len(out) >= self.max_new:
            return "length"
        if self.stop and self._may_hold_stop():
            if self.decoder._hit_stop(out, self.stop, self.skip):
                return "stop"
            self.searched = len(out)  # out[:searched] holds no stop string
        if self.cancel is not None and self.cancel.is_set():
            return "cancelled"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "deadline"
        return None

    def plain_step(self, pending: int) -> int:
        """One forward of the pending token (``ar``); returns the next pending token."""
        past_len = self.n_ctx - 1  # the pending token is not in the KV cache yet
        t = time.perf_counter()
        if self.argmax_only and not self.remaining:
            pending = self.verify(pending, _NO_DRAFT, past_len)[1][0]
            self.forward_s += time.perf_counter() - t
        else:
            logits = decode_one_token(self.model, self.cache, pending, past_len)
            self.forward_s += time.perf_counter() - t
            pending = self._choose(logits)
        self.accepted_lengths.append(1)
        return pending

    def tree_step(self, pending: int) -> int | None:
        """One speculative step: draft a tree after the pending token, verify both in one forward, commit the
        accepted path and the model's own next token. Returns the next pending token, None where an EOS or
        ``max_new`` cut the committed tokens."""
        drafter, ahead = self.drafter, self.ahead
        past_len = self.n_ctx - 1  # the pending token is not in the KV cache yet
        t = time.perf_counter()
        ctx_view = self.context[:self.n_ctx]
        tree, cut = ahead.next_tree(ctx_view) if self.drafted else (None, False)
        if tree is None and ahead is not None:  # the first step, or one the last call did not draft
            tree, cut = ahead.draft_first(ctx_view, len(self.out))
        if tree is None:
            tree = drafter.propose(ctx_view)
        if not cut:
            tree = self._verifiable(tree, self.max_new - len(self.out))
        fused = ahead is not None and not tree.n_adaptive and ahead.ready(self.n_ctx, len(self.out))
        t_forward = time.perf_counter()
        self.retrieval_s += t_forward - t
        self.draft_sizes.append(len(tree))
        counted = drafted = False  # the estimates and hits learned in the verification's call; the next tree
        logits = None
        if fused:  # forward, walk, compaction, the counts and the next step's tree: one native call (for as many
            # steps as can run back to back in it: the steps before the last replayed here)
            if self.loop is not None:
                path, committed, counted, drafted, logged = self.verify.verify_loop(pending, tree, past_len, ahead,
                                                                                    self.loop)
            else:
                (path, committed, counted, drafted), logged = self.verify.verify_draft(pending, tree, past_len,
                                                                                       ahead), ()
            spent = ahead.drafting_s() if drafted else 0.0
            if logged:
                spent += sum(step.propose_ns for step in logged) * 1e-9
                tree = self.loop.last_tree
            self.forward_s += time.perf_counter() - t_forward - spent
            self.retrieval_s += spent
            if logged:
                ctx_view = self._replay(logged)
            if not drafted and getattr(tree, "in_builder", False):  # the call was not taken: arrays intact
                tree = tree.tree()
        elif self.argmax_only and not self.remaining and not tree.n_adaptive:
            # forward, walk, compaction and the counts (one native call on a CPU): timed as the forward
            path, committed, counted = self.verify(pending, tree.tree() if getattr(tree, "in_builder", False)
                                                   else tree, past_len)
            self.forward_s += time.perf_counter() - t_forward
        else:
            logits = tree_forward(self.model, self.cache, pending, tree, past_len)
            self.forward_s += time.perf_counter() - t_forward
            path, bonus = self._accept(logits, tree)
            compact_cache(self.cache, past_len, path, len(tree))
            committed = tree.tokens[path].tolist() + [bonus]
        self.drafted = drafted
        if tree.n_adaptive:
            drafter.observe_logits(ctx_view, tree, logits, path, committed)
        if drafted:  # the builder's arrays hold the next tree now: the drafter observes what the call kept
            t = time.perf_counter()
            drafter.observe_path(ctx_view, ahead.first_source(), len(path), committed)
            ahead.observed(len(committed))
            self.retrieval_s += time.perf_counter() - t
        else:
            self.retrieval_s += self._learn(ctx_view, tree, path, committed, counted)
        if self.head is not None and not (counted and self.head_in_verify):
            self.decoder._feed_head(path, committed[0], committed[-1])
        self.accepted_lengths.append(len(committed))
        # all but the last committed token are in the KV cache now; the last becomes pending
        return committed[-1] if self.commit(committed[:-1]) else None

    def _replay(self, logged: list) -> np.ndarray:
        """The decoder's bookkeeping of the steps a native loop ran before its last (``logged``, in order, as
        :meth:`engine.native.bound_verify.BoundVerify.verify_loop` returns them), as :meth:`tree_step` and
        :meth:`_end_before_step` do it after one call that drafted: the drafter's observation, the accepted length,
        the committed tokens (the loop ran on only where none is an EOS or shares a byte with a stop string, and the
        output stays below ``max_new``), the next tree's size. Returns the drafting context of the last step (the
        committed context, its pending token last)."""
        drafter, ahead, context = self.drafter, self.ahead, self.context
        t = time.perf_counter()
        for i, step in enumerate(logged):
            drafter.observe_path(context[:self.n_ctx], step.first_source, step.got, step.committed)
            ahead.looped(step.cache_len_out)
            m = len(step.committed)
            self.accepted_lengths.append(m)
            context[self.n_ctx:self.n_ctx + m] = step.committed
            self.n_ctx += m
            self.out.extend(step.committed)
            ahead.looped_tree(step.found, step.retrieved, step.stores, context[:self.n_ctx])
            self.draft_sizes.append(logged[i + 1].n if i + 1 < len(logged) else self.loop.last_n)
        self.retrieval_s += time.perf_counter() - t
        return context[:self.n_ctx]

    def _cut_at_stop(self, finish: str) -> None:
        """A step commits several tokens (and the loop may have left at max_new or EOS without a search): keep them
        up to the one that completed the stop, where ar, searching after every token, stops."""
        out, stop, decoder = self.out, self.stop, self.decoder
        if stop and out and (finish == "stop" or (self._may_hold_stop() and decoder._hit_stop(out, stop, self.skip))):
            del out[stop_end(decoder.loaded.tokenizer, out, stop, self.skip, self.searched):]
            self.n_ctx = len(self.ids) + len(out)

    def _may_hold_stop(self) -> bool:
        """Whether the output past the last stop search (``out[searched:]``) holds a token sharing a byte with a stop
        string (every token may, where ``stop_touch`` is None): only then can a search find one."""
        return self.stop_touch is None or not self.stop_touch.isdisjoint(self.out[self.searched:])

    # ----------------------------------------------------------------------------- verification's parts
    def _choose(self, logits: torch.Tensor) -> int:
        """:func:`choose_token`, restricted to the tokens consistent with the constraint while one remains."""
        if self.remaining:
            from .healing import choose_constrained  # noqa: PLC0415

            return choose_constrained(logits, self.params, self.generator, self.remaining, self.token_bytes)
        return choose_token(logits, self.params, self.generator)

    def _verifiable(self, tree, left: int):
        """``tree`` without the nodes whose verification is wasted: those deeper than ``left`` (the tokens the
        generation may still add: a path longer than that is cut at ``max_new_tokens`` whatever it holds), those
        that contradict the token-healing constraint (:func:`engine.healing.consistent_subtree`), or, once it is
        spelled, a stop token and those below it (:func:`engine.verify.prune_after_stop`)."""
        if not len(tree):
            return tree
        if left < len(tree) and int(tree.depths.max()) > left:  # a node's depth is at most the tree's size
            tree = tree.keep(tree.depths <= left)
        if not self.remaining:
            return tree if self.stop_tokens is None else prune_after_stop(tree, self.stop_tokens)
        from .healing import consistent_subtree  # noqa: PLC0415

        return consistent_subtree(tree, self.remaining, self.token_bytes)

    def _accept(self, logits: torch.Tensor, tree):
        """:func:`engine.verify.accept`, under the token-healing constraint while one remains
        (:func:`engine.healing.accept_constrained`). Returns ``(path, bonus)``."""
        if not self.remaining:
            return accept(logits, tree, self.params, self.generator)
        from .healing import accept_constrained  # noqa: PLC0415

        return accept_constrained(logits, tree, self.params, self.generator, self.remaining, self.token_bytes)

    def _learn(self, context: np.ndarray, tree, path: list[int], committed: list[int], counted: bool = False) -> float:
        """After a verification: update the acceptance estimates, let the drafter observe what was committed
        (``committed``: the ``path`` nodes' tokens, then the model's own token), count accepted nodes per source
        bitmask into ``hits`` (:func:`engine.draft_tree.hits_by_source` names them at the end: a per-node loop over
        the sources and a fancy index cost ~40 us a step with the caches cold). ``counted``: the verification's
        native call did the estimates and the count already (:class:`engine.native.bound_verify.BoundVerify`); only the
        drafter observes. Returns the drafter's observe time in seconds (drafting work)."""
        estimator = self.estimator
        if not counted and estimator is not None and tree.keys is not None:
            if tree.n_adaptive:
                n = tree.n_draft
                estimator.update(tree.keys, tree.parents[:n], [p for p in path if p < n])
            else:
                estimator.update(tree.keys, tree.parents, path)
        t = time.perf_counter()
        self.drafter.observe(context, tree, path, committed)
        spent = time.perf_counter() - t
        if path and not counted:
            sources = tree.sources.tolist()
            for node in path:
                self.hits[sources[node]] += 1
        return spent
