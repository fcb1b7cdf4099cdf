"""Method ``suffix`` (issue #9 item 5): arctic-inference's own SuffixDecodingCache as a drafter, verified by
our tree verification. Lossless on real code, learns from its own output, and a clear error without the
optional install."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from engine import SpeculativeDecoder
from engine.draft_tree import SOURCE_SUFFIX
from engine.suffix_drafter import (INSTALL_HINT, SuffixDecodingUnavailable, draft_to_tree,
                                   suffix_decoding_available)

needs_suffix = pytest.mark.skipif(not suffix_decoding_available(),
                                  reason="arctic-inference not installed (method suffix; see README)")


@pytest.fixture
def no_arctic(monkeypatch):
    """arctic-inference made unimportable (whether or not it is installed)."""
    monkeypatch.setitem(sys.modules, "arctic_inference", None)
    monkeypatch.setitem(sys.modules, "arctic_inference.suffix_decoding", None)


def test_draft_to_tree_chain_tree_and_order():
    chain = draft_to_tree([7, 8, 9], [-1, 0, 1], [0.5, 0.25, 0.25])
    assert chain.tokens.tolist() == [7, 8, 9] and chain.parents.tolist() == [-1, 0, 1]
    assert chain.depths.tolist() == [1, 2, 3]
    assert (chain.sources == SOURCE_SUFFIX).all()
    assert chain.probs.tolist() == pytest.approx([0.5, 0.5, 1.0])  # conditionals of path probabilities
    assert chain.longest_match([7, 8, 9, 1]) == 3
    # children listed before their parent: reordered breadth-first, same tree
    tree = draft_to_tree([5, 6, 4], [2, 2, -1], [0.3, 0.6, 0.9])
    assert tree.tokens.tolist() == [4, 5, 6] and tree.parents.tolist() == [-1, 0, 0]
    assert tree.depths.tolist() == [1, 2, 2]
    assert tree.longest_match([4, 6]) == 2 and tree.longest_match([5]) == 0
    assert len(draft_to_tree([], [], [])) == 0


@needs_suffix
def test_drafter_learns_from_its_own_output():
    """A pattern that first appears in the output (not the prompt) is drafted when it starts again,
    within the request (prompt tree) and in a later request with another prompt (global tree)."""
    from engine.drafters import make_drafter

    drafter = make_drafter("suffix", None)
    prompt = np.array([1, 2, 3], dtype=np.int64)
    drafter.reset(prompt)
    ctx = np.array([1, 2, 3, 40], dtype=np.int64)
    assert len(drafter.propose(ctx)) == 0
    pattern = [41, 42, 43, 44, 45, 46]
    drafter.observe(ctx, drafter.propose(ctx), [], pattern + [40])
    ctx = np.concatenate([ctx, pattern, [40]]).astype(np.int64)
    tree = drafter.propose(ctx)  # ... 40 41 ... 46 40 -> 41 42 ...
    assert tree.tokens.tolist()[:1] == [41] and tree.longest_match(pattern) >= 1
    drafter.reset(np.array([9, 9, 9], dtype=np.int64))  # a new request: the old output is in the global tree
    ctx = np.array([9, 9, 9, 40, 41, 42], dtype=np.int64)
    assert drafter.propose(ctx).longest_match([43, 44, 45]) == 3


@needs_suffix
def test_suffix_lossless_on_real_code(tiny_coder, real_code_prompts, one_thread):
    """Greedy output of suffix (vLLM's chains) and suffix with tree speculation equals ar's on prompts from
    real third-party code, and drafts were accepted (verification is exercised)."""
    accepted = []
    decoders = {"chain": SpeculativeDecoder(tiny_coder, method="suffix"),
                "tree": SpeculativeDecoder(tiny_coder, method="suffix", use_tree_spec=True)}
    ar = SpeculativeDecoder(tiny_coder, method="ar")
    for name, ids in real_code_prompts[:4]:
        ref = ar.generate(ids, max_new_tokens=48).token_ids
        for kind, dec in decoders.items():
            res = dec.generate(ids, max_new_tokens=48)
            assert res.token_ids == ref, f"suffix ({kind}) diverged from ar on {name}"
            accepted.append(res.stats["mean_accepted_length"])
            assert res.stats["hits"]["suffix"] == sum(res.stats["accepted_lengths"]) - len(res.stats["accepted_lengths"])
    assert max(accepted) > 1.0, "no suffix draft was ever accepted"


@needs_suffix
@pytest.mark.parametrize("family,vocab", [("llama", 512), ("qwen2", 151_936), ("gpt2", 300)])
def test_suffix_lossless_random_models(family, vocab):
    """Random models (drafts partly accepted, partly rejected): greedy suffix output equals ar's, twice on
    one decoder (the second run drafts from the first one's output too)."""
    from tests.conftest import loaded_random

    loaded = loaded_random(family, vocab, seed=1)
    rng = np.random.default_rng(2)
    base = rng.integers(0, vocab, 24).tolist()
    prompt = base + rng.integers(0, vocab, 10).tolist() + base[:12]  # repeats: prompt-tree drafts fire
    ref = SpeculativeDecoder(loaded, method="ar").generate(prompt, max_new_tokens=40).token_ids
    for opts in ({}, {"use_tree_spec": True}):
        dec = SpeculativeDecoder(loaded, method="suffix", **opts)
        runs = [dec.generate(prompt, max_new_tokens=40) for _ in range(2)]
        assert [r.token_ids for r in runs] == [ref, ref], f"{family} {opts} diverged from greedy"
        assert runs[1].stats["mean_accepted_length"] > 1.0


@needs_suffix
def test_suffix_learns_across_generations(tiny_coder, real_code_prompts, one_thread):
    """The decoder keeps one SuffixDecodingCache: the second generation of a prompt is drafted from the
    first one's output (global tree), same tokens, more accepted per forward."""
    dec = SpeculativeDecoder(tiny_coder, method="suffix")
    for _, ids in real_code_prompts:  # one whose output is not cut short by EOS
        first = dec.generate(ids, max_new_tokens=64)
        if first.finish_reason == "length":
            break
    second = dec.generate(ids, max_new_tokens=64)
    assert second.token_ids == first.token_ids
    assert second.stats["mean_accepted_length"] > max(first.stats["mean_accepted_length"], 2.0)
    assert second.stats["forward_passes"] < first.stats["forward_passes"]


@needs_suffix
def test_suffix_repetitive_prompt_accepts_more_than_one(tiny_coder, one_thread):
    """A repetitive prompt: the prompt tree alone yields drafts that are accepted."""
    text = "".join(f"    config.set_option('key_{i}', value_{i}, default=None)\n" for i in range(12))
    ids = tiny_coder.tokenizer("def configure(config):\n" + text, add_special_tokens=False)["input_ids"]
    ref = SpeculativeDecoder(tiny_coder, method="ar").generate(ids, max_new_tokens=64).token_ids
    res = SpeculativeDecoder(tiny_coder, method="suffix").generate(ids, max_new_tokens=64)
    assert res.token_ids == ref
    assert res.stats["mean_accepted_length"] > 1.5 and res.stats["hits"]["suffix"] > 0


@needs_suffix
def test_bench_suffix_methods_lossless_and_no_warmup_leak(tmp_path, tiny_coder, one_thread):
    """bench runs suffix and suffix-tree lossless; their caches hold the timed tasks' outputs only (the
    warm-up ran on the first task's prompt and must not have left its answer in the global tree)."""
    from engine import bench
    from engine.bench import runner

    from tests.test_bench import _real_repo, _smoke_cfg

    repo = _real_repo(tmp_path)
    tasks = bench.extract_tasks(repo, tiny_coder.tokenizer, 2, seed=3)
    result = bench.benchmark(tiny_coder, repo, tasks, None,
                             _smoke_cfg(methods=("ar", "suffix", "suffix-tree"), headroom=False))
    for name in ("suffix", "suffix-tree"):
        m = result["methods"][name]
        assert m["lossless"] is True, name
        assert m["engine_method"] == "suffix"
        cache = runner._SUFFIX_CACHES[(id(tiny_coder), name)]
        assert len(cache.cached_requests) == len(tasks)
    assert "suffix" not in bench.DEFAULT_METHODS
    json.dumps(result)


def test_suffix_without_package_clear_error(no_arctic, tmp_path, capsys):
    from engine.drafters import make_drafter
    from tests.conftest import loaded_random

    assert not suffix_decoding_available()
    with pytest.raises(SuffixDecodingUnavailable, match="pip install .*arctic-inference==0.3.0 .*see README"):
        make_drafter("suffix", None)
    with pytest.raises(ImportError, match="method 'suffix' needs arctic-inference"):
        SpeculativeDecoder(loaded_random("llama", 64), method="suffix")
    assert "\n" not in INSTALL_HINT

    from engine import bench

    assert bench.main(["--repo", str(tmp_path), "--methods", "ar,suffix"]) == 2
    err = capsys.readouterr().err.strip()
    assert INSTALL_HINT in err and len(err.splitlines()) == 1
    assert bench.main(["--repo", str(tmp_path), "--methods", "ar,copyspec", "--model",
                       str(Path(tmp_path) / "no-model")]) == 2
    assert INSTALL_HINT not in capsys.readouterr().err  # other methods do not need it


def test_generate_cli_suffix_without_package(no_arctic, tiny_coder, tmp_path, capsys):
    """`fastcoder generate --method suffix` without arctic-inference: exit 2 and the one-line hint."""
    from engine.cli import main

    prompt = tmp_path / "p.py"
    prompt.write_text("def f(x):\n")
    assert main(["generate", "--model", tiny_coder.name, "--method", "suffix", "--prompt-file", str(prompt),
                 "--max-new-tokens", "4"]) == 2
    err = capsys.readouterr().err
    assert INSTALL_HINT in err and "Traceback" not in err
