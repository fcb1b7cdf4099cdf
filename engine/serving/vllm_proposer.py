"""fastcoder's drafter as a vLLM ``custom_class`` proposer (chains only). Importable without vLLM.

vLLM (V1 model runner) builds it with ``cls(vllm_config)`` when started with
``--speculative-config '{"method": "custom_class", "model": "engine.serving.vllm_proposer.FastCoderProposer",
"num_speculative_tokens": K}'`` and, after every step, calls::

    propose(sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray,
            token_ids_cpu: np.ndarray, slot_mappings=...) -> list[list[int]]

``token_ids_cpu`` is the input batch's (max_num_reqs, max_model_len) buffer; row i holds request i's
prompt and output, ``num_tokens_no_spec[i]`` of them valid, the token sampled this step last (the
*pending* token of :mod:`engine.drafters`). ``sampled_token_ids[i]`` is what the step committed for
row i (the accepted draft tokens plus the model's own token; empty: the row is not decoding). One
``list[int]`` per row comes back, at most K tokens (vLLM cuts them to K too); ``[]`` means no draft.

Drafting is the local decoder's (:class:`engine.drafters.FastCoderDrafter`): the FastCoder cache of
verified output, D_r and D_c, and context copy, merged into a draft tree sized with the same online
acceptance estimates (:mod:`engine.acceptance`) against a verify-cost curve. vLLM verifies chains
only (tree attention was removed upstream), so the proposer sends the tree's best chain: the path
maximising ``(1 + sum of path probabilities) / c(length)``, cut to K. After the next step, the
committed tokens tell how much of the chain was accepted; that feeds the estimates, the missing
table and the cache, as the local decoder's ``observe`` does.

Per-request data. The ``custom_class`` interface passes no request ids or sampling parameters, so
the worker class :class:`engine.serving.vllm_worker.FastCoderCPUWorker` (or ``...GPUWorker``) hands
the proposer its model runner (:meth:`FastCoderProposer.attach_runner`); the proposer then reads row
i's request id from ``runner.input_batch.req_ids[i]`` and the request's ``vllm_xargs`` from
``runner.requests[req_id].sampling_params.extra_args``:

- ``"fastcoder_repo": ID``: draft from that repository's D_r too. The repositories are those of the
  configuration (:class:`ProposerConfig`, written by ``fastcoder serve-vllm``): each a saved
  :class:`engine.datastore.Datastore` that the worker process memory-maps on first use. An ID not
  in the configuration (or whose datastore does not load) gives that request no drafts at all.
- ``"fastcoder_doc": KEY`` (optional): requests with the same repository and KEY (an editor's file)
  share one FastCoder cache, as the local decoder keeps one per document; without it each request
  has its own.

Without the worker class (a plain ``vllm serve``) every request drafts from D_c, its own cache and
context copy, keyed by row and prompt. The proposer never raises into vLLM: an error in a row gives
that row no draft (logged once, counted in :meth:`FastCoderProposer.stats`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..acceptance import AcceptanceEstimator
from ..cost_model import VerifyCost
from ..datastore import Datastore
from ..draft_tree import SOURCE_NAMES, DraftTree
from ..drafters import FastCoderCache, FastCoderDrafter, FastCoderOptions, RetrievalOptions

log = logging.getLogger(__name__)

__all__ = ["CONFIG_ENV", "REPO_ARG", "DOC_ARG", "PROPOSER_CLASS", "ProposerConfig", "FastCoderProposer",
           "best_chain", "linear_cost"]

#: Environment variable naming the proposer's JSON configuration (:class:`ProposerConfig`).
CONFIG_ENV = "FASTCODER_VLLM_CONFIG"
#: ``vllm_xargs`` key naming the request's repository (an id of :attr:`ProposerConfig.repos`).
REPO_ARG = "fastcoder_repo"
#: Seconds between checks of a repository datastore's folder for a rebuild (:meth:`FastCoderProposer._repo`).
RELOAD_CHECK_S = 2.0
#: ``vllm_xargs`` key naming the request's document (requests of one document share a cache).
DOC_ARG = "fastcoder_doc"
#: The dotted path to give vLLM as the speculative ``model`` of method ``custom_class``.
PROPOSER_CLASS = "engine.serving.vllm_proposer.FastCoderProposer"

#: Retrieval settings of the local decoder when trees are sized by cost (engine.decoder's
#: MAX_DRAFT_TOKENS, SIZED_MAX_MATCHES, SIZED_DRAFT_LEN; tests check they agree).
DEFAULT_RETRIEVAL = {"budget": 64, "max_matches": 32, "draft_len": 24}


def linear_cost(slope: float) -> VerifyCost:
    """A verify-cost curve ``c(n) = 1 + slope * n`` (n draft tokens verified with one pending token).

    vLLM batches every request's chain into one forward, so a chain's own cost is mostly its share of
    that forward: small on an accelerator (slope ~0.01), larger on a CPU."""
    slope = max(float(slope), 0.0)
    sizes = [1, 4, 16, 64]
    return VerifyCost(sizes, [1.0 + slope * n for n in sizes], 0.0, 0, {"kind": "linear", "slope": slope})


def _meta_stamp(path: str) -> tuple[int, int] | None:
    """(inode, mtime_ns) of a datastore folder's ``meta.json``; None when it cannot be read."""
    try:
        st = os.stat(os.path.join(path, "meta.json"))
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


@dataclass
class ProposerConfig:
    """What the proposer loads in vLLM's worker process (JSON at ``$FASTCODER_VLLM_CONFIG``).

    Attributes:
        repos: repository id -> saved :class:`~engine.datastore.Datastore` folder (D_r). ``serve-vllm``
            writes two ids per repository: its resolved folder (DESIGN.md's ``{"fastcoder_repo": DIR}``)
            and its name; a request naming a folder as spelled differently is matched after realpath.
        common: D_c datastore folder, or None for none.
        tokenizer_fingerprint: every datastore must have been built with this tokenizer
            (:func:`engine.common_datastore.tokenizer_fingerprint`); None skips the check.
        tokenizer: tokenizer folder for FastCoder's skip-token rule (None: vLLM's model tokenizer;
            "" turns the rule off).
        cost_slope: c(n) = 1 + cost_slope * n, the cost of verifying an n-token chain in plain decode
            steps (:func:`linear_cost`).
        options: :class:`~engine.drafters.FastCoderOptions` / :class:`~engine.drafters.RetrievalOptions`
            fields (unknown names raise TypeError when the proposer is built).
        max_states: per-request drafter states kept (least recently seen dropped first).
        max_docs: per-document caches kept (``fastcoder_doc``; least recently used dropped).
        stats_path: JSON file the proposer rewrites with :meth:`FastCoderProposer.stats` (at most once
            a second); None: none.
    """

    repos: dict[str, str] = field(default_factory=dict)
    common: str | None = None
    tokenizer_fingerprint: str | None = None
    tokenizer: str | None = None
    cost_slope: float = 0.05
    options: dict = field(default_factory=dict)
    max_states: int = 1024
    max_docs: int = 256
    stats_path: str | None = None

    @classmethod
    def from_dict(cls, data: dict) -> "ProposerConfig":
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown fastcoder proposer settings: {', '.join(unknown)}")
        return cls(**data)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ProposerConfig":
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    @classmethod
    def from_env(cls) -> "ProposerConfig":
        """The configuration named by ``$FASTCODER_VLLM_CONFIG``; the defaults (D_c none, no
        repositories) when unset."""
        path = os.environ.get(CONFIG_ENV)
        return cls.load(path) if path else cls()

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")
        return path


def best_chain(tree: DraftTree, k: int, cost: VerifyCost) -> np.ndarray:
    """Node indices (root first) of the chain of ``tree`` that vLLM should verify: at most ``k`` nodes,
    the one maximising expected committed tokens per verify cost, ``(1 + sum_v P(v)) / c(len)`` over its
    nodes v (P(v): the probability that v's whole path is accepted); empty when no chain beats no draft.

    P comes from the tree's acceptance estimates (``tree.probs``, set when the tree was sized by cost);
    without them, from its weights (a node's share of its parent's weight)."""
    n = len(tree) - tree.n_adaptive
    if n <= 0 or k <= 0:
        return np.zeros(0, dtype=np.int64)
    parents = tree.parents[:n]
    depths = tree.depths[:n]
    if tree.probs is not None:
        p = np.asarray(tree.probs[:n], dtype=np.float64)
    else:
        w = np.asarray(tree.weights[:n], dtype=np.float64)
        root_total = max(float(w[parents < 0].sum()), 1e-12)
        p = np.where(parents >= 0, w / np.maximum(w[np.maximum(parents, 0)], 1e-12), w / root_total)
    path = np.empty(n)
    gain = np.empty(n)
    for i in range(n):  # breadth-first: a parent precedes its children
        par = int(parents[i])
        path[i] = p[i] * (path[par] if par >= 0 else 1.0)
        gain[i] = path[i] + (gain[par] if par >= 0 else 0.0)
    ratio = (1.0 + gain) / np.asarray(cost.c(depths), dtype=np.float64)
    ratio[depths > k] = -np.inf
    best = int(np.argmax(ratio))
    if not ratio[best] > 1.0 + 1e-12:  # no draft: 1 token for c(0) = 1
        return np.zeros(0, dtype=np.int64)
    chain = []
    node = best
    while node >= 0:
        chain.append(node)
        node = int(parents[node])
    return np.asarray(chain[::-1], dtype=np.int64)


class _RequestState:
    """One request's drafter and the chain it proposed last (to learn from what was accepted)."""

    __slots__ = ("drafter", "repo_id", "last_len", "last_token", "tree", "chain", "last_seen")

    def __init__(self, drafter: FastCoderDrafter, repo_id: str | None, step: int):
        self.drafter = drafter
        self.repo_id = repo_id
        self.last_len = 0
        self.last_token = -1
        self.tree: DraftTree | None = None
        self.chain = np.zeros(0, dtype=np.int64)
        self.last_seen = step

    def continues(self, context: np.ndarray) -> bool:
        """Whether ``context`` extends the context of the last proposal (same request, row intact)."""
        n = self.last_len
        return n <= len(context) and (n == 0 or int(context[n - 1]) == self.last_token)


class FastCoderProposer:
    """fastcoder's drafter behind vLLM's ``custom_class`` interface (see the module docstring).

    Args:
        vllm_config: vLLM's ``VllmConfig`` (K from ``speculative_config.num_speculative_tokens``,
            ``model_config.max_model_len``); None in tests (K = 8).
        config: a :class:`ProposerConfig`; None reads ``$FASTCODER_VLLM_CONFIG``.
        datastores: repository id -> an already loaded D_r (anything with ``search``), ahead of the
            configuration's folders (tests, or a host process that loaded them).
        common: an already loaded D_c, ahead of ``config.common``.
        token_info: :class:`engine.model.TokenInfo` for the skip-token rule; None loads it from the
            tokenizer named by the configuration (or vLLM's) when :meth:`load_model` runs.
        num_speculative_tokens: K, ahead of ``vllm_config``.
    """

    def __init__(self, vllm_config=None, config: ProposerConfig | None = None, *, datastores: dict | None = None,
                 common=None, token_info=None, num_speculative_tokens: int | None = None):
        self.config = config if config is not None else ProposerConfig.from_env()
        spec = getattr(vllm_config, "speculative_config", None)
        model_config = getattr(vllm_config, "model_config", None)
        self.k = int(num_speculative_tokens or getattr(spec, "num_speculative_tokens", None) or 8)
        self.max_model_len = int(getattr(model_config, "max_model_len", None) or 2**62)
        self._model_tokenizer = getattr(model_config, "tokenizer", None)
        opts = dict(self.config.options)
        ret_fields, fc_fields = set(RetrievalOptions.__dataclass_fields__), set(FastCoderOptions.__dataclass_fields__)
        unknown = sorted(set(opts) - ret_fields - fc_fields)
        if unknown:
            raise TypeError(f"options not understood by the fastcoder proposer: {', '.join(unknown)}")
        self._ret = {**DEFAULT_RETRIEVAL, **{k: v for k, v in opts.items() if k in ret_fields}}
        self._fc = {k: v for k, v in opts.items() if k in fc_fields}
        RetrievalOptions(**self._ret), FastCoderOptions(**self._fc)  # validate now, not in the first step
        self.cost = linear_cost(self.config.cost_slope)
        self.estimator = AcceptanceEstimator()  # shared by every request, as a decoder's
        self._datastores: dict[str, object] = dict(datastores or {})
        self._failed_repos: set[str] = set()
        self._by_path: dict[str, object] = {}
        self._stamps: dict[str, tuple] = {}  # datastore folder -> (meta.json (inode, mtime_ns), checked at)
        self._common = common
        self._common_loaded = common is not None or not self.config.common
        self._token_info = token_info
        self._token_info_loaded = token_info is not None or self.config.tokenizer == ""
        self._runner = None
        self._states: OrderedDict = OrderedDict()
        self._doc_caches: OrderedDict = OrderedDict()
        self._step = 0
        self._logged: set[str] = set()
        self._stats_written = 0.0
        self._stats = {"steps": 0, "rows": 0, "proposals": 0, "drafted_tokens": 0, "verified_chains": 0,
                       "accepted_tokens": 0, "accepted_by_source": {}, "rows_by_repo": {},
                       "unknown_repo_rows": 0, "errors": 0, "propose_ms": 0.0}

    # ------------------------------------------------------------------ vLLM hooks

    def load_model(self, *args, **kwargs) -> None:
        """vLLM's hook after the target model loads: memory-map D_c and load the skip-token table."""
        self._ensure_loaded()

    def dummy_run(self, *args, **kwargs) -> None:
        """vLLM's warm-up hook: nothing to warm (drafting runs on the CPU)."""

    def attach_runner(self, runner) -> None:
        """Give the proposer vLLM's model runner, whose ``input_batch.req_ids`` and ``requests`` carry
        each row's request id and ``vllm_xargs`` (called by :mod:`engine.serving.vllm_worker`)."""
        self._runner = runner

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None,
                **kwargs) -> list[list[int]]:
        """One draft chain per batch row (see the module docstring); never raises."""
        t0 = time.perf_counter()
        try:
            rows = len(sampled_token_ids)
        except Exception:  # not a sequence: nothing sensible to return
            self._error("bad sampled_token_ids")
            return []
        try:
            out = self._propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, rows)
        except Exception:
            self._error("propose")
            out = [[] for _ in range(rows)]
        self._stats["propose_ms"] += (time.perf_counter() - t0) * 1000.0
        self._maybe_write_stats()
        return out

    # ------------------------------------------------------------------ state

    def stats(self) -> dict:
        """Plain data: steps, rows, chains proposed, draft tokens sent, chains verified and draft
        tokens accepted (as this proposer saw them), accepted tokens per draft source, rows per
        repository, rows refused for an unknown repository, errors, time spent proposing (ms), live
        request states and the acceptance estimator's summary."""
        s = json.loads(json.dumps(self._stats))
        s["acceptance_rate"] = (round(s["accepted_tokens"] / s["drafted_tokens"], 4)
                                if s["drafted_tokens"] else None)
        s["states"] = len(self._states)
        s["estimator"] = self.estimator.summary()
        s["k"] = self.k
        return s

    def _ensure_loaded(self) -> None:
        if not self._common_loaded:
            self._common_loaded = True
            try:
                self._common = Datastore.load(self.config.common, self.config.tokenizer_fingerprint, mmap=True)
            except Exception as err:
                self._common = None
                self._error(f"D_c {self.config.common!r} not loaded ({err}); drafting without it", tb=False)
        if not self._token_info_loaded:
            self._token_info_loaded = True
            name = self.config.tokenizer or self._model_tokenizer
            if name:
                try:
                    from transformers import AutoTokenizer  # noqa: PLC0415

                    from ..model import TokenInfo  # noqa: PLC0415

                    tok = AutoTokenizer.from_pretrained(name)
                    self._token_info = TokenInfo.from_tokenizer(tok, len(tok))
                except Exception as err:
                    self._error(f"tokenizer {name!r} not loaded ({err}); skip-token rule off", tb=False)

    def _repo(self, repo_id: str):
        """The loaded D_r for ``repo_id``, loading (memory-mapping) it on first use; None if unknown.

        A datastore folder rewritten in place (``fastcoder index build --repo DIR --out PATH`` run again
        on the shared path: :meth:`engine.datastore.Datastore.save` swaps the folder atomically) is
        reloaded: its ``meta.json`` is checked at most every :data:`RELOAD_CHECK_S` seconds. A reload
        that fails keeps the datastore already loaded."""
        ds = self._datastores.get(repo_id)
        if repo_id in self._failed_repos:
            return None
        path = self.config.repos.get(repo_id)
        if path is None and ("/" in repo_id or os.sep in repo_id):  # a repository folder, as spelled
            path = self.config.repos.get(os.path.realpath(repo_id))
        if path is None:
            return ds  # given directly (datastores=) or unknown
        if ds is not None and not self._changed_on_disk(path):
            return ds
        loaded = self._by_path.get(path)  # several ids (folder, name) may name one datastore
        if loaded is None or loaded is ds:
            try:
                loaded = Datastore.load(path, self.config.tokenizer_fingerprint, mmap=True)
            except Exception as err:
                if ds is not None:  # a half-written or bad rebuild: keep serving the old one
                    self._error(f"repository {repo_id!r}: new datastore at {path} not loaded ({err}); "
                                "keeping the previous one", tb=False)
                    return ds
                self._failed_repos.add(repo_id)
                self._error(f"repository {repo_id!r}: datastore {path} not loaded ({err}); no drafts for it",
                            tb=False)
                return None
            self._by_path[path] = loaded
            self._stamps[path] = (_meta_stamp(path), time.monotonic())
            self._stats["repo_loads"] = self._stats.get("repo_loads", 0) + 1
            log.info("fastcoder proposer: repository %r %s (%d tokens, memory-mapped)", repo_id,
                     "reloaded" if ds is not None else "loaded", getattr(loaded, "num_tokens", -1))
        self._datastores[repo_id] = loaded
        return loaded

    def _changed_on_disk(self, path: str) -> bool:
        """Whether ``path/meta.json`` changed since it was loaded (checked at most every
        :data:`RELOAD_CHECK_S` s)."""
        now = time.monotonic()
        stamp, checked = self._stamps.get(path, (None, -1e9))
        if now - checked < RELOAD_CHECK_S:
            return False
        current = _meta_stamp(path)
        self._stamps[path] = (stamp, now)
        if current is None or current == stamp:  # None: being swapped right now, or removed: keep it
            return False
        self._by_path.pop(path, None)
        return True

    def _error(self, what: str, tb: bool = True) -> None:
        self._stats["errors"] += 1
        if what not in self._logged:
            self._logged.add(what)
            (log.exception if tb else log.warning)("fastcoder proposer: %s", what)

    def _maybe_write_stats(self, force: bool = False) -> None:
        path = self.config.stats_path
        now = time.monotonic()
        if not path or (not force and now - self._stats_written < 1.0):
            return
        self._stats_written = now
        try:
            target = Path(path)
            fd, tmp = tempfile.mkstemp(prefix=".stats-", dir=target.parent)
            with os.fdopen(fd, "w") as fh:
                json.dump(self.stats(), fh)
            os.replace(tmp, target)
        except Exception as err:
            self._error(f"stats not written to {path} ({err})", tb=False)

    # ------------------------------------------------------------------ drafting

    def _row_requests(self, rows: int) -> list:
        """Per row (request id, extra_args dict, prompt length or None); ids None without a runner."""
        runner = self._runner
        if runner is None:
            return [(None, {}, None)] * rows
        ids = list(runner.input_batch.req_ids)[:rows]
        out = []
        for i in range(rows):
            rid = ids[i] if i < len(ids) else None
            req = runner.requests.get(rid) if rid is not None else None
            params = getattr(req, "sampling_params", None)
            extra = getattr(params, "extra_args", None) or {}
            prompt_len = getattr(req, "num_prompt_tokens", None)
            out.append((rid, extra if isinstance(extra, dict) else {}, prompt_len))
        return out

    def _propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, rows: int) -> list[list[int]]:
        self._ensure_loaded()
        self._step += 1
        self._stats["steps"] += 1
        requests = self._row_requests(rows)
        out: list[list[int]] = []
        for i in range(rows):
            try:
                out.append(self._propose_row(i, requests[i], sampled_token_ids[i], num_tokens_no_spec,
                                             token_ids_cpu))
            except Exception:
                self._error("propose row")
                out.append([])
        self._evict()
        return out

    def _propose_row(self, i: int, request, sampled, num_tokens_no_spec, token_ids_cpu) -> list[int]:
        if sampled is None or len(sampled) == 0:  # not decoding this step (prefill chunk, discarded)
            return []
        self._stats["rows"] += 1
        rid, extra, prompt_len = request
        n = int(num_tokens_no_spec[i])
        room = min(self.k, self.max_model_len - n - 1)
        if room <= 0:
            return []
        repo_id = extra.get(REPO_ARG)
        repo = None
        if repo_id is not None:
            repo_id = str(repo_id)
            by_repo = self._stats["rows_by_repo"]
            by_repo[repo_id] = by_repo.get(repo_id, 0) + 1
            repo = self._repo(repo_id)
            if repo is None:  # an unknown repository: no drafts (never another repository's)
                self._stats["unknown_repo_rows"] += 1
                if f"unknown {repo_id}" not in self._logged:
                    self._logged.add(f"unknown {repo_id}")
                    log.warning("fastcoder proposer: unknown repository %r (known: %s); no drafts for it",
                                repo_id, ", ".join(sorted(set(self.config.repos) | set(self._datastores))) or "none")
                return []
        context = np.asarray(token_ids_cpu[i, :n], dtype=np.int64)
        key = rid if rid is not None else f"row{i}:{hashlib.blake2b(context[:32].tobytes(), digest_size=8).hexdigest()}"
        state = self._states.get(key)
        if state is None or state.repo_id != repo_id or not state.continues(context):
            doc = extra.get(DOC_ARG)
            if prompt_len is None or not 0 < int(prompt_len) <= n:
                prompt_len = n - len(sampled)
            state = self._new_state(key, repo_id, repo, None if doc is None else str(doc),
                                    context[:max(int(prompt_len), 0)])
        else:
            self._observe(state, context)
        state.last_seen = self._step
        self._states.move_to_end(key)
        tree = state.drafter.propose(context)
        chain = best_chain(tree, room, self.cost)
        state.tree, state.chain = tree, chain
        state.last_len, state.last_token = n, int(context[-1]) if n else -1
        if len(chain):
            self._stats["proposals"] += 1
            self._stats["drafted_tokens"] += int(len(chain))
        return tree.tokens[chain].tolist()

    def _new_state(self, key, repo_id, repo, doc: str | None, prompt: np.ndarray) -> _RequestState:
        if doc is not None:
            cache_key = (repo_id, doc)
            cache = self._doc_caches.get(cache_key)
            if cache is None:
                cache = self._doc_caches[cache_key] = FastCoderCache(n_min=self._ret.get("n_min", 2))
                while len(self._doc_caches) > self.config.max_docs:
                    self._doc_caches.popitem(last=False)
            self._doc_caches.move_to_end(cache_key)
        else:
            cache = FastCoderCache(n_min=self._ret.get("n_min", 2))
        drafter = FastCoderDrafter(repo, self._common, self._token_info, cache, FastCoderOptions(**self._fc),
                                   RetrievalOptions(**self._ret), self.estimator, self.cost)
        drafter.reset(prompt)
        state = self._states[key] = _RequestState(drafter, repo_id, self._step)
        return state

    def _observe(self, state: _RequestState, context: np.ndarray) -> None:
        """Learn from the last chain: the tokens committed since it are ``context[last_len:]``."""
        committed = context[state.last_len:]
        if state.tree is None or len(committed) == 0:
            return
        chain = state.chain
        drafted = state.tree.tokens[chain]
        limit = min(len(chain), len(committed) - 1)  # the last committed token is the model's own
        m = 0
        while m < limit and int(drafted[m]) == int(committed[m]):
            m += 1
        path = chain[:m].tolist()
        state.drafter.observe(context[:state.last_len], state.tree, path, committed.tolist())
        if len(chain):
            self._stats["verified_chains"] += 1
            self._stats["accepted_tokens"] += m
            if state.tree.keys is not None:
                self.estimator.update(state.tree.keys[chain], np.arange(-1, len(chain) - 1, dtype=np.int64),
                                      list(range(m)))
            by_source = self._stats["accepted_by_source"]
            for node in path:
                bits = int(state.tree.sources[node])
                for bit, name in SOURCE_NAMES.items():
                    if bits & bit:
                        by_source[name] = by_source.get(name, 0) + 1

    def _evict(self) -> None:
        """Drop the least recently seen request states beyond ``max_states`` and those unseen for long
        (vLLM tells a custom proposer nothing when a request finishes)."""
        states = self._states
        while len(states) > self.config.max_states:
            states.popitem(last=False)
        horizon = self._step - 4096
        while states:
            key, state = next(iter(states.items()))
            if state.last_seen >= horizon:
                break
            del states[key]
