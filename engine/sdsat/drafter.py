"""SDSAT drafting (Liu & Zhu, SDSAT, section 2.1), alone and merged with retrieval into one draft tree.

Draft step 1 (eq. 1): the pending token is forwarded with a chain of k identical adaptive tokens
below it (:meth:`engine.draft_tree.DraftTree.with_adaptive_branch`). The logits at the pending token
give the model's own next token; the logits at the j-th adaptive token give a draft of the token
j + 1 positions after the pending one. Draft step 2 (eq. 2) forwards the new pending token with
those drafts as an ordinary draft chain, and verification (eq. 3) accepts the longest prefix that the
model itself would have produced, so greedy output is exactly the model's own. For sampling
(section 2.1.2) the drafts of step 1 form a small tree (the ``width`` most likely tokens at each
adaptive position) verified with the exact per-node sampling rule of :func:`engine.verify.accept`.

Two schedules:

- ``every_step=False`` (method ``sdsat``, the paper's loop): the adaptive branch is forwarded only
  when no adaptive drafts are waiting, so steps alternate draft step 1 / draft step 2 + verify
  (at most 2 + k tokens per two forwards).
- ``every_step=True`` (method ``fastcoder+sdsat``): every forward carries the retrieval draft tree
  (D_r, D_c, the FastCoder cache, context copy), the waiting adaptive drafts merged into it as one
  more source (:data:`engine.draft_tree.SOURCE_ADAPTIVE`, so each node keeps its source in the
  statistics and the acceptance estimates) and a fresh adaptive branch. When verification accepts m
  draft tokens, the adaptive tokens past the m-th still draft the tokens after the new pending one
  (conditioned on the context up to the old pending token only, so they are weaker than step 1's);
  no forward is spent on drafting alone.
"""

from __future__ import annotations

import numpy as np
import torch

from ..draft_tree import SOURCE_ADAPTIVE, Candidates, DraftTree
from ..tree_builder import build_draft_tree
from .config import SdsatConfig

#: With a cost model that finds adaptive drafts not worth their tokens, one forward in this many still
#: carries one adaptive token, so the learned acceptance can recover (costs ~c(1) - 1 = 5% of 1 in 32).
PROBE_EVERY = 32


class AdaptiveDrafter:
    """SDSAT draft source behind the :class:`engine.drafters.Drafter` interface, plus
    :meth:`observe_logits`, which the decoder calls with the logits of the adaptive branch.

    Args:
        config: the model's :class:`SdsatConfig` (adaptive token id, trained window L).
        k: adaptive tokens per branch (>= 1); with ``estimator`` and ``cost`` this is a cap and each
            branch's length is chosen by expected tokens per verify cost (:meth:`choose_k`).
        retrieval: a :class:`engine.drafters.FastCoderDrafter` whose candidates are merged into the
            same tree (``fastcoder+sdsat``), or None (``sdsat``).
        every_step: attach an adaptive branch to every forward (see the module docstring).
        width: candidates per adaptive position (1: a chain, greedy; > 1: a tree, for sampling).
        budget, min_prob, estimator, cost: as :func:`engine.tree_builder.build_draft_tree`.

    Raises:
        ValueError: ``k < 1`` or ``width < 1``.
    """

    def __init__(self, config: SdsatConfig, k: int, retrieval=None, every_step: bool = False, width: int = 1,
                 budget: int = 64, min_prob: float = 0.0, estimator=None, cost=None):
        if int(k) < 1 or int(width) < 1:
            raise ValueError(f"adaptive tokens k and width must be >= 1, got k={k}, width={width}")
        self.config = config
        self.token_id = int(config.adaptive_token_id)
        self.k = int(k)
        self.retrieval = retrieval
        self.every_step = bool(every_step)
        self.width = int(width)
        self.budget, self.min_prob = int(budget), float(min_prob)
        self.estimator, self.cost = estimator, cost
        self._drafts: Candidates | None = None
        self._drafts_at = -1  # context length (tokens, pending included) the waiting drafts continue
        self._forwards = 0  # forwards that could carry an adaptive branch (for the probing schedule)

    def reset(self, prompt: np.ndarray) -> None:
        self._drafts, self._drafts_at = None, -1
        if self.retrieval is not None:
            self.retrieval.reset(prompt)

    def propose(self, context: np.ndarray) -> DraftTree:
        """The retrieval candidates (if any) and the waiting adaptive drafts merged into one tree, with
        an adaptive branch appended when the schedule asks for one."""
        parts = self.retrieval.candidates(context) if self.retrieval is not None else []
        drafts = self._drafts if self._drafts_at == len(context) else None
        self._drafts, self._drafts_at = None, -1
        if drafts is not None:
            parts.append(drafts)
        cost = self.cost.at(len(context)) if self.cost is not None else None  # at this KV-cache length
        tree = build_draft_tree(parts, self.budget, self.min_prob, self.estimator, cost) if parts \
            else DraftTree.empty()
        if self.every_step or drafts is None:
            self._forwards += 1
            k = self.choose_k()
            if k == 0 and self._forwards % PROBE_EVERY == 0:  # keep learning what adaptive drafts are worth
                k = 1
            if k:
                tree = tree.with_adaptive_branch(self.token_id, k)
        return tree

    def observe(self, context: np.ndarray, tree: DraftTree, path: list[int], accepted: list[int]) -> None:
        if self.retrieval is not None:
            self.retrieval.observe(context, tree, path, accepted)

    @torch.inference_mode()
    def observe_logits(self, context: np.ndarray, tree: DraftTree, logits: torch.Tensor, path: list[int],
                       accepted: list[int]) -> None:
        """Read the next drafts off the adaptive branch after a verification.

        Args:
            context: (T,) int64 context the tree was proposed from (pending token last).
            tree: that tree; its last ``tree.n_adaptive`` nodes are the adaptive branch.
            logits: (1 + len(tree), V) verification logits.
            path: accepted node indices; accepted: committed tokens (path tokens + the bonus token).

        With m draft tokens accepted, adaptive tokens m + 1 .. k draft the tokens after the new pending
        token (the j-th adaptive token predicts the token j + 1 positions after the old pending one).
        """
        if not tree.n_adaptive:
            return
        m = len(path)
        if any(p >= tree.n_draft for p in path):  # the model chose the adaptive token itself: no drafts
            return
        first = logits.shape[0] - tree.n_adaptive + m
        rows = logits[first:]
        if rows.shape[0] == 0:
            return
        probs = torch.softmax(rows.float(), dim=-1)
        top_p, top_t = probs.topk(min(self.width, probs.shape[-1]), dim=-1)  # (r, w)
        top_p, top_t = top_p.cpu().numpy(), top_t.cpu().numpy()
        main = top_t[:, 0]
        rows_out = [main]
        counts = [1.0]
        for d in range(top_t.shape[0]):  # sampling: the runner-up tokens at each position, as leaves
            for a in range(1, top_t.shape[1]):
                alt = np.full(len(main), -1, dtype=np.int64)
                alt[:d] = main[:d]
                alt[d] = top_t[d, a]
                rows_out.append(alt)
                counts.append(float(top_p[d, a] / max(top_p[d, 0], 1e-9)))
        self._drafts = Candidates(np.stack(rows_out).astype(np.int64), np.asarray(counts), 1.0, SOURCE_ADAPTIVE)
        self._drafts_at = len(context) + len(accepted)

    def choose_k(self) -> int:
        """Adaptive tokens for the next branch: ``k``, or with a cost model the k' <= k maximising
        ``(2 + sum_j prod_{i<=j} a_i) / (c(k') + c(k'))``, the tokens per cost of one SDSAT loop (draft
        step 1 with k' adaptive tokens, then verification of k' drafts), where a_i is the learned
        acceptance of adaptive drafts at depth i; 0 (no adaptive branch: plain decoding, 1 token per
        c(0) = 1) when even the best k' does not beat that. :meth:`propose` still probes with one
        adaptive token every :data:`PROBE_EVERY` forwards so the estimates can recover."""
        if self.estimator is None or self.cost is None:
            return self.k
        from ..acceptance import bucket_keys  # noqa: PLC0415

        depths = np.arange(1, self.k + 1, dtype=np.int64)
        ones = np.ones(self.k)
        keys = bucket_keys(np.full(self.k, SOURCE_ADAPTIVE, dtype=np.int64), depths, ones,
                           np.zeros(self.k, dtype=np.int64))
        path = np.cumprod(self.estimator.estimate(keys, ones))
        gain = 2.0 + np.cumsum(path)
        ratio = gain / (2.0 * self.cost.c(depths))
        best = int(np.argmax(ratio))
        return best + 1 if ratio[best] > 1.0 else 0


def make_adaptive_drafter(method: str, loaded, repo_datastore, common_datastore, cache, estimator, cost,
                          greedy: bool, sdsat_options: dict, options: dict) -> AdaptiveDrafter:
    """The drafter of method ``sdsat`` or ``fastcoder+sdsat`` for ``loaded`` (which must carry
    :class:`SdsatConfig` metadata).

    Args:
        sdsat_options: ``adaptive_tokens`` (k, 1..16; default the trained window L),
            ``adaptive_width`` (default 1 when ``greedy`` else 3), ``adaptive_every_step``.
        options: retrieval / FastCoder options (fastcoder+sdsat), or ``draft_budget``/``min_prob``.

    Raises:
        ValueError: k outside 1..16 or width < 1; TypeError: options the method does not take.
    """
    from ..decoder import MAX_ADAPTIVE_TOKENS  # noqa: PLC0415
    from ..drafters import make_drafter  # noqa: PLC0415

    config: SdsatConfig = loaded.sdsat
    k = int(sdsat_options.get("adaptive_tokens", config.max_window))
    if not 1 <= k <= MAX_ADAPTIVE_TOKENS:
        raise ValueError(f"adaptive_tokens must be within 1..{MAX_ADAPTIVE_TOKENS}, got {k}")
    width = int(sdsat_options.get("adaptive_width", 1 if greedy else 3))
    every_step = bool(sdsat_options.get("adaptive_every_step", method == "fastcoder+sdsat"))
    options = dict(options)
    if method == "fastcoder+sdsat":
        retrieval = make_drafter("fastcoder", loaded.token_info, repo_datastore, common_datastore, cache=cache,
                                 estimator=estimator, cost=cost, **options)
        budget, min_prob = retrieval.ret.budget, retrieval.ret.min_prob
    else:
        retrieval = None
        budget = int(options.pop("draft_budget", options.pop("budget", 64)))
        min_prob = float(options.pop("min_prob", 0.0))
        if options:
            raise TypeError(f"options not understood by method {method!r}: {', '.join(sorted(options))}")
    return AdaptiveDrafter(config, k, retrieval, every_step, width, budget, min_prob, estimator, cost)
