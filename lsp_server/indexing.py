"""D_r maintenance for :class:`lsp_server.host.EngineHost`: building each workspace folder's repository
datastore, applying file events, rescans. No LSP import (the host's rule).

Threads (see :mod:`lsp_server.host`): folder builds run on the loader thread, every D_r change and
attach on the ``fastcoder-index`` thread. Events queued while it works are coalesced per path; a batch
touching more than ``settings.max_incremental_files`` files of a folder rebuilds that folder's D_r;
indexing waits (at most :data:`INDEX_YIELD_S`) for a running completion, and both indexing threads
run at a lower OS priority. D_r is searched lock-free over immutable snapshots, so a completion never
waits behind indexing.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

log = logging.getLogger("fastcoder.lsp")

INDEX_YIELD_S = 2.0  # indexing waits at most this long (seconds) for a running completion before going on


def lower_thread_priority() -> None:
    """Renice the calling thread (Linux schedules threads as tasks) so that indexing and loading yield
    the CPU to the model worker and the message loop; a no-op where that is not possible."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass


class FolderIndex:
    """D_r of one workspace folder plus its indexing state (``off`` | ``indexing`` | ``ready`` | ``error``)."""

    def __init__(self, root: str):
        self.root = root
        self.datastore: Any = None
        self.state = "off"
        self.error: str | None = None
        self.pending: dict[str, str] = {}  # path -> "changed" | "deleted" seen while indexing
        self.build_ms: float | None = None
        self.builds = 0  # D_r builds attached so far (a client waits for this to grow after rebuildIndex)

    def summary(self) -> dict:
        ds = self.datastore
        return {
            "state": self.state,
            "tokens": int(getattr(ds, "num_tokens", 0) or 0) if ds is not None else 0,
            "files": int(getattr(ds, "num_files", 0) or 0) if ds is not None else 0,
            "build_ms": self.build_ms,
            "builds": self.builds,
            "error": self.error,
        }


class IndexingMixin:
    """The repository-datastore half of :class:`lsp_server.host.EngineHost` (state lives there)."""

    def _mark_queued(self, roots: list[str]) -> None:
        """Show ``roots`` as ``indexing`` from the moment their build is queued (caller holds ``_lock``).

        The build itself runs later on the (low-priority) loader thread; until it starts, a folder left
        ``off`` would read as "nothing to index" to a client polling ``fastcoder/status``, and file
        events for it would be dropped while the build that follows still reads the disk."""
        if not self.settings.repo_index:
            return
        for root in roots:
            index = self.folders.get(root)
            if index is not None and index.state != "ready":
                index.state, index.error = "indexing", None

    def _index_all(self, gen: int) -> None:
        for root in list(self.folders):
            if gen != self._generation:
                return
            self._index_folder(root, gen)

    def _index_folder(self, root: str, gen: int) -> None:
        index = self.folders.get(root)
        if index is None or self.loaded is None:
            return
        if not self.settings.repo_index:
            index.state, index.datastore = "off", None
            self._attach(root, None)
            return
        if not Path(root).is_dir():
            index.state, index.error = "error", f"workspace folder {root} does not exist"
            self.notify("warning", f"fastcoder: {index.error}; it is not indexed")
            return
        index.state, index.error = "indexing", None
        t0 = time.perf_counter()
        try:
            from engine.repo_datastore import RepoDatastore  # noqa: PLC0415

            def report(done: int, total: int) -> None:
                self.progress("index", f"indexing {Path(root).name}: {done}/{total} files",
                              60 + (35 * done) // max(total, 1), False)

            self.wait_model_idle(INDEX_YIELD_S)
            ds = RepoDatastore.build(root, self.loaded.tokenizer, exclude=list(self.settings.exclude),
                                     max_file_bytes=self.settings.max_file_bytes, progress=report)
        except Exception as exc:
            log.exception("indexing %s failed", root)
            index.state, index.error = "error", f"indexing {root} failed: {exc}"
            self.notify("warning", f"fastcoder: {index.error}")
            return
        if gen != self._generation or root not in self.folders:
            return
        index.build_ms = (time.perf_counter() - t0) * 1000
        log.info("indexed %s: %s tokens, %s files in %.0f ms", root, getattr(ds, "num_tokens", "?"),
                 getattr(ds, "num_files", "?"), index.build_ms)
        # attach on the index worker, which owns every D_r change (decoders see whole snapshots)
        self.index_pool.submit(self._attach_built, root, index, ds).result()

    def _attach_built(self, root: str, index: FolderIndex, ds: Any) -> None:
        index.datastore, index.state = ds, "ready"
        pending, index.pending = index.pending, {}
        self._attach(root, ds)
        if len(pending) > self.settings.max_incremental_files:  # changed while it was built: again
            log.info("%d files changed in %s while it was indexed: rebuilding its D_r", len(pending), root)
            self.counters["rebuilds"] += 1
            self.loader_pool.submit(self._index_folder, root, self._generation)
            pending = {}
        for path, kind in pending.items():
            self.wait_model_idle(INDEX_YIELD_S)
            self._apply_file_event(index, path, kind, self.buffers.get(path))
        for path, text in list(self.buffers.items()):  # a (re)build read the disk: buffers win again
            if path not in pending and self.folder_of(path) == root:
                self._apply_file_event(index, path, "changed", text)
        index.builds += 1  # counted once the build is attached with the buffers and pending events

    def _attach(self, root: str, ds: Any) -> None:
        with self._lock:
            self._decoders.pop(root, None)

    def set_folders(self, folders: list[str]) -> None:
        """Replace the set of workspace folders: new ones are indexed in the background, removed ones dropped."""
        with self._lock:
            for root in list(self.folders):
                if root not in folders:
                    del self.folders[root]
                    self._decoders.pop(root, None)
            added = [r for r in folders if r not in self.folders]
            for root in added:
                self.folders[root] = FolderIndex(root)
            gen = self._generation
            ready = self.state == "ready"
            if ready:
                self._mark_queued(added)
        if ready:
            for root in added:
                self.loader_pool.submit(self._index_folder, root, gen)

    def rebuild_index(self) -> list[str]:
        """Re-index every workspace folder from scratch in the background (e.g. after a
        ``.gitignore`` change); completions keep using the old D_r until the new one is attached.
        Returns the folders queued (empty while the model is not loaded)."""
        with self._lock:
            if self.state != "ready":
                return []
            gen, roots = self._generation, list(self.folders)
        for root in roots:
            self.loader_pool.submit(self._index_folder, root, gen)
        return roots

    def folder_of(self, path: str | None) -> str | None:
        """The deepest workspace folder containing ``path`` (a filesystem path), or None."""
        if not path:
            return None
        best = None
        for root in list(self.folders):
            if (path == root or path.startswith(root.rstrip("/") + "/")) and (best is None or len(root) > len(best)):
                best = root
        return best

    def file_events(self, events: dict[str, str], buffers: dict[str, str] | None = None) -> Future:
        """Queue file events ``{path: "changed" | "deleted"}`` for the D_r of their folders (index worker).

        buffers: ``{path: text}`` for open documents whose unsaved text is what counts (else the file on
        disk is read). Events queued while the worker is busy are coalesced per path (the latest wins).
        Returns a future resolved once these events are applied (result: files updated or removed)."""
        buffers = buffers or {}
        with self._events_lock:
            for path, kind in events.items():
                self._pending_events[path] = (kind, buffers.get(path), path in buffers)
            schedule = not self._drain_scheduled
            self._drain_scheduled = True
        if schedule:
            self._drain_future = self.index_pool.submit(self._drain_events)
        return self._drain_future

    def _drain_events(self) -> int:
        with self._events_lock:
            batch, self._pending_events = self._pending_events, {}
            self._drain_scheduled = False
            self._applying = len(batch)
        try:
            return self._apply_batch(batch)
        finally:
            with self._events_lock:
                self._applying = 0

    def _apply_batch(self, batch: dict[str, tuple[str, str | None, bool]]) -> int:
        if not batch:
            return 0
        t0 = time.perf_counter()
        done = 0
        by_folder: dict[str | None, list[str]] = collections.defaultdict(list)
        for path, (kind, text, has_buffer) in batch.items():
            if has_buffer:  # an open document's unsaved text counts until the editor closes it
                self.buffers[path] = text
            else:
                self.buffers.pop(path, None)
            by_folder[self.folder_of(path)].append(path)
        for root, paths in by_folder.items():
            index = self.folders.get(root) if root else None
            if index is None:
                continue
            if index.state == "indexing":
                index.pending.update({p: batch[p][0] for p in paths})
                continue
            if index.state != "ready":
                continue
            if len(paths) > self.settings.max_incremental_files:
                log.info("%d files changed in %s: rebuilding its D_r", len(paths), root)
                self.counters["rebuilds"] += 1
                self.loader_pool.submit(self._index_folder, root, self._generation)
                continue
            for path in paths:
                self.wait_model_idle(INDEX_YIELD_S)
                done += self._apply_file_event(index, path, batch[path][0], self.buffers.get(path))
        if done:
            self.last_reindex_ms = (time.perf_counter() - t0) * 1000
            self.counters["reindexed_files"] += done
        return done

    def rescan(self, reason: str) -> list[str]:
        """Rebuild every folder's D_r from the disk (events were lost, e.g. an inotify queue overflow)."""
        self.rescans += 1
        self.notify("info", f"fastcoder: {reason}; re-indexing the workspace")
        return self.rebuild_index()

    def pending_file_events(self) -> int:
        """File events queued for or being applied by the index worker (not applied yet)."""
        with self._events_lock:
            return len(self._pending_events) + getattr(self, "_applying", 0)

    def _apply_file_event(self, index: FolderIndex, path: str, kind: str, text: str | None) -> int:
        """One D_r change: ``text`` is an open buffer's content, None reads the file from disk (the
        datastore filters out ignored, binary, huge and non-UTF-8 files and removes vanished ones)."""
        ds = index.datastore
        if ds is None:
            return 0
        try:
            if kind == "deleted":
                ds.remove(path)
            else:
                ds.update(path, text)
            return 1
        except Exception as exc:  # a bad file must never stop indexing
            log.warning("D_r update of %s failed: %s", path, exc)
            return 0

    def repo_contains(self, text: str) -> list[dict]:
        """Debug helper (model worker): ``[{"root": folder, "found": bool}]``, whether each folder's D_r holds the tokens of ``text`` (its first and
        last token are dropped, as tokenisation at the edges depends on the surrounding text)."""
        if self.loaded is None:
            return []
        import numpy as np  # noqa: PLC0415

        ids = list(self.loaded.tokenizer.encode(text, add_special_tokens=False))
        core = np.asarray(ids[1:-1] if len(ids) > 3 else ids, dtype=np.int64)
        out = []
        for root, index in list(self.folders.items()):
            ds = index.datastore
            found = False
            if ds is not None and len(core):
                r = ds.search(core, n_max=len(core), n_min=len(core), draft_len=1, max_matches=1)
                found = int(r.match_length) >= len(core)
            out.append({"root": root, "found": found})
        return out
