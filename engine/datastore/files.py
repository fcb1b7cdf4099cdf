"""A datastore on disk: atomic save, validated load, and the clean-up of interrupted saves.

Files of a saved datastore directory: ``tokens.npy`` (N,) ``>u2``/``>u4``, ``sa.npy`` (N,) int32/int64 byte
offsets, and ``meta.json`` (format version, vocab_size, num_tokens, num_documents, tokenizer fingerprint,
token width, dtypes, crc32 of each array's bytes). :meth:`engine.datastore.Datastore.save` and
:meth:`~engine.datastore.Datastore.load` call :func:`write_arrays` and :func:`read_arrays`.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path

import numpy as np

from .matching import DatastoreError, _be_dtype, token_width

#: On-disk format version written to ``meta.json``.
FORMAT_VERSION = 1


def write_arrays(path: str | os.PathLike, tokens: np.ndarray, sa: np.ndarray, vocab_size: int,
                 num_documents: int, tokenizer_fingerprint: str, width: int) -> Path:
    """Write a datastore's arrays and ``meta.json`` to directory ``path`` (created; replaced atomically if
    it exists): a temporary directory beside it, fsynced, then swapped with the old one in one atomic
    ``renameat2(RENAME_EXCHANGE)`` where the system has it (else renamed twice; a kill in between is recovered by
    :func:`recover_interrupted_save`). Returns the directory path.

    Args:
        tokens: (N,) ``>u2``/``>u4`` big-endian token values (id + 1, 0 = separator).
        sa: (N,) int32/int64 suffix array (byte offsets).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent))
    try:
        np.save(tmp / "tokens.npy", tokens, allow_pickle=False)
        np.save(tmp / "sa.npy", sa, allow_pickle=False)
        meta = {
            "format": "fastcoder-datastore",
            "format_version": FORMAT_VERSION,
            "vocab_size": vocab_size,
            "num_tokens": int(tokens.shape[0]),
            "num_documents": num_documents,
            "tokenizer_fingerprint": tokenizer_fingerprint,
            "token_width": width,
            "tokens_dtype": tokens.dtype.str,
            "sa_dtype": sa.dtype.str,
            "crc32": {"tokens": _crc32(tokens), "sa": _crc32(sa)},
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        for name in ("tokens.npy", "sa.npy", "meta.json"):
            _fsync(tmp / name)
        _fsync(tmp)
        if not path.exists():
            tmp.rename(path)
        elif _exchange(tmp, path):
            shutil.rmtree(tmp, ignore_errors=True)  # the old store, swapped into the temporary's name
        else:  # no atomic exchange here: a kill between the two renames leaves the old store
            # as .NAME.old-PID, which recover_interrupted_save puts back at the next load or save
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        _fsync(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def read_arrays(path: str | os.PathLike, tokenizer_fingerprint: str | None = None,
                mmap: bool | None = None) -> tuple[np.ndarray, np.ndarray, int, int, str]:
    """Read and validate what :func:`write_arrays` wrote: (tokens, sa, vocab_size, num_documents,
    tokenizer fingerprint). See :meth:`engine.datastore.Datastore.load` for the arguments and the
    :class:`DatastoreError` cases."""
    path = Path(path)
    meta = _read_meta(path)
    found = meta.get("tokenizer_fingerprint", "")
    if tokenizer_fingerprint is not None and found != tokenizer_fingerprint:
        raise DatastoreError(f"datastore {path} was built for a different tokenizer: expected "
                             f"fingerprint {tokenizer_fingerprint!r}, found {found!r}")
    try:
        n = int(meta["num_tokens"])
        vocab = int(meta["vocab_size"])
        ndocs = int(meta["num_documents"])
        width = int(meta["token_width"])
        crcs = meta["crc32"]
        tok_dtype, sa_dtype = np.dtype(meta["tokens_dtype"]), np.dtype(meta["sa_dtype"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DatastoreError(f"datastore {path}/meta.json is missing or has a bad field: {exc}")
    if width not in (2, 4) or tok_dtype != _be_dtype(width) or width != token_width(vocab):
        raise DatastoreError(f"datastore {path}: unsupported token encoding {tok_dtype} "
                             f"(width {width}) for vocab_size {vocab}")
    if sa_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise DatastoreError(f"datastore {path}: unsupported suffix-array dtype {sa_dtype}")
    if mmap is None:  # map only large stores: a mapped file truncated under us would SIGBUS
        mmap = n * (tok_dtype.itemsize + sa_dtype.itemsize) > MMAP_MIN_BYTES
    tokens = _load_array(path / "tokens.npy", tok_dtype, n, crcs.get("tokens"), mmap)
    sa = _load_array(path / "sa.npy", sa_dtype, n, crcs.get("sa"), mmap)
    if n:
        hi = int(tokens.max())
        if hi > vocab:
            raise DatastoreError(f"datastore {path}: token id {hi - 1} out of range for "
                                 f"vocab_size {vocab}")
        seps = int(np.count_nonzero(tokens == 0))
        if seps != ndocs or tokens[-1] != 0:
            raise DatastoreError(f"datastore {path}: {seps} document separators found, meta.json "
                                 f"says {ndocs} documents")
        lo_sa, hi_sa = int(sa.min()), int(sa.max())
        if lo_sa < 0 or hi_sa > (n - 1) * width:
            raise DatastoreError(f"datastore {path}: suffix array offsets out of range")
    elif ndocs:
        raise DatastoreError(f"datastore {path}: no tokens but {ndocs} documents in meta.json")
    return tokens, sa, vocab, ndocs, found


#: Datastores whose arrays are larger than this (bytes) are memory-mapped by :meth:`Datastore.load`;
#: smaller ones are read into memory, so that a file truncated or rewritten under a running server
#: cannot kill it with SIGBUS (the stdlib D_c is ~52 MB).
MMAP_MIN_BYTES = 512 * 1024 * 1024


def _fsync(path: Path) -> None:
    """Flush a file or directory to disk (best effort: some file systems refuse directories)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: renameat2(2)'s flag that swaps two paths atomically (Linux 3.15+), and the "current directory" descriptor.
_RENAME_EXCHANGE, _AT_FDCWD = 2, -100


@functools.cache
def _renameat2():
    """The C library's ``renameat2``, or None where it has none."""
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    except OSError:
        return None
    if fn is not None:
        fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
        fn.restype = ctypes.c_int
    return fn


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` in one atomic step (``renameat2(..., RENAME_EXCHANGE)``): at every moment each
    name holds one whole directory. False, nothing changed, where the C library or the file system lacks it (then
    the caller renames twice)."""
    fn = _renameat2()
    return fn is not None and fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def recover_interrupted_save(path: str | os.PathLike) -> bool:
    """Where ``path`` is missing because a save was killed between its two renames (no atomic exchange on this
    system: the old store moved to ``.NAME.old-PID``, the new one not yet in place), put the old store back. Only
    a writer that no longer runs counts. Returns True when it restored one."""
    path = Path(path)
    if path.exists() or not path.parent.is_dir():
        return False
    for entry in sorted(path.parent.glob(f".{path.name}.old-*")):
        pid_text = entry.name[len(path.name) + len(".old-") + 1:]
        if pid_text.isdigit() and not _pid_alive(int(pid_text)) and (entry / "meta.json").is_file():
            try:
                entry.rename(path)
            except OSError:  # another process restored it first
                return path.exists()
            return True
    return False


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Delete what an interrupted :meth:`Datastore.save` of ``path`` left beside it.

    A save writes ``.NAME.tmp-PID-*`` and, where the file system has no atomic exchange, ``.NAME.old-PID`` while
    replacing; a kill -9 leaves them. Those whose writer process no longer runs are removed, after an old store
    that is the only copy left was put back (:func:`recover_interrupted_save`). Returns the removed paths.
    """
    path = Path(path)
    removed = []
    if not path.parent.is_dir():
        return removed
    recover_interrupted_save(path)
    for entry in path.parent.glob(f".{path.name}.*"):
        rest = entry.name[len(path.name) + 2:]
        kind, _, tail = rest.partition("-")
        pid_text = tail.split("-", 1)[0]
        if kind not in ("tmp", "old") or not pid_text.isdigit():
            continue
        if not _pid_alive(int(pid_text)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _crc32(arr: np.ndarray) -> int:
    crc = 0
    flat = arr.reshape(-1).view(np.uint8)
    step = 1 << 26
    for i in range(0, flat.size, step):
        crc = zlib.crc32(flat[i:i + step], crc)
    return crc


def _read_meta(path: Path) -> dict:
    if not path.is_dir() and not recover_interrupted_save(path):
        raise DatastoreError(f"datastore directory {path} does not exist")
    try:
        meta = json.loads((path / "meta.json").read_text())
    except FileNotFoundError:
        raise DatastoreError(f"datastore {path} has no meta.json (not a datastore, or an interrupted "
                             f"build)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatastoreError(f"datastore {path}/meta.json is unreadable: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != "fastcoder-datastore":
        raise DatastoreError(f"datastore {path}/meta.json is not a fastcoder datastore")
    if meta.get("format_version") != FORMAT_VERSION:
        raise DatastoreError(f"datastore {path} has format version {meta.get('format_version')}, "
                             f"this fastcoder reads version {FORMAT_VERSION}: rebuild it")
    return meta


def _load_array(file: Path, dtype: np.dtype, n: int, crc, mmap: bool) -> np.ndarray:
    name = file.name
    try:
        arr = np.load(file, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise DatastoreError(f"datastore file {file} is missing") from None
    except Exception as exc:  # truncated header/body: ValueError, OSError, EOFError
        raise DatastoreError(f"datastore file {file} is truncated or corrupt ({exc})") from None
    if arr.dtype != dtype or arr.shape != (n,):
        raise DatastoreError(f"datastore file {file} holds {arr.dtype}{list(arr.shape)}, expected "
                             f"{dtype}[{n}] (truncated or from another build)")
    if crc is None or _crc32(arr) != int(crc):
        raise DatastoreError(f"datastore file {file} is corrupt (crc32 mismatch on {name})")
    return arr
