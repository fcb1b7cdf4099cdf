"""The engine host: model, datastores and per-document warm state behind the language server.

No LSP import here: the server (``lsp_server.server``) turns requests into :class:`CompletionRequest`
objects and calls :meth:`EngineHost.complete` on the single model-worker thread; callbacks report messages
and progress back to it. Threads:

- ``fastcoder-loader`` (1 thread): loads the model, loads/builds D_c, builds each folder's D_r.
- ``fastcoder-model`` (1 thread): every call into the decoder, so at most one generation runs at a time.
- ``fastcoder-index`` (1 thread): every D_r update/remove and attach. Events are coalesced per path while
  it works; a batch touching more than ``settings.max_incremental_files`` files of a folder rebuilds that
  folder's D_r instead. D_r is searched lock-free over immutable snapshots, so a completion never waits
  behind indexing (a ``git checkout`` of thousands of files). The D_r half lives in
  :mod:`lsp_server.indexing` (``IndexingMixin``).
- watchdog observer + debouncer threads (``lsp_server.repo_watch``) only hand file events to the index
  worker.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from .indexing import FolderIndex, IndexingMixin, lower_thread_priority
from .postprocess import CursorContext, generation_stop, postprocess, strip_healed, whole_lines
from .prompt import build_fim_prompt, model_max_tokens, prompt_budget
from .settings import COST_SIZED_METHODS, DECODER_KEYS, REINDEX_KEYS, RELOAD_KEYS, SDSAT_METHODS, Settings

log = logging.getLogger("fastcoder.lsp")

MAX_DOCUMENT_CHARS = 5_000_000  # documents larger than this get no completion (characters)


def _screen_lm_head(loaded) -> str | bool:
    """Pack ``loaded``'s LM head for greedy steps' int8 screening (:func:`engine.lean_forward.greedy_screen`) and say
    with which instruction set greedy decoding will use it (``"vnni"``, ``"avx2"``); False when it will not, or on
    any failure (the whole head serves)."""
    try:
        from engine.lean_forward import greedy_screen  # noqa: PLC0415

        return greedy_screen(loaded.model) or False
    except Exception:  # noqa: BLE001  (an optional speed-up: never a failed load)
        log.exception("LM-head screen unavailable")
        return False


def _make_greedy_step(loaded) -> bool:
    """Make ``loaded``'s one-call greedy step (:func:`engine.lean_forward.greedy_step_serves`) and say whether its
    greedy steps take it; False on any failure (the separate calls serve)."""
    try:
        from engine.lean_forward import greedy_step_serves  # noqa: PLC0415

        return greedy_step_serves(loaded.model, make=True)
    except Exception:  # noqa: BLE001  (an optional speed-up: never a failed load)
        log.exception("one-call greedy step unavailable")
        return False


@dataclass
class CompletionRequest:
    """One inline-completion job: the document text around the cursor at ``version``.

    folder: the workspace folder (path) whose D_r serves the document, or None.
    cancel: set by a newer request for the same document or by ``$/cancelRequest``.
    """

    uri: str
    version: int | None
    prefix: str
    suffix: str
    folder: str | None
    cancel: threading.Event = field(default_factory=threading.Event)
    received: float = field(default_factory=time.perf_counter)


@dataclass
class CompletionOutcome:
    """The result of one job: ``text`` is None when there is nothing to show; ``latency_ms`` is measured
    from the request's arrival (server side); ``stats`` is the engine's ``GenerationResult.stats``."""

    text: str | None
    finish_reason: str
    latency_ms: float
    stats: dict = field(default_factory=dict)


class EngineHost(IndexingMixin):
    """Owns the model, D_c, one D_r per workspace folder, the decoders and the per-document caches.

    notify(level, message): called from any thread for user-facing messages (level: "info" | "warning" |
    "error"). progress(stage, message, percentage, done): called from the loader thread.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        notify: Callable[[str, str], None] | None = None,
        progress: Callable[[str, str, int | None, bool], None] | None = None,
    ):
        self.settings = settings or Settings()
        self.notify = notify or (lambda level, msg: None)
        self.progress = progress or (lambda stage, msg, pct, done: None)
        self.state = "idle"  # idle | loading | ready | error
        self.error: str | None = None
        self.loaded: Any = None
        self.common: Any = None
        self.folders: dict[str, FolderIndex] = {}
        self._decoders: dict[str | None, Any] = {}
        self._caches: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._lock = threading.RLock()
        self._generation = 0
        self.model_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fastcoder-model")
        self.loader_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fastcoder-loader",
                                              initializer=lower_thread_priority)
        self.index_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fastcoder-index",
                                             initializer=lower_thread_priority)
        self._events_lock = threading.Lock()
        self._pending_events: dict[str, tuple[str, str | None, bool]] = {}  # path -> (kind, buffer, has buffer)
        self._drain_scheduled = False
        self.rescans = 0
        self._background_cancel = threading.Event()
        self._completing = threading.Event()  # set while the model worker runs a completion
        self._estimator: Any = None  # acceptance estimates, shared by the fastcoder decoders
        self._history: Any = None  # earlier completions' output (engine.history), shared like the estimator
        self.verify_cost: dict | None = None
        self.lm_head_screen: str | bool = False  # the LM head's screen for greedy steps: "vnni", "avx2" or False
        self.greedy_step = False  # greedy steps in one native call (engine.native.step)
        self.forward_kernels: str | bool = False  # the native forward kernels' instruction set: "avx512", "avx2", False
        self.weights_on_huge_pages_mb = 0.0  # the packed weights' MB on 2 MB pages (engine.huge_pages)
        self.native_rows: dict | None = None  # engine.probe_cache.native_rows of the loaded model
        self._cost = None  # the VerifyCost measured at load, shared by every decoder (never measured twice)
        self.latencies_ms: collections.deque[float] = collections.deque(maxlen=200)
        self.accepted_lengths: collections.deque[float] = collections.deque(maxlen=200)
        self.type_through_ms: collections.deque[float] = collections.deque(maxlen=200)  # server side
        # where each recent completion's time went (ms): see :data:`LATENCY_PARTS`
        self.breakdowns: collections.deque[dict] = collections.deque(maxlen=200)
        self.counters = collections.Counter()
        self.hits = collections.Counter()
        self.buffers: dict[str, str] = {}  # path -> unsaved text of open documents (model worker only)
        self.load_ms: float | None = None
        self.ready_at: float | None = None
        self.last_reindex_ms: float | None = None
        self.last: dict | None = None  # stats of the latest completed (not cancelled) completion

    # ------------------------------------------------------------------ loading
    def start(self, folders: list[str]) -> Future:
        """Load the model and D_c, then build every folder's D_r, on the loader thread. Returns its future."""
        with self._lock:
            self._generation += 1
            gen = self._generation
            self.state, self.error = "loading", None
            for root in folders:
                self.folders.setdefault(root, FolderIndex(root))
        return self.loader_pool.submit(self._load, gen)

    def _load(self, gen: int) -> None:
        settings = self.settings
        t0 = time.perf_counter()
        try:
            from engine import ModelLoadError, load_model  # noqa: PLC0415 (heavy import, off the loop)

            self.progress("model", f"loading {settings.resolved_model()}", 0, False)
            try:
                loaded = load_model(settings.resolved_model(), device=settings.device, dtype=settings.dtype)
            except ModelLoadError as exc:
                raise _LoadFailed(str(exc)) from None
            cost = None
            if settings.method in SDSAT_METHODS and loaded.sdsat is None:
                raise _LoadFailed(f"method {settings.method!r} needs an SDSAT model (fine-tuned with adaptive tokens, "
                                  f"an sdsat.json beside its weights); {settings.resolved_model()} is not one: make "
                                  "one with `fastcoder train-sdsat` or set fastcoder.method to another method")
            if settings.method in COST_SIZED_METHODS:  # measured once per model/device/dtype/threads, then cached
                self.progress("cost", "measuring the verify cost c(n)", 25, False)
                try:
                    from engine.cost_model import load_or_measure_verify_cost  # noqa: PLC0415

                    cost = load_or_measure_verify_cost(loaded)
                except Exception:
                    log.exception("verify-cost measurement failed")
                from engine import native  # noqa: PLC0415

                native.library()  # the C drafting code: compiled here once per machine, not in a first completion
                from engine.acceptance_prior import find_prior  # noqa: PLC0415

                if (prior := find_prior(loaded.model)) is not None:
                    prior.rates()  # the fitted prior's table (~45 ms), here rather than in a first completion
                from engine.draft_head import find_draft_head  # noqa: PLC0415

                find_draft_head(loaded.model)  # read once here (engine.draft_head), not in a first completion
            # the LM head's int8 screen for greedy steps, packed here rather than in a first completion (Qwen2.5-Coder's
            # 151,936 x 1,536 head: 223 MB, 1.4-2.1 s on one thread, 0.9-1.0 s on two)
            screen = _screen_lm_head(loaded)
            from engine.native import packed_kernels_isa  # noqa: PLC0415

            kernels = packed_kernels_isa(getattr(loaded, "packing", None)) or False
            from engine.packed_linear import weights_on_huge_pages_mb  # noqa: PLC0415

            huge_mb = weights_on_huge_pages_mb(getattr(loaded, "packing", None))
            from engine.probe_cache import native_rows  # noqa: PLC0415

            rows = native_rows(loaded)
            step = _make_greedy_step(loaded)  # greedy steps in one native call (engine.native.step)
            self.progress("common", f"common datastore: {settings.common_datastore}", 30, False)
            common = self._load_common(loaded, settings)
        except _LoadFailed as exc:
            self._fail(gen, str(exc))
            return
        except Exception as exc:  # any loader bug must leave the server up
            log.exception("model load failed")
            self._fail(gen, f"model load failed: {type(exc).__name__}: {exc}")
            return
        with self._lock:
            if gen != self._generation:
                return
            self.loaded, self.common, self._cost = loaded, common, cost
            self.verify_cost = cost.as_dict() if cost is not None else None
            self.lm_head_screen = screen
            self.forward_kernels = kernels
            self.weights_on_huge_pages_mb = huge_mb
            self.native_rows = rows
            self.greedy_step = step
            self._estimator = self._history = None  # learned for the previous model's tokens
            self._decoders.clear()
            self._caches.clear()
            self.state = "ready"
            self._mark_queued(list(self.folders))  # a status poll never sees a ready host with unbuilt folders
            self.load_ms = (time.perf_counter() - t0) * 1000
            self.ready_at = time.perf_counter()
        log.info("model %s ready on %s in %.0f ms", loaded.name, loaded.device, self.load_ms)
        self.progress("ready", "model ready; indexing workspace", 60, False)
        self._index_all(gen)
        self.progress("done", "ready", 100, True)

    def _load_common(self, loaded: Any, settings: Settings) -> Any:
        if settings.common_datastore == "none":
            return None
        try:
            from engine.common_datastore import load_common_datastore  # noqa: PLC0415

            def report(done: int, total: int) -> None:
                self.progress("common", f"building the common datastore: {done}/{total} files",
                              30 + (29 * done) // max(total, 1), False)

            return load_common_datastore(loaded.tokenizer, settings.common_datastore, build_if_missing=True,
                                         progress=False, on_progress=report,
                                         on_rebuild=lambda message: self.notify("warning", f"fastcoder: {message}"))
        except Exception as exc:
            msg = f"fastcoder.commonDatastore {settings.common_datastore!r} unusable ({exc}); continuing without D_c"
            log.warning(msg)
            self.notify("warning", msg)
            return None

    def _fail(self, gen: int, message: str) -> None:
        with self._lock:
            if gen != self._generation:
                return
            self.state, self.error = "error", message
        log.error("%s", message)
        self.notify("error", f"fastcoder: {message}. Completions are disabled until the model loads.")
        self.progress("error", message, None, True)

    # ------------------------------------------------------------------ settings
    def apply_settings(self, new: Settings) -> str:
        """Switch to ``new`` settings. Returns what happens: ``"reload"`` (model / device / D_c changed:
        reload in the background), ``"reindex"`` (repoIndex / exclude changed: D_r rebuilt in the
        background), or ``"none"`` (applies from the next request; a method change replaces the decoders)."""
        changed = new.changed_keys(self.settings)
        sdsat_switch = "method" in changed and (new.method in SDSAT_METHODS or self.settings.method in SDSAT_METHODS)
        self.settings = new
        if changed & set(RELOAD_KEYS) or sdsat_switch:  # a switch to/from SDSAT re-checks the model's metadata
            if self.state != "idle":
                self.start(list(self.folders))
            return "reload"
        if changed & set(REINDEX_KEYS) and self.state == "ready":
            gen = self._generation
            self.loader_pool.submit(self._index_all, gen)
            return "reindex"
        if changed & set(DECODER_KEYS):
            self.model_pool.submit(self._reset_decoders)
        if "max_cached_documents" in changed:
            self.model_pool.submit(self._trim_caches)
        return "none"

    def _cheap_verification(self) -> bool | None:
        """Whether the measured verify cost is flat enough for fastcoder's wider drafting; None before it is measured."""
        if self._cost is None:
            return None
        from engine.cost_model import verification_is_cheap  # noqa: PLC0415

        return verification_is_cheap(self._cost)

    def _reset_decoders(self) -> None:
        with self._lock:
            self._decoders.clear()
            self._caches.clear()

    # ------------------------------------------------------------------ completions
    def _decoder_for(self, folder: str | None) -> Any:
        with self._lock:
            dec = self._decoders.get(folder)
            if dec is None:
                from engine import SpeculativeDecoder  # noqa: PLC0415

                index = self.folders.get(folder) if folder else None
                repo = index.datastore if index is not None and index.state == "ready" else None
                extra = {}
                if self.settings.method in COST_SIZED_METHODS:
                    if self._estimator is None:
                        from engine.acceptance import AcceptanceEstimator  # noqa: PLC0415

                        from engine.acceptance_prior import find_prior  # noqa: PLC0415

                        self._estimator = AcceptanceEstimator(prior=find_prior(self.loaded.model))
                    extra["acceptance_estimator"] = self._estimator  # learned across folders and requests
                    if self._cost is not None:
                        extra["verify_cost"] = self._cost
                if self.settings.method == "fastcoder":
                    if self._history is None:
                        from engine.output_store import new_completion_history  # noqa: PLC0415

                        self._history = new_completion_history(self.loaded.model)
                    extra["completion_history"] = self._history  # every folder's completions draft for all
                dec = SpeculativeDecoder(self.loaded, method=self.settings.method, repo_datastore=repo,
                                         common_datastore=self.common, **extra)
                if getattr(dec, "cost", None) is not None:
                    self.verify_cost = dec.cost.as_dict()
                dec.max_prompt_kv_documents = self.settings.warm_documents
                self._decoders[folder] = dec
            return dec

    def _cache_for(self, uri: str, decoder: Any) -> Any:
        with self._lock:  # status() reads the LRU from the message-loop thread
            cache = self._caches.get(uri)
            if cache is None:
                cache = decoder.new_cache()
                self._caches[uri] = cache
            self._caches.move_to_end(uri)
            self._trim_caches()
            return cache

    def _cache_bytes(self) -> int:
        with self._lock:
            caches = list(self._caches.values())
        return sum(int(getattr(c, "nbytes", 0) or 0) for c in caches)

    def _trim_caches(self) -> None:
        with self._lock:  # re-entrant: _cache_for already holds it
            while len(self._caches) > self.settings.max_cached_documents:
                self._caches.popitem(last=False)

    def drop_document(self, uri: str) -> None:
        """Forget the warm state (cache) of a closed document."""
        def drop() -> None:
            with self._lock:
                self._caches.pop(uri, None)

        self.model_pool.submit(drop)

    def complete(self, req: CompletionRequest) -> CompletionOutcome:
        """Run one completion (call on the model worker). Never raises: errors give ``text=None``."""
        if req.cancel.is_set():
            return self._outcome(req, None, "cancelled", {})
        if self.state != "ready" or self.loaded is None:
            return self._outcome(req, None, "not-ready", {})
        self._completing.set()
        try:
            return self._complete(req)
        except Exception as exc:
            log.exception("completion failed")
            self.counters["errors"] += 1
            return self._outcome(req, None, f"error: {exc}", {})
        finally:
            self._completing.clear()

    def wait_model_idle(self, max_wait_s: float) -> float:
        """Block (an indexing thread) while a completion runs, at most ``max_wait_s`` seconds: indexing
        competes with a forward pass for the GIL and the cores (a 10-token completion took 1.7 s next to
        a 5,000-file rebuild). Returns the seconds waited."""
        t0 = time.monotonic()
        while self._completing.is_set() and time.monotonic() - t0 < max_wait_s:
            time.sleep(0.005)
        return time.monotonic() - t0

    def _prompt_for(self, req: CompletionRequest, decoder: Any) -> Any:
        s = self.settings
        tok = self.loaded.tokenizer
        budget = prompt_budget(s.max_prompt_tokens, model_max_tokens(self.loaded.model.config, tok), s.max_new_tokens)
        heal = decoder.token_bytes if s.token_healing and decoder.method != "hf-prompt-lookup" else None
        return build_fim_prompt(tok, req.prefix, req.suffix, budget, heal=heal)

    # ------------------------------------------------------------------ warm cache
    def preempt_background(self) -> None:
        """Stop the running background prefill (if any) at its next chunk: a completion needs the model."""
        with self._lock:
            self._background_cancel.set()

    def warm(self, req: CompletionRequest) -> Future | None:
        """Prefill the prompt a completion at ``req``'s cursor would use into the document's KV cache, in
        the background on the model worker (:meth:`engine.decoder.SpeculativeDecoder.warm`, in chunks).
        Any completion submitted later preempts it within one chunk (:meth:`preempt_background`).
        Returns the job's future (result: prompt tokens held warm), or None when warming is off."""
        if not self.settings.warm_cache or self.state != "ready":
            return None
        with self._lock:
            self._background_cancel.set()  # a newer warm-up replaces an older one
            req.cancel = self._background_cancel = threading.Event()
        return self.model_pool.submit(self._warm, req)

    def _warm(self, req: CompletionRequest) -> int:
        if req.cancel.is_set() or self.state != "ready" or self.loaded is None:
            return 0
        try:
            decoder = self._decoder_for(req.folder)
            prompt = self._prompt_for(req, decoder)
            cache = self._cache_for(req.uri, decoder)
            t0 = time.perf_counter()
            filled = decoder.warm(prompt.token_ids, cache, self.settings.max_new_tokens, cancel=req.cancel,
                                  chunk_tokens=self.settings.warm_chunk_tokens)
        except Exception:
            log.exception("background prefill failed")
            return 0
        self.counters["warm_prefills"] += 1
        if req.cancel.is_set():
            self.counters["warm_preempted"] += 1
        log.debug("warmed %s: %d prompt tokens in %.0f ms", req.uri, filled, (time.perf_counter() - t0) * 1000)
        return filled

    def _complete(self, req: CompletionRequest) -> CompletionOutcome:
        s = self.settings
        t_start = time.perf_counter()
        decoder = self._decoder_for(req.folder)
        prompt = self._prompt_for(req, decoder)
        ctx = CursorContext.from_split(req.prefix, req.suffix)
        cache = self._cache_for(req.uri, decoder)  # FastCoder CACHE and the prompt's KV cache
        waited = {"queue_ms": (t_start - req.received) * 1000, "prompt_ms": (time.perf_counter() - t_start) * 1000}
        deadline = time.monotonic() + s.deadline_ms / 1000 if s.deadline_ms else None
        res = decoder.generate(prompt.token_ids, max_new_tokens=s.max_new_tokens, temperature=s.temperature,
                               top_p=s.top_p, top_k=s.top_k, seed=s.seed, stop=generation_stop(s.stop_at, ctx),
                               cache=cache, cancel=req.cancel, deadline=deadline, constraint=prompt.healed)
        if res.finish_reason == "cancelled":
            return self._outcome(req, None, "cancelled", {**res.stats, **waited})
        raw = res.text
        if prompt.healed:
            self.counters["healed_prompts"] += 1
            raw = strip_healed(raw, prompt.healed)
        if res.finish_reason == "deadline":
            raw = whole_lines(raw)
        text = postprocess(raw, ctx, s.stop_at)
        return self._outcome(req, text, res.finish_reason, {**res.stats, **waited}, record=True)

    def _outcome(self, req: CompletionRequest, text: str | None, reason: str, stats: dict,
                 record: bool = False) -> CompletionOutcome:
        latency = (time.perf_counter() - req.received) * 1000
        self.counters["requests"] += 1
        decoded = int(stats.get("new_tokens") or 0)
        self.counters["decoded_tokens"] += decoded
        if reason == "cancelled":
            self.counters["cancelled"] += 1
            self.counters["wasted_tokens"] += decoded
        if record:
            self.counters["prompt_tokens"] += int(stats.get("prompt_tokens") or 0)
            self.counters["reused_prompt_tokens"] += int(stats.get("reused_prompt_tokens") or 0)
            self.last = {"uri": req.uri, "latency_ms": latency, "finish_reason": reason,
                         **{k: stats.get(k) for k in ("new_tokens", "forward_passes", "mean_accepted_length",
                                                      "prefill_ms", "decode_ms", "retrieval_ms", "hits",
                                                      "prompt_tokens", "reused_prompt_tokens")}}
            self.latencies_ms.append(latency)
            self.breakdowns.append({**{part: float(stats.get(part) or 0.0) for part in LATENCY_PARTS[:-1]},
                                    "total_ms": latency})
            mal = stats.get("mean_accepted_length")
            if isinstance(mal, (int, float)):
                self.accepted_lengths.append(float(mal))
            for source, n in (stats.get("hits") or {}).items():
                self.hits[source] += int(n)
        return CompletionOutcome(text, reason, latency, stats)

    # ------------------------------------------------------------------ observability
    def status(self) -> dict:
        """A JSON-able snapshot for ``fastcoder/status`` (latencies in ms, sizes in tokens/files/bytes)."""
        lat = list(self.latencies_ms)
        total_hits = sum(self.hits.values())
        loaded = self.loaded
        return {
            "state": self.state if self.state != "idle" else "loading",
            "model": getattr(loaded, "name", None) or self.settings.resolved_model(),
            "device": str(getattr(loaded, "device", self.settings.device)),
            "dtype": str(getattr(loaded, "dtype", self.settings.dtype)).replace("torch.", ""),
            "method": self.settings.method,
            "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(self.settings).items()},
            "error": self.error,
            "load_ms": self.load_ms,
            "common": {"name": self.settings.common_datastore,
                       "tokens": int(getattr(self.common, "num_tokens", 0) or 0) if self.common is not None else 0},
            # a list, not a dict keyed by path: JSON keys that are not identifiers get renamed by pygls clients
            "repo": [{"root": root, **idx.summary()} for root, idx in list(self.folders.items())],
            "latencies_ms": lat[-20:],
            "p50_ms": _percentile(lat, 50),
            "p95_ms": _percentile(lat, 95),
            "type_through_p95_ms": _percentile(list(self.type_through_ms), 95),
            "latency_breakdown_ms": latency_breakdown(list(self.breakdowns)),
            "mean_accepted_length": (sum(self.accepted_lengths) / len(self.accepted_lengths)
                                     if self.accepted_lengths else None),
            "cache_hit_rate": (self.hits["cache"] / total_hits) if total_hits else None,
            "hits": dict(self.hits),
            "cached_documents": len(self._caches),
            "cache_bytes": self._cache_bytes(),
            "counters": dict(self.counters),
            "last_reindex_ms": self.last_reindex_ms,
            "verify_cost": self.verify_cost,
            # greedy steps take the LM head's argmax by int8 screening and exact rescoring (the same tokens)
            "lm_head_screen": self.lm_head_screen,
            "forward_kernels": self.forward_kernels,
            # the native products' and attention's row limits, timed at a load or read from the probe cache
            "native_rows": self.native_rows,
            # a GPU model's steps replay CUDA graphs (engine.cuda_graphs): True, why not, or None (a CPU model)
            "cuda_graphs": getattr(self.loaded, "cuda_graphs_status", None),
            # greedy steps in one native call (engine.native.step): known after the first (the load's c(n) measurement)
            "greedy_step": self.greedy_step,
            # the packed weights' MB on 2 MB pages (engine.huge_pages; the KV cache's follow the same switch)
            "weights_on_huge_pages_mb": self.weights_on_huge_pages_mb,
            # a flat c(n) (a GPU's): fastcoder searches every source beside the context copy (engine.cost_model)
            "cheap_verification": self._cheap_verification(),
            "acceptance": self._estimator.summary() if self._estimator is not None else None,
            "history_completions": self._history.num_completions if self._history is not None else 0,
            # the model's output on other packages that warmed the history (engine.output_store), None: started empty
            "output_store": getattr(self._history, "store", None),
            "warm_prompt_share": (self.counters["reused_prompt_tokens"] / self.counters["prompt_tokens"]
                                  if self.counters["prompt_tokens"] else None),
            "index": {"pending_file_events": self.pending_file_events(), "rescans": self.rescans,
                      "rebuilds": self.counters["rebuilds"],
                      "limits": {"maxIncrementalFiles": self.settings.max_incremental_files,
                                 "maxFileBytes": self.settings.max_file_bytes}},
            "last": self.last,
        }

    def shutdown(self) -> None:
        """Stop accepting work; running jobs finish (they are cancelled by the server first)."""
        with self._lock:
            self._generation += 1
        self.model_pool.shutdown(wait=False, cancel_futures=True)
        self.loader_pool.shutdown(wait=False, cancel_futures=True)
        self.index_pool.shutdown(wait=False, cancel_futures=True)

class _LoadFailed(Exception):
    """Model loading failed with a message meant for the user."""


#: The parts of a completion's server-side latency (ms), in order: waiting for the model worker (``queue_ms``: a
#: running background prefill or an earlier completion), building the prompt (``prompt_ms``: tokenization,
#: token healing), the prefill of what the prompt KV cache did not hold (``prefill_ms``), the decode
#: (``decode_ms``), and the whole, request received to answer ready (``total_ms``; the rest is post-processing).
LATENCY_PARTS = ("queue_ms", "prompt_ms", "prefill_ms", "decode_ms", "total_ms")


def latency_breakdown(records: list[dict]) -> dict | None:
    """Median and mean of each :data:`LATENCY_PARTS` entry (ms) over ``records`` (one dict per completed
    completion, as :class:`EngineHost` keeps them), with their count ``n``; None without records."""
    if not records:
        return None
    out: dict = {"n": len(records)}
    for part in LATENCY_PARTS:
        values = [float(r.get(part, 0.0)) for r in records]
        out[part] = {"p50": round(_percentile(values, 50), 2), "mean": round(sum(values) / len(values), 2)}
    return out


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]
