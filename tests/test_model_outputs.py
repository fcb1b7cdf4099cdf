"""The model-output common datastore (engine/model_outputs.py): the model's own greedy output, indexed."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import TINY_CODER


def _plain_greedy(model, prompt: list[int], n: int, eos: set[int]) -> list[int]:
    """The model's own greedy continuation, one full forward per token (no cache, no drafts)."""
    ids, out = list(prompt), []
    with torch.inference_mode():
        for _ in range(n):
            tok = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            if tok in eos:
                break
            out.append(tok)
            ids.append(tok)
    return out


@pytest.fixture()
def corpus(tmp_path):
    """Two third-party source files (never the standard library: the dev model's training set)."""
    src = Path(importlib.util.find_spec("pluggy").submodule_search_locations[0])
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name in ("_hooks.py", "_manager.py"):
        shutil.copy(src / name, folder / name)
    return folder


def test_documents_are_the_prompt_tail_and_the_models_greedy_output(tiny_coder, corpus, tmp_path):
    from engine.common_datastore import corpus_files, load_common_datastore
    from engine.model_outputs import INFO_FILE, OutputSampling, build_model_output_datastore, sample_prompts

    sampling = OutputSampling(samples=3, per_file=2, prompt_tokens=64, new_tokens=8, context_tokens=6, seed=1)
    out = build_model_output_datastore(tiny_coder, [corpus], tmp_path / "ds", sampling, progress=False)
    ds = load_common_datastore(tiny_coder.tokenizer, str(out))  # usable as D_c (--common PATH)
    info = json.loads((out / INFO_FILE).read_text())
    assert ds.num_documents == info["samples"] == 3 and info["files"] == 2

    _, files = corpus_files(corpus)
    prompts = sample_prompts(tiny_coder.tokenizer, files, sampling)  # seeded: the builder's prompts
    assert len(prompts) == 3 and all(len(p) == 64 for p in prompts)
    eos = set(tiny_coder.eos_token_ids)
    expected = [p[-6:] + _plain_greedy(tiny_coder.model, p, 8, eos) for p in prompts]
    assert info["tokens"] == sum(len(d) for d in expected)
    for doc in expected:  # each document is in the datastore, and continues as the model wrote it
        hit = ds.search(np.asarray(doc[:8]), n_max=8, n_min=8, draft_len=len(doc) - 8)
        assert hit.match_length == 8
        assert doc[8:] in [[int(t) for t in row if t >= 0] for row in hit.continuations]


def test_bad_settings_and_corpora_get_clear_errors(tiny_coder, tmp_path):
    from engine.cli import main
    from engine.datastore import DatastoreError
    from engine.model_outputs import OutputSampling, build_model_output_datastore

    with pytest.raises(ValueError, match="samples"):
        OutputSampling(samples=0)
    with pytest.raises(ValueError, match="context_tokens"):
        OutputSampling(prompt_tokens=8, context_tokens=9)
    small = tmp_path / "small"
    small.mkdir()
    (small / "a.py").write_text("x = 1\n")
    with pytest.raises(DatastoreError, match="tokens for a prompt"):
        build_model_output_datastore(tiny_coder, [small], tmp_path / "ds", OutputSampling(samples=2), progress=False)
    assert main(["index", "build", "--model-outputs", str(tmp_path / "missing")]) == 2
    assert main(["index", "build", "--model", str(TINY_CODER), "--model-outputs", str(small), "--samples", "0"]) == 2


def test_cli_builds_a_datastore_the_decoder_uses_as_d_c(tiny_coder, corpus, tmp_path, capsys):
    from engine import SpeculativeDecoder
    from engine.cli import main
    from engine.common_datastore import load_common_datastore

    out = tmp_path / "outputs"
    assert main(["index", "build", "--model", str(TINY_CODER), "--device", "cpu", "--model-outputs", str(corpus),
                 "--samples", "2", "--new-tokens", "8", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["path"] == str(out)
    common = load_common_datastore(tiny_coder.tokenizer, str(out))
    prompt = (corpus / "_hooks.py").read_text()[:1500]
    plain = SpeculativeDecoder(tiny_coder, method="ar").generate(prompt, max_new_tokens=24)
    fast = SpeculativeDecoder(tiny_coder, method="fastcoder", common_datastore=common).generate(prompt, max_new_tokens=24)
    assert fast.token_ids == plain.token_ids  # lossless with the model-output D_c
