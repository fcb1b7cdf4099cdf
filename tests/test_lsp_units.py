"""Unit tests of the language server's pure parts: settings, FIM prompts, post-processing, file events."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsp_server.postprocess import CursorContext, generation_stop, postprocess
from lsp_server.prompt import build_fim_prompt, detect_fim_template, prompt_budget
from lsp_server.repo_watch import coalesce
from lsp_server.settings import RELOAD_KEYS, Settings, parse_settings, section_of

MODEL = Path(__file__).resolve().parents[2] / "shared" / "models" / "tiny-py-coder"


# ---------------------------------------------------------------- settings
def test_settings_defaults_and_both_push_forms():
    s, w = parse_settings(None)
    assert s == Settings() and w == []
    assert s.method == "fastcoder" and s.max_new_tokens == 64 and s.stop_at == "line"
    assert s.common_datastore == "stdlib" and s.repo_index is True and s.temperature == 0.0
    nested, _ = parse_settings({"fastcoder": {"maxNewTokens": 16, "stopAt": "block"}})
    flat, _ = parse_settings({"maxNewTokens": 16, "stopAt": "block"})
    assert nested == flat and nested.max_new_tokens == 16 and nested.stop_at == "block"
    pulled, _ = parse_settings(({"method": "ar"},))  # workspace/configuration answers a tuple
    assert pulled.method == "ar"


def test_settings_invalid_value_warns_and_keeps_previous():
    base = Settings(max_new_tokens=32)
    s, warnings = parse_settings({"fastcoder": {"maxNewTokens": -3, "method": "magic", "exclude": "*.txt",
                                                "device": "tpu", "repoIndex": "yes", "unknownKey": 1}}, base)
    assert s.max_new_tokens == 32 and s.method == "fastcoder" and s.device == "auto" and s.repo_index
    assert s.exclude == ("*.txt",)
    joined = "\n".join(warnings)
    for key in ("maxNewTokens", "method", "device", "repoIndex"):
        assert f"fastcoder.{key}" in joined
    assert len(warnings) == 4


def test_dtype_setting_is_validated_and_reloads_the_model():
    s, warnings = parse_settings({"fastcoder": {"dtype": "float32"}}, Settings())
    assert s.dtype == "float32" and not warnings
    kept, warnings = parse_settings({"fastcoder": {"dtype": "int4"}}, s)
    assert kept.dtype == "float32" and len(warnings) == 1 and "fastcoder.dtype" in warnings[0]
    assert Settings(dtype="bfloat16").changed_keys(Settings()) == {"dtype"}
    assert "dtype" in RELOAD_KEYS  # another dtype means loading the weights again


def test_section_of_ignores_other_extensions():
    assert section_of({"python": {"x": 1}}) is None
    assert section_of([]) is None
    assert Settings(method="ar").changed_keys(Settings()) == {"method"}


def test_fastcoder_model_env_overrides_default(monkeypatch):
    monkeypatch.setenv("FASTCODER_MODEL", "/some/model")
    assert Settings().resolved_model() == "/some/model"
    assert Settings(model="/explicit").resolved_model() == "/explicit"


# ---------------------------------------------------------------- prompts
class FakeTokenizer:
    """One token per character, plus the special tokens in ``specials``."""

    bos_token_id = 1

    def __init__(self, specials: list[str]):
        self.specials = {t: 100_000 + i for i, t in enumerate(specials)}

    def get_vocab(self):
        return dict(self.specials)

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


@pytest.mark.parametrize("specials,name", [
    (["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"], "qwen"),
    (["<fim_prefix>", "<fim_suffix>", "<fim_middle>"], "starcoder"),
    (["<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"], "deepseek"),
    (["▁<PRE>", "▁<SUF>", "▁<MID>"], "codellama"),
])
def test_fim_template_detection(specials, name):
    tok = FakeTokenizer(specials)
    tpl, ids = detect_fim_template(tok)
    assert tpl.name == name
    p = build_fim_prompt(tok, "ab", "cd", 64)
    head = [1] if name == "codellama" else []
    assert p.token_ids == head + [ids[0], ord("a"), ord("b"), ids[1], ord("c"), ord("d"), ids[2]]


def test_prefix_only_without_fim_tokens():
    p = build_fim_prompt(FakeTokenizer([]), "x = 1\ny", "never used", 64)
    assert p.template == "prefix-only" and p.token_ids == [ord(c) for c in "x = 1\ny"]


def test_budget_keeps_prefix_tail_and_suffix_head():
    tok = FakeTokenizer(["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"])
    prefix, suffix = "P" * 500 + "tail", "head" + "S" * 500
    p = build_fim_prompt(tok, prefix, suffix, 103)  # 100 content tokens: suffix <= 25
    assert len(p.token_ids) == 103 and p.truncated
    assert p.suffix_tokens == 25 and p.prefix_tokens == 75
    text = "".join(chr(t) for t in p.token_ids if t < 100_000)
    assert text.startswith("P" * 71 + "tail") and text.endswith("head" + "S" * 21)
    short = build_fim_prompt(tok, prefix, "", 103)  # unused suffix budget goes to the prefix
    assert short.prefix_tokens == 100


def test_prompt_budget():
    assert prompt_budget(None, 4096, 64) == 1024
    assert prompt_budget(None, 512, 64) == 448
    assert prompt_budget(2000, None, 64) == 2000


def test_real_tokenizer_fim_prompt():
    if not MODEL.is_dir():
        pytest.skip("tiny-py-coder not available")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(MODEL))
    p = build_fim_prompt(tok, "def add(a, b):\n    ", "\n\nprint(add(1, 2))\n", 256)
    assert p.template == "qwen"
    text = tok.decode(p.token_ids)
    assert text == "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>"


# ---------------------------------------------------------------- post-processing
def ctx(prefix: str, suffix: str = "") -> CursorContext:
    return CursorContext.from_split(prefix, suffix)


def test_line_mode_cuts_at_end_of_line():
    assert postprocess("return a + b\n    x = 1", ctx("def f(a, b):\n    "), "line") == "return a + b"
    assert generation_stop("line", ctx("def f():\n    ")) == ["\n"]


def test_line_mode_at_end_of_nonblank_line_keeps_next_line():
    c = ctx("def f(a, b):")
    assert c.at_end_of_nonblank_line and generation_stop("line", c) == ["\n\n"]
    assert postprocess("\n    return a + b\n    more", c, "line") == "\n    return a + b"


def test_block_mode_stops_at_blank_line_or_dedent():
    c = ctx("def f(a):\n    ")
    raw = "if a:\n        return 1\n    return 2\nprint(f(1))"
    assert postprocess(raw, c, "block") == "if a:\n        return 1\n    return 2"
    assert postprocess("x = 1\n    y = 2\n\n    z = 3", c, "block") == "x = 1\n    y = 2"


def test_trims_repeat_of_text_after_cursor():
    assert postprocess("a, b)", ctx("print(", ")"), "line") == "a, b"
    assert postprocess(")", ctx("print(", ")"), "line") is None
    following = ctx("def f():\n    ", "\n    return x\n")
    assert postprocess("x = 1\n    return x", following, "block") == "x = 1"


def test_whitespace_only_is_dropped():
    assert postprocess("   ", ctx("x = "), "line") is None
    assert postprocess("\n\n", ctx("def f():"), "block") is None


# ---------------------------------------------------------------- file events
class Ev:
    def __init__(self, event_type, src, dest="", is_directory=False):
        self.event_type, self.src_path, self.dest_path, self.is_directory = event_type, src, dest, is_directory


def test_coalesce_moves_and_deletes():
    batch = coalesce([Ev("created", "/r/a.py"), Ev("modified", "/r/a.py"), Ev("moved", "/r/a.py", "/r/b.py"),
                      Ev("moved", "/r/c.py.tmp", "/r/c.py"), Ev("deleted", "/r/d.py"),
                      Ev("modified", "/r/pkg", is_directory=True)])
    assert batch == {"/r/a.py": "deleted", "/r/b.py": "changed", "/r/c.py.tmp": "deleted",
                     "/r/c.py": "changed", "/r/d.py": "deleted"}


def test_typing_keeps_the_prompt_window_start_stable():
    """Consecutive prompts while typing share all but their last tokens, so the decoder can reuse
    the previous prompt's KV cache (the window start moves only in ANCHOR_CHARS steps)."""
    if not MODEL.is_dir():
        pytest.skip("tiny-py-coder not available")
    import _pytest.python

    from transformers import AutoTokenizer

    from lsp_server.prompt import common_prefix_len

    tok = AutoTokenizer.from_pretrained(str(MODEL))
    source = Path(_pytest.python.__file__).read_text(encoding="utf-8")  # real third-party code
    cursor = len(source) // 2
    typed = "    result = compute(value)\n"
    prompts = [build_fim_prompt(tok, source[:cursor] + typed[:k], source[cursor:], 512).token_ids
               for k in range(0, len(typed), 3)]
    assert all(len(p) <= 512 for p in prompts)
    shared = [common_prefix_len(a, b) / len(b) for a, b in zip(prompts, prompts[1:])]
    assert sum(s > 0.6 for s in shared) >= len(shared) - 1, shared


def _longest_anchored_window(tok, prefix: str, budget: int) -> tuple[list[int] | None, int]:
    """The reference: every anchored window from the longest down, the first that fits (the old loop), and
    the characters it tokenized."""
    from lsp_server.prompt import _CHARS_PER_TOKEN_BOUND, ANCHOR_CHARS

    start = max(0, len(prefix) - budget * _CHARS_PER_TOKEN_BOUND)
    start = -(-start // ANCHOR_CHARS) * ANCHOR_CHARS
    chars = 0
    while start < len(prefix):
        line_start = 0 if start == 0 else (prefix.find("\n", start - 1) + 1 or len(prefix))
        if line_start >= len(prefix):
            break
        ids = tok.encode(prefix[line_start:], add_special_tokens=False)
        chars += len(prefix) - line_start
        if len(ids) <= budget:
            return ids, chars
        start += ANCHOR_CHARS
    return None, chars


def test_anchored_window_is_the_longest_that_fits_and_tokenizes_less():
    """The prefix window is the longest anchored one that fits, as when every window was tried from the
    longest down; deep in a long file (the editor's usual case) it tokenizes a fraction of the text that took."""
    if not MODEL.is_dir():
        pytest.skip("tiny-py-coder not available")
    import random

    import _pytest.python
    from transformers import AutoTokenizer

    from lsp_server import prompt as prompt_module
    from lsp_server.prompt import anchored_tail_ids

    tok = AutoTokenizer.from_pretrained(str(MODEL))
    source = Path(_pytest.python.__file__).read_text(encoding="utf-8")  # real third-party code
    rng = random.Random(0)
    cases = [(len(source) * 3 // 5, 700)] + [(rng.randrange(100, len(source)), rng.choice([64, 300, 700, 2000]))
                                            for _ in range(12)]
    for i, (cursor, budget) in enumerate(cases):
        want, old_chars = _longest_anchored_window(tok, source[:cursor], budget)
        prompt_module._encoded.clear()
        chars: list[int] = []
        encode = tok.encode
        tok.encode = lambda text, **kw: chars.append(len(text)) or encode(text, **kw)
        try:
            ids, cut = anchored_tail_ids(tok, source[:cursor], budget)
        finally:
            del tok.encode
        assert len(ids) <= budget and cut == (len(ids) < len(encode(source[:cursor], add_special_tokens=False)))
        if want is not None:
            assert ids == want
        if i == 0:
            assert want is not None and sum(chars) * 2 <= old_chars, (chars, old_chars)


def test_prompt_tokenizations_are_reused():
    """The same window is tokenized once (the background prefill and the completion at the same place build
    the same prompt; the text after the cursor stays the same while typing); the FIM tokens are looked up once
    per tokenizer, and again once its vocabulary grows."""
    class Counting(FakeTokenizer):
        def __init__(self, specials):
            super().__init__(specials)
            self.encoded, self.vocab_reads = [], 0

        def __len__(self):
            return len(self.specials) + 256

        def get_vocab(self):
            self.vocab_reads += 1
            return super().get_vocab()

        def encode(self, text, add_special_tokens=False):
            self.encoded.append(text)
            return super().encode(text)

    tok = Counting(["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"])
    first = build_fim_prompt(tok, "def f(x):\n    ret", "\n\nprint(f(1))\n", 256)
    assert build_fim_prompt(tok, "def f(x):\n    ret", "\n\nprint(f(1))\n", 256) == first
    assert tok.encoded == ["\n\nprint(f(1))\n", "def f(x):\n    ret"] and tok.vocab_reads == 1
    typed = build_fim_prompt(tok, "def f(x):\n    retu", "\n\nprint(f(1))\n", 256)
    assert tok.encoded[2:] == ["def f(x):\n    retu"]  # the suffix's ids were kept
    assert typed.token_ids[-9:] == first.token_ids[-9:] and typed.token_ids[:-9] != first.token_ids[:-9]
    tok.specials = {"<fim_prefix>": 7, "<fim_suffix>": 8, "<fim_middle>": 9, "x": 10}  # another size
    assert detect_fim_template(tok)[0].name == "starcoder" and tok.vocab_reads == 2


def test_a_folder_reads_indexing_from_the_moment_its_build_is_queued(tmp_path, tiny_tokenizer):
    """A client waiting for indexing polls until no folder reads ``indexing``: a folder added to a ready
    host must not read ``off`` while its build waits behind other work on the loader thread (the
    client then took the index as built, and the files it rewrote next were read by that first build)."""
    import threading  # noqa: PLC0415
    from types import SimpleNamespace  # noqa: PLC0415

    from lsp_server.host import EngineHost  # noqa: PLC0415

    (tmp_path / "a.py").write_text("def f():\n    return 1\n")
    host = EngineHost(Settings())
    try:
        host.loaded, host.state = SimpleNamespace(tokenizer=tiny_tokenizer), "ready"
        release = threading.Event()
        host.loader_pool.submit(release.wait, 30)  # the loader thread is busy: the build stays queued
        host.set_folders([str(tmp_path)])
        assert host.folders[str(tmp_path)].summary()["state"] == "indexing"
        release.set()
        host.loader_pool.submit(lambda: None).result(60)  # the queued build has run
        summary = host.folders[str(tmp_path)].summary()
        assert summary["state"] == "ready" and summary["builds"] == 1 and summary["files"] == 1
    finally:
        release.set()
        host.shutdown()


def test_cursor_offset_reads_the_notification_and_rejects_bad_params():
    """``fastcoder/cursor`` params -> (uri, offset in code points); anything else -> None (logged, no raise)."""
    from types import SimpleNamespace

    from pygls.workspace import TextDocument

    from lsp_server.server import cursor_offset

    uri = "file:///ws/a.py"
    doc = TextDocument(uri, "def f():\n    é = 1\n")
    ws = SimpleNamespace(text_documents={uri: doc})

    def note(uri_value, line, character):  # what pygls gives a handler for a custom method's params
        return SimpleNamespace(textDocument=SimpleNamespace(uri=uri_value),
                               position=SimpleNamespace(line=line, character=character))

    assert cursor_offset(ws, note(uri, 1, 4)) == (uri, 13)
    assert cursor_offset(ws, note(uri, 1, 5)) == (uri, 14)  # after "é" (one UTF-16 unit)
    assert cursor_offset(ws, note(uri, 2, 0)) == (uri, len(doc.source))
    for bad in (None, [], SimpleNamespace(position=None), note(5, 0, 0), note("file:///other.py", 0, 0),
                note(uri, 9, 0), note(uri, 0, 99), note(uri, -1, 0), note(uri, "x", 0)):
        assert cursor_offset(ws, bad) is None


def test_warm_on_cursor_setting_parses():
    new, warnings = parse_settings({"fastcoder": {"warmOnCursor": False}}, Settings())
    assert new.warm_on_cursor is False and not warnings
    new, warnings = parse_settings({"fastcoder": {"warmOnCursor": "no"}}, Settings())
    assert new.warm_on_cursor is True and warnings  # not a boolean: kept, with a warning


def test_status_says_whether_verification_is_cheap():
    from types import SimpleNamespace

    from engine.cost_model import VerifyCost
    from lsp_server.host import EngineHost

    assert EngineHost._cheap_verification(SimpleNamespace(_cost=None)) is None  # not measured yet
    assert EngineHost._cheap_verification(SimpleNamespace(_cost=VerifyCost.flat())) is True
    steep = VerifyCost([1, 8, 16], [1.3, 2.0, 3.0], 2.0, 512)
    assert EngineHost._cheap_verification(SimpleNamespace(_cost=steep)) is False


def test_server_threads_default_to_all_cpus_but_one_and_keep_the_users_setting(monkeypatch):
    """The server leaves one CPU to the rest of the machine (a busy core stalls every multi-threaded forward), at
    least one thread, and keeps an OMP_NUM_THREADS the user set."""
    from lsp_server import __main__ as entry

    monkeypatch.setattr(entry.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert entry.default_threads() == 7
    monkeypatch.setattr(entry.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert entry.default_threads() == 1
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert entry.set_default_threads() == "1" and entry.os.environ["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert entry.set_default_threads() == "3"


def test_log_level_comes_from_the_environment_and_a_bad_one_still_starts(monkeypatch, capsys):
    """FASTCODER_LOG_LEVEL (set through an editor's server environment setting) is the default of --log-level; the
    flag wins over it; an unknown level logs at INFO after a message instead of stopping the server."""
    from lsp_server import __main__ as entry

    monkeypatch.delenv("FASTCODER_LOG_LEVEL", raising=False)
    assert entry.parse_args([]).log_level == "INFO"
    monkeypatch.setenv("FASTCODER_LOG_LEVEL", "debug")
    assert entry.parse_args([]).log_level == "DEBUG"
    assert entry.parse_args(["--log-level", "warning"]).log_level == "WARNING"  # as the README spells it
    monkeypatch.setenv("FASTCODER_LOG_LEVEL", "loud")
    assert entry.parse_args([]).log_level == "INFO"
    assert "FASTCODER_LOG_LEVEL='LOUD'" in capsys.readouterr().err


def test_every_inline_completion_leaves_one_debug_line_saying_how_it_ended(caplog):
    """A request that got nothing to show says why in the server's DEBUG log (here: the model still loading),
    so an empty answer seen once in an editor can be read back."""
    import asyncio
    import logging
    from types import SimpleNamespace

    from lsprotocol import types

    from lsp_server.server import complete

    ls = SimpleNamespace(backend=SimpleNamespace(state="loading"))
    params = types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri="file:///w/a.py"), position=types.Position(3, 4),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))
    with caplog.at_level(logging.DEBUG, logger="fastcoder.lsp"):
        res = asyncio.run(complete(ls, params))
    assert list(res.items) == []
    lines = [r.getMessage() for r in caplog.records if r.name == "fastcoder.lsp"]
    assert len(lines) == 1 and lines[0].startswith("inlineCompletion file:///w/a.py:3:4 empty: backend loading"), lines
