"""Drafters: every draft source behind one small interface (propose a draft tree, observe the result).

- :class:`RestDrafter`: REST (He et al., NAACL 2024), retrieval from the common datastore D_c.
- :class:`CopySpecDrafter`: CopySpec (Dumitru et al., 2025), copy the tokens that followed the
  last gamma tokens' earlier occurrence in the prompt or the generated text.
- :class:`FastCoderDrafter`: FastCoder / CodeSwift (Zhao et al., 2025) Alg. 1: the per-document
  cache first, then D_r and D_c together (weights alpha, beta), with the missing table and the skip
  token; plus copies from the context chosen as SuffixDecoding chooses them
  (:mod:`engine.context_match`) and the output of earlier completions, across documents
  (:mod:`engine.history`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .context_match import SuffixMatchIndex
from .cost_model import CONTEXT_BUCKET
from .datastore import MatchState
from .history import (CompletionHistory, TokenMirror, continuation_candidates, count_continuations,
                      longest_agreement, sequences_from)
from .native import draft_ahead
from .native import propose as native_propose
from .draft_tree import SOURCE_CACHE, SOURCE_COMMON, SOURCE_CONTEXT, SOURCE_REPO, Candidates, DraftTree
from .tree_builder import SIZED_MAX_DEPTH, build_draft_tree


class Drafter(Protocol):
    """What the decoder needs from a draft source (transformers' CandidateGenerator, for trees)."""

    def reset(self, prompt: np.ndarray) -> None:
        """Start of a generation; ``prompt`` is the (T,) int64 prompt token ids."""

    def propose(self, context: np.ndarray) -> DraftTree:
        """A draft tree continuing ``context`` ((T,) int64: prompt + generated, pending token last)."""

    def observe(self, context: np.ndarray, tree: DraftTree, path: list[int], accepted: list[int]) -> None:
        """After verification: ``context`` as it was proposed from, the tree, the accepted node
        indices and every committed token (accepted draft tokens + the model's own token)."""

    # optional: ``finish(context)`` at the end of a generation, ``context`` (T,) int64 = prompt + output


@dataclass
class RetrievalOptions:
    """Datastore query settings shared by the retrieval drafters (REST defaults).

    n_max/n_min: longest/shortest context suffix searched (tokens); draft_len: tokens per
    continuation; max_matches: occurrences sampled per query; budget: draft tokens per tree;
    min_prob: estimated acceptance probability below which a draft node is pruned
    (:func:`engine.tree_builder.build_draft_tree`).
    """

    n_max: int = 16
    n_min: int = 2
    draft_len: int = 16
    max_matches: int = 128
    budget: int = 64
    min_prob: float = 0.0


def _retrieval_candidates(datastore, context: np.ndarray, opts: RetrievalOptions, weight: float,
                          source: int, state: MatchState | None = None) -> Candidates | None:
    if datastore is None:
        return None
    extra = {"state": state} if state is not None and getattr(datastore, "supports_match_state", False) else {}
    r = datastore.search(context, n_max=opts.n_max, n_min=opts.n_min, draft_len=opts.draft_len,
                         max_matches=opts.max_matches, **extra)
    if r.match_length == 0 or len(r.counts) == 0:
        return None
    return Candidates(r.continuations, r.counts, weight, source, int(r.match_length))


class RestDrafter:
    """REST: draft tree from the continuations of the longest matching context suffix in D_c."""

    def __init__(self, common_datastore, options: RetrievalOptions | None = None):
        self.common = common_datastore
        self.opts = options or RetrievalOptions()
        self.match_state = MatchState()  # the common store's match, carried from step to step

    def reset(self, prompt: np.ndarray) -> None:
        self.match_state.reset()

    def propose(self, context: np.ndarray) -> DraftTree:
        cand = _retrieval_candidates(self.common, context, self.opts, 1.0, SOURCE_COMMON, self.match_state)
        return build_draft_tree([cand] if cand else [], self.opts.budget, self.opts.min_prob)

    def observe(self, context, tree, path, accepted) -> None:
        pass


class ContextIndex:
    """Hash map from every gamma-gram of a growing token sequence to where its continuation starts.

    CopySpec's lookup structure, updated incrementally as tokens are appended.
    """

    def __init__(self, gamma: int = 3):
        self.gamma = gamma
        self.positions: dict[tuple, list[int]] = {}
        self.indexed = 0  # continuation starts < indexed are in the map
        self.tokens: list[int] = []

    def reset(self, tokens) -> None:
        self.positions.clear()
        self.tokens = []
        self.indexed = 0
        self.extend_to(tokens)

    def extend_to(self, context) -> None:
        """Index the grams of ``context`` (which extends what was seen before)."""
        n = len(context)
        if n < len(self.tokens) or (self.tokens and int(context[len(self.tokens) - 1]) != self.tokens[-1]):
            self.positions.clear()
            self.tokens, self.indexed = [], 0
        self.tokens.extend(int(t) for t in context[len(self.tokens):])
        toks, g = self.tokens, self.gamma
        for start in range(max(self.indexed, g), n):  # gram toks[start-g:start] -> continuation at start
            self.positions.setdefault(tuple(toks[start - g:start]), []).append(start)
        self.indexed = max(self.indexed, n)

    def continuations(self, length: int, first_only: bool, limit: int = 4) -> list[list[int]]:
        """Up to ``limit`` continuations (``length`` tokens) of the last gamma tokens' earlier
        occurrences: the first occurrence (CopySpec's reference) or the most recent ones."""
        toks, g = self.tokens, self.gamma
        if len(toks) < g + 1:
            return []
        starts = [s for s in self.positions.get(tuple(toks[-g:]), ()) if s < len(toks)]
        starts = starts[:1] if first_only else starts[::-1][:limit]
        return [toks[s:s + length] for s in starts if toks[s:s + length]]


class CopySpecDrafter:
    """CopySpec: on a match of the last ``gamma`` tokens, propose the ``copy_len`` tokens that
    followed their first earlier occurrence (a single chain)."""

    def __init__(self, gamma: int = 3, copy_len: int = 10):
        self.index = ContextIndex(gamma)
        self.copy_len = copy_len

    def reset(self, prompt: np.ndarray) -> None:
        self.index.reset(prompt)

    def propose(self, context: np.ndarray) -> DraftTree:
        self.index.extend_to(context)
        found = self.index.continuations(self.copy_len, first_only=True)
        return DraftTree.from_chain(found[0], SOURCE_CONTEXT) if found else DraftTree.empty()

    def observe(self, context, tree, path, accepted) -> None:
        pass


class FastCoderCache:
    """Warm state of one document: FastCoder's CACHE, plus the KV cache of its last prompt.

    CACHE (FastCoder Alg. 1): verified retrieved sequences and chunks of model output, stored back
    to back (separated by -1) in one token buffer with a bigram index; a search finds the longest
    suffix of the context (>= ``n_min`` tokens) that occurs in a stored sequence and returns what
    followed. Bounded to ``max_tokens`` tokens (oldest dropped).

    Prompt KV: ``prompt_ids`` and the model's KV cache over them (``prompt_kv``), kept by the
    decoder so the next request of the same document prefills only what follows the longest
    common prefix (an editor's prompts share everything up to the cursor).
    """

    def __init__(self, max_tokens: int = 65536, n_min: int = 2, n_max: int = 16):
        self.max_tokens = max_tokens
        self.n_min, self.n_max = n_min, n_max
        self.num_sequences = 0
        self.lookups = 0
        self.hits = 0
        self._buf: list[int] = []
        self._index: dict[tuple[int, int], list[int]] = {}  # bigram -> continuation starts, built by search()
        self._indexed = 0  # buffer positions the index covers (a sequence boundary)
        self.mirror = TokenMirror()  # the buffer as int64, for engine.native.propose
        self.prompt_ids: list[int] = []
        self.prompt_kv = None

    @property
    def kv_nbytes(self) -> int:
        """Bytes held by the prompt KV cache (a preallocated layer's whole buffers, not only the filled part)."""
        if self.prompt_kv is None:
            return 0
        total = 0
        for layer in self.prompt_kv.layers:
            held = getattr(layer, "buffer_nbytes", None)
            if held is not None:
                total += held
            elif getattr(layer, "keys", None) is not None:
                total += layer.keys.nelement() * layer.keys.element_size() * 2
        return total

    def drop_prompt_kv(self) -> None:
        self.prompt_ids, self.prompt_kv = [], None

    @property
    def nbytes(self) -> int:
        """Approximate memory held (bytes), the prompt KV cache included."""
        return 8 * len(self._buf) + 120 * len(self._index) + self.mirror.nbytes + self.kv_nbytes

    def add(self, tokens) -> None:
        """Store one sequence (token ids: a list or a 1-D int array); sequences shorter than n_min + 1 are
        ignored, negative ids dropped."""
        seq = [t for t in (tokens.tolist() if isinstance(tokens, np.ndarray) else map(int, tokens)) if t >= 0]
        if len(seq) <= self.n_min:
            return
        if len(self._buf) + len(seq) + 1 > self.max_tokens:
            self._evict(len(seq) + 1)
        self._buf.extend(seq)
        self._buf.append(-1)
        self.num_sequences += 1

    def _evict(self, room: int) -> None:
        kept = sequences_from(self._buf, min(len(self._buf), max(len(self._buf) // 2, room)))
        self._buf, self._index, self._indexed, self.num_sequences = [], {}, 0, 0
        for seq in kept:
            self.add(seq)

    def _bigram_index(self) -> dict[tuple[int, int], list[int]]:
        """The bigram index, brought up to the buffer's end: (seq[j], seq[j + 1]) -> its continuation's buffer
        position, start + j + 2, for every stored sequence (the last bigram has none), in ascending order. Built
        here, not in :meth:`add`, because only this Python search reads it: the native step
        (:mod:`engine.native.propose`) scans :attr:`mirror` instead, and indexing every add cost ~60 us."""
        buf, index, start = self._buf, self._index, self._indexed
        while start < len(buf):
            end = buf.index(-1, start)
            # plain list and dict operations (a per-bigram setdefault built a list each time)
            for at, pair in enumerate(zip(buf[start:end - 2], buf[start + 1:end - 1]), start + 2):
                found = index.get(pair)
                if found is None:
                    index[pair] = [at]
                else:
                    found.append(at)
            start = end + 1
        self._indexed = start
        return index

    def search(self, context: np.ndarray, draft_len: int = 16, limit: int = 32,
               tail: list[int] | None = None) -> Candidates | None:
        """Continuations of the longest context suffix (>= n_min tokens) found in the cache.

        ``tail``: the context's last tokens as a list (at least ``n_max`` of them, or the whole context)
        when the caller has it already (one numpy conversion a step instead of one per source)."""
        self.lookups += 1
        if len(context) < self.n_min:
            return None
        ctx = context[-self.n_max:].tolist() if tail is None else tail[-self.n_max:]
        starts = self._bigram_index().get((ctx[-2], ctx[-1]) if len(ctx) >= 2 else (), [])[-limit:]
        if not starts:
            return None
        best, found = longest_agreement(self._buf, starts, ctx, 2)
        cand = continuation_candidates(count_continuations(self._buf, found, draft_len), SOURCE_CACHE, best,
                                       draft_len)
        self.hits += cand is not None
        return cand


@dataclass
class FastCoderOptions:
    """FastCoder settings and the switches for its Table II ablations.

    alpha/beta: weights of D_r/D_c counts in the draft tree; cache_min_sequences: l, the cache is
    searched first once it holds this many sequences; output_chunk: every this many model tokens
    go to the cache; skip_probability: p, chance to retrieve at a skip token.

    Context copy (``use_context_copy``) is SuffixDecoding's per-request choice
    (:class:`engine.context_match.SuffixMatchIndex`: ``copy_max_depth``, ``copy_factor``,
    ``copy_min_prob`` are its ``max_tree_depth``, ``max_spec_factor``, ``min_token_prob``). ``copy_factor``
    is 3, not SuffixDecoding's 1: its cap keeps a draft verified whole from growing past what a short
    match supports, but here the acceptance estimates and c(n) trim every draft tree, and a longer copy
    gives them more to choose from (oracle replay, nine cells, fastcoder / SuffixDecoding without drafting
    time: 1.033 at 1, 1.049 at 1.5, 1.051 at 2, 1.055 at 3, every cell >= 1.001 at 3). ``copy_depth_bound``
    False drops SuffixDecoding's bound of match + draft by ``copy_max_depth`` (its suffix tree's depth), which
    gave the longest agreements the shortest copies (:mod:`engine.context_match`). ``indent_shift``: the context
    copy's and the completion history's continuations from a line indented differently from the context's are
    re-indented to it (:mod:`engine.indent_shift`; needs the token info's table).
    ``use_history``: also draft from earlier completions' output (:mod:`engine.history`, SuffixDecoding's
    global tree), where the decoder passes a :class:`~engine.history.CompletionHistory`.

    ``retrieve_beside_copy`` False: D_r and D_c are searched only when neither the cache nor the context copy
    has a continuation (Alg. 1 puts the cache first; the context copy is the other per-document source). Their
    candidates then mostly competed with a copy for the tree's few nodes while costing two datastore searches
    a step. Oracle replay, pinned c(n), 10 tasks per cell, predicted speedup over ``ar`` with the measured
    drafting time, searching beside a copy -> not: ``function`` pluggy / jinja2 / pygls 2.53 / 2.69 / 2.80 ->
    2.61 / 2.82 / 3.01; ``fim-block`` 2.54 / 2.91 / 3.33 -> 2.61 / 3.02 / 3.43; ``fim-line`` (24-42 steps a
    cell) 1.39 / 1.29 / 2.69 -> 1.32 / 1.29 / 2.97. True restores the search at every cache miss; the decoder
    sets it (with ``copy_factor`` 6) where verification is cheap, a flat c(n) such as a GPU's
    (:data:`engine.cost_model.CHEAP_VERIFY_DRAFTING`), where the extra candidates cost nothing to verify.

    ``tree_max_depth``: the cost-sized tree's depth bound (tokens; every source's continuations are cut to it).
    24 (:data:`engine.tree_builder.SIZED_MAX_DEPTH`) by default; where verification is cheap the decoder sets 48 with
    ``copy_max_depth`` and the retrieval's ``draft_len`` (:data:`engine.cost_model.CHEAP_VERIFY_DRAFTING`): on an
    H100, 9-20% of fastcoder's `function` and `fim-block` steps accepted 20 or more tokens, and a step that accepts
    a whole 24-token path then needs another forward for what a deeper one would have verified at once.

    ``cache_min_sequences`` is 0, not the paper's 50: a benchmark task or a newly opened document
    never holds 50 sequences, so the cache of the generation's own output went unused. Measured by an
    oracle replay of the benchmark (``benchmarks/replay_methods.py``; 10 function tasks x 128 tokens,
    tiny-py-coder, speedup over ar predicted from the measured c(n), drafting time excluded): pygls /
    pluggy / jinja2 2.65 / 2.15 / 2.38x at 50 -> 2.69 / 2.18 / 2.48x at 0 (accepted length 4.07 / 3.27 /
    3.73 -> 4.11 / 3.33 / 3.91).
    """

    alpha: float = 1.0
    beta: float = 1.0
    cache_min_sequences: int = 0
    output_chunk: int = 20
    skip_probability: float = 0.5
    use_cache: bool = True
    use_repo: bool = True
    use_common: bool = True
    use_context_copy: bool = True
    use_strategy: bool = True  # skip token + missing table
    use_history: bool = True
    retrieve_beside_copy: bool = False
    copy_max_depth: int = 24
    tree_max_depth: int = SIZED_MAX_DEPTH
    copy_factor: float = 3.0
    copy_min_prob: float = 0.1
    copy_depth_bound: bool = False
    indent_shift: bool = True
    seed: int = 0


class FastCoderDrafter:
    """FastCoder Alg. 1 with a context-copy source; see the module docstring."""

    def __init__(self, repo_datastore, common_datastore, token_info, cache: FastCoderCache | None = None,
                 options: FastCoderOptions | None = None, retrieval: RetrievalOptions | None = None,
                 estimator=None, cost=None, history: CompletionHistory | None = None):
        self.opts = options or FastCoderOptions()
        self.history = history if self.opts.use_history else None
        self.estimator, self.cost = estimator, cost  # size trees by expected tokens per verify cost
        self.ret = retrieval or RetrievalOptions()
        self.repo = repo_datastore if self.opts.use_repo else None
        self.common = common_datastore if self.opts.use_common else None
        self.token_info = token_info
        self.cache = cache if cache is not None else FastCoderCache(n_min=self.ret.n_min)
        indent = getattr(token_info, "indent", None) if self.opts.indent_shift else None
        self.context_index = SuffixMatchIndex(self.opts.copy_max_depth, factor=self.opts.copy_factor,
                                              min_prob=self.opts.copy_min_prob, max_tokens=self.ret.draft_len,
                                              depth_bound=self.opts.copy_depth_bound, indent=indent)
        # D_r's and D_c's matches, carried from step to step (engine.datastore.MatchState)
        self.repo_state, self.common_state = MatchState(), MatchState()
        self.missing: set[tuple[int, ...]] = set()
        self._missing_version = None
        self.missing_changes = 0  # additions and clears of the missing table (the native step mirrors it)
        self.coin = None  # the skip coin drawn ahead (take_coin)
        self.rng = random.Random(self.opts.seed)
        self.skipped = 0
        self._prompt_len = 0
        self._chunk_from = 0
        self._cost_of = self._cost_bucket = self._cost_at = None  # the curve at the last context's bucket
        # one native call a step for the sources and the tree where the configuration allows (engine.native.propose)
        self._native = native_propose.supported(self)
        self._native_args = None
        self.stop = None  # (V,) uint8: the generation's stop tokens, nothing drafted below one (set_stop_tokens)

    def set_stop_tokens(self, stop: np.ndarray | None) -> None:
        """Draft nothing below a stop token from now on: ``stop`` ((V,) uint8, nonzero for a token whose text holds
        one of the generation's stop strings, as a line completion's newline; None: no stop). Each source's
        continuations are cut at their first one before the tree is sized
        (:func:`engine.tree_builder.cut_at_stop`), so the tree's budget goes to nodes whose acceptance counts."""
        self.stop = stop

    def reset(self, prompt: np.ndarray) -> None:
        self.context_index.reset(prompt)
        self.repo_state.reset()
        self.common_state.reset()
        self._prompt_len = self._chunk_from = len(prompt)
        if self._native:
            native_propose.prepare(self, len(prompt))

    def _retrieve(self, context: np.ndarray) -> list[Candidates]:
        key = self._retrieval_key(context)
        return [] if key is None else self._search_stores(context, key)

    def _retrieval_key(self, context: np.ndarray) -> tuple | None:
        """FastCoder Alg. 1's retrieval strategy before D_r and D_c are searched: the missing table's key for
        ``context`` (its last ``n_min`` tokens), or None when the step skips retrieval (``skipped`` counts them):
        the key holds a special token (:attr:`engine.model.TokenInfo.special`: a FIM prompt's sentinel in its
        first step, which no datastore continues), is in the missing table, or the context is at a skip token
        and the coin says skip."""
        opts = self.opts
        key = tuple(context[-self.ret.n_min:].tolist())
        special = getattr(self.token_info, "special", None)
        if special and not special.isdisjoint(key):
            self.skipped += 1
            return None
        if opts.use_strategy:
            self.missing_for_version(getattr(self.repo, "version", None))
            if key in self.missing:
                self.skipped += 1
                return None
            if self.token_info is not None and self.token_info.at_line_start(context) \
                    and self.take_coin() >= opts.skip_probability:
                self.skipped += 1
                return None
        return key

    def _search_stores(self, context: np.ndarray, key: tuple) -> list[Candidates]:
        """D_r's and D_c's continuations for ``context`` (each store's :class:`MatchState` carried), ``key`` added
        to the missing table when neither has one."""
        opts, ret = self.opts, self.ret
        found = [c for c in (_retrieval_candidates(self.repo, context, ret, opts.alpha, SOURCE_REPO,
                                                   self.repo_state),
                             _retrieval_candidates(self.common, context, ret, opts.beta, SOURCE_COMMON,
                                                   self.common_state))
                 if c is not None]
        if not found:
            self.note_miss(key)
        return found

    def note_miss(self, key: tuple) -> None:
        """Neither D_r nor D_c continues the context ending in ``key``: into the missing table (FastCoder Alg. 1)."""
        if self.opts.use_strategy and (self.repo is not None or self.common is not None):
            self.missing.add(key)
            self.missing_changes += 1

    def missing_for_version(self, version) -> None:
        """The missing table for D_r's ``version``: emptied where D_r changed since it was filled (earlier misses may
        now hit)."""
        if version != self._missing_version:
            self.missing.clear()
            self._missing_version = version
            self.missing_changes += 1

    def take_coin(self) -> float:
        """The skip token's coin (FastCoder Alg. 1): the next draw of the drafter's generator, drawn ahead where the
        native step needs it before the turn (``coin``), so that both paths use the same draws in the same order."""
        coin = self.coin
        if coin is None:
            return self.rng.random()
        self.coin = None
        return coin

    def propose(self, context: np.ndarray) -> DraftTree:
        """The draft tree for ``context`` ((T,) int64: prompt + output so far), sized against the verify
        cost at a KV cache of T tokens (:meth:`engine.cost_model.VerifyCost.at`) when sized by cost.

        In the default configuration the sources are searched and the tree built by one native call
        (:func:`engine.native.propose.propose_native`: the same tree bit for bit, ~70 us a step instead of
        ~200 us with the caches cold after a verify forward); :meth:`candidates` and
        :func:`engine.tree_builder.build_draft_tree` otherwise."""
        cost = self.cost
        if cost is not None:
            cost = self.cost_at(len(context))
            if self._native:  # the same tree from one C call; None: the datastores are searched (Python path)
                tree = native_propose.propose_native(self, context, cost)
                if tree is not None:
                    return tree
        return build_draft_tree(self.candidates(context), self.ret.budget, self.ret.min_prob, self.estimator, cost,
                                self.opts.tree_max_depth, self.stop)

    def draft_ahead(self, eos, max_new: int):
        """The fields for drafting each next step inside the verification's native call
        (:class:`engine.native.draft_ahead.DraftAhead`, for ``eos`` ids and ``max_new`` tokens), or None where this
        drafter's step is not the native one or ``$FASTCODER_DRAFT_AHEAD=0`` keeps drafting before each verification."""
        if not self._native or self._native_args is None or not draft_ahead.draft_ahead_on():
            return None
        args = self._native_args
        if args.ahead is None:
            args.ahead = draft_ahead.DraftAhead()
        return args.ahead.start(self, eos, max_new)

    def cost_at(self, context_len: int):
        """The verify cost curve at a KV cache of ``context_len`` tokens (:meth:`engine.cost_model.VerifyCost.at`,
        which depends on ``context_len // CONTEXT_BUCKET`` only: kept per bucket)."""
        bucket = context_len // CONTEXT_BUCKET
        if self.cost is not self._cost_of or bucket != self._cost_bucket:
            self._cost_of, self._cost_bucket, self._cost_at = self.cost, bucket, self.cost.at(context_len)
        return self._cost_at

    def candidates(self, context: np.ndarray) -> list[Candidates]:
        """Every source's continuations for ``context`` (FastCoder Alg. 1: the cache first, else D_r and
        D_c when the context copy has nothing either, plus the context copy and the completion history),
        before they are merged into a draft tree."""
        parts: list[Candidates] = []
        copied = None
        if self.opts.use_context_copy:
            self.context_index.extend_to(context)
            copied = self.context_index.candidates()
        history = self.history
        # the context's last tokens as a list, shared by the cache's and the history's searches
        tail = context[-max(self.cache.n_max, history.n_max if history is not None else 0):].tolist()
        if self.opts.use_cache and self.cache.num_sequences >= self.opts.cache_min_sequences:
            hit = self.cache.search(context, self.ret.draft_len, tail=tail)
            if hit is not None:
                parts.append(hit)
        if not parts and (copied is None or self.opts.retrieve_beside_copy):
            parts = self._retrieve(context)
        if copied is not None:
            parts.append(copied)
        if history is not None:
            earlier = history.search(context, self.ret.draft_len, tail=tail, indent=self.context_index.indent)
            if earlier is not None:
                parts.append(earlier)
        return parts

    def finish(self, context: np.ndarray) -> None:
        """End of a generation: its output (``context`` past the prompt) joins the completion history."""
        if self.history is not None:
            self.history.add(context[:self._prompt_len], context[self._prompt_len:])

    def observe(self, context, tree, path, accepted) -> None:
        self.observe_path(context, int(tree.sources[path[0]]) if path else 0, len(path), accepted)

    def observe_path(self, context: np.ndarray, first_source: int, n_path: int, accepted: list[int]) -> None:
        """:meth:`observe` from what it reads of the tree: ``first_source``, the source bits of the first of the
        ``n_path`` accepted nodes (0: none), ``accepted`` the committed tokens (the path's, then the model's own)."""
        if not self.opts.use_cache:
            return
        if n_path and first_source & (SOURCE_REPO | SOURCE_COMMON | SOURCE_CACHE):
            # the verified retrieved sequence: the query suffix and the accepted draft (accepted's first
            # len(path) tokens are the path's)
            self.cache.add(context[-self.ret.n_max:].tolist() + list(accepted[:n_path]))
        end = len(context) + len(accepted)
        if end - self._chunk_from >= self.opts.output_chunk:
            # the chunk: context[lo:] and every committed token (context + accepted up to end)
            lo = max(self._prompt_len, self._chunk_from - self.ret.n_max)
            self.cache.add(context[lo:].tolist() + list(accepted))
            self._chunk_from = end


#: FastCoder's default draft-node pruning threshold (``RetrievalOptions.min_prob``). Measured with
#: tiny-py-coder on pluggy (6 tasks, 128 tokens, 2-core CPU): min_prob 0 -> accepted length 4.46,
#: 1.17x faster than ar; 0.2 -> 4.43, 1.80x (trees shrink, acceptance barely changes). REST keeps 0.
FASTCODER_MIN_PROB = 0.2


def make_drafter(method: str, token_info, repo_datastore=None, common_datastore=None,
                 cache: FastCoderCache | None = None, estimator=None, cost=None,
                 history: CompletionHistory | None = None, **options) -> Drafter:
    """Build the drafter for ``method`` (``rest``, ``copyspec``, ``fastcoder``, ``suffix``).

    ``options`` may hold :class:`RetrievalOptions` fields (n_max, n_min, draft_len, max_matches,
    budget; ``draft_budget`` is accepted for budget), :class:`FastCoderOptions` fields, and
    ``gamma``/``copy_len`` for CopySpec. Unknown names raise ``TypeError``. ``estimator`` and ``cost``
    (fastcoder): size each tree by expected tokens per verify cost (:mod:`engine.acceptance`); without
    them the tree keeps the top nodes by weight above ``min_prob`` (default :data:`FASTCODER_MIN_PROB`).
    ``history`` (fastcoder): earlier completions to draft from (:class:`engine.history.CompletionHistory`).
    ``suffix``: arctic-inference's SuffixDecoding, options as :func:`engine.suffix_drafter.make_suffix_drafter`
    (raises :class:`engine.suffix_drafter.SuffixDecodingUnavailable` without arctic-inference).
    """
    options = dict(options)
    if method == "suffix":
        from .suffix_drafter import make_suffix_drafter  # noqa: PLC0415  (optional arctic-inference)

        return make_suffix_drafter(**options)
    if method == "fastcoder" and (estimator is None or cost is None):
        options.setdefault("min_prob", FASTCODER_MIN_PROB)
    if "draft_budget" in options:
        options["budget"] = options.pop("draft_budget")
    ret_fields = set(RetrievalOptions.__dataclass_fields__)
    ret = RetrievalOptions(**{k: options.pop(k) for k in list(options) if k in ret_fields})
    if method == "rest":
        _no_more(method, options)
        return RestDrafter(common_datastore, ret)
    if method == "copyspec":
        gamma, copy_len = options.pop("gamma", 3), options.pop("copy_len", 10)
        _no_more(method, options)
        return CopySpecDrafter(gamma, copy_len)
    if method == "fastcoder":
        fc_fields = set(FastCoderOptions.__dataclass_fields__)
        fc = FastCoderOptions(**{k: options.pop(k) for k in list(options) if k in fc_fields})
        _no_more(method, options)
        return FastCoderDrafter(repo_datastore, common_datastore, token_info, cache, fc, ret, estimator, cost,
                                history)
    raise ValueError(f"unknown drafting method {method!r}")


def _no_more(method: str, options: dict) -> None:
    if options:
        raise TypeError(f"options not understood by method {method!r}: {', '.join(sorted(options))}")
