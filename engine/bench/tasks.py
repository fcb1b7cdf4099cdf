"""Benchmark tasks from a real repository, one per task kind (:data:`TASK_KINDS`):

* ``function``: a function cut at its body (RepoEval / DevEval function-level completion); the prompt is
  the file's text before the body, left-truncated; no stop string.
* ``fim-line``: the language server's line completion. The cursor sits inside a body line, right after a
  space or one of ``([.,=:`` (after the indentation, before the line's last character); the rest of that
  line is the excluded span; the prompt is a FIM prompt (PSM order: prefix before the cursor, suffix from
  the line's end); generation stops at the end of the line (stop string ``"\n"``, the server's stop for a
  cursor inside a line).
* ``fim-block``: the server's block completion. The cursor sits at a function body's start; the body is
  the excluded span; FIM prompt with the text after the body as suffix; generation stops at the first
  blank line (stop string ``"\n\n"``, the server's generation stop for blocks; its post-processing
  then cuts the text at a dedent, which does not change what is generated).

FIM prompts use the tokenizer's FIM template (:func:`engine.fim.detect_fim_template`), within the same
prompt budget as ``function`` (special tokens included; the suffix gets at most a quarter); a tokenizer
without FIM tokens gets the prefix only, as the server does.
"""

from __future__ import annotations

import ast
import os
import random
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

#: Task kinds: ``function`` (the original harness), ``fim-line`` and ``fim-block`` (the editor's workload).
TASK_KINDS = ("function", "fim-line", "fim-block")
#: Stop strings per task kind (the language server's, see lsp_server/postprocess.py generation_stop).
TASK_STOPS: dict[str, tuple[str, ...]] = {"function": (), "fim-line": ("\n",), "fim-block": ("\n\n",)}
#: Share of the FIM prompt budget the suffix may take (the server's SUFFIX_FRACTION).
FIM_SUFFIX_FRACTION = 0.25
#: A fim-line cursor follows one of these characters (places where a person pauses while typing).
FIM_LINE_CURSOR_AFTER = " ([.,=:"
_CHARS_PER_TOKEN_BOUND = 12  # no token is longer than this many characters (suffix pre-cut)
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
        truncated: whether left truncation dropped tokens (of the prefix or the suffix).
        kind: one of :data:`TASK_KINDS`.
        cursor: char offset of the cursor in the file (``body_start``: the excluded span starts there).
        cursor_line, cursor_col: 1-based line and 0-based column of the cursor.
        stop: stop strings passed to ``generate`` (the output is compared with ``ar`` up to the first).
        template: the FIM template's name, ``"prefix-only"`` (no FIM tokens) or ``None`` (``function``).
        prefix_tokens, suffix_tokens: prompt tokens from before / after the cursor (special tokens not
            counted).
        healed: the bytes token healing took off the prefix's end (:func:`heal_task`), which every method's output
            must start with (``generate``'s ``constraint``); b"" when not healed.
    """

    task_id: str
    path: str
    function: str
    lineno: int
    body_start: int
    body_end: int
    prompt_ids: list[int] = field(repr=False)
    truncated: bool = False
    kind: str = "function"
    cursor_line: int = 0
    cursor_col: int = 0
    stop: tuple[str, ...] = ()
    template: str | None = None
    prefix_tokens: int = 0
    suffix_tokens: int = 0
    healed: bytes = b""

    @property
    def cursor(self) -> int:
        return self.body_start

    def describe(self) -> dict:
        """JSON-ready summary without the prompt ids."""
        return {"task_id": self.task_id, "kind": self.kind, "file": self.path, "function": self.function,
                "lineno": self.lineno, "body_span": [self.body_start, self.body_end],
                "cursor": [self.cursor_line, self.cursor_col], "stop": list(self.stop),
                "template": self.template, "prefix_tokens": self.prefix_tokens,
                "suffix_tokens": self.suffix_tokens,
                "prompt_tokens": len(self.prompt_ids), "truncated_prompt": self.truncated,
                "healed": self.healed.decode("utf-8", "backslashreplace")}


def heal_task(task: Task, table) -> Task:
    """``task`` with its prompt's prefix backed up to a token boundary, as the language server builds a prompt with
    token healing on (:func:`engine.healing.heal_tail` over the text before the cursor: a cursor after a space or inside
    a word leaves a token the model would rarely have chosen there). ``table``: the model's
    :class:`engine.healing.TokenBytes`. The removed bytes go to :attr:`Task.healed`; the task is returned unchanged
    when nothing is removed."""
    from engine.healing import heal_tail  # noqa: PLC0415

    ids = list(task.prompt_ids)
    if task.template in (None, "prefix-only"):  # the whole prompt is text before the cursor
        kept, healed = heal_tail(table, ids)
        return replace(task, prompt_ids=kept, healed=healed, prefix_tokens=len(kept)) if healed else task
    end = len(ids) - task.suffix_tokens - 2  # [BOS] <prefix-token> prefix <suffix-token> suffix <middle-token>
    start = end - task.prefix_tokens
    kept, healed = heal_tail(table, ids[start:end])
    if not healed:
        return task
    return replace(task, prompt_ids=ids[:start] + kept + ids[end:], healed=healed, prefix_tokens=len(kept))


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
                  min_prompt_chars: int = 64, kind: str = "function") -> list[Task]:
    """Pick ``num_tasks`` tasks of ``kind`` from a repository, seeded and deterministic.

    Args:
        root: repository folder.
        tokenizer: a Hugging Face tokenizer (``tokenizer(text, add_special_tokens=False)``).
        num_tasks: how many tasks (fewer when the repository has fewer eligible functions).
        seed: sampling seed; the same seed and files give the same tasks.
        max_prompt_tokens: prompt budget (tokens); longer prefixes keep their last tokens.
        min_body_lines: minimum body length (lines).
        min_prompt_chars: skip functions whose file prefix is shorter than this (chars).
        kind: one of :data:`TASK_KINDS` (see the module docstring).

    Returns:
        the tasks, in sampled order.

    Raises:
        BenchError: ``root`` is not a folder, it holds no eligible function, or ``kind`` is unknown.
    """
    if kind not in TASK_KINDS:
        raise BenchError(f"unknown task kind {kind!r}; choose from {', '.join(TASK_KINDS)}")
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
    if kind == "function":
        chosen = rng.sample(candidates, min(max(num_tasks, 0), len(candidates)))
        return [_make_task(rel, span, source, tokenizer, max_prompt_tokens) for rel, span, source in chosen]
    order = rng.sample(candidates, len(candidates))
    tasks: list[Task] = []
    for rel, span, source in order:
        if len(tasks) >= num_tasks:
            break
        if kind == "fim-block":
            start, end, name = span.body_start, span.body_end, f"{rel}::{span.qualname}"
        else:
            cursor = pick_line_cursor(source, span, random.Random(f"{seed}:{rel}::{span.qualname}"))
            if cursor is None:
                continue
            line_end = source.find("\n", cursor)
            start, end = cursor, len(source) if line_end < 0 else line_end
            line, col = _line_col(source, cursor)
            name = f"{rel}::{span.qualname}@{line}:{col}"
        tasks.append(_make_fim_task(name, rel, span, source, start, end, kind, tokenizer, max_prompt_tokens))
    if not tasks:
        raise BenchError(f"no {kind} task (no cursor position) under {str(root)!r}")
    return tasks


def _line_col(source: str, offset: int) -> tuple[int, int]:
    """1-based line and 0-based column of char ``offset``."""
    line_start = source.rfind("\n", 0, offset) + 1
    return source.count("\n", 0, offset) + 1, offset - line_start


def pick_line_cursor(source: str, span: FunctionSpan, rng: random.Random) -> int | None:
    """A fim-line cursor inside ``span``'s body: a char offset right after a space or one of
    :data:`FIM_LINE_CURSOR_AFTER`, past the line's indentation and before its last non-blank character
    (so some of the line is left to complete); comment lines are skipped. None when no line has one."""
    spots: list[int] = []
    pos = span.body_start
    for line in source[span.body_start:span.body_end].splitlines(keepends=True):
        code = line.rstrip()
        indent = len(code) - len(code.lstrip())
        if code.strip() and not code.lstrip().startswith("#"):
            spots += [pos + i for i in range(indent + 1, len(code))
                      if code[i - 1] in FIM_LINE_CURSOR_AFTER and code[:i].strip()]
        pos += len(line)
    return rng.choice(spots) if spots else None


def _encode(tokenizer, text: str) -> list[int]:
    return [int(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]] if text else []


def build_fim_ids(tokenizer, prefix: str, suffix: str, budget: int,
                  suffix_fraction: float = FIM_SUFFIX_FRACTION) -> tuple[list[int], str, int, int, bool]:
    """A FIM prompt in PSM order within ``budget`` tokens (special tokens included), built as the
    language server builds it: ``[BOS] <prefix-token> prefix <suffix-token> suffix <middle-token>``; the
    suffix keeps its first tokens (at most ``suffix_fraction`` of the budget), the prefix its last. A
    tokenizer without FIM tokens gets the prefix's last ``budget`` tokens.

    Returns:
        ``(ids, template name or "prefix-only", prefix tokens, suffix tokens, truncated)``.
    """
    from engine.fim import detect_fim_template  # noqa: PLC0415

    found = detect_fim_template(tokenizer)
    if found is None:
        ids = _encode(tokenizer, prefix)
        kept = ids[-budget:] if budget > 0 else []
        return kept, "prefix-only", len(kept), 0, len(kept) < len(ids)
    tpl, (pre_id, suf_id, mid_id) = found
    bos = getattr(tokenizer, "bos_token_id", None)
    head = [int(bos)] if tpl.bos and bos is not None else []
    room = max(budget - 3 - len(head), 0)
    suffix_budget = int(room * suffix_fraction)
    suffix_full = _encode(tokenizer, suffix[:suffix_budget * _CHARS_PER_TOKEN_BOUND])
    suffix_ids = suffix_full[:suffix_budget]
    prefix_full = _encode(tokenizer, prefix)
    prefix_room = room - len(suffix_ids)
    prefix_ids = prefix_full[-prefix_room:] if prefix_room > 0 else []
    truncated = (len(prefix_ids) < len(prefix_full) or len(suffix_ids) < len(suffix_full)
                 or len(suffix) > suffix_budget * _CHARS_PER_TOKEN_BOUND)
    ids = head + [pre_id] + prefix_ids + [suf_id] + suffix_ids + [mid_id]
    return ids, tpl.name, len(prefix_ids), len(suffix_ids), truncated


def _make_fim_task(task_id: str, rel: str, span: FunctionSpan, source: str, start: int, end: int, kind: str,
                   tokenizer, max_prompt_tokens: int) -> Task:
    """A FIM task: cursor at ``start``; ``source[start:end]`` is the excluded span (the text to write)."""
    ids, template, n_prefix, n_suffix, truncated = build_fim_ids(tokenizer, source[:start], source[end:],
                                                                 max_prompt_tokens)
    line, col = _line_col(source, start)
    return Task(task_id, rel, span.qualname, span.lineno, start, end, ids, truncated, kind=kind,
                cursor_line=line, cursor_col=col, stop=TASK_STOPS[kind], template=template,
                prefix_tokens=n_prefix, suffix_tokens=n_suffix)


def _make_task(rel: str, span: FunctionSpan, source: str, tokenizer, max_prompt_tokens: int) -> Task:
    ids = list(tokenizer(source[:span.body_start], add_special_tokens=False)["input_ids"])
    truncated = len(ids) > max_prompt_tokens
    ids = ids[-max_prompt_tokens:] if max_prompt_tokens > 0 else []
    line, col = _line_col(source, span.body_start)
    return Task(f"{rel}::{span.qualname}", rel, span.qualname, span.lineno, span.body_start,
                span.body_end, [int(t) for t in ids], truncated, cursor_line=line, cursor_col=col,
                prefix_tokens=len(ids))

