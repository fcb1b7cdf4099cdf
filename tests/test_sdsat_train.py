"""The SDSAT fine-tuning recipe (engine/sdsat/train.py) and its command.

- the data: mixed sequences replace ~10% window starts by adaptive tokens, labels stay the original next
  tokens, the loss counts adaptive positions only in mixed rows and every position in standard rows;
- eq. 9's loss equals its definition computed by hand;
- a few steps on a tiny random Llama: both losses are computed, the output folder is an SDSAT model the
  decoder loads, and a run resumes from its checkpoint;
- merging with the base model (WiSE-FT) gives the interpolated weights, added embedding rows kept, and the
  recipe saves the merged model while its checkpoint keeps the raw fine-tune;
- the command's errors are one line with exit status 2.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from engine.sdsat.train import (SdsatCollator, SdsatTrainOptions, fim_sample, merge_with_base, mix_adaptive,
                                resolve_adaptive_token, sdsat_loss, train_sdsat)
from tests.conftest import TINY_CODER, third_party_sources

ADAPTIVE = 7


def test_mixed_sequence_replaces_windows_and_keeps_position_zero():
    rng = np.random.default_rng(0)
    inputs = np.arange(100, 300, dtype=np.int64)  # 200 distinct tokens
    mixed, mask = mix_adaptive(inputs, ADAPTIVE, max_window=4, fraction=0.10, rng=rng)
    assert not mask[0], "position 0 is never replaced: a window needs a real token before it"
    assert (mixed[mask] == ADAPTIVE).all() and (mixed[~mask] == inputs[~mask]).all()
    assert 0.10 <= mask.mean() <= 0.30, f"20 window starts x mean width 2.5 (some overlap), got {mask.mean():.2f}"
    _, short = mix_adaptive(inputs, ADAPTIVE, max_window=1, fraction=0.10, rng=rng)
    assert short.sum() == 20, "L = 1: exactly 10% of the positions, one adaptive token each"


def test_collator_labels_are_the_original_next_tokens():
    windows = [np.arange(i * 1000, i * 1000 + 65, dtype=np.int64) for i in range(4)]
    batch = SdsatCollator(ADAPTIVE, max_window=8, fraction=0.10, seed=1)(windows)
    ids, labels, mask, mixed = batch["input_ids"], batch["labels"], batch["loss_mask"], batch["mixed"]
    assert ids.shape == labels.shape == mask.shape == (4, 64) and ids.dtype == labels.dtype == torch.int64
    assert mixed.tolist().count(True) == 2, "half the rows are mixed"
    for row, w in enumerate(windows):
        assert labels[row].tolist() == w[1:].tolist(), "labels are never adaptive tokens"
        if mixed[row]:
            adaptive = ids[row] == ADAPTIVE
            assert adaptive.any() and mask[row].bool().tolist() == adaptive.tolist(), \
                "a mixed row counts exactly its adaptive positions"
        else:
            assert ids[row].tolist() == w[:-1].tolist() and bool(mask[row].all()), "a standard row counts all"


FIM = (1, 2, 3)  # prefix, suffix, middle sentinels


def test_fim_sample_is_prefix_suffix_middle_of_the_same_tokens():
    rng = np.random.default_rng(0)
    window = np.arange(100, 165, dtype=np.int64)
    for _ in range(50):
        sample, start = fim_sample(window, FIM, rng)
        assert len(sample) == len(window)
        p, s_at, m_at = (int(np.flatnonzero(sample == t)[0]) for t in FIM)
        assert p == 0 and s_at < m_at == start - 1
        pre, suf, mid = sample[1:s_at], sample[s_at + 1:m_at], sample[start:]
        assert 1 <= len(mid) <= 64 and len(pre) >= 1
        assert np.concatenate([pre, mid, suf]).tolist() == window[:-3].tolist()


def test_fim_rows_put_adaptive_tokens_in_the_middle_only():
    windows = [np.arange(1000 + i * 1000, 1129 + i * 1000, dtype=np.int64) for i in range(8)]
    batch = SdsatCollator(ADAPTIVE, max_window=4, fraction=0.10, seed=3, fim_ids=FIM, fim_rate=1.0)(windows)
    ids, labels, mask = batch["input_ids"], batch["labels"], batch["loss_mask"]
    for row in range(8):
        full = torch.cat([ids[row, :1], labels[row]])
        assert int(full[0]) == FIM[0] and (full == FIM[2]).sum() == 1, "every row is a FIM sample"
        middle_at = int(torch.nonzero(ids[row] == FIM[2])[0]) + 1
        if batch["mixed"][row]:
            adaptive = torch.nonzero(ids[row] == ADAPTIVE).flatten()
            assert (adaptive > middle_at).all(), "adaptive windows start after the middle's first token"
            assert mask[row].bool().tolist() == (ids[row] == ADAPTIVE).tolist()


def test_loss_is_eq9():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11)
    labels = torch.randint(0, 11, (2, 5))
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 1, 1, 0, 0]], dtype=torch.float32)
    mixed = torch.tensor([False, True])
    loss, f_std, f_mix = sdsat_loss(logits, labels, mask, mixed, adaptive_weight=1.0)
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    assert math.isclose(float(f_std), float(ce[0].mean()), rel_tol=1e-5)
    assert math.isclose(float(f_mix), float(ce[1, 1:3].mean()), rel_tol=1e-5)
    assert math.isclose(float(loss), 0.5 * (float(f_std) + float(f_mix)), rel_tol=1e-5)


@pytest.fixture(scope="module")
def tiny_random_lm(tmp_path_factory):
    """A 2-layer random Llama with tiny-py-coder's tokenizer, saved as a model folder."""
    if not TINY_CODER.exists():
        pytest.skip(f"dev model not found at {TINY_CODER}")
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("random-lm")
    tok = AutoTokenizer.from_pretrained(str(TINY_CODER))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    for path in third_party_sources(3):
        shutil.copy(path, out / f"{path.parent.name}_{path.name}")
    return out


@pytest.mark.slow
def test_a_few_steps_give_an_sdsat_model_that_loads_and_resumes(tiny_random_lm, corpus, tmp_path):
    from engine import SpeculativeDecoder, load_model

    out = tmp_path / "sdsat"
    opts = SdsatTrainOptions(max_window=4, seq_len=64, steps=4, batch_size=4, warmup_steps=1, save_steps=2,
                             threads=1)
    stats = train_sdsat(str(tiny_random_lm), corpus, out, opts, eval_corpus=corpus)
    assert stats["steps"] == 4
    for key in ("last_loss_standard", "last_loss_adaptive", "eval_standard_loss_before",
                "eval_standard_loss_after"):
        assert math.isfinite(float(stats[key])) and float(stats[key]) > 0, key
    meta = json.loads((out / "sdsat.json").read_text())
    assert meta["max_window"] == 4 and meta["adaptive_token"] == "<|reserved_0|>"
    assert (out / "checkpoint-4").is_dir()

    loaded = load_model(str(out), device="cpu")
    assert loaded.sdsat is not None and loaded.sdsat.adaptive_token_id == meta["adaptive_token_id"]
    prompt = loaded.tokenizer("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n")["input_ids"]
    ref = SpeculativeDecoder(loaded, method="ar").generate(prompt, max_new_tokens=12).token_ids
    assert SpeculativeDecoder(loaded, method="sdsat").generate(prompt, max_new_tokens=12).token_ids == ref

    more = train_sdsat(str(tiny_random_lm), corpus, out, SdsatTrainOptions(**{**opts.__dict__, "steps": 6}),
                       resume=True)
    assert more["resumed_from"].endswith("checkpoint-4") and more["steps"] == 6


def test_a_missing_adaptive_token_is_added_and_the_embeddings_resized(tiny_random_lm):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_random_lm))
    lm = AutoModelForCausalLM.from_pretrained(str(tiny_random_lm))
    before = lm.get_input_embeddings().weight.shape[0]
    tid = resolve_adaptive_token(tok, lm, "<|fastcoder_adaptive|>")
    assert tid >= before - 1 and lm.get_input_embeddings().weight.shape[0] > tid
    assert tok.convert_ids_to_tokens(tid) == "<|fastcoder_adaptive|>"


def test_command_errors_are_one_line(tmp_path, capsys):
    from fastcoder.cli import main

    assert main(["train-sdsat", "--model", "x", "--corpus", str(tmp_path / "missing"), "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0]
    (tmp_path / "empty").mkdir()
    assert main(["eval-sdsat", "--model", str(tmp_path / "nope"), "--corpus", str(tmp_path / "empty")]) == 2
    assert "nope" in capsys.readouterr().err


def test_merge_with_base_interpolates_and_keeps_added_rows(tiny_random_lm):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(str(tiny_random_lm))
    tuned = AutoModelForCausalLM.from_pretrained(str(tiny_random_lm))
    tid = resolve_adaptive_token(AutoTokenizer.from_pretrained(str(tiny_random_lm)), tuned, "<|fastcoder_adaptive|>")
    torch.manual_seed(1)
    with torch.no_grad():
        for p in tuned.parameters():
            p.add_(torch.randn_like(p))
    rows = base.get_input_embeddings().weight.shape[0]
    before = {n: p.detach().clone() for n, p in tuned.named_parameters()}
    assert merge_with_base(tuned, base, 1.0) == len(before)
    assert all(torch.equal(p, before[n]) for n, p in tuned.named_parameters())
    merge_with_base(tuned, base, 0.25)
    for (n, p), (_, b) in zip(tuned.named_parameters(), base.named_parameters()):
        want = before[n].clone()
        want[:b.shape[0]] = b + 0.25 * (before[n][:b.shape[0]] - b)
        assert torch.allclose(p, want, atol=1e-6), n
    emb = tuned.get_input_embeddings().weight
    assert emb.shape[0] > rows and torch.equal(emb[tid], before["model.embed_tokens.weight"][tid])  # added row kept
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="alpha"):
            merge_with_base(tuned, base, bad)


@pytest.mark.slow
def test_the_recipe_saves_the_merged_model_and_the_checkpoint_keeps_the_raw_fine_tune(tiny_random_lm, corpus,
                                                                                    tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "merged"
    opts = SdsatTrainOptions(max_window=4, seq_len=64, steps=2, batch_size=4, warmup_steps=1, save_steps=2,
                             threads=1, lr=1e-2, merge_alpha=0.5)
    stats = train_sdsat(str(tiny_random_lm), corpus, out, opts)
    assert stats["merge_alpha"] == 0.5
    name = "model.layers.0.mlp.up_proj.weight"
    weights = {}
    for label, folder in (("base", tiny_random_lm), ("raw", out / "checkpoint-2"), ("saved", out)):
        weights[label] = dict(AutoModelForCausalLM.from_pretrained(str(folder)).named_parameters())[name]
    assert not torch.allclose(weights["raw"], weights["base"])  # it did train
    assert torch.allclose(weights["saved"], (weights["base"] + weights["raw"]) / 2, atol=1e-6)
    with pytest.raises(ValueError, match="merge_alpha"):
        SdsatTrainOptions(merge_alpha=2.0)
