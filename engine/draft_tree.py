"""Draft trees: a draft source's candidates and the tree verification takes, flattened for tree attention.

:class:`Candidates` are one source's continuations with their counts; :class:`DraftTree` is the kept trie,
breadth-first, with the positions and the tree-attention mask of its forward (SpecInfer/Medusa/REST). How
candidates become a tree (REST Alg. 2, FastCoder eq. 3, sizing by the verify cost) is
:mod:`engine.tree_builder`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch


#: Bits of :attr:`DraftTree.sources`: which draft source proposed a node.
SOURCE_CACHE = 1
SOURCE_REPO = 2
SOURCE_COMMON = 4
SOURCE_CONTEXT = 8
SOURCE_ADAPTIVE = 16  # drafts read off SDSAT adaptive tokens (engine.sdsat.drafter)
SOURCE_SUFFIX = 32  # arctic-inference's SuffixDecoding (engine.suffix_drafter)
SOURCE_HISTORY = 64  # earlier completions' output, across documents (engine.history)
SOURCE_NAMES = {SOURCE_CACHE: "cache", SOURCE_REPO: "repo", SOURCE_COMMON: "common", SOURCE_CONTEXT: "context",
                SOURCE_ADAPTIVE: "adaptive", SOURCE_SUFFIX: "suffix", SOURCE_HISTORY: "history"}


def hits_by_source(bit_counts) -> dict[str, int]:
    """Accepted draft nodes per source name (:data:`SOURCE_NAMES`) from counts per source bitmask
    (``bit_counts[b]``, a list or a (256,) int array: nodes whose ``DraftTree.sources`` value is b); a node of several
    sources counts for each. The counts are Python ints."""
    hits = {name: 0 for name in SOURCE_NAMES.values()}
    for bits, count in enumerate(bit_counts):
        if count:
            for bit, name in SOURCE_NAMES.items():
                if bits & bit:
                    hits[name] += int(count)
    return hits


@dataclass
class Candidates:
    """Continuations proposed by one draft source.

    Attributes:
        tokens: (M, L) int array of token ids, right-padded with -1 (shorter continuations).
        counts: (M,) float array: how often each continuation was seen (before weighting).
        weight: the source's weight (alpha for D_r, beta for D_c, 1 otherwise).
        source: one of the ``SOURCE_*`` bits.
        match_length: tokens of context suffix the source matched (0: unknown), a feature of the
            acceptance estimate.
    """

    tokens: np.ndarray
    counts: np.ndarray
    weight: float
    source: int
    match_length: int = 0


#: Mask dtypes :meth:`DraftTree.attention_mask` builds with numpy (bfloat16 has no numpy dtype).
_NUMPY_MASK_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}


@dataclass
class DraftTree:
    """A draft tree flattened in breadth-first order (a parent always precedes its children).

    The tree hangs below the *pending* token: the last token already chosen but not yet in the KV
    cache. Node ``i`` continues the path root -> ... -> parents[i] -> i.

    Attributes:
        tokens: (N,) int64 token ids.
        parents: (N,) int64 index of each node's parent, -1 for children of the pending token.
        depths: (N,) int64, 1 for children of the pending token.
        sources: (N,) uint8 bitmask of ``SOURCE_*``: which sources proposed the node.
        weights: (N,) float64 node weights (for inspection).
        keys: (N,) int64 acceptance-estimate bucket of each node (:mod:`engine.acceptance`), or None
            when the tree was not sized by cost.
        n_adaptive: the last ``n_adaptive`` nodes are not drafts but an SDSAT *adaptive branch*: k
            adaptive tokens chained below the pending token, forwarded only for the drafts their
            logits give (SDSAT section 2.1, draft step 1). They are verified like any node (a model
            that chose the adaptive token would have them accepted, exactly), but carry no
            acceptance-estimate bucket: ``keys`` covers the first ``len(tree) - n_adaptive`` nodes.
        probs: (N,) float64 estimated P(node accepted | parent accepted) of each node, or None when
            the tree was not sized by cost (chain-only verifiers pick their chain with it:
            :mod:`engine.serving.vllm_proposer`).
    """

    tokens: np.ndarray
    parents: np.ndarray
    depths: np.ndarray
    sources: np.ndarray
    weights: np.ndarray
    keys: np.ndarray | None = None
    n_adaptive: int = 0
    probs: np.ndarray | None = None
    _children: dict | None = field(default=None, repr=False)
    _ancestors: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def empty(cls) -> "DraftTree":
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z.copy(), z.copy(), np.zeros(0, dtype=np.uint8), np.zeros(0))

    @classmethod
    def from_chain(cls, tokens: Sequence[int], source: int) -> "DraftTree":
        """A single path (a linear draft, as CopySpec proposes)."""
        n = len(tokens)
        return cls(np.asarray(tokens, dtype=np.int64), np.arange(-1, n - 1, dtype=np.int64),
                   np.arange(1, n + 1, dtype=np.int64), np.full(n, source, dtype=np.uint8),
                   np.ones(n))

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def n_draft(self) -> int:
        """Draft nodes (tokens): every node but the adaptive branch."""
        return len(self) - self.n_adaptive

    def with_adaptive_branch(self, token_id: int, k: int) -> "DraftTree":
        """This tree plus a chain of ``k`` copies of the adaptive token ``token_id`` below the pending
        token, appended last (SDSAT eq. 1: the adaptive token at depth j predicts the token j + 1
        positions after the pending one). Breadth-first order is not needed by tree attention,
        only parents before children, which holds."""
        if k <= 0:
            return self
        n = len(self)
        chain_parents = np.concatenate([[-1], np.arange(n, n + k - 1)]).astype(np.int64)
        return DraftTree(
            np.concatenate([self.tokens, np.full(k, int(token_id), dtype=np.int64)]),
            np.concatenate([self.parents, chain_parents]),
            np.concatenate([self.depths, np.arange(1, k + 1, dtype=np.int64)]),
            np.concatenate([self.sources, np.zeros(k, dtype=np.uint8)]),
            np.concatenate([self.weights, np.zeros(k)]),
            self.keys, self.n_adaptive + k)

    def keep(self, mask: np.ndarray) -> "DraftTree":
        """The nodes where ``mask`` ((N,) bool) holds and all of whose ancestors are kept, in their order,
        parents re-indexed (a prefix-closed subtree). A tree with an SDSAT adaptive branch is returned
        unchanged (the branch's layout is fixed)."""
        if self.n_adaptive or not len(self):
            return self
        keep = np.asarray(mask, dtype=bool).copy()
        parents = self.parents
        for i in range(len(self)):  # parents come before their children
            if parents[i] >= 0 and not keep[parents[i]]:
                keep[i] = False
        if keep.all():
            return self
        idx = np.nonzero(keep)[0]
        new_index = np.full(len(self), -1, dtype=np.int64)
        new_index[idx] = np.arange(len(idx))
        old_parents = parents[idx]
        return DraftTree(self.tokens[idx], np.where(old_parents >= 0, new_index[old_parents], -1),
                         self.depths[idx], self.sources[idx], self.weights[idx],
                         None if self.keys is None else self.keys[idx], 0,
                         None if self.probs is None else self.probs[idx])

    @property
    def children(self) -> dict[tuple[int, int], int]:
        """Map (parent index, token id) -> child index; parent -1 is the pending token."""
        if self._children is None:
            self._children = {(p, t): i for i, (p, t) in
                              enumerate(zip(self.parents.tolist(), self.tokens.tolist()))}
        return self._children

    @property
    def ancestors(self) -> np.ndarray:
        """(N, N) bool: ``ancestors[i, j]`` when node j is node i or one of its ancestors."""
        if self._ancestors is None:
            n = len(self)
            if n <= 64:  # one bitmask per node (parents first), unpacked in one call: ~10 us at any depth
                bits: list[int] = []
                for i, p in enumerate(self.parents.tolist()):
                    bits.append((bits[p] if p >= 0 else 0) | (1 << i))
                packed = np.array(bits, dtype="<u8").view(np.uint8)
                self._ancestors = np.unpackbits(packed, bitorder="little").reshape(n, 64)[:, :n].view(bool)
            else:  # one array pass per depth level (~10 us each)
                anc = np.eye(n, dtype=bool)
                for d in range(2, int(self.depths.max(initial=0)) + 1):
                    rows = np.nonzero(self.depths == d)[0]
                    anc[rows] |= anc[self.parents[rows]]
                self._ancestors = anc
        return self._ancestors

    def attention_mask(self, past_len: int, dtype: torch.dtype, device: torch.device,
                       prefix_len: int = 0) -> torch.Tensor:
        """Additive 4D tree-attention mask for the input ``prefix + [pending] + tokens``.

        Args:
            past_len: the pending token's position (the KV cache then holds ``past_len - prefix_len``
                tokens).
            prefix_len: uncached prompt tokens before the pending token, at positions
                ``past_len - prefix_len .. past_len - 1``, run in the same forward (a prefill that
                verifies a draft of the first new tokens); each sees what precedes it (causal).
        Returns:
            (1, 1, prefix_len + 1 + N, past_len + 1 + N) tensor of ``dtype``: 0 where a query may attend
            (the context, the pending token, the node itself and its ancestors), ``finfo(dtype).min``
            elsewhere. Float, not bool: eager attention adds the mask to the scores.
        """
        n = len(self)
        k = int(prefix_len)
        if not 0 <= k <= past_len:
            raise ValueError(f"prefix_len must be in 0..past_len ({past_len}), got {prefix_len}")
        low = torch.finfo(dtype).min
        np_dtype = _NUMPY_MASK_DTYPES.get(dtype)
        if k == 0 and device.type == "cpu" and np_dtype is not None:  # a decode step: numpy, ~5 us (torch ~20)
            mask = np.zeros((1 + n, past_len + 1 + n), dtype=np_dtype)
            tree_part = mask[:, past_len + 1:]  # rows see the context and the pending token; nodes their path
            tree_part[...] = low
            tree_part[1:][self.ancestors] = 0
            return torch.from_numpy(mask)[None, None]
        allow = np.zeros((1 + n, 1 + n), dtype=bool)
        allow[:, 0] = True
        allow[1:, 1:] = self.ancestors
        block = torch.from_numpy(allow).to(device)
        mask = torch.zeros((k + 1 + n, past_len + 1 + n), dtype=dtype, device=device)
        mask[k:, past_len:].masked_fill_(~block, low)
        if k:  # prompt rows: causal over the prompt, blind to the pending token and the tree
            mask[:k, past_len - k:] = torch.full((k, k + 1 + n), low, dtype=dtype, device=device).triu(1)
        return mask[None, None]

    def forward_inputs(self, past_len: int, dtype: torch.dtype, device: torch.device, prefix_len: int = 0
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(position_ids(...), attention_mask(...))``. A decode step of a float32 CPU model gets the same tensors
        from one native call into reused buffers instead (:func:`engine.verify._cpu_step_tree_inputs`). Raises
        ValueError as :meth:`attention_mask` does."""
        return (self.position_ids(past_len, device, prefix_len),
                self.attention_mask(past_len, dtype, device, prefix_len))

    def position_ids(self, past_len: int, device: torch.device, prefix_len: int = 0) -> torch.Tensor:
        """(1, prefix_len + 1 + N) int64 positions: the prefix at ``past_len - prefix_len ..``, the pending
        token at ``past_len``, node i at past_len + depth."""
        pos = np.concatenate([np.arange(-int(prefix_len), 1), self.depths]) + past_len
        return torch.from_numpy(pos).to(device)[None]

    def longest_match(self, target: Sequence[int]) -> int:
        """Number of leading tokens of ``target`` that a root-to-node path of this tree spells."""
        node, matched = -1, 0
        children = self.children
        for tok in target:
            node = children.get((node, int(tok)), None)
            if node is None:
                break
            matched += 1
        return matched
