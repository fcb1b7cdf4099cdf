"""The output store (engine.output_store): the model's own output on other packages warms the completion history."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine import output_store as ost
from engine.draft_tree import SOURCE_HISTORY
from engine.history import CompletionHistory


def _store(pairs, model=None, info=None):
    return ost.OutputStore.from_sequences(pairs, model or {"params": 3, "head_sha256": "ab"}, info or {"x": 1})


def test_files_round_trip_and_bad_files_fail_clearly(tmp_path):
    store = _store([([1, 2], [3, 4, 5]), ([], [6]), ([7], [])])  # the empty output is left out
    assert (store.num_sequences, store.output_tokens) == (2, 4)
    assert [(t.tolist(), o.tolist()) for t, o in store.sequences()] == [([1, 2], [3, 4, 5]), ([], [6])]
    back = ost.OutputStore.load(store.save(tmp_path / "s.npz"))
    assert [(t.tolist(), o.tolist()) for t, o in back.sequences()] == [([1, 2], [3, 4, 5]), ([], [6])]
    assert (back.model, back.info) == (store.model, store.info)
    assert back.describe() == {"model": store.model, "sequences": 2, "output_tokens": 4, "x": 1}
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError):
        ost.OutputStore.load(tmp_path / "bad.npz")
    with pytest.raises(OSError):
        ost.OutputStore.load(tmp_path / "missing.npz")
    for tokens, offsets, tails in (([1, 2], [0, 3], [0]), ([1, 2], [0, 2], [3]), ([-1, 2], [0, 2], [0]),
                                   ([1, 2], [0, 1, 2], [0])):
        with pytest.raises(ValueError):
            ost.OutputStore(np.array(tokens), np.array(offsets), np.array(tails))


def test_a_warm_history_drafts_what_the_store_holds_and_a_cold_one_does_not():
    """The store's outputs are in the history from the start: the continuation of a stored tail comes back as the
    history's draft; the history's count of this session's completions starts at 0."""
    store = _store([([10, 11, 12], [13, 14, 15, 16]), ([20, 21], [22, 23])])
    warm = ost.new_completion_history(store=store)
    ctx = np.array([5, 10, 11, 12], dtype=np.int64)
    cand = warm.search(ctx, draft_len=8)
    assert cand is not None and cand.source == SOURCE_HISTORY
    assert [int(t) for t in cand.tokens[0] if t >= 0] == [13, 14, 15]  # factor 1: at most as many as matched
    assert warm.num_completions == 0 and warm.store["sequences"] == 2
    assert warm.max_candidates == ost.WARM_MAX_CANDIDATES and warm.max_tokens >= 2 * len(store.tokens)
    cold = ost.new_completion_history()
    assert cold.search(ctx, draft_len=8) is None and cold.store is None
    assert cold.max_candidates == CompletionHistory().max_candidates


def test_the_store_is_found_for_its_own_model_only(tmp_path, monkeypatch):
    """``$FASTCODER_OUTPUT_STORE`` off gives none, a path gives that file; in a folder only the store built for the
    model's identity serves."""
    from engine.acceptance_prior import model_identity

    class Fake:
        pass

    monkeypatch.setenv(ost.STORE_ENV, "off")
    assert ost.find_output_store(Fake()) is None
    path = _store([([1], [2])]).save(tmp_path / "given.npz")
    monkeypatch.setenv(ost.STORE_ENV, str(path))
    assert ost.find_output_store(Fake()).num_sequences == 1
    monkeypatch.delenv(ost.STORE_ENV)
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(4, 4)  # no output embedding: an identity of its parameter count and an empty hash
    folder = tmp_path / "stores"
    _store([([1], [2])], model={"params": 999, "head_sha256": ""}).save(folder / "other.npz")
    assert ost.find_output_store(model, [folder]) is None
    _store([([1], [2, 3])], model=model_identity(model)).save(folder / ost.store_file_name(model_identity(model)))
    assert ost.find_output_store(model, [folder]).output_tokens == 2


def test_the_packaged_store_serves_tiny_py_coder_and_decoding_stays_lossless(tiny_coder, monkeypatch):
    """tiny-py-coder finds its packaged store, built on packages other than the benchmark's, and a decoder's history
    is warm with it; a store holding the model's own output for a prompt drafts it the first time (a cold history
    has nothing to draft), and the output equals plain decoding either way."""
    from engine import SpeculativeDecoder

    monkeypatch.delenv(ost.STORE_ENV, raising=False)
    store = ost.find_output_store(tiny_coder.model)
    assert store is not None, "no packaged output store for tiny-py-coder"
    assert not {s["repo"] for s in store.info["built_on"]} & {"jinja2", "pluggy", "pygls"}  # not the benchmark's
    prompt = ("def parse_header(line):\n    key, value = line.split(':', 1)\n    return key.strip(), value.strip()\n"
              "\n\ndef parse_headers(lines):\n    headers = {}\n    for line in lines:\n")
    want = SpeculativeDecoder(tiny_coder, method="ar").generate(prompt, max_new_tokens=40)
    packaged = SpeculativeDecoder(tiny_coder, method="fastcoder")
    assert packaged.history.store is not None and packaged.history.num_completions == 0
    assert packaged.generate(prompt, max_new_tokens=40).token_ids == want.token_ids
    ids = tiny_coder.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    own = ost.OutputStore.from_sequences([(ids[-32:], want.token_ids)])
    warm = SpeculativeDecoder(tiny_coder, method="fastcoder", completion_history=ost.new_completion_history(store=own))
    cold = SpeculativeDecoder(tiny_coder, method="fastcoder", completion_history=CompletionHistory())
    got, plain = warm.generate(prompt, max_new_tokens=40), cold.generate(prompt, max_new_tokens=40)
    assert got.token_ids == plain.token_ids == want.token_ids
    assert got.stats["hits"]["history"] > 0 and plain.stats["hits"]["history"] == 0


def test_build_command_writes_a_store_the_decoder_then_uses(tmp_path, handlers_repo, tiny_coder, engine_cli):
    """``fastcoder build-output-store`` (tiny settings) writes the model's greedy outputs with its identity and where
    they came from; every stored output is what ``ar`` writes for that task."""
    from engine.acceptance_prior import model_identity

    out = tmp_path / "store.npz"
    status, stdout, stderr = engine_cli(["build-output-store", "--model", tiny_coder.name, "--repo", handlers_repo,
                                         "--kinds", "function,fim-line", "--tasks", "3", "--max-new-tokens", "16",
                                         "--common", "none", "--threads", "1", "--out", out])
    assert status == 0, stderr[-2000:]
    report = json.loads(stdout.strip().splitlines()[-1])
    store = ost.OutputStore.load(out)
    assert report["path"] == str(out) and store.model == model_identity(tiny_coder.model)
    assert [s["repo"] for s in store.info["built_on"]] == ["repo", "repo"]
    assert 0 < store.num_sequences <= 6 and 0 < store.output_tokens <= 6 * 16
    assert all(0 < len(t) <= 32 for t, _ in store.sequences())
    status, _, stderr = engine_cli(["build-output-store", "--model", tiny_coder.name, "--repo", tmp_path / "nope",
                                    "--out", tmp_path / "x.npz"])
    assert status == 2 and "not a folder" in stderr
    # --add: a store grows by more packages; the earlier sequences come first, unchanged
    grown_path = tmp_path / "grown.npz"
    status, _, stderr = engine_cli(["build-output-store", "--model", tiny_coder.name, "--repo", handlers_repo,
                                    "--kinds", "fim-block", "--tasks", "2", "--max-new-tokens", "8", "--common", "none",
                                    "--threads", "1", "--add", out, "--out", grown_path])
    assert status == 0, stderr[-2000:]
    grown = ost.OutputStore.load(grown_path)
    assert [s["kind"] for s in grown.info["built_on"]] == ["function", "fim-line", "fim-block"]
    old_seqs = [(t.tolist(), o.tolist()) for t, o in store.sequences()]
    assert [(t.tolist(), o.tolist()) for t, o in grown.sequences()][:len(old_seqs)] == old_seqs
    assert grown.num_sequences > store.num_sequences
    other = _store([([1], [2])]).save(tmp_path / "other.npz")  # another model's store is refused
    status, _, stderr = engine_cli(["build-output-store", "--model", tiny_coder.name, "--repo", handlers_repo,
                                    "--add", other, "--out", tmp_path / "y.npz"])
    assert status == 2 and "written by another model" in stderr and not (tmp_path / "y.npz").exists()


def test_stores_merge_in_order_and_only_for_one_model():
    a = _store([([1, 2], [3, 4])], info={"built_on": [{"repo": "a"}]})
    b = _store([([5], [6]), ([], [7, 8, 9])], info={"built_on": [{"repo": "b"}]})
    both = ost.OutputStore.merged([a, b], {"note": "x"})
    assert [(t.tolist(), o.tolist()) for t, o in both.sequences()] == [([1, 2], [3, 4]), ([5], [6]), ([], [7, 8, 9])]
    assert (both.output_tokens, both.info) == (6, {"note": "x", "built_on": [{"repo": "a"}, {"repo": "b"}]})
    with pytest.raises(ValueError, match="different models"):
        ost.OutputStore.merged([a, _store([([1], [2])], model={"params": 4})])
    with pytest.raises(ValueError):
        ost.OutputStore.merged([])


def test_the_bench_reports_the_store_and_warns_when_it_was_built_on_the_repository(tmp_path, monkeypatch, capsys):
    from engine.bench.cli import _output_store_report

    class Loaded:
        model = object()

    path = _store([([1], [2])], info={"built_on": [{"repo": "mylib", "kind": "function"}]}).save(tmp_path / "s.npz")
    monkeypatch.setenv(ost.STORE_ENV, str(path))
    assert _output_store_report(Loaded(), tmp_path / "other", ["ar", "fastcoder"])["built_on_this_repo"] is False
    assert capsys.readouterr().err == ""
    assert _output_store_report(Loaded(), tmp_path / "mylib", ["ar", "fastcoder"])["built_on_this_repo"] is True
    assert "built on mylib" in capsys.readouterr().err
    assert _output_store_report(Loaded(), tmp_path / "mylib", ["ar", "suffix"]) is None  # no fastcoder, no store


def test_one_line_completions_draft_from_this_sessions_completions_only():
    """A warm history gives one-line completions its session part; a completion's output joins both parts whichever
    it drafted from."""
    warm = ost.new_completion_history(store=_store([([10, 11, 12], [13, 14, 15, 16])]))
    session = warm.for_completion(True)
    assert warm.for_completion(False) is warm and session is not warm
    ctx = np.array([10, 11, 12], dtype=np.int64)
    assert session.search(ctx, draft_len=8) is None and warm.search(ctx, draft_len=8) is not None
    session.add([30, 31], [32, 33, 34])  # a one-line completion's output
    warm.add([40, 41], [42, 43, 44])  # a longer one's
    for part in (session, warm):
        for tail, nxt in (([30, 31], 32), ([40, 41], 42)):
            cand = part.search(np.array(tail, dtype=np.int64), draft_len=8)
            assert cand is not None and int(cand.tokens[0][0]) == nxt
    assert warm.num_completions == session.num_completions == 2
