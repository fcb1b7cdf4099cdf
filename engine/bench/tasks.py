"""Benchmark tasks: functions of a real repository, cut at their body (RepoEval / DevEval style)."""

from __future__ import annotations

import ast
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_MAX_PROMPT_TOKENS = 1024  # tiny-py-coder was trained on 1,024-token windows
_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "build", "dist"}


class BenchError(RuntimeError):
    """Bad benchmark input (no repository, no usable functions, unknown method); one line for a person."""




@dataclass
class FunctionSpan:
    """A function body inside one source text.

    Attributes:
        qualname: dotted name (``Class.method``, ``outer.inner``).
        lineno: 1-based line of the ``def``.
        body_start: char offset of the start of the body's first line (after a docstring, if the
            body has more statements); the prompt is ``source[:body_start]``.
        body_end: char offset just past the body's last line (its newline included).
        body_lines: lines from the body's first to its last line.
    """

    qualname: str
    lineno: int
    body_start: int
    body_end: int
    body_lines: int


@dataclass
class Task:
    """One benchmark task (repository-level function completion).

    Attributes:
        task_id: ``"<relative path>::<qualname>"``.
        path: file path relative to the repository root (POSIX separators).
        function: the function's qualified name.
        lineno: 1-based line of its ``def``.
        body_start, body_end: char offsets of the excluded body span in the file.
        prompt_ids: the prompt's token ids (left-truncated to the prompt budget).
        truncated: whether left truncation dropped tokens.
    """

    task_id: str
    path: str
    function: str
    lineno: int
    body_start: int
    body_end: int
    prompt_ids: list[int] = field(repr=False)
    truncated: bool = False

    def describe(self) -> dict:
        """JSON-ready summary without the prompt ids."""
        return {"task_id": self.task_id, "file": self.path, "function": self.function,
                "lineno": self.lineno, "body_span": [self.body_start, self.body_end],
                "prompt_tokens": len(self.prompt_ids), "truncated_prompt": self.truncated}


def _line_starts(source: str) -> list[int]:
    """Char offset of the start of every line (1-based line ``k`` starts at ``result[k - 1]``);
    line breaks as Python's tokenizer sees them (``\\r\\n``, ``\\r``, ``\\n``)."""
    return [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", source)]


def _is_docstring(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


def find_functions(source: str, min_body_lines: int = 3) -> list[FunctionSpan]:
    """All functions (sync/async, methods, nested) whose body has at least ``min_body_lines`` lines.

    The body starts at its first statement's line (a leading docstring stays in the prompt when more
    statements follow); one-line functions (body on the ``def`` line) are skipped.

    Returns:
        spans sorted by line; an empty list when ``source`` does not parse.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    starts = _line_starts(source)
    spans: list[FunctionSpan] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    span = _body_span(child, qualname, source, starts)
                    if span is not None and span.body_lines >= min_body_lines:
                        spans.append(span)
                visit(child, qualname + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return sorted(spans, key=lambda s: s.lineno)


def _body_span(node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str, source: str,
               starts: list[int]) -> FunctionSpan | None:
    body = list(node.body)
    if len(body) > 1 and _is_docstring(body[0]):
        body = body[1:]
    first, last = body[0], body[-1]
    body_start = starts[first.lineno - 1]
    line_head = source[body_start:body_start + len(source[body_start:].split("\n", 1)[0])]
    if line_head[:first.col_offset].strip() or first.lineno <= node.lineno:
        return None  # the body shares a line with the signature: no clean split
    end_line = last.end_lineno or last.lineno
    body_end = starts[end_line] if end_line < len(starts) else len(source)
    return FunctionSpan(qualname, node.lineno, body_start, body_end, end_line - first.lineno + 1)


def iter_python_files(root: Path) -> list[Path]:
    """Sorted ``*.py`` files under ``root``, skipping hidden folders, caches and build outputs."""
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        files.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
    return files


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def extract_tasks(root: str | Path, tokenizer, num_tasks: int, seed: int = 0,
                  max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS, min_body_lines: int = 3,
                  min_prompt_chars: int = 64) -> list[Task]:
    """Pick ``num_tasks`` functions from a repository, seeded and deterministic.

    Args:
        root: repository folder.
        tokenizer: a Hugging Face tokenizer (``tokenizer(text, add_special_tokens=False)``).
        num_tasks: how many tasks (fewer when the repository has fewer eligible functions).
        seed: sampling seed; the same seed and files give the same tasks.
        max_prompt_tokens: prompt budget (tokens); longer prefixes keep their last tokens.
        min_body_lines: minimum body length (lines).
        min_prompt_chars: skip functions whose file prefix is shorter than this (chars).

    Returns:
        the tasks, in sampled order.

    Raises:
        BenchError: ``root`` is not a folder, or it holds no eligible function.
    """
    root = Path(root)
    if not root.is_dir():
        raise BenchError(f"--repo {str(root)!r} is not a folder")
    candidates: list[tuple[str, FunctionSpan, str]] = []
    for path in iter_python_files(root):
        source = _read_text(path)
        if not source:
            continue
        rel = path.relative_to(root).as_posix()
        for span in find_functions(source, min_body_lines):
            if span.body_start >= min_prompt_chars:
                candidates.append((rel, span, source))
    if not candidates:
        raise BenchError(f"no function with a body of >= {min_body_lines} lines under {str(root)!r}")
    rng = random.Random(seed)
    chosen = rng.sample(candidates, min(max(num_tasks, 0), len(candidates)))
    return [_make_task(rel, span, source, tokenizer, max_prompt_tokens) for rel, span, source in chosen]


def _make_task(rel: str, span: FunctionSpan, source: str, tokenizer, max_prompt_tokens: int) -> Task:
    ids = list(tokenizer(source[:span.body_start], add_special_tokens=False)["input_ids"])
    truncated = len(ids) > max_prompt_tokens
    ids = ids[-max_prompt_tokens:] if max_prompt_tokens > 0 else []
    return Task(f"{rel}::{span.qualname}", rel, span.qualname, span.lineno, span.body_start,
                span.body_end, [int(t) for t in ids], truncated)

