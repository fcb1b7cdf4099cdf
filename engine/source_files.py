"""Which files of a workspace are source files, and their text (what D_r and D_c index).

Files indexed: text files with a code-like extension (:data:`SOURCE_EXTENSIONS`), at most
``max_file_bytes``, valid UTF-8, no NUL byte in the first 8 KiB; ``.gitignore`` files (nested ones
too, gitwildmatch via pathspec) and ``exclude`` globs are honoured; ``.git``, virtual environments
(``.venv``, ``venv``, any directory holding ``pyvenv.cfg``), ``node_modules`` and ``__pycache__``
are always skipped.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import pathspec

__all__ = ["SOURCE_EXTENSIONS", "SOURCE_NAMES", "SKIP_DIRS", "SourceFilter", "has_source_extension",
           "iter_source_files", "read_source_text"]

#: File extensions (lower case, with the dot) that are indexed.
SOURCE_EXTENSIONS = frozenset("""
.py .pyi .pyx .pxd .ipynb .js .mjs .cjs .ts .tsx .jsx .vue .svelte .go .rs .java .kt .kts .scala .swift
.c .h .cpp .hpp .cc .hh .cxx .hxx .m .mm .cs .fs .rb .php .pl .pm .lua .r .jl .dart .ex .exs .erl .hs
.ml .mli .clj .sh .bash .zsh .fish .ps1 .bat .sql .graphql .proto .thrift .html .htm .css .scss .sass
.less .xml .toml .yaml .yml .json .jsonc .md .rst .txt .cfg .ini .conf .cmake .mk .gradle .tf .nix
.zig .vim .el .tex .dockerfile
""".split())
#: Extension-less file names that are indexed.
SOURCE_NAMES = frozenset({"Makefile", "Dockerfile", "CMakeLists.txt", "Justfile", "Rakefile", "Gemfile"})
#: Directory names never entered.
SKIP_DIRS = frozenset({".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__",
                       ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox", ".eggs"})
#: Bytes read to tell a binary file (a NUL byte) from a text file.
BINARY_SNIFF_BYTES = 8192


def read_source_text(path: str | os.PathLike, max_file_bytes: int = 1_000_000) -> str | None:
    """The text of ``path`` if it is an indexable text file, else None.

    None for: not a regular file (a FIFO, socket or device is never read: opening is non-blocking
    and the type is checked on the open descriptor, so a FIFO cannot block the caller), a symlink
    loop, unreadable, larger than ``max_file_bytes`` bytes, a NUL byte in the first 8 KiB (binary),
    or not valid UTF-8. Never raises.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_file_bytes:
            return None
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = -1
            data = fh.read(max_file_bytes + 1)
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > max_file_bytes or b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def has_source_extension(name: str) -> bool:
    """Whether a file name looks like source code or text (see :data:`SOURCE_EXTENSIONS`)."""
    if name in SOURCE_NAMES:
        return True
    return os.path.splitext(name)[1].lower() in SOURCE_EXTENSIONS


def _load_gitignore(directory: Path) -> pathspec.PathSpec | None:
    text = read_source_text(directory / ".gitignore")  # never blocks on a FIFO named .gitignore
    if text is None:
        return None
    return pathspec.GitIgnoreSpec.from_lines(text.splitlines())


@dataclass
class SourceFilter:
    """Which files under ``root`` are indexed: ``.gitignore`` files, ``exclude`` globs (gitwildmatch,
    relative to root), skipped directories, the extension list and ``max_file_bytes``."""

    root: Path
    exclude: Sequence[str] = ()
    max_file_bytes: int = 1_000_000
    _exclude_spec: pathspec.PathSpec | None = field(default=None, init=False, repr=False)
    _gitignores: dict = field(default_factory=dict, init=False, repr=False)  # rel dir -> spec|None

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self._exclude_spec = pathspec.GitIgnoreSpec.from_lines(list(self.exclude)) if self.exclude else None

    def relpath(self, path: str | os.PathLike) -> str | None:
        """Root-relative POSIX path of ``path`` (absolute, or relative to root), None outside root."""
        p = Path(path)
        if not p.is_absolute():
            p = self.root / p
        try:
            rel = Path(os.path.abspath(p)).relative_to(self.root)
        except ValueError:
            try:
                rel = p.resolve().relative_to(self.root)
            except (ValueError, OSError):
                return None
        s = rel.as_posix()
        return None if s in ("", ".") else s

    def _gitignore(self, rel_dir: str) -> pathspec.PathSpec | None:
        if rel_dir not in self._gitignores:
            self._gitignores[rel_dir] = _load_gitignore(self.root / rel_dir if rel_dir else self.root)
        return self._gitignores[rel_dir]

    def is_ignored(self, rel: str, is_dir: bool) -> bool:
        """gitignore + exclude verdict for a root-relative path (directories: pass is_dir=True)."""
        key = rel + "/" if is_dir else rel
        if self._exclude_spec is not None and self._exclude_spec.match_file(key):
            return True
        parts = rel.split("/")
        verdict = None
        for depth in range(len(parts)):
            spec = self._gitignore("/".join(parts[:depth]))
            if spec is not None:
                res = spec.check_file("/".join(parts[depth:]) + ("/" if is_dir else ""))
                if res.include is not None:
                    verdict = res.include
        return bool(verdict)

    def skip_dir(self, rel: str) -> bool:
        """Whether the directory (root-relative) is never entered (skip list, venv, ignored)."""
        if rel.rsplit("/", 1)[-1] in SKIP_DIRS:
            return True
        if (self.root / rel / "pyvenv.cfg").exists():
            return True
        return self.is_ignored(rel, is_dir=True)

    def accepts(self, rel: str) -> bool:
        """Whether a root-relative file path would be indexed (ignoring its content)."""
        name = rel.rsplit("/", 1)[-1]
        if not has_source_extension(name):
            return False
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            if self.skip_dir("/".join(parts[:depth])):
                return False
        return not self.is_ignored(rel, is_dir=False)

    def walk(self) -> Iterator[str]:
        """Root-relative POSIX paths of candidate files, sorted per directory (content not checked)."""
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            rel_dir = "" if rel_dir == "." else rel_dir
            prefix = rel_dir + "/" if rel_dir else ""
            dirnames[:] = sorted(d for d in dirnames if not self.skip_dir(prefix + d))
            for name in sorted(filenames):
                rel = prefix + name
                if has_source_extension(name) and not self.is_ignored(rel, is_dir=False):
                    yield rel


def iter_source_files(root: str | os.PathLike, exclude: Sequence[str] = (),
                      max_file_bytes: int = 1_000_000) -> list[Path]:
    """Absolute paths of the candidate source files under ``root`` (same filter as D_r; content,
    size and encoding are checked later by :func:`read_source_text`)."""
    flt = SourceFilter(Path(root), exclude, max_file_bytes)
    return [flt.root / rel for rel in flt.walk()]
