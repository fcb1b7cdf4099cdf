"""A short (warm) prefill verifies a draft of the first new tokens in the same forward (engine/decoder.py,
PREFILL_DRAFT_MAX_TOKENS): same tokens as ar, fewer decode forwards when the draft is right. Exactness
under sampling is tests/test_sampling.py's (its 16-token prompts take this path)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine import SpeculativeDecoder
from engine.decoder import PREFILL_DRAFT_MAX_TOKENS
from engine.steps import prefill
from engine.draft_tree import DraftTree
from engine.kv_cache import new_kv_cache
from engine.verify import tree_forward


def _tree(tokens, parents):
    n = len(tokens)
    parents = np.asarray(parents, dtype=np.int64)
    depths = np.zeros(n, dtype=np.int64)
    for i, p in enumerate(parents):
        depths[i] = 1 if p < 0 else depths[p] + 1
    return DraftTree(np.asarray(tokens, dtype=np.int64), parents, depths, np.ones(n, dtype=np.uint8), np.ones(n))


@pytest.mark.parametrize("prefix_len", [0, 1, 7])
def test_prefix_and_tree_in_one_forward_equal_prefill_then_tree(tiny_coder, real_code_prompts, prefix_len):
    """The prompt's uncached tail, its last token and a branching tree in one forward give the logits of a
    prefill of the tail followed by the tree's own forward, and leave the same KV cache."""
    model = tiny_coder.model
    ids = real_code_prompts[0][1][:70]
    cached, tail, last = ids[:69 - prefix_len], ids[69 - prefix_len:69], ids[69]
    tree = _tree([11, 12, 13, 14, 15], [-1, 0, 1, -1, 3])
    with torch.inference_mode():
        one = new_kv_cache(model, 128)
        prefill(model, one, torch.tensor([cached]))
        merged = tree_forward(model, one, last, tree, 69, prefix=tail)
        two = new_kv_cache(model, 128)
        prefill(model, two, torch.tensor([cached]))
        if tail:
            prefill(model, two, torch.tensor([tail]))
        split = tree_forward(model, two, last, tree, 69)
    assert merged.shape == split.shape == (1 + len(tree), tiny_coder.vocab_size)
    torch.testing.assert_close(merged, split, rtol=1e-4, atol=1e-4)
    assert torch.equal(merged.argmax(-1), split.argmax(-1))
    assert one.get_seq_length() == two.get_seq_length() == 70 + len(tree)
    torch.testing.assert_close(one.layers[0].keys, two.layers[0].keys, rtol=1e-4, atol=1e-4)


def test_prefix_mask_is_causal_over_the_prompt_and_blind_to_the_tree():
    tree = _tree([5, 6], [-1, 0])
    mask = tree.attention_mask(10, torch.float32, torch.device("cpu"), prefix_len=3)[0, 0]
    allowed = mask == 0
    assert mask.shape == (3 + 1 + 2, 10 + 1 + 2)
    assert allowed[0, :8].all() and not allowed[0, 8:].any()   # position 7 sees up to itself
    assert allowed[2, :10].all() and not allowed[2, 10:].any()  # position 9: not the pending token
    assert allowed[3, :11].all() and not allowed[3, 11:].any()  # pending: prompt and itself
    assert allowed[5, :13].all()                                # node 1 sees node 0 (its parent)
    assert tree.position_ids(10, torch.device("cpu"), prefix_len=3).tolist() == [[7, 8, 9, 10, 11, 12]]
    with pytest.raises(ValueError):
        tree.attention_mask(2, torch.float32, torch.device("cpu"), prefix_len=3)


def test_typing_the_suggestion_gets_the_rest_from_the_prefill_forward(tiny_coder, real_code_prompts):
    """The editor pattern: a completion, then the user types its first tokens and asks again. The next
    prompt is mostly in the document's KV cache, and its prefill forward verifies the rest of the earlier
    output (FastCoder's CACHE drafts it): tokens equal ar's, with fewer decode forwards than tokens."""
    ar = SpeculativeDecoder(tiny_coder, "ar")
    fc = SpeculativeDecoder(tiny_coder, "fastcoder")
    checked = 0
    for _, ids in real_code_prompts[:4]:
        doc = fc.new_cache()
        first = fc.generate(ids, max_new_tokens=40, cache=doc)
        assert first.stats["prefill_draft_accepted"] == 0  # a cold prefill runs alone
        if len(first.token_ids) < 12:
            continue
        typed = ids + first.token_ids[:3]
        want = ar.generate(typed, max_new_tokens=20)
        got = fc.generate(typed, max_new_tokens=20, cache=doc)
        assert got.token_ids == want.token_ids and got.finish_reason == want.finish_reason
        assert got.stats["reused_prompt_tokens"] >= len(typed) - PREFILL_DRAFT_MAX_TOKENS
        assert got.stats["prefill_draft_accepted"] >= 1
        # the prefill's draft is drafting time of the prefill phase, reported apart from the steps'
        assert 0 < got.stats["retrieval_prefill_ms"] <= got.stats["retrieval_ms"]
        # the decode steps' forwards are timed apart: a part of the decode time, as ar's plain steps are
        assert 0 < want.stats["forward_ms"] < want.stats["decode_ms"]  # ar: 19 plain steps
        assert 0 <= got.stats["forward_ms"] < got.stats["decode_ms"]  # none when the prefill's draft held it all
        assert got.stats["forward_passes"] < len(got.token_ids) - got.stats["prefill_draft_accepted"]
        # a draft longer than max_new_tokens is cut at it
        short = fc.generate(typed, max_new_tokens=2, cache=doc)
        assert short.token_ids == want.token_ids[:2] and short.finish_reason == "length"
        checked += 1
    assert checked >= 2


@pytest.mark.parametrize("method", ["copyspec", "suffix"])
def test_other_drafters_verify_at_a_warm_prefill_too(tiny_coder, real_code_prompts, method):
    if method == "suffix":
        pytest.importorskip("arctic_inference")
    ar = SpeculativeDecoder(tiny_coder, "ar")
    dec = SpeculativeDecoder(tiny_coder, method)
    _, ids = real_code_prompts[1]
    doc = dec.new_cache()
    first = dec.generate(ids, max_new_tokens=30, cache=doc)
    typed = ids + first.token_ids[:2]
    got = dec.generate(typed, max_new_tokens=30, cache=doc)
    assert got.token_ids == ar.generate(typed, max_new_tokens=30).token_ids
    assert got.stats["reused_prompt_tokens"] > 0


def test_a_healed_warm_prompt_verifies_its_draft_under_the_constraint(tiny_coder, real_code_prompts):
    """Typing inside a token: the server heals the prompt (drops its last tokens, constrains the output to
    their bytes). The draft of the earlier completion is verified in the prefill forward under that
    constraint, and the tokens equal the model's own constrained greedy output."""
    from engine.healing import heal_tail
    from tests.test_healing import _greedy_under_constraint

    table = tiny_coder.token_bytes
    fc = SpeculativeDecoder(tiny_coder, "fastcoder")
    healed = drafted = 0
    for _, ids in real_code_prompts[:6]:
        doc = fc.new_cache()
        first = fc.generate(ids, max_new_tokens=40, cache=doc)
        if len(first.token_ids) < 12:
            continue
        kept, removed = heal_tail(table, ids + first.token_ids[:3])
        if not removed:
            continue
        got = fc.generate(kept, max_new_tokens=20, constraint=removed, cache=doc)
        assert got.token_ids == _greedy_under_constraint(tiny_coder, kept, removed, table, 20)
        healed += 1
        drafted += got.stats["prefill_draft_accepted"] >= 1
        if healed >= 2 and drafted >= 1:
            break  # enough cases: each reference re-reads the whole sequence per token
    assert healed >= 2 and drafted >= 1


def test_a_request_cancelled_during_the_prefill_forward_ends_cancelled(tiny_coder, real_code_prompts, monkeypatch):
    """The prefill's forward can hold a whole answer, stop string included; a request cancelled meanwhile
    (the editor's next keystroke superseded it) must still end as cancelled, so the server answers it
    empty (editors/vscode e2e "cancel-previous"). An oracle drafter proposes ar's own line."""
    import threading

    from engine.draft_tree import SOURCE_CONTEXT

    ar = SpeculativeDecoder(tiny_coder, "ar")
    fc = SpeculativeDecoder(tiny_coder, "copyspec")
    tok = tiny_coder.tokenizer
    for _, ids in real_code_prompts:
        prompt = ids[:PREFILL_DRAFT_MAX_TOKENS]  # short enough for the merged prefill, cold
        line = ar.generate(prompt, max_new_tokens=16, stop=["\n"])
        if line.finish_reason != "stop" or len(line.token_ids) < 2:
            continue

        class Oracle:
            def reset(self, prompt):
                pass

            def propose(self, context):
                return DraftTree.from_chain(line.token_ids, SOURCE_CONTEXT)

            def observe(self, *args):
                pass

        monkeypatch.setattr(fc, "_make_drafter", lambda *a, **k: Oracle())
        assert fc.generate(prompt, max_new_tokens=16, stop=["\n"]).finish_reason == "stop"
        cancel = threading.Event()
        cancel.set()
        res = fc.generate(prompt, max_new_tokens=16, stop=["\n"], cancel=cancel)
        # every drafted token but the stop token, which is not verified as a draft (the bonus token gives it)
        assert res.stats["prefill_draft_accepted"] == len(line.token_ids) - 1
        assert res.finish_reason == "cancelled" and res.stats["forward_passes"] == 0
        return
    pytest.skip("no prompt whose greedy line ends within 16 tokens")
