"""Common datastore D_c (REST Sec. 3.1; FastCoder Sec. 3): a static corpus of code, built once per
tokenizer and corpus, cached on disk and memory-mapped.

The default corpus is the running interpreter's standard library (``sysconfig.get_paths()["stdlib"]``,
``.py`` files). ``site-packages`` (third-party code) is skipped; the ``test``/``tests``/``idlelib``
packages are **kept**: they are ordinary, idiomatic stdlib code and the bulk of the assert/unittest
patterns completions meet (CPython 3.11: ~1,790 files, ~8.6M tokens with tiny-py-coder's tokenizer).

Cache location: ``platformdirs.user_cache_dir("fastcoder")/datastores/<tokenizer-fp>-<corpus-fp>``,
where corpus-fp hashes the sorted relative file paths, sizes and mtimes plus the corpus root, so a
changed corpus or tokenizer gets a new datastore and a stale one is never loaded.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import sysconfig
import time
from pathlib import Path
from typing import Callable

import numpy as np

from .cache_paths import cache_root
from .datastore import FORMAT_VERSION, Datastore, DatastoreError, remove_stale_temporaries
from .source_chunks import tokenize_texts
from .source_files import SourceFilter, read_source_text

log = logging.getLogger(__name__)

__all__ = ["tokenizer_fingerprint", "build_common_datastore", "load_common_datastore",
           "stdlib_root", "corpus_files", "corpus_fingerprint", "default_cache_dir"]

_FP_LEN = 16
_BATCH_CHARS = 1_000_000


def tokenizer_fingerprint(tokenizer) -> str:
    """Short hex fingerprint (16 chars) of a tokenizer: sha256 of its serialised vocabulary, merges
    and normaliser (``backend_tokenizer.to_str()`` for fast tokenizers, else the sorted vocabulary)
    plus ``len(tokenizer)``. Equal fingerprints mean equal token ids for equal text."""
    h = hashlib.sha256()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        h.update(backend.to_str().encode("utf-8"))
    else:
        vocab = tokenizer.get_vocab()
        h.update(repr(sorted(vocab.items(), key=lambda kv: kv[1])).encode("utf-8"))
    h.update(f"|len={len(tokenizer)}".encode())
    return h.hexdigest()[:_FP_LEN]


def stdlib_root() -> Path:
    """The running interpreter's standard-library directory."""
    return Path(sysconfig.get_paths()["stdlib"]).resolve()


def corpus_files(corpus: str | os.PathLike | None) -> tuple[Path, list[Path]]:
    """(root, sorted absolute file paths) of a corpus. None = the stdlib's ``.py`` files without
    ``site-packages``; a directory = every source file under it (the D_r filter: .gitignore, skipped
    directories, code-like extensions). Raises DatastoreError if the directory does not exist."""
    if corpus is None:
        root = stdlib_root()
        flt = SourceFilter(root, exclude=("site-packages/",))
        files = [root / rel for rel in flt.walk() if rel.endswith(".py")]
    else:
        root = Path(corpus).expanduser().resolve()
        if not root.is_dir():
            raise DatastoreError(f"corpus directory {corpus} does not exist")
        flt = SourceFilter(root)
        files = [root / rel for rel in flt.walk()]
    return root, sorted(files)


def corpus_fingerprint(root: Path, files: list[Path]) -> str:
    """Short hex hash of the corpus root, the sorted relative paths, sizes and mtimes (ns)."""
    h = hashlib.sha256(f"v{FORMAT_VERSION}|{root}".encode())
    for p in files:
        try:
            st = p.stat()
            h.update(f"\n{p.relative_to(root).as_posix()}|{st.st_size}|{st.st_mtime_ns}".encode())
        except OSError:
            h.update(f"\n{p}|missing".encode())
    return h.hexdigest()[:_FP_LEN]


def default_cache_dir() -> Path:
    """``platformdirs.user_cache_dir("fastcoder") / "datastores"`` (``FASTCODER_CACHE_DIR`` overrides
    the ``user_cache_dir`` part)."""
    return cache_root() / "datastores"


def _default_out(tokenizer, root: Path, files: list[Path]) -> Path:
    return default_cache_dir() / f"{tokenizer_fingerprint(tokenizer)}-{corpus_fingerprint(root, files)}"


def build_common_datastore(tokenizer, corpus: str | os.PathLike | None = None,
                           out: str | os.PathLike | None = None, progress: bool = True,
                           on_progress: Callable[[int, int], None] | None = None) -> Path:
    """Tokenise a corpus and save it as a :class:`~engine.datastore.Datastore` directory.

    Args:
        tokenizer: Hugging Face tokenizer of the target model.
        corpus: directory of source files; None = the running Python's standard library.
        out: output directory; None = the cache path described in the module docstring.
        progress: tqdm progress bar on stderr while tokenising.
        on_progress: called with (files done, files in all) while tokenising (e.g. LSP $/progress).
    Returns the output directory. Raises DatastoreError for a missing corpus or an empty one.
    Cost (2 cores): ~60-70 s for the CPython 3.11 stdlib (8.6M tokens), dominated by tokenisation.
    """
    root, files = corpus_files(corpus)
    out_path = Path(out) if out is not None else _default_out(tokenizer, root, files)
    fp = tokenizer_fingerprint(tokenizer)
    docs = _tokenize_corpus(tokenizer, files, progress, desc=f"D_c {root.name or root}", on_progress=on_progress)
    if not docs:
        raise DatastoreError(f"corpus {root} has no readable source files")
    ds = Datastore.from_documents(docs, len(tokenizer), tokenizer_fingerprint=fp)
    return ds.save(out_path)


def _tokenize_corpus(tokenizer, files: list[Path], progress: bool, desc: str,
                     on_progress: Callable[[int, int], None] | None = None) -> list[np.ndarray]:
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(files), desc=desc, unit="file", file=sys.stderr, leave=False)
    docs: list[np.ndarray] = []
    batch: list[str] = []
    chars = 0
    try:
        for i, p in enumerate(files):
            text = read_source_text(p)
            if text:
                batch.append(text)
                chars += len(text)
            if chars >= _BATCH_CHARS or i == len(files) - 1:
                docs.extend(tokenize_texts(tokenizer, batch))
                if bar is not None:
                    bar.update(i + 1 - bar.n)
                if on_progress is not None:
                    on_progress(i + 1, len(files))
                batch, chars = [], 0
    finally:
        if bar is not None:
            bar.close()
    return docs


def load_common_datastore(tokenizer, spec: str | os.PathLike | None, build_if_missing: bool = True,
                          progress: bool = True,
                          on_progress: Callable[[int, int], None] | None = None,
                          on_rebuild: Callable[[str], None] | None = None) -> Datastore | None:
    """D_c from a setting value.

    ``spec``: None or ``"none"`` -> None (no D_c); ``"stdlib"`` -> the cached standard-library
    datastore for this tokenizer, built first if missing and ``build_if_missing``; a cached copy that
    fails validation (corrupt, truncated, an older format) is reported through ``on_rebuild`` and
    rebuilt; any other value -> a datastore directory, loaded with the tokenizer fingerprint checked.
    ``on_progress(done, total)``: files tokenised while building.
    Raises DatastoreError (one line, saying how to fix it) when the datastore is missing (and not
    built), unreadable, corrupt or for another tokenizer.
    """
    if spec is None:
        return None
    spec_s = str(spec).strip()
    if spec_s.lower() in ("none", ""):
        return None
    fp = tokenizer_fingerprint(tokenizer)
    if spec_s.lower() == "stdlib":
        root, files = corpus_files(None)
        path = default_cache_dir() / f"{fp}-{corpus_fingerprint(root, files)}"
        remove_stale_temporaries(path)
        if (path / "meta.json").is_file():
            try:
                return Datastore.load(path, tokenizer_fingerprint=fp)
            except DatastoreError as exc:
                if not build_if_missing:
                    raise
                message = f"the cached standard-library datastore is unusable ({exc}); rebuilding it"
                log.warning(message)
                if on_rebuild is not None:
                    on_rebuild(message)
        elif not build_if_missing:
            raise DatastoreError(f"no standard-library datastore for this tokenizer at {path}; "
                                 f"build it with build_if_missing=True or `fastcoder index build`")
        t0 = time.perf_counter()
        build_common_datastore(tokenizer, None, path, progress, on_progress=on_progress)
        if progress:
            print(f"fastcoder: built the stdlib common datastore in {time.perf_counter() - t0:.1f} s "
                  f"at {path}", file=sys.stderr)
        return Datastore.load(path, tokenizer_fingerprint=fp)
    path = Path(spec_s).expanduser()
    if not path.exists():
        raise DatastoreError(f"common datastore {spec_s!r} not found (expected 'stdlib', 'none' or a "
                             f"datastore directory)")
    try:
        return Datastore.load(path, tokenizer_fingerprint=fp)
    except DatastoreError as exc:
        raise DatastoreError(f"{exc}; rebuild it with `fastcoder index build --corpus DIR --out {path}`") from None
