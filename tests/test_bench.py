"""Tests of the benchmark harness (the engine/bench package): task extraction, metrics, the JSON contract,
and that the lossless check really compares outputs (a broken decoder must make it fail)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine import bench

SOURCE = '''\
import os


def short(a):
    return a


def one_liner(x): return x + 1


def documented(path, mode="r"):
    """Open a file.

    Long docstring.
    """
    full = os.path.join("base", path)
    with open(full, mode) as fh:
        data = fh.read()
    return data


class Box:
    def method(self, items):
        total = 0
        for item in items:
            total += item
        return total

    async def fetch(self,
                    url):
        async with url as u:
            x = await u.read()
        return x
'''


def test_find_functions_spans_body_after_docstring():
    spans = {s.qualname: s for s in bench.find_functions(SOURCE, min_body_lines=3)}
    assert set(spans) == {"documented", "Box.method", "Box.fetch"}
    doc = spans["documented"]
    assert SOURCE[:doc.body_start].endswith('    Long docstring.\n    """\n')
    assert SOURCE[doc.body_start:doc.body_end] == (
        '    full = os.path.join("base", path)\n    with open(full, mode) as fh:\n'
        '        data = fh.read()\n    return data\n')
    assert doc.body_lines == 4
    fetch = spans["Box.fetch"]
    assert SOURCE[:fetch.body_start].endswith("url):\n")
    assert SOURCE[fetch.body_end - len("return x\n"):fetch.body_end] == "return x\n"
    assert fetch.body_end == len(SOURCE)


def test_find_functions_bad_source_is_empty():
    assert bench.find_functions("def broken(:\n  pass\n") == []
    assert bench.find_functions("") == []


def _real_repo(tmp_path: Path) -> Path:
    """A small repository of real third-party code (pluggy, installed with pytest)."""
    spec = importlib.util.find_spec("pluggy")
    src = Path(list(spec.submodule_search_locations)[0])
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    for name in ("_result.py", "_tracing.py", "_hooks.py"):
        shutil.copy(src / name, repo / "pkg" / name)
    return repo


def test_extract_tasks_seeded_and_truncated(tmp_path, tiny_coder):
    repo = _real_repo(tmp_path)
    a = bench.extract_tasks(repo, tiny_coder.tokenizer, 3, seed=1, max_prompt_tokens=100)
    b = bench.extract_tasks(repo, tiny_coder.tokenizer, 3, seed=1, max_prompt_tokens=100)
    assert [t.task_id for t in a] == [t.task_id for t in b] and len(a) == 3
    assert len({t.task_id for t in a}) == 3
    for task in a:
        assert 0 < len(task.prompt_ids) <= 100
        text = (repo / task.path).read_text()
        full = tiny_coder.tokenizer(text[:task.body_start], add_special_tokens=False)["input_ids"]
        assert task.prompt_ids == full[-100:]
        assert task.truncated == (len(full) > 100)
        assert len(text[task.body_start:task.body_end].splitlines()) >= 3
    many = bench.extract_tasks(repo, tiny_coder.tokenizer, 10_000, seed=0)
    assert len(many) == len({t.task_id for t in many}) > 3


def test_extract_tasks_bad_input(tmp_path, tiny_coder):
    with pytest.raises(bench.BenchError, match="not a folder"):
        bench.extract_tasks(tmp_path / "missing", tiny_coder.tokenizer, 2)
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(bench.BenchError, match="no function"):
        bench.extract_tasks(tmp_path, tiny_coder.tokenizer, 2)


def test_parse_methods():
    assert bench.parse_methods("fastcoder,rest") == ("ar", "fastcoder", "rest")
    assert bench.parse_methods("rest,ar,rest") == ("ar", "rest")
    with pytest.raises(bench.BenchError, match="unknown method"):
        bench.parse_methods("ar,medusa")


def _rec(new_tokens, decode_ms, passes, lossless=True, retrieval_ms=0.0, hits=None, retrieval_prefill_ms=0.0,
         forward_ms=None):
    return {"task_id": "t", "file": "f", "function": "g", "prompt_tokens": 10, "new_tokens": new_tokens,
            "prefill_ms": 5.0, "decode_ms": decode_ms, "wall_ms": decode_ms + 5, "retrieval_ms": retrieval_ms,
            "retrieval_prefill_ms": retrieval_prefill_ms, "forward_ms": forward_ms,
            "forward_passes": passes, "accepted_lengths": [1] * passes, "draft_sizes": [2] * passes,
            "hits": hits or {}, "finish_reason": "length", "peak_rss_mb": 100.0, "cache_bytes": None,
            "lossless": lossless, "first_divergence": None if lossless else 3, "token_ids": [1]}


def test_summarize_ratios_of_totals():
    records = {"ar": [_rec(11, 100.0, 10), _rec(21, 200.0, 20)],
               "fastcoder": [_rec(11, 50.0, 5, retrieval_ms=5.0, hits={"repo": 3}, retrieval_prefill_ms=1.0,
                                  forward_ms=40.0),
                             _rec(21, 50.0, 5, lossless=False, retrieval_ms=5.0, hits={"cache": 2}, forward_ms=42.0)]}
    out = bench.summarize(records)
    ar, fc = out["ar"], out["fastcoder"]
    assert ar["ms_per_token"] == pytest.approx(300 / 32) and ar["speedup"] == pytest.approx(1.0)
    assert fc["ms_per_token"] == pytest.approx(100 / 32)
    assert fc["speedup"] == pytest.approx(3.0)
    assert fc["mean_accepted_length"] == pytest.approx(30 / 10)
    assert ar["mean_accepted_length"] == pytest.approx(1.0)
    assert fc["retrieval_ms_per_step"] == pytest.approx(1.0)
    assert fc["retrieval_share"] == pytest.approx(0.1)
    # the drafting done in the prefill phase (the drafter's reset, the prefill's draft) is not step time
    assert fc["step_retrieval_ms_per_step"] == pytest.approx(0.9) and fc["step_retrieval_share"] == pytest.approx(0.09)
    # the forwards' time and the rest of a step ("other": masks, acceptance, compaction, Python)
    assert fc["forward_ms_per_step"] == pytest.approx(8.2) and fc["step_forward_share"] == pytest.approx(0.82)
    assert fc["step_other_share"] == pytest.approx(1 - 0.82 - 0.09)
    assert ar["forward_ms_per_step"] is None and ar["step_other_share"] is None  # not measured: not made up
    assert fc["hits"] == {"cache": 2, "repo": 3, "common": 0, "context": 0, "adaptive": 0, "suffix": 0,
                          "history": 0}
    assert ar["lossless"] is True and fc["lossless"] is False and fc["lossless_tasks"] == 1
    assert "token_ids" not in fc["per_task"][0]


def test_greedy_pieces_and_prompt_lookup():
    transcript = [5, 6, 7, 8, 9, 10]

    def propose(context, remaining):  # drafts 2 correct tokens after token 6, nothing elsewhere
        return 2 if int(context[-1]) == 6 else 0

    pieces = bench.greedy_pieces(propose, [1, 2], transcript)
    # token 5 from prefill; at 6 -> 1 piece of 1 (ctx ends 5); ctx ends 6 -> accept 7,8 + bonus 9; then 10
    assert pieces == [1, 3, 1] and sum(pieces) == len(transcript) - 1
    ctx = np.array([3, 4, 5, 9, 3, 4], dtype=np.int64)
    assert bench.prompt_lookup_match(ctx, [5, 9, 1]) == 2
    assert bench.prompt_lookup_match(np.array([1, 2], dtype=np.int64), [3]) == 0


def _smoke_cfg(**kw):
    base = dict(max_new_tokens=10, warmup_tokens=2, cost_sizes=(1, 2, 4), cost_repeats=1, progress=False)
    base.update(kw)
    return bench.BenchConfig(**base)


def test_smoke_all_methods_json_and_broken_decoder(tmp_path, tiny_coder, monkeypatch, one_thread):
    """Two tasks, every method, real datastores: the JSON contract holds and every method is lossless;
    then a decoder that alters one output token must make ``lossless`` false for that method only."""
    repo = _real_repo(tmp_path)
    out = tmp_path / "out"
    argv = ["--model", str(Path(tiny_coder.name)), "--repo", str(repo), "--common", "none", "--tasks", "2",
            "--max-new-tokens", "10", "--warmup-tokens", "2", "--cost-sizes", "1,2,4", "--seed", "3",
            "--json", str(out / "r.json"), "--markdown", str(out / "r.md"), "--plot", str(out / "r.png"),
            "--no-progress"]
    assert bench.main(argv) == 0
    result = json.loads((out / "r.json").read_text())
    assert result["schema"] == bench.SCHEMA
    assert list(result["methods"]) == list(bench.DEFAULT_METHODS)
    assert len(result["tasks"]) == 2
    for name, m in result["methods"].items():
        for key in ("ms_per_token", "speedup", "mean_accepted_length", "forward_passes", "prefill_ms",
                    "retrieval_ms_per_step", "retrieval_share", "hits", "peak_rss_mb", "lossless"):
            assert key in m, (name, key)
        assert m["lossless"] is True, name
        assert m["ms_per_token"] > 0 and m["speedup"] > 0 and m["peak_rss_mb"] > 0
        assert len(m["per_task"]) == 2
        for t, ref in zip(m["per_task"], result["methods"]["ar"]["per_task"]):
            assert {"task_id", "file", "function", "prompt_tokens", "new_tokens", "decode_ms",
                    "accepted_lengths", "lossless"} <= set(t)
            assert t["task_id"] == ref["task_id"] and t["new_tokens"] == ref["new_tokens"] > 0
    assert result["methods"]["ar"]["speedup"] == pytest.approx(1.0)
    assert result["methods"]["ar"]["mean_accepted_length"] == pytest.approx(1.0)
    head = result["headroom"]
    cost = head["verify_cost"]
    assert cost["n"] == [1, 2, 4] and cost["ar_ms"] > 0
    assert cost["c"] == pytest.approx([m / cost["ar_ms"] for m in cost["ms"]])
    assert head["retrieval_ceiling"]["mean_accepted_length_bound"] >= 1.0
    assert set(head["predicted"]) >= {"ar", "fastcoder"}
    assert "| fastcoder |" in (out / "r.md").read_text()
    assert (out / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    from engine import SpeculativeDecoder

    real_generate = SpeculativeDecoder.generate

    def broken(self, *args, **kwargs):
        res = real_generate(self, *args, **kwargs)
        if self.method == "copyspec" and len(res.token_ids) > 3:
            res.token_ids[3] = (res.token_ids[3] + 1) % tiny_coder.vocab_size
        return res

    monkeypatch.setattr(SpeculativeDecoder, "generate", broken)
    tasks = bench.extract_tasks(repo, tiny_coder.tokenizer, 2, seed=3)
    cfg = _smoke_cfg(methods=("ar", "copyspec", "rest"), headroom=False)
    again = bench.benchmark(tiny_coder, repo, tasks, None, cfg)
    assert again["methods"]["copyspec"]["lossless"] is False
    assert {t["first_divergence"] for t in again["methods"]["copyspec"]["per_task"]} == {3}
    assert again["methods"]["rest"]["lossless"] is True and again["methods"]["ar"]["lossless"] is True


def test_cli_bad_input_exit_code_2(tmp_path, capsys):
    assert bench.main(["--repo", str(tmp_path / "missing")]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert bench.main(["--repo", str(tmp_path), "--methods", "ar,medusa"]) == 2
    assert "unknown method" in capsys.readouterr().err
    assert bench.main(["--repo", str(tmp_path), "--model", str(tmp_path / "no-model")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_failing_method_is_recorded_not_fatal(tmp_path, tiny_coder, monkeypatch, one_thread):
    """A decoder that raises on one method: the run completes, that method is not lossless and
    its per-task records carry the error."""
    from engine import SpeculativeDecoder

    real_generate = SpeculativeDecoder.generate

    def flaky(self, *args, **kwargs):
        if self.method == "rest":
            raise RuntimeError("boom")
        return real_generate(self, *args, **kwargs)

    monkeypatch.setattr(SpeculativeDecoder, "generate", flaky)
    repo = _real_repo(tmp_path)
    tasks = bench.extract_tasks(repo, tiny_coder.tokenizer, 1, seed=0)
    out = bench.benchmark(tiny_coder, repo, tasks, None, _smoke_cfg(methods=("ar", "rest"), headroom=False,
                                                                    max_new_tokens=4))
    assert out["methods"]["ar"]["lossless"] is True
    rest = out["methods"]["rest"]
    assert rest["lossless"] is False and rest["per_task"][0]["error"] == "RuntimeError: boom"


# --------------------------------------------------------------------------------------------------
# The editor's workload: fim-line and fim-block tasks (issue #9 item 4)
# --------------------------------------------------------------------------------------------------


def _fim_ids(tokenizer):
    from engine.fim import detect_fim_template

    found = detect_fim_template(tokenizer)
    assert found is not None, "tiny-py-coder has FIM tokens"
    return found[1]


def _check_psm(task, source: str, tokenizer) -> None:
    """The prompt is [prefix-token] tail of the text before the cursor [suffix-token] head of the text
    after the excluded span [middle-token], within the budget."""
    pre, suf, mid = _fim_ids(tokenizer)
    ids = task.prompt_ids
    assert ids[0] == pre and ids[-1] == mid and ids.count(suf) == 1
    cut = ids.index(suf)
    prefix_ids, suffix_ids = ids[1:cut], ids[cut + 1:-1]
    assert (len(prefix_ids), len(suffix_ids)) == (task.prefix_tokens, task.suffix_tokens)
    full_prefix = tokenizer(source[:task.cursor], add_special_tokens=False)["input_ids"]
    assert prefix_ids == full_prefix[len(full_prefix) - len(prefix_ids):]
    full_suffix = tokenizer(source[task.body_end:], add_special_tokens=False)["input_ids"]
    assert suffix_ids == full_suffix[:len(suffix_ids)] and suffix_ids


def test_fim_line_tasks_cursor_inside_a_line(tmp_path, tiny_tokenizer):
    repo = _real_repo(tmp_path)
    tasks = bench.extract_tasks(repo, tiny_tokenizer, 6, seed=2, max_prompt_tokens=300, kind="fim-line")
    again = bench.extract_tasks(repo, tiny_tokenizer, 6, seed=2, max_prompt_tokens=300, kind="fim-line")
    assert [t.task_id for t in tasks] == [t.task_id for t in again] and len(tasks) == 6
    for task in tasks:
        source = (repo / task.path).read_text()
        line_start = source.rfind("\n", 0, task.cursor) + 1
        before, rest = source[line_start:task.cursor], source[task.cursor:task.body_end]
        assert task.kind == "fim-line" and task.stop == ("\n",) and task.template == "qwen"
        assert before.strip() and before[-1] in bench.FIM_LINE_CURSOR_AFTER  # inside the line's code
        assert rest.strip() and "\n" not in rest  # the rest of the line is what is left to write
        assert source[task.body_end] == "\n"
        assert (task.cursor_line, task.cursor_col) == (source.count("\n", 0, task.cursor) + 1,
                                                       task.cursor - line_start)
        assert len(task.prompt_ids) <= 300 and task.suffix_tokens <= int(297 * bench.FIM_SUFFIX_FRACTION)
        _check_psm(task, source, tiny_tokenizer)
        span = {s.qualname: s for s in bench.find_functions(source)}[task.function]
        assert span.body_start <= task.cursor < task.body_end <= span.body_end


def test_token_healing_backs_the_prefix_up_and_every_method_writes_what_it_removed(tmp_path, tiny_coder,
                                                                                     one_thread, engine_cli):
    """``--token-healing``: a task's prompt loses the prefix's last tokens that a longer token starts with (the cursor
    after a space or a bracket), the rest of the prompt unchanged; every method's output, ``ar``'s included, is the
    model's output under the constraint to begin with those bytes, and the methods stay lossless."""
    repo = _real_repo(tmp_path)
    table = tiny_coder.token_bytes
    tasks = bench.extract_tasks(repo, tiny_coder.tokenizer, 6, seed=2, max_prompt_tokens=300, kind="fim-line")
    healed = [bench.heal_task(task, table) for task in tasks]
    assert any(h.healed for h in healed), [t.task_id for t in tasks]
    for task, h in zip(tasks, healed):
        cut = task.prefix_tokens - h.prefix_tokens
        end = len(task.prompt_ids) - task.suffix_tokens - 2  # the prefix ends before <suffix-token> suffix <middle>
        assert h.prompt_ids == task.prompt_ids[:end - cut] + task.prompt_ids[end:]
        assert b"".join(table.pieces[t] for t in task.prompt_ids[end - cut:end]) == h.healed
        assert (cut > 0) == bool(h.healed) and h.describe()["healed"] == h.healed.decode("utf-8", "backslashreplace")
    plain = bench.extract_tasks(repo, tiny_coder.tokenizer, 2, seed=0)  # prefix-only prompts heal at their end
    assert all(h.prompt_ids == t.prompt_ids[:len(h.prompt_ids)] for t in plain for h in [bench.heal_task(t, table)])
    runs = [h for h in healed if h.healed][:2]
    cfg = _smoke_cfg(methods=("ar", "suffix", "fastcoder"), headroom=False, max_new_tokens=12, warmup_tokens=0)
    if importlib.util.find_spec("arctic_inference") is None:
        cfg = _smoke_cfg(methods=("ar", "copyspec", "fastcoder"), headroom=False, max_new_tokens=12, warmup_tokens=0)
    out = bench.benchmark(tiny_coder, repo, runs, None, cfg)
    for name, m in out["methods"].items():
        assert m["lossless"] is True, name
    from engine import SpeculativeDecoder

    for task, record in zip(runs, out["methods"]["ar"]["per_task"]):  # the bench's ar ran under the constraint
        want = SpeculativeDecoder(tiny_coder, "ar").generate(task.prompt_ids, 12, stop=["\n"], constraint=task.healed)
        assert want.text.encode().startswith(task.healed) and record["new_tokens"] == len(want.token_ids)
    assert [t["healed"] for t in out["tasks"]] == [h.healed.decode() for h in runs]
    status, _, err = engine_cli(["bench", "--model", tiny_coder.name, "--repo", repo, "--task-kind", "fim-line",
                                 "--token-healing", "--methods", "ar,hf-prompt-lookup", "--tasks", "1"])
    assert status == 2 and "takes no constraint" in err  # transformers' generate cannot be constrained


def test_fim_block_tasks_cursor_at_body_start(tmp_path, tiny_tokenizer):
    repo = _real_repo(tmp_path)
    tasks = bench.extract_tasks(repo, tiny_tokenizer, 3, seed=1, kind="fim-block")
    assert len(tasks) == 3
    for task in tasks:
        source = (repo / task.path).read_text()
        span = {s.qualname: s for s in bench.find_functions(source)}[task.function]
        assert task.kind == "fim-block" and task.stop == ("\n\n",)
        assert (task.body_start, task.body_end) == (span.body_start, span.body_end) and task.cursor_col == 0
        assert len(task.prompt_ids) <= bench.DEFAULT_MAX_PROMPT_TOKENS
        _check_psm(task, source, tiny_tokenizer)
        assert task.describe()["stop"] == ["\n\n"] and task.describe()["kind"] == "fim-block"
    with pytest.raises(bench.BenchError, match="unknown task kind"):
        bench.extract_tasks(repo, tiny_tokenizer, 1, kind="fim-word")


def test_build_fim_ids_budget_and_prefix_only(tiny_tokenizer):
    prefix, suffix = "def add(a, b):\n    total = a +" * 20, " b\n    return total\n" * 20
    ids, template, n_pre, n_suf, truncated = bench.build_fim_ids(tiny_tokenizer, prefix, suffix, 40)
    assert template == "qwen" and len(ids) == 40 and truncated
    assert n_suf == int(37 * bench.FIM_SUFFIX_FRACTION) and n_pre == 37 - n_suf

    class NoFim:  # a tokenizer without FIM tokens: the prefix's tail only, as the server does
        def __call__(self, text, add_special_tokens=False):
            return tiny_tokenizer(text, add_special_tokens=add_special_tokens)

        def get_vocab(self):
            return {}

    ids, template, n_pre, n_suf, truncated = bench.build_fim_ids(NoFim(), prefix, suffix, 40)
    full = tiny_tokenizer(prefix, add_special_tokens=False)["input_ids"]
    assert (template, n_suf, truncated) == ("prefix-only", 0, True) and ids == full[-40:] and n_pre == 40


def test_cut_at_stop(tiny_tokenizer):
    ids = tiny_tokenizer("x = 1\ny = 2\n", add_special_tokens=False)["input_ids"]
    first_line = bench.cut_at_stop(tiny_tokenizer, ids, ["\n"])
    assert tiny_tokenizer.decode(first_line).count("\n") == 1 and tiny_tokenizer.decode(first_line).endswith("\n")
    assert ids[:len(first_line)] == first_line
    assert bench.cut_at_stop(tiny_tokenizer, ids, ["\n\n"]) == ids  # no stop: all kept
    assert bench.cut_at_stop(tiny_tokenizer, ids, []) == ids


def test_fim_runs_lossless_with_stops(tmp_path, tiny_coder, monkeypatch, one_thread):
    """One fim-line and one fim-block task, 8 tokens: every method is token-identical to ar up to the
    stop, and tokens a speculative step commits past the stop are not counted against it."""
    from engine import SpeculativeDecoder

    real_generate = SpeculativeDecoder.generate
    seen = []

    def overshoot(self, *args, **kwargs):  # as if a tree step had committed two tokens past the stop
        seen.append(kwargs.get("stop"))
        res = real_generate(self, *args, **kwargs)
        if self.method == "copyspec" and res.finish_reason == "stop":
            res.token_ids = res.token_ids + [res.token_ids[-1], res.token_ids[-1]]
        return res

    monkeypatch.setattr(SpeculativeDecoder, "generate", overshoot)
    repo = _real_repo(tmp_path)
    cfg = _smoke_cfg(methods=("ar", "copyspec", "fastcoder"), headroom=False, max_new_tokens=8, warmup_tokens=0)
    for kind, stop in (("fim-line", ["\n"]), ("fim-block", ["\n\n"])):
        tasks = bench.extract_tasks(repo, tiny_coder.tokenizer, 1, seed=0, kind=kind)
        out = bench.benchmark(tiny_coder, repo, tasks, None, cfg)
        assert out["tasks"][0]["kind"] == kind and seen[-1] == stop
        ar = out["methods"]["ar"]["per_task"][0]
        if ar["new_tokens"] > 1 or ar["finish_reason"] == "eos":  # ends at a stop, an EOS or the length
            assert out["methods"]["ar"]["mean_accepted_length"] == pytest.approx(1.0)
        for name, m in out["methods"].items():
            assert m["lossless"] is True, (kind, name)
            task = m["per_task"][0]
            assert task["new_tokens"] == ar["new_tokens"] and 0 < task["new_tokens"] <= 8
            assert task["new_tokens"] <= task["generated_tokens"] and task["kind"] == kind
            assert m["e2e_ms_per_completion"] >= m["decode_ms_per_completion"] > 0 and m["prefill_ms"] > 0
            assert m["e2e_speedup"] > 0
    md = bench.render_markdown({**out, "config": {"task_kind": "fim-block"}})
    assert "of kind fim-block (stop at '\\n\\n')" in md and "e2e ms/completion" in md


def _method(lossless: bool | None) -> dict:
    return {"ms_per_token": 1.0, "speedup": 1.0, "mean_accepted_length": 1.0, "forward_passes": 1, "hits": {},
            "retrieval_ms_per_step": 0.0, "retrieval_share": 0.0, "peak_rss_mb": 1.0, "lossless": lossless,
            "lossless_tasks": 1 if lossless else 0, "tasks": 1}


def test_report_names_the_gpu_and_explains_half_precision_divergence():
    env = {"cpu": "Intel Xeon", "cpu_count": 16, "torch_threads": 1, "accelerator": "NVIDIA H200"}
    diverged = {"environment": env, "methods": {"ar": _method(True), "fastcoder": _method(False)}}
    half = bench.render_markdown({**diverged, "config": {"device": "cuda", "dtype": "bfloat16"}})
    assert "hardware: NVIDIA H200 (cuda, bfloat16); host Intel Xeon (16 cores" in half
    assert "bfloat16: a forward over several tokens rounds differently" in half
    exact = bench.render_markdown({**diverged, "config": {"device": "cuda", "dtype": "float32"}})
    assert "rounds differently" not in exact  # in float32 a divergence is a bug, reported as such
    same = bench.render_markdown({"environment": {**env, "accelerator": None}, "config": {"dtype": "bfloat16"},
                                  "methods": {"ar": _method(True), "fastcoder": _method(True)}})
    assert "rounds differently" not in same and "hardware: Intel Xeon (16 cores" in same
    assert "forward kernels" not in same  # none recorded: nothing said
    avx2 = bench.render_markdown({"environment": {**env, "accelerator": None, "forward_kernels": "avx2"},
                                  "methods": {"ar": _method(True)}})
    assert "(16 cores, torch threads 1, forward kernels avx2)" in avx2  # which kernels made the numbers
    assert bench.environment()["accelerator"] is None  # no GPU asked for


def test_repeats_run_fresh_and_report_the_spread(tmp_path, tiny_coder, one_thread, monkeypatch):
    """--repeats 2: the task set twice, each from fresh drafter state (an acceptance estimator trained on the first
    repeat would size the second's trees differently), the pooled table, and min / median / max per method."""
    from engine.bench import report, runner

    repo = _real_repo(tmp_path)
    tasks = bench.extract_tasks(repo, tiny_coder.tokenizer, 2, seed=3)
    cfg = _smoke_cfg(methods=("ar", "copyspec", "fastcoder"), headroom=False, repeats=2)
    learned_before = []
    real_run_tasks = report.run_tasks

    def run_tasks(loaded, *args, **kwargs):
        learned_before.append((id(loaded), "fastcoder") in runner._ESTIMATORS)
        return real_run_tasks(loaded, *args, **kwargs)

    monkeypatch.setattr(report, "run_tasks", run_tasks)
    out = bench.benchmark(tiny_coder, repo, tasks, None, cfg)
    assert learned_before == [False, False]
    assert len(out["repeats"]) == 2 and set(out["repeats"][0]) == {"ar", "copyspec", "fastcoder"}
    fast = out["methods"]["fastcoder"]
    assert [t["repeat"] for t in fast["per_task"]] == [0, 0, 1, 1] and fast["lossless"] is True
    first, second = fast["per_task"][:2], fast["per_task"][2:]
    assert [t["accepted_lengths"] for t in first] == [t["accepted_lengths"] for t in second]  # the same experiment
    lo, mid, hi = out["spread"]["fastcoder"]["speedup"]
    assert lo <= mid <= hi and out["spread"]["ar"]["speedup"] == pytest.approx([1.0, 1.0, 1.0])
    assert out["spread"]["fastcoder"]["vs_best_other"][0] > 0
    md = bench.render_markdown(out)
    assert "Spread over 2 repeats" in md and "| fastcoder | " in md.split("Spread over")[1]
    assert bench.main(["--repo", str(repo), "--repeats", "0"]) == 2


def _summarize_runs():
    spec = importlib.util.spec_from_file_location(
        "summarize_runs", Path(__file__).resolve().parents[1] / "benchmarks" / "summarize_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _paired_run(rng, slowdown: float, noise: float, kind: str = "function") -> dict:
    """A bench JSON's methods with per-task records: "fastcoder-x" is ``slowdown`` times slower than "fastcoder" on
    every task run, both under the same per-task-run machine swing (+-30%) and their own ``noise``."""
    a, b = [], []
    for i in range(20):
        swing = rng.uniform(0.7, 1.3)
        a.append({"task_id": f"t{i}", "kind": kind, "new_tokens": 128,
                  "decode_ms": 150 * swing * rng.uniform(1 - noise, 1 + noise)})
        b.append({"task_id": f"t{i}", "kind": kind, "new_tokens": 128,
                  "decode_ms": 150 * slowdown * swing * rng.uniform(1 - noise, 1 + noise)})
    return {"methods": {"fastcoder": {"per_task": a}, "fastcoder-x": {"per_task": b}}}


def test_paired_comparison_sees_a_small_effect_under_large_machine_swings():
    """benchmarks/summarize_runs.py's paired per-task ratio: a 3% slowdown under +-30% swings shared by both methods
    is found with an interval that excludes 1; no difference gives an interval around 1; mismatched records fail."""
    sr = _summarize_runs()
    rng = np.random.default_rng(0)
    slower = [_paired_run(rng, 1.03, 0.02) for _ in range(3)]
    n, g, lo, hi = sr.paired(slower, "fastcoder", "fastcoder-x")["all"]
    assert n == 60 and 1.02 < g < 1.04 and 1.0 < lo < g < hi
    same = [_paired_run(rng, 1.0, 0.02, kind) for kind in ("function", "fim-line")]
    groups = sr.paired(same, "fastcoder", "fastcoder-x")
    assert list(groups) == ["function", "fim-line", "all"]
    n, g, lo, hi = groups["all"]
    assert n == 40 and lo < 1.0 < hi and hi - lo < 0.03
    assert sr.paired(same, "fastcoder", "missing") == {}
    same[0]["methods"]["fastcoder-x"]["per_task"].reverse()
    with pytest.raises(ValueError):
        sr.paired(same, "fastcoder", "fastcoder-x")


def test_replay_variants_are_bench_methods_with_other_options():
    """benchmarks/replay_methods.py --variant NAME=BASE:key=value,...: BASE's engine method and options, updated with
    JSON-parsed values; malformed specs and unknown bases are clear errors."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import replay_methods

    name, (method, options) = replay_methods.parse_variant("deep=fastcoder-no-head:copy_max_depth=48,use_history=false")
    assert (name, method) == ("deep", "fastcoder")
    assert options == {"draft_head": False, "copy_max_depth": 48, "use_history": False}
    assert replay_methods.parse_variant("x=fastcoder:")[1] == bench.runner.METHOD_SPECS["fastcoder"]
    for bad in ("deep", "deep=fastcoder", "deep=nope:a=1", "deep=fastcoder:a"):
        with pytest.raises(ValueError):
            replay_methods.parse_variant(bad)


def test_replay_feeds_the_draft_head_each_step_as_the_decoder_does(tmp_path, tiny_coder, one_thread):
    """benchmarks/measure_drafting.replay with ``head`` and ``hidden``: the head learns from every step (its
    calibration moves) and ends holding the hidden state of the row that chose the last pending token, as the decoder
    leaves it; without them it stays disabled and learns nothing. The hidden states given are the model's: their
    argmax spells the reference."""
    import sys

    import numpy as np
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import measure_drafting

    from engine.bench import runner  # noqa: PLC0415
    from engine.bench.fit_head import _hidden_and_choice  # noqa: PLC0415

    repo = _real_repo(tmp_path)
    ar = runner.make_decoder(tiny_coder, "ar", None, None)
    for task in bench.extract_tasks(repo, tiny_coder.tokenizer, 6, seed=3):
        ref = runner.run_one(ar, "ar", task.prompt_ids, 24, stop=task.stop)["token_ids"]
        if len(ref) >= 8:
            break
    with torch.no_grad():
        n, hidden = len(task.prompt_ids), _hidden_and_choice(tiny_coder.model, [*task.prompt_ids, *ref])[0]
    assert hidden.shape == (n + len(ref), tiny_coder.model.config.hidden_size)
    assert tiny_coder.model.lm_head(hidden[n - 1:n - 1 + len(ref)]).argmax(-1).tolist() == ref
    store = runner.build_repo_datastore(repo, tiny_coder.tokenizer, task, ())
    for fed in (False, True):
        runner._ESTIMATORS.clear()  # a fresh estimator, and with it a fresh head
        runner._HISTORIES.clear()
        dec = runner.make_decoder(tiny_coder, "fastcoder", store, None)
        head = dec.depth_one
        if head is None:
            pytest.skip("no draft head for tiny-py-coder")
        calibration = head.params[2:5].copy()
        r = measure_drafting.replay(dec._make_drafter(dec.new_cache()), dec.estimator, task.prompt_ids, ref, [0],
                                    tiny_coder.eos_token_ids, head=head if fed else None,
                                    hidden=hidden if fed else None)
        assert sum(r["accepted"]) == len(ref) - 1
        if not fed:
            assert head.learned == 0 and not head.enabled
            assert np.array_equal(head.params[2:5], calibration)
            continue
        assert head.learned > 0 and head.enabled and not np.array_equal(head.params[2:5], calibration)
        last = head.hidden.copy()
        head.set_hidden(hidden[n + len(ref) - 2], ref[-1])  # the row that chose the last pending token
        assert np.array_equal(head.hidden, last)


def test_kernel_ablation_runs_the_avx2_kernels_and_restores_the_choice(tmp_path, tiny_coder, one_thread, monkeypatch):
    """``fastcoder-avx2`` decodes with the forward's AVX2 kernels (engine.native.forward_kernels around each
    generation, paired per task with fastcoder): the same tokens as ``ar``, and the process's own choice back
    after each run, also when the generation fails."""
    from engine import native  # noqa: PLC0415
    from engine.bench import runner  # noqa: PLC0415

    lib = native.library()
    if lib is None or native.kernel_isa(lib) == "none":
        pytest.skip("no native forward kernels on this machine")
    seen = []
    real_use = lib.fc_gemm_use

    class Spy:  # the ctypes library, recording which kernels each generation asked for
        def __getattr__(self, name):
            return getattr(lib, name)

        def fc_gemm_use(self, isa):
            seen.append(isa)
            return real_use(isa)

    monkeypatch.setattr(native, "library", lambda: Spy())
    repo = _real_repo(tmp_path)
    tasks = bench.extract_tasks(repo, tiny_coder.tokenizer, 2, seed=3)
    out = bench.benchmark(tiny_coder, repo, tasks, None, _smoke_cfg(methods=("ar", "fastcoder", "fastcoder-avx2"),
                                                                    headroom=False))
    assert out["methods"]["fastcoder-avx2"]["lossless"] is True
    back = 1 if native.kernel_isa(lib) == "avx2" else 0
    runs = len(seen) // 2  # the two tasks and the warm-up: AVX2 on, the process's choice back
    assert runs >= 2 and seen == [1, back] * runs
    decoder = runner.make_decoder(tiny_coder, "fastcoder-avx2", None, None)
    monkeypatch.setattr(decoder, "generate", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        runner.run_one(decoder, "fastcoder-avx2", [1, 2, 3], 4)
    assert seen[-2:] == [1, back]
    with pytest.raises(ValueError):
        with native.forward_kernels("sse"):
            pass


def test_every_method_runs_after_each_other_one_and_first_in_turn():
    """The methods' order per task (bench.run_order, a Williams design): with a rotation alone fastcoder ran right
    after SuffixDecoding on every task. Over n tasks (2n for an odd number n of methods) every method runs right after
    every other one equally often, and first equally often."""
    from collections import Counter

    for methods in (("ar", "fastcoder"), ("ar", "suffix", "fastcoder"), ("ar", "suffix", "fastcoder", "copyspec"),
                    ("ar", "suffix", "fastcoder", "copyspec", "rest")):
        n = len(methods)
        rows = [bench.run_order(methods, i) for i in range(n if n % 2 == 0 else 2 * n)]
        assert all(sorted(r) == sorted(methods) for r in rows)
        pairs = Counter((a, b) for r in rows for a, b in zip(r, r[1:]))
        assert len(pairs) == n * (n - 1) and len(set(pairs.values())) == 1, (methods, pairs)
        firsts = Counter(r[0] for r in rows)
        assert len(firsts) == n and len(set(firsts.values())) == 1
    assert bench.run_order(("ar",), 3) == ["ar"] and bench.run_order((), 0) == []
