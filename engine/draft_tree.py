"""Draft trees: the weighted trie of retrieved continuations, flattened for tree attention.

REST (He et al., 2024) Alg. 2 and FastCoder (Zhao et al., 2025) eq. 3: every retrieved continuation
is inserted into a trie with every prefix counted; a node's weight is
``alpha * count_in_D_r + beta * count_in_D_c`` (other sources add their counts with weight 1); the
kept nodes are the top ones by weight, prefix-closed, at most ``budget`` draft tokens.
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
SOURCE_NAMES = {SOURCE_CACHE: "cache", SOURCE_REPO: "repo", SOURCE_COMMON: "common", SOURCE_CONTEXT: "context"}


@dataclass
class Candidates:
    """Continuations proposed by one draft source.

    Attributes:
        tokens: (M, L) int array of token ids, right-padded with -1 (shorter continuations).
        counts: (M,) float array: how often each continuation was seen (before weighting).
        weight: the source's weight (alpha for D_r, beta for D_c, 1 otherwise).
        source: one of the ``SOURCE_*`` bits.
    """

    tokens: np.ndarray
    counts: np.ndarray
    weight: float
    source: int


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
    """

    tokens: np.ndarray
    parents: np.ndarray
    depths: np.ndarray
    sources: np.ndarray
    weights: np.ndarray
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
            anc = np.eye(n, dtype=bool)
            for d in range(2, int(self.depths.max(initial=0)) + 1):
                rows = np.nonzero(self.depths == d)[0]
                anc[rows] |= anc[self.parents[rows]]
            self._ancestors = anc
        return self._ancestors

    def attention_mask(self, past_len: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """Additive 4D tree-attention mask for the input ``[pending] + tokens``.

        Returns:
            (1, 1, 1 + N, past_len + 1 + N) tensor of ``dtype``: 0 where a query may attend (the
            context, the pending token, the node itself and its ancestors), ``finfo(dtype).min``
            elsewhere. Float, not bool: eager attention adds the mask to the scores.
        """
        n = len(self)
        allow = np.zeros((1 + n, 1 + n), dtype=bool)
        allow[:, 0] = True
        allow[1:, 1:] = self.ancestors
        block = torch.from_numpy(allow).to(device)
        mask = torch.zeros((1 + n, past_len + 1 + n), dtype=dtype, device=device)
        mask[:, past_len:].masked_fill_(~block, torch.finfo(dtype).min)
        return mask[None, None]

    def position_ids(self, past_len: int, device: torch.device) -> torch.Tensor:
        """(1, 1 + N) int64 positions: the pending token at ``past_len``, node i at past_len + depth."""
        pos = np.concatenate([[0], self.depths]) + past_len
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


def build_draft_tree(candidates: Sequence[Candidates], budget: int = 64, min_prob: float = 0.0) -> DraftTree:
    """Merge the candidates of several sources into one weighted trie and keep the best nodes.

    Args:
        candidates: per-source continuations; empty ones are ignored.
        budget: maximum number of draft tokens (nodes) kept (REST and FastCoder use 64).
        min_prob: drop nodes whose estimated acceptance probability is below this. A node's
            estimate is, per source, the share of that source's continuations passing through it
            (max over sources), as SuffixDecoding's ``min_token_prob``. Verifying a node costs
            compute (on a CPU a 64-node tree costs about 3 single-token forwards), so unlikely
            branches are pruned and trees stay small when retrieval is unsure.

    Returns:
        A :class:`DraftTree` with at most ``budget`` nodes, prefix-closed: a node's weight is the
        weighted count of continuations passing through it, so a parent never weighs less than its
        child, and ties are broken by depth, then token id, then insertion order (deterministic).
    """
    parts = [c for c in candidates if c.tokens.size and len(c.counts)]
    if not parts or budget <= 0:
        return DraftTree.empty()
    width = max(c.tokens.shape[1] for c in parts)
    toks = np.concatenate([np.pad(c.tokens.astype(np.int64), ((0, 0), (0, width - c.tokens.shape[1])),
                                  constant_values=-1) for c in parts])
    w = np.concatenate([np.asarray(c.counts, dtype=np.float64) * c.weight for c in parts])
    src = np.concatenate([np.full(len(c.counts), c.source, dtype=np.uint8) for c in parts])
    share = np.concatenate([np.asarray(c.counts, dtype=np.float64) / max(float(np.sum(c.counts)), 1e-12)
                            for c in parts])
    part = np.concatenate([np.full(len(c.counts), i, dtype=np.int64) for i, c in enumerate(parts)])
    nparts = len(parts)
    m = toks.shape[0]
    # Walk the trie level by level: a node is (parent node id, token); np.unique numbers them.
    parent_of_row = np.full(m, -1, dtype=np.int64)
    alive = np.ones(m, dtype=bool)
    node_parent, node_token, node_depth, node_weight, node_source, node_prob = [], [], [], [], [], []
    next_id = 0
    stride = int(toks.max()) + 2
    for d in range(width):
        alive &= toks[:, d] >= 0
        rows = np.nonzero(alive)[0]
        if rows.size == 0:
            break
        keys = (parent_of_row[rows] + 1) * stride + toks[rows, d]
        uniq, inverse = np.unique(keys, return_inverse=True)
        k = uniq.shape[0]
        node_parent.append(uniq // stride - 1)
        node_token.append(uniq % stride)
        node_depth.append(np.full(k, d + 1, dtype=np.int64))
        node_weight.append(np.bincount(inverse, weights=w[rows], minlength=k))
        per_part = np.bincount(inverse * nparts + part[rows], weights=share[rows], minlength=k * nparts)
        node_prob.append(per_part.reshape(k, nparts).max(axis=1))
        bits = np.zeros(k, dtype=np.uint8)
        np.bitwise_or.at(bits, inverse, src[rows])
        node_source.append(bits)
        parent_of_row[rows] = next_id + inverse
        next_id += k
    parent = np.concatenate(node_parent)
    token = np.concatenate(node_token)
    depth = np.concatenate(node_depth)
    weight = np.concatenate(node_weight)
    source = np.concatenate(node_source)
    prob = np.concatenate(node_prob)
    # Top `budget` by weight among likely nodes; ties -> shallower first (keeps the set
    # prefix-closed: a parent's weight and probability are never below its child's), then token id.
    order = np.lexsort((np.arange(len(weight)), token, depth, -weight))
    order = order[prob[order] >= min_prob - 1e-12][:budget]
    kept = np.zeros(len(weight), dtype=bool)
    kept[order] = True
    for d in range(2, width + 1):  # guard against float rounding: drop any node whose parent is gone
        at_d = depth == d
        kept[at_d] &= kept[np.maximum(parent[at_d], 0)]
    keep = np.nonzero(kept)[0]  # node ids grow with depth, so sorted ids are breadth-first
    new_index = np.full(len(weight), -1, dtype=np.int64)
    new_index[keep] = np.arange(len(keep))
    new_parent = np.where(parent[keep] >= 0, new_index[np.maximum(parent[keep], 0)], -1)
    return DraftTree(token[keep], new_parent, depth[keep], source[keep], weight[keep])
