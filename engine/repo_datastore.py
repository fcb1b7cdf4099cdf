"""Repository datastore D_r: the workspace's source files as a token datastore, updated incrementally.

FastCoder (Zhao et al., 2025, Sec. 3) retrieves from a repository datastore D_r next to the common
one; REST (He et al., 2024) only has static stores, and a suffix array cannot be appended to. Here
D_r is a *base* :class:`~engine.datastore.Datastore` of every indexed file plus, after edits,

- an *overlay* Datastore of the current text of every changed/new file (rebuilt on each update:
  small, ~1-10 ms), and
- a *tombstone* Datastore of the base documents of changed/removed files. An occurrence in the
  base is live unless it lies in such a document; the number of live occurrences of a pattern is
  ``count_base - count_tombstone`` (two O(log N) C searches), so the longest-match search stays
  exact without scanning the base.

When overlay + tombstone pass ``merge_tokens`` tokens the base is rebuilt from the per-file token
cache (no re-tokenisation). Results equal a rebuild from scratch (same match_length, continuation
rows and counts) whenever ``max_matches`` is not limiting.

Which files are indexed: :mod:`engine.source_files`; how their text becomes token ids:
:mod:`engine.source_chunks`.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from .datastore import (SEPARATOR, Datastore, DatastoreError, MatchState, Retrieval, count_rows,
                        longest_length, prepare_context, sample_range)
from .source_chunks import TOKENIZE_BATCH_CHARS, ChunkEncoder, split_chunks, tokenize_texts
from .source_files import (BINARY_SNIFF_BYTES, SKIP_DIRS, SOURCE_EXTENSIONS, SourceFilter, iter_source_files,
                           read_source_text)

__all__ = ["SOURCE_EXTENSIONS", "SKIP_DIRS", "RepoDatastore", "SourceFilter", "ChunkEncoder",
           "read_source_text", "iter_source_files", "tokenize_texts", "split_chunks"]


def _split_span(text: str, span: tuple[int, int] | None) -> list[str]:
    if span is None:
        return [text]
    start, end = max(0, span[0]), max(span[0], span[1])
    return [text[:start], text[end:]]


# ----------------------------------------------------------------------------------- snapshots


@dataclass(frozen=True)
class _Snapshot:
    """An immutable view of D_r; readers grab one reference and never see a half update."""

    base: Datastore
    base_starts: np.ndarray            # (D,) int64 token position of each base document
    masked: np.ndarray | None          # (D,) bool: base document belongs to a changed/removed file
    tomb: Datastore | None             # the masked base documents
    overlay: Datastore | None          # current documents of changed/new files
    version: int


class RepoDatastore:
    """D_r: the repository's files as a searchable, incrementally updated token datastore.

    Build with :meth:`build`; keep current with :meth:`update` / :meth:`remove` (one writer thread);
    query with :meth:`search` (any reader thread, lock-free: it reads one immutable snapshot).
    """

    #: :meth:`search` takes a ``state`` (:class:`~engine.datastore.MatchState`).
    supports_match_state = True
    #: Overlay size (tokens) above which the next change merges everything into a new base.
    merge_overlay_tokens = 196_608
    #: Tombstone size (tokens) above which the next change merges everything into a new base.
    merge_tomb_tokens = 524_288

    def __init__(self, root: Path, tokenizer, source_filter: SourceFilter, vocab_size: int,
                 exclude_span: tuple[str, int, int] | None = None) -> None:
        """Internal: use :meth:`build`."""
        self._root = Path(root).resolve()
        self._filter = source_filter
        self._encoder = ChunkEncoder(tokenizer)
        self._vocab_size = int(vocab_size)
        self._span_rel: str | None = None
        self._span: tuple[int, int] | None = None
        if exclude_span is not None:
            self._span_rel = source_filter.relpath(exclude_span[0])
            self._span = (int(exclude_span[1]), int(exclude_span[2]))
        self._files: dict[str, tuple[np.ndarray, ...]] = {}    # rel -> documents (int32)
        self._chunks: dict[str, dict] = {}                       # rel -> chunk text -> ids
        self._base_files: dict[str, tuple[np.ndarray, ...]] = {}
        self._base_order: list[str] = []
        self._dirty: set[str] = set()
        self._tomb_key: tuple[str, ...] = ()
        self._tomb: Datastore | None = None
        self._masked: np.ndarray | None = None
        self._lock = threading.Lock()
        self._version = 0
        self._num_tokens = 0
        self._snap: _Snapshot | None = None

    # ------------------------------------------------------------------ build

    @classmethod
    def build(cls, root: str | os.PathLike, tokenizer, exclude: Iterable[str] = (),
              max_file_bytes: int = 1_000_000, progress: Callable[[int, int], None] | None = None,
              exclude_span: tuple[str | os.PathLike, int, int] | None = None,
              chunk_cache: dict | None = None) -> "RepoDatastore":
        """Index every source file under ``root`` (see the module docstring for the filter).

        Args:
            root: repository directory.
            tokenizer: a Hugging Face tokenizer (fast recommended); ids must be < ``len(tokenizer)``.
            exclude: extra gitwildmatch globs relative to root (e.g. ``"tests/**"``, ``"*.min.js"``).
            max_file_bytes: larger files are skipped (bytes).
            progress: optional ``callable(done_files, total_files)``, called after each batch.
            exclude_span: ``(path, start_char, end_char)``: that file is indexed as two documents, the
                text before and after the span, so the span's tokens never enter D_r (benchmarks).
            chunk_cache: chunk text -> token ids (int32), read and filled; pass the same dict to builds of one
                repository with one tokenizer and only the chunks not seen before are tokenised (the benchmark
                and ``build-output-store`` build one D_r per task: on a 6 MB package each build tokenised it all).
        Raises DatastoreError if ``root`` is not a directory. Unreadable/binary files are skipped.
        Cost (2 cores): ~4 s per 1M tokens (~70k lines of Python), mostly tokenisation.
        """
        root_p = Path(root)
        if not root_p.is_dir():
            raise DatastoreError(f"repository root {root} is not a directory")
        flt = SourceFilter(root_p, tuple(exclude), max_file_bytes)
        self = cls(flt.root, tokenizer, flt, len(tokenizer), None if exclude_span is None else
                   (str(exclude_span[0]), exclude_span[1], exclude_span[2]))
        rels = list(flt.walk())
        total, done, chars = len(rels), 0, 0
        batch: dict[str, str] = {}
        # chunk cache shared across files during the build (dedupes licence headers...), and across builds if given
        shared: dict = chunk_cache if chunk_cache is not None else {}
        for rel in rels:
            text = read_source_text(flt.root / rel, max_file_bytes)
            done += 1
            if text is not None:
                batch[rel] = text
                chars += len(text)
            if chars >= TOKENIZE_BATCH_CHARS or done == total:
                self._index_texts(batch, shared)
                batch, chars = {}, 0
                if progress is not None:
                    progress(done, total)
        self._rebuild_base()
        return self

    def _index_texts(self, texts: dict[str, str], shared: dict | None = None) -> None:
        """Tokenise files (rel -> text) into ``self._files`` / ``self._chunks`` (no snapshot change)."""
        pieces, owners = [], []
        for rel, text in texts.items():
            for part in _split_span(text, self._span if rel == self._span_rel else None):
                pieces.append(part)
                owners.append(rel)
        cache = shared if shared is not None else {}
        if shared is None:
            for rel in texts:
                cache.update(self._chunks.get(rel, {}))
        ids, entries = self._encoder.encode(pieces, cache)
        docs: dict[str, list[np.ndarray]] = {rel: [] for rel in texts}
        chunks: dict[str, dict] = {rel: {} for rel in texts}
        for rel, arr, own in zip(owners, ids, entries):
            if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= self._vocab_size):
                raise DatastoreError(f"tokenizer produced ids outside [0, {self._vocab_size}) for {rel}")
            docs[rel].append(arr)
            chunks[rel].update(own)
            if shared is not None:
                shared.update(own)
        for rel in texts:
            old = self._files.get(rel)
            self._num_tokens += sum(d.size for d in docs[rel]) - (sum(d.size for d in old) if old else 0)
            self._files[rel] = tuple(docs[rel])
            if self._encoder.chunked:
                self._chunks[rel] = chunks[rel]

    def _rebuild_base(self) -> None:
        """Merge: a fresh base from the per-file token cache; clears overlay and tombstones."""
        order = sorted(self._files)
        docs = [d for rel in order for d in self._files[rel]]
        base = Datastore.from_documents(docs, self._vocab_size)
        lengths = np.fromiter((d.size + 1 for d in docs), np.int64, len(docs))
        starts = np.zeros(len(docs), np.int64)
        if len(docs) > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        self._base_files = {rel: self._files[rel] for rel in order}
        self._base_order = order
        self._dirty = set()
        self._tomb_key, self._tomb, self._masked = (), None, None
        self._snap = _Snapshot(base, starts, None, None, None, self._version)

    # ------------------------------------------------------------------ incremental updates

    def update(self, path: str | os.PathLike, text: str | None = None) -> bool:
        """Index the current content of one new or changed file.

        ``path``: absolute or root-relative. ``text``: the current content (e.g. an unsaved editor
        buffer); None reads the file from disk. Paths outside root, filtered out (.gitignore, exclude,
        extension, skipped directories) are ignored; text over ``max_file_bytes``, binary or
        unreadable removes the file. An update of the ``exclude_span`` file indexes the new text
        whole (the span referred to the old text). Returns whether the file is now indexed.
        Cost: re-tokenising the changed chunks plus rebuilding the overlay (~5-30 ms), or a base merge
        (~0.3 s per 1M tokens) once the overlay passes :attr:`merge_overlay_tokens`.
        """
        rel = self._filter.relpath(path)
        if rel is None or not self._filter.accepts(rel):
            return False
        if text is None:
            text = read_source_text(self._root / rel, self._filter.max_file_bytes)
        elif len(text) > self._filter.max_file_bytes or "\x00" in text[:BINARY_SNIFF_BYTES]:
            text = None
        if text is None:
            self.remove(rel)
            return False
        with self._lock:
            if rel == self._span_rel:
                self._span_rel = None
            old = self._files.get(rel)
            self._index_texts({rel: text})
            if old is not None and _same_docs(old, self._files[rel]):
                return True
            self._apply_change(rel)
        return True

    def remove(self, path: str | os.PathLike) -> bool:
        """Drop a file from D_r (deleted, or no longer indexable). Returns whether it was indexed."""
        rel = self._filter.relpath(path)
        if rel is None:
            return False
        with self._lock:
            if rel == self._span_rel:
                self._span_rel = None
            if rel not in self._files:
                return False
            self._num_tokens -= sum(d.size for d in self._files.pop(rel))
            self._chunks.pop(rel, None)
            self._apply_change(rel)
        return True

    def _apply_change(self, rel: str) -> None:
        """Under the lock, after ``self._files[rel]`` changed: new overlay (and tombstones if the set
        of changed files changed), or a merge into a new base; then swap the snapshot."""
        self._version += 1
        base_docs, cur_docs = self._base_files.get(rel), self._files.get(rel)
        if (base_docs is None and cur_docs is None) or (
                base_docs is not None and cur_docs is not None and _same_docs(base_docs, cur_docs)):
            self._dirty.discard(rel)
        else:
            self._dirty.add(rel)
        dirty = sorted(self._dirty)
        over_docs = [d for r in dirty for d in self._files.get(r, ())]
        tomb_key = tuple(r for r in dirty if r in self._base_files)
        tomb_docs = [d for r in tomb_key for d in self._base_files[r]]
        if (sum(d.size + 1 for d in over_docs) > self.merge_overlay_tokens
                or sum(d.size + 1 for d in tomb_docs) > self.merge_tomb_tokens):
            self._rebuild_base()
            return
        snap = self._snap
        if tomb_key != self._tomb_key:
            self._tomb_key = tomb_key
            self._tomb = Datastore.from_documents(tomb_docs, self._vocab_size) if tomb_docs else None
            self._masked = self._mask(set(tomb_key)) if tomb_docs else None
        overlay = Datastore.from_documents(over_docs, self._vocab_size) if over_docs else None
        self._snap = _Snapshot(snap.base, snap.base_starts, self._masked, self._tomb, overlay,
                               self._version)

    def _mask(self, rels: set[str]) -> np.ndarray:
        """(D,) bool over base documents: True for documents of the given files."""
        masked = np.zeros(len(self._snap.base_starts), bool)
        i = 0
        for r in self._base_order:
            n = len(self._base_files[r])
            if r in rels:
                masked[i:i + n] = True
            i += n
        return masked

    # ------------------------------------------------------------------ properties

    @property
    def root(self) -> Path:
        return self._root

    @property
    def version(self) -> int:
        """Increases by one on every change of the indexed content."""
        return self._version

    @property
    def num_files(self) -> int:
        return len(self._files)

    @property
    def num_tokens(self) -> int:
        """Live tokens (excluding separators) over all indexed files."""
        return self._num_tokens

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def nbytes(self) -> int:
        """Bytes held by the datastores and the per-file token cache."""
        s = self._snap
        total = s.base.nbytes + sum(x.nbytes for x in (s.tomb, s.overlay) if x is not None)
        return int(total + sum(d.nbytes for docs in list(self._files.values()) for d in docs))

    def files(self) -> list[str]:
        """Root-relative POSIX paths of the indexed files, sorted."""
        return sorted(self._files)

    def to_datastore(self, tokenizer_fingerprint: str = "") -> Datastore:
        """A flat :class:`~engine.datastore.Datastore` of the current documents (files in path order), to
        :meth:`~engine.datastore.Datastore.save` for a server that loads D_r from disk (``fastcoder index
        build --repo``: fastcoder's vLLM proposer). Its suffix array is built anew (~0.25 s per 1M tokens)."""
        with self._lock:
            docs = [d for rel in sorted(self._files) for d in self._files[rel]]
        return Datastore.from_documents(docs, self._vocab_size, tokenizer_fingerprint=tokenizer_fingerprint)

    def __repr__(self) -> str:
        return f"RepoDatastore(root={str(self._root)!r}, files={self.num_files}, version={self.version})"

    # ------------------------------------------------------------------ search

    def searched_store(self) -> Datastore | None:
        """The :class:`~engine.datastore.Datastore` whose search this one's is right now: the base while no edit
        is pending (:meth:`search` hands it the query), else None (the search merges base and overlay)."""
        s = self._snap
        return s.base if s.overlay is None and s.tomb is None else None

    def search(self, context, n_max: int = 16, n_min: int = 2, draft_len: int = 16,
               max_matches: int = 128, state: MatchState | None = None) -> Retrieval:
        """Same contract as :meth:`engine.datastore.Datastore.search`, over the live documents.

        With pending edits, sampling (``total > max_matches``) splits the cap between base and
        overlay in proportion to their live occurrences, so counts are approximate there.
        ``state``: a :class:`~engine.datastore.MatchState` kept across the searches of one growing
        context (reset by itself when the indexed content changes); same results, fewer probes.
        """
        s = self._snap
        draft_len = int(draft_len)
        if s.overlay is None and s.tomb is None:
            return s.base.search(context, n_max, n_min, draft_len, max_matches, state)
        if n_max < n_min or max_matches <= 0:
            return Retrieval.empty(draft_len)
        n_max, n_min = int(n_max), max(int(n_min), 1)
        q = prepare_context(context, n_max, self._vocab_size)
        if state is None:
            if len(q) < n_min:
                return Retrieval.empty(draft_len)
            n, hit = _longest_live_match(s, q, n_min)
        else:
            key = (self, s.version, n_min, n_max)
            k = state.extension(key, context)
            state.searches += 1
            if len(q) < n_min:
                n, hit = 0, None
            elif k is None:
                n, hit = _longest_live_match(s, q, n_min)
            else:
                state.incremental += 1
                n, hit = _longest_live_match(s, q, n_min, state.upper(k, len(q)))
            state.record(key, context, len(q), n_min, n_max, (n, 0, 0))
        if n == 0:
            return Retrieval.empty(draft_len)
        (b_left, b_cnt), b_live, (o_left, o_cnt) = hit
        total = b_live + o_cnt
        k_b, k_o = b_live, o_cnt
        if total > max_matches:
            k_b = int(round(max_matches * b_live / total))
            k_o = max_matches - k_b
        rows = []
        if k_b:
            want = b_cnt if k_b >= b_live else min(b_cnt, math.ceil(k_b * b_cnt / b_live))
            pos = s.base.positions(sample_range(b_left, b_cnt, want))
            if s.masked is not None:
                doc = np.searchsorted(s.base_starts, pos, side="right") - 1
                pos = pos[~s.masked[doc]][:k_b]
            rows.append(s.base.continuations_at(pos + n, draft_len))
        if k_o:
            pos = s.overlay.positions(sample_range(o_left, o_cnt, k_o))
            rows.append(s.overlay.continuations_at(pos + n, draft_len))
        all_rows = np.concatenate(rows) if rows else np.empty((0, draft_len), np.int32)
        if draft_len > 0:
            all_rows = all_rows[all_rows[:, 0] != SEPARATOR]
        conts, counts = count_rows(all_rows, presorted=False)
        return Retrieval(n, conts, counts, int(total))


def _longest_live_match(s: _Snapshot, q: np.ndarray, n_min: int, hi: int | None = None):
    """Binary search for the longest n in [n_min, hi] whose suffix has a live occurrence in base or
    overlay (hi defaults to ``len(q)``; when given, an upper bound from a :class:`MatchState`, it is
    probed first and the binary search runs below it only on a miss).

    Returns (n, ((base_left, base_count), base_live, (overlay_left, overlay_count))), n = 0 if none.
    """
    pattern = s.base.encode_query(q)
    w = s.base.token_width

    def probe(m: int):
        p = pattern[len(pattern) - m * w:]
        b = s.base.find(p)
        live = b[1]
        if live and s.tomb is not None:
            live -= s.tomb.find(p)[1]
        o = s.overlay.find(p) if s.overlay is not None else (0, 0)
        return (b, live, o) if live > 0 or o[1] > 0 else None

    return longest_length(probe, len(q), n_min, hi)


def _same_docs(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))

