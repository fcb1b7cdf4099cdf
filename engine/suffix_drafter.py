"""SuffixDecoding as a drafter: the peer's own code (arctic-inference's ``SuffixDecodingCache``) with
the settings vLLM's ``suffix`` speculative method uses, its drafts verified by our tree verification.

SuffixDecoding (Oliaro et al., "SuffixDecoding: Extreme Speculative Decoding for Emerging AI
Applications", NeurIPS 2025, arXiv:2411.04975) keeps suffix trees over the prompt of each active
request and over the outputs of previous requests (the "global" tree), matches the last tokens of
the context in both and speculates the most frequent continuation (a chain, or a tree with
``use_tree_spec``), sized by ``max_spec_factor * match_length + max_spec_offset`` and pruned below
``min_token_prob``.

How vLLM drives it (vllm/v1/spec_decode/suffix_decoding.py, ``SuffixDecodingProposer.propose``, vLLM
0.32) and what :class:`SuffixDrafter` does alike, with a batch of one request:

- first step of a request: ``start_request(req_id, prompt)``; every step: ``add_active_response``
  with the tokens sampled since, then ``speculate(req_id, last max_tree_depth tokens,
  max_spec_tokens=num_speculative_tokens, max_spec_factor, min_token_prob)`` (chains:
  ``use_tree_spec`` left at False); a request no longer in the batch: ``stop_request`` (its output
  stays in the global tree, up to ``max_cached_requests`` requests, FIFO).
- defaults (``vllm.config.SpeculativeConfig``): ``suffix_decoding_max_tree_depth=24``,
  ``suffix_decoding_max_cached_requests=10000``, ``suffix_decoding_max_spec_factor=1.0``,
  ``suffix_decoding_min_token_prob=0.1``, ``num_speculative_tokens`` defaulting to the tree depth;
  ``max_spec_offset`` is not passed (the cache's default, 0.0).

arctic-inference is optional (PyPI has only its sdist; it builds against the CPU torch without build
isolation, see README): importing this module works without it, building a drafter raises
:class:`SuffixDecodingUnavailable`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .draft_tree import SOURCE_SUFFIX, DraftTree

#: The one-line error (and install hint) when arctic-inference is missing.
INSTALL_HINT = ("method 'suffix' needs arctic-inference (SuffixDecoding), which is not installed: "
                "pip install 'nanobind==2.9.2' cmake ninja grpcio-tools protobuf && "
                "pip install --no-build-isolation --no-deps arctic-inference==0.3.0 (see README)")


class SuffixDecodingUnavailable(ImportError):
    """arctic-inference (``arctic_inference.suffix_decoding``) cannot be imported."""


def suffix_decoding_available() -> bool:
    """Whether ``arctic_inference.suffix_decoding`` imports (the ``suffix`` method can run)."""
    try:
        _cache_class()
    except SuffixDecodingUnavailable:
        return False
    return True


def _cache_class():
    try:
        from arctic_inference.suffix_decoding import SuffixDecodingCache  # noqa: PLC0415
    except ImportError as err:
        raise SuffixDecodingUnavailable(INSTALL_HINT) from err
    return SuffixDecodingCache


@dataclass(frozen=True)
class SuffixOptions:
    """SuffixDecoding settings, defaults as vLLM's ``suffix`` method (``SpeculativeConfig``).

    max_tree_depth: depth of the prompt and global suffix trees (tokens; bounds match + draft);
    max_cached_requests: previous outputs kept in the global tree (FIFO eviction; 0 disables it);
    max_spec_tokens: draft tokens at most (vLLM's num_speculative_tokens; default the tree depth);
    max_spec_factor, max_spec_offset: a draft holds at most ``factor * match_length + offset`` tokens;
    min_token_prob: nodes whose estimated probability (frequency in the tree) is lower are cut;
    use_tree_spec: speculate a tree instead of a chain (vLLM: False; the paper and arctic-inference's
    simulator: True).
    """

    max_tree_depth: int = 24
    max_cached_requests: int = 10000
    max_spec_tokens: int | None = None
    max_spec_factor: float = 1.0
    max_spec_offset: float = 0.0
    min_token_prob: float = 0.1
    use_tree_spec: bool = False

    def __post_init__(self):
        if self.max_tree_depth < 1:
            raise ValueError(f"max_tree_depth={self.max_tree_depth} must be >= 1")
        if self.max_cached_requests < 0:
            raise ValueError(f"max_cached_requests={self.max_cached_requests} must be >= 0")
        if self.max_spec_tokens is not None and not 0 <= self.max_spec_tokens <= MAX_SPEC_TOKENS:
            raise ValueError(f"max_spec_tokens={self.max_spec_tokens} must be in [0, {MAX_SPEC_TOKENS}]")
        if self.max_spec_factor < 0:
            raise ValueError(f"max_spec_factor={self.max_spec_factor} must be >= 0")
        if not 0.0 <= self.min_token_prob <= 1.0:
            raise ValueError(f"min_token_prob={self.min_token_prob} must be in [0, 1]")

    @property
    def spec_tokens(self) -> int:
        """Draft tokens at most: ``max_spec_tokens``, else the tree depth (vLLM's default)."""
        return self.max_tree_depth if self.max_spec_tokens is None else int(self.max_spec_tokens)


#: Draft tokens a suffix tree may hold at most (the decoder leaves room for 64 past the prompt).
MAX_SPEC_TOKENS = 64


def new_suffix_cache(options: SuffixOptions | None = None):
    """A fresh ``arctic_inference.suffix_decoding.SuffixDecodingCache`` for ``options``' tree depth and
    global-cache size. Raises :class:`SuffixDecodingUnavailable` without arctic-inference."""
    opts = options or SuffixOptions()
    return _cache_class()(max_tree_depth=opts.max_tree_depth, max_cached_requests=opts.max_cached_requests)


def draft_to_tree(token_ids, parents, probs) -> DraftTree:
    """A SuffixDecoding draft (``SuffixDecodingDraft``: token ids, parent indices with -1 for children
    of the last context token, and each node's estimated probability) as a :class:`DraftTree` whose
    nodes are tagged :data:`engine.draft_tree.SOURCE_SUFFIX`.

    ``weights`` (N,) float64 hold SuffixDecoding's per-node probabilities (the product of the branch
    frequencies down the path, its "path probability"); ``probs`` (N,) float64 are the conditionals
    P(node | parent accepted) = prob / parent's prob. Nodes are reordered breadth-first if they are not
    already parent-before-child.
    """
    par_list = [int(p) for p in parents]
    n = len(par_list)
    if n == 0:
        return DraftTree.empty()
    tokens = np.asarray(token_ids, dtype=np.int64)
    path = np.asarray(probs, dtype=np.float64)
    if any(p >= i for i, p in enumerate(par_list)):  # arctic-inference emits parents first; just in case
        order = _breadth_first(par_list)
        new_index = {old: new for new, old in enumerate(order)}
        par_list = [new_index[par_list[i]] if par_list[i] >= 0 else -1 for i in order]
        tokens, path = tokens[order], path[order]
    depth_list: list[int] = []
    for p in par_list:
        depth_list.append(depth_list[p] + 1 if p >= 0 else 1)
    par = np.asarray(par_list, dtype=np.int64)
    depths = np.asarray(depth_list, dtype=np.int64)
    parent_path = np.where(par >= 0, path[np.maximum(par, 0)], 1.0)
    cond = np.divide(path, parent_path, out=np.zeros(n), where=parent_path > 0)
    return DraftTree(tokens, par, depths, np.full(n, SOURCE_SUFFIX, dtype=np.uint8), path,
                     probs=np.clip(cond, 0.0, 1.0))


def _breadth_first(parents: list[int]) -> list[int]:
    """Node indices in breadth-first order of the forest given by ``parents`` (-1: a root)."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        children.setdefault(p, []).append(i)
    order, frontier = [], children.get(-1, [])
    while frontier:
        order += frontier
        frontier = [c for node in frontier for c in children.get(node, [])]
    if len(order) != len(parents):
        raise ValueError("SuffixDecoding draft parents do not form a tree")
    return order


_request_ids = itertools.count()


class SuffixDrafter:
    """The :class:`engine.drafters.Drafter` of method ``suffix``: arctic-inference's SuffixDecodingCache
    driven as vLLM drives it (module docstring), one request per generation.

    Args:
        cache: the ``SuffixDecodingCache`` shared across generations (its global tree holds previous
            outputs); a fresh one (:func:`new_suffix_cache`) when None.
        options: :class:`SuffixOptions`.

    Raises:
        SuffixDecodingUnavailable: arctic-inference is not installed.
    """

    def __init__(self, cache=None, options: SuffixOptions | None = None):
        self.opts = options or SuffixOptions()
        self.cache = cache if cache is not None else new_suffix_cache(self.opts)
        self.depth = int(self.cache.max_tree_depth)
        self.req_id: str | None = None
        self._seen = 0  # tokens of prompt + output the cache holds for this request

    def reset(self, prompt: np.ndarray) -> None:
        """Start a request for ``prompt`` ((T,) int token ids). Requests still active in the shared
        cache are stopped first (vLLM stops every request that left the batch; ours holds one)."""
        for rid in list(self.cache.active_requests):
            self.cache.stop_request(rid)
        self.req_id = f"fastcoder-{next(_request_ids)}"
        self.cache.start_request(self.req_id, np.ascontiguousarray(prompt, dtype=np.int32))
        self._seen = len(prompt)

    def _catch_up(self, tokens: np.ndarray) -> None:
        if self.req_id is None or self.req_id not in self.cache.active_requests:
            self.reset(tokens[:0])
        if len(tokens) > self._seen:
            self.cache.add_active_response(self.req_id, np.ascontiguousarray(tokens[self._seen:], dtype=np.int32))
            self._seen = len(tokens)

    def propose(self, context: np.ndarray) -> DraftTree:
        """Draft after ``context`` ((T,) int64: prompt + output, the pending token last): the output
        tokens not yet in the cache are added to the request's response first, then the last
        ``max_tree_depth`` tokens are matched (vLLM's order)."""
        self._catch_up(context)
        if self.opts.spec_tokens <= 0:
            return DraftTree.empty()
        pattern = np.ascontiguousarray(context[-self.depth:], dtype=np.int32)
        o = self.opts
        draft = self.cache.speculate(self.req_id, pattern, max_spec_tokens=o.spec_tokens,
                                     max_spec_factor=o.max_spec_factor, max_spec_offset=o.max_spec_offset,
                                     min_token_prob=o.min_token_prob, use_tree_spec=o.use_tree_spec)
        return draft_to_tree(draft.token_ids, draft.parents, draft.probs)

    def observe(self, context, tree, path, accepted) -> None:
        """Add the committed tokens to the request's response (so the last step's are cached too)."""
        if self.req_id is not None and len(context) == self._seen and accepted:
            self.cache.add_active_response(self.req_id, np.asarray(accepted, dtype=np.int32))
            self._seen += len(accepted)


def make_suffix_drafter(suffix_cache=None, draft_budget: int | None = None, budget: int | None = None,
                        **options) -> SuffixDrafter:
    """A :class:`SuffixDrafter` from :class:`SuffixOptions` fields; ``draft_budget``/``budget`` are
    accepted for ``max_spec_tokens`` (the benchmark's ``--draft-budget``). ``suffix_cache``: a shared
    ``SuffixDecodingCache`` (its own tree depth then wins over ``max_tree_depth``).

    Raises:
        TypeError: an option SuffixDecoding does not take; ValueError: a bad value;
        SuffixDecodingUnavailable: arctic-inference is not installed.
    """
    unknown = set(options) - set(SuffixOptions.__dataclass_fields__)
    if unknown:
        raise TypeError(f"options not understood by method 'suffix': {', '.join(sorted(unknown))}")
    cap = draft_budget if draft_budget is not None else budget
    if cap is not None and options.get("max_spec_tokens") is None:
        options["max_spec_tokens"] = int(cap)
    return SuffixDrafter(suffix_cache, SuffixOptions(**options))
