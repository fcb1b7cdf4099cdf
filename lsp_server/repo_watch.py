"""File watching for the repository datastores (watchdog 7, debounced).

Editors without dynamic ``workspace/didChangeWatchedFiles`` registration (Neovim) send no file events, so
the server watches each workspace folder itself. Events in .git, virtual environments, node_modules and
caches are ignored; bursts are debounced (watchdog's EventDebouncer) and coalesced per path into
``{path: "changed" | "deleted"}`` (a move is delete(src) + change(dest)), then handed to ``on_batch`` on
the debouncer thread, which must only hand off (the host submits to its model worker).
"""

from __future__ import annotations

import logging
import os
from typing import Callable

from watchdog.events import (FileClosedEvent, FileCreatedEvent, FileDeletedEvent, FileModifiedEvent,
                             FileMovedEvent, FileSystemEvent, FileSystemEventHandler)
from watchdog.observers import Observer
from watchdog.utils.event_debouncer import EventDebouncer

log = logging.getLogger("fastcoder.lsp")

IGNORED_DIRS = (".git", ".hg", ".svn", ".venv", "venv", "env", "node_modules", "__pycache__", ".mypy_cache",
                ".pytest_cache", ".tox", "build", "dist", ".idea", ".vscode")
IGNORED_SUFFIXES = (".tmp", "~", ".swp", ".pyc")
_IGNORED_DIR_SET = frozenset(IGNORED_DIRS)


def is_ignored_path(path: str) -> bool:
    """Whether a file event's path is inside an ignored directory or is an editor/build temporary.

    A set lookup per path component: watchdog's glob matching (PatternMatchingEventHandler) cost ~0.1 ms
    per event in Python, and a checkout of thousands of files sends tens of thousands of events, all
    competing with the model's forward passes for the GIL."""
    if path.endswith(IGNORED_SUFFIXES):
        return True
    return not _IGNORED_DIR_SET.isdisjoint(path.split(os.sep))
DEBOUNCE_S = 0.2
#: The only events D_r needs. watchdog turns this into the inotify mask, so opens and reads of the
#: workspace (a grep, a test run) never reach the kernel queue, which used to overflow and drop edits.
EVENT_FILTER = [FileCreatedEvent, FileModifiedEvent, FileDeletedEvent, FileMovedEvent, FileClosedEvent]


_IGNORED_DIR_BYTES = frozenset(os.fsencode(d) for d in IGNORED_DIRS)


def _skip_ignored_trees() -> bool:
    """Keep inotify watches off ignored trees (``.git``, virtual environments, ``node_modules``, ...).

    watchdog 7's recursive inotify watch adds a kernel watch for every directory below the root and
    filters events in Python afterwards, so a workspace with a large ``node_modules`` spends the user's
    inotify watch limit (8,192 by default) on directories we never index. This replaces its
    ``InotifyWatchGroup._add_all_callbacks`` (the one place it walks a tree to add watches: at start,
    for new and moved-in directories) with the same walk pruned at ignored names, as an upstream
    exclude option would. Returns whether the patch is in place (False on other platforms or
    watchdog versions; watching then works as before)."""
    try:
        from watchdog.observers import inotify as wd_inotify  # noqa: PLC0415
    except Exception:  # not Linux
        return False
    group = getattr(wd_inotify, "InotifyWatchGroup", None)
    if group is None or not hasattr(group, "_add_all_callbacks") or not hasattr(group, "_add_callback"):
        return False
    if getattr(group, "_fastcoder_prunes_ignored", False):
        return True

    def _add_all_callbacks(self, path):
        if os.path.basename(os.fsencode(path)) in _IGNORED_DIR_BYTES:
            return
        is_dir = os.path.isdir(path)
        self._add_callback(path)
        if is_dir and self.is_recursive:
            for root, dirnames, _ in os.walk(path, followlinks=self.follow_symlink):
                dirnames[:] = [d for d in dirnames if os.fsencode(d) not in _IGNORED_DIR_BYTES]
                for dirname in dirnames:
                    full_path = os.path.join(root, dirname)
                    if not self.follow_symlink and os.path.islink(full_path):
                        continue
                    self._add_callback(full_path)

    group._add_all_callbacks = _add_all_callbacks
    group._fastcoder_prunes_ignored = True
    return True


class _OverflowListener(logging.Handler):
    """watchdog reports a kernel queue overflow only in a log line ("Inotify queue overflowed"); this
    handler on its logger turns that line into a callback, so lost events trigger a rescan."""

    def __init__(self, callback: Callable[[], None]):
        super().__init__(logging.WARNING)
        self.callback = callback

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            try:
                self.callback()
            except Exception:  # never raise into watchdog's thread
                log.exception("overflow callback failed")


def coalesce(events: list[FileSystemEvent]) -> dict[str, str]:
    """Per-path outcome of a burst of watchdog events, in order: ``"changed"`` or ``"deleted"``."""
    out: dict[str, str] = {}
    for ev in events:
        if ev.is_directory:
            continue
        src = str(ev.src_path) if ev.src_path else ""
        if ev.event_type == "moved":
            if src:
                out[src] = "deleted"
            if ev.dest_path:
                out[str(ev.dest_path)] = "changed"
        elif ev.event_type == "deleted":
            out[src] = "deleted"
        elif ev.event_type in ("created", "modified", "closed") and src:
            out[src] = "changed"
    return out


class _Collector(FileSystemEventHandler):
    def __init__(self, debouncer: EventDebouncer):
        super().__init__()
        self.debouncer = debouncer

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type in ("opened", "closed_no_write", "attrib"):
            return
        src = os.fsdecode(event.src_path)
        dest = os.fsdecode(event.dest_path) if event.dest_path else ""
        if is_ignored_path(src) and (not dest or is_ignored_path(dest)):
            return
        self.debouncer.handle_event(event)


class RepoWatcher:
    """Watches workspace folders; calls ``on_batch({path: "changed" | "deleted"})`` after each quiet period
    of ``debounce_s`` seconds. ``add``/``remove`` folders at any time; ``stop()`` ends both threads."""

    def __init__(self, on_batch: Callable[[dict[str, str]], None], debounce_s: float = DEBOUNCE_S,
                 on_overflow: Callable[[], None] | None = None):
        self._on_batch = on_batch
        self.prunes_ignored_trees = _skip_ignored_trees()
        self._overflow_listener = None
        if on_overflow is not None:
            self._overflow_listener = _OverflowListener(on_overflow)
            logging.getLogger("watchdog.observers.inotify_c").addHandler(self._overflow_listener)
        self._debouncer = EventDebouncer(debounce_s, self._flush)
        self._observer = Observer()
        self._watches: dict[str, object] = {}
        self._started = False

    def _flush(self, events: list[FileSystemEvent]) -> None:
        batch = coalesce(events)
        if batch:
            try:
                self._on_batch(batch)
            except Exception:  # never kill the debouncer thread
                log.exception("file-event batch failed")

    def add(self, root: str) -> bool:
        """Start watching ``root`` recursively; False (and a log line) when it cannot be watched."""
        if root in self._watches:
            return True
        try:
            if not self._started:
                self._debouncer.start()
                self._observer.start()
                self._started = True
            self._watches[root] = self._observer.schedule(_Collector(self._debouncer), root, recursive=True,
                                                          event_filter=EVENT_FILTER)
            return True
        except Exception as exc:  # vanished folder, inotify limit, ...
            log.warning("cannot watch %s: %s", root, exc)
            return False

    def remove(self, root: str) -> None:
        """Stop watching ``root`` (no-op if it was not watched)."""
        watch = self._watches.pop(root, None)
        if watch is not None:
            try:
                self._observer.unschedule(watch)
            except Exception as exc:
                log.debug("unschedule %s: %s", root, exc)

    def stop(self) -> None:
        """Stop the observer and the debouncer threads."""
        if self._overflow_listener is not None:
            logging.getLogger("watchdog.observers.inotify_c").removeHandler(self._overflow_listener)
            self._overflow_listener = None
        if not self._started:
            return
        try:
            self._observer.stop()
            self._debouncer.stop()
            self._observer.join(timeout=2)
            self._debouncer.join(timeout=2)
        except Exception as exc:
            log.debug("watcher stop: %s", exc)
        self._started = False
