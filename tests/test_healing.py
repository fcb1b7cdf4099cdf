"""Token healing (issue #10): the constrained output equals the model's own greedy output under the
same byte constraint, for every method; a prompt cut inside ``return`` completes ``urn``."""

from __future__ import annotations

import re
import time

import pytest
import torch

from conftest import third_party_sources
from engine import SpeculativeDecoder
from engine.healing import TokenBytes, heal_tail, mask_logits

METHODS = ("ar", "rest", "copyspec", "fastcoder")


@pytest.fixture(scope="module")
def table(tiny_coder):
    return TokenBytes.from_tokenizer(tiny_coder.tokenizer, tiny_coder.vocab_size)


def test_allowed_tokens_are_exactly_those_consistent_with_the_constraint(table):
    remaining = b" ret"
    allowed = set(table.allowed(remaining).tolist())
    brute = {i for i, p in enumerate(table.pieces) if p and (p.startswith(remaining) or remaining.startswith(p))}
    assert allowed == brute and allowed
    assert table.advance(b" ret", next(i for i in allowed if table.pieces[i] == b" r")) == b"et"
    assert table.advance(b" ret", next(i for i in allowed if table.pieces[i] == b" return")) == b""


def test_heal_tail_backs_up_to_a_token_boundary(tiny_coder, table):
    tok = tiny_coder.tokenizer
    ids = tok.encode("def f(x):\n    ret", add_special_tokens=False)
    kept, removed = heal_tail(table, ids)
    assert removed == b" ret" and kept == ids[:-1]
    ids = tok.encode("x = self.wri", add_special_tokens=False)
    assert heal_tail(table, ids)[1].endswith(b"wri")


def _greedy_under_constraint(loaded, ids, remaining: bytes, table, max_new: int) -> list[int]:
    """Reference: a plain loop over the full sequence (no cache, no drafts), masking while constrained."""
    model, out = loaded.model, []
    seq = list(ids)
    with torch.inference_mode():
        for _ in range(max_new):
            logits = model(torch.tensor([seq])).logits[0, -1]
            if remaining:
                logits = mask_logits(logits, table.allowed(remaining))
            token = int(logits.argmax())
            if token in loaded.eos_token_ids:
                break
            remaining = table.advance(remaining, token) if remaining else b""
            out.append(token)
            seq.append(token)
    return out


@pytest.fixture(scope="module")
def constrained_references(tiny_coder, table, real_code_prompts):
    """(name, kept prompt, removed bytes, the reference's 24 tokens) for three real prompts, healed: computed
    once for every method (the reference loop re-reads the whole sequence at every token)."""
    cases = []
    for name, prompt in real_code_prompts[:3]:
        kept, removed = heal_tail(table, prompt[:-1] + [prompt[-1]])
        if not removed:
            kept, removed = prompt[:-1], table.pieces[prompt[-1]]
        cases.append((name, kept, removed, _greedy_under_constraint(tiny_coder, kept, removed, table, 24)))
    return cases


@pytest.mark.parametrize("method", METHODS)
def test_constrained_output_is_the_models_own_constrained_greedy_output(tiny_coder, table, constrained_references,
                                                                        method):
    decoder = SpeculativeDecoder(tiny_coder, method=method)
    for name, kept, removed, ref in constrained_references:
        got = decoder.generate(kept, max_new_tokens=24, constraint=removed)
        assert got.token_ids == ref, (name, method)
        assert b"".join(table.pieces[t] for t in got.token_ids).startswith(removed)


def test_once_the_constraint_is_spelled_each_next_tree_is_drafted_in_the_verification(tiny_coder, table,
                                                                                     constrained_references,
                                                                                     monkeypatch):
    """A healed prompt drafts its steps after the constraint as an unhealed one does: each next tree inside the
    verification's native call (before, a generation that began constrained drafted every step in Python to its
    end); the output stays the model's constrained greedy output."""
    from engine.native import draft_ahead

    if not draft_ahead.draft_ahead_on():
        pytest.skip("draft-ahead is off here ($FASTCODER_DRAFT_AHEAD=0)")
    calls = []
    real = draft_ahead.DraftAhead.draft_first
    monkeypatch.setattr(draft_ahead.DraftAhead, "draft_first",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    decoder = SpeculativeDecoder(tiny_coder, method="fastcoder")
    name, kept, removed, ref = constrained_references[0]
    decoder.generate(kept, max_new_tokens=24)  # unconstrained: does this machine draft ahead at all?
    if not calls:
        pytest.skip("no native draft-ahead on this machine (the fastcoder drafter's native step is off)")
    calls.clear()
    got = decoder.generate(kept, max_new_tokens=24, constraint=removed)
    assert got.token_ids == ref, name
    assert calls, "no step after the constraint was drafted by the native draft-ahead"


def test_a_healed_generations_first_step_is_primed_in_the_prefill_with_its_stop_table(tiny_coder,
                                                                                   constrained_references,
                                                                                   monkeypatch):
    """The draft-ahead fields of a healed generation are made in its set-up and primed before the prefill's forward,
    as an unhealed one's: the step after a prefill whose token spells the constraint drafts in them, with the stop
    table the drafter took once the constraint was spelled (a line completion's newline), not the none it held
    while constrained."""
    from engine.native import draft_ahead

    if not draft_ahead.draft_ahead_on():
        pytest.skip("draft-ahead is off here ($FASTCODER_DRAFT_AHEAD=0)")
    primes, firsts = [], []
    real_prime, real_first = draft_ahead.DraftAhead.prime, draft_ahead.DraftAhead.draft_first

    def prime(self, *a, **k):
        primes.append(1)
        return real_prime(self, *a, **k)

    def first(self, *a, **k):
        got = real_first(self, *a, **k)
        firsts.append((self.stop is not None and self.stop is self.drafter.stop, got[0] is not None))
        return got

    monkeypatch.setattr(draft_ahead.DraftAhead, "prime", prime)
    monkeypatch.setattr(draft_ahead.DraftAhead, "draft_first", first)
    decoder, plain = SpeculativeDecoder(tiny_coder, method="fastcoder"), SpeculativeDecoder(tiny_coder, method="ar")
    checked = 0
    for name, kept, removed, _ in constrained_references:
        primes.clear(), firsts.clear()
        got = decoder.generate(kept, max_new_tokens=24, constraint=removed, stop=["\n"])
        assert got.token_ids == plain.generate(kept, max_new_tokens=24, constraint=removed, stop=["\n"]).token_ids
        if not firsts:  # the answer ended at the prefill's token, or this machine has no native draft-ahead
            continue
        assert primes, f"{name}: the first step's fields were not primed before the prefill"
        assert firsts[0][0], f"{name}: the first step drafted without the stop table"
        checked += 1
    if not checked:
        pytest.skip("no healed answer went past the prefill's token with a native draft-ahead on this machine")


def _return_line_prompt(tiny_coder, table):
    """(prefix ending with a newline, indentation) of a body line whose greedy continuation (healed:
    a prompt ending in a newline is itself cut inside the newline+indentation token) is that
    indentation followed by ``return``."""
    decoder = SpeculativeDecoder(tiny_coder, method="ar")
    tok = tiny_coder.tokenizer
    for path in third_party_sources(6):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"^( +)return \w", text, flags=re.M):
            ids = tok.encode(text[:m.start()][-2500:], add_special_tokens=False)[-600:]
            kept, removed = heal_tail(table, ids)
            out = decoder.generate(kept, max_new_tokens=4, constraint=removed).text.encode()
            if removed and out.startswith(removed) and out[len(removed):].startswith(
                    (m.group(1) + "return").encode()):
                return tok.decode(ids), m.group(1)
    pytest.skip("no body in the installed third-party files where the model continues with 'return'")


def test_typing_ret_inside_return_completes_urn(tiny_coder, table):
    prefix, indent = _return_line_prompt(tiny_coder, table)
    ids = tiny_coder.tokenizer.encode(prefix + indent + "ret", add_special_tokens=False)
    decoder = SpeculativeDecoder(tiny_coder, method="fastcoder")
    unhealed = decoder.generate(ids, max_new_tokens=8)
    kept, removed = heal_tail(table, ids)
    assert removed.endswith(b"ret")
    healed = decoder.generate(kept, max_new_tokens=8, constraint=removed)
    assert healed.text.encode().startswith(removed)
    assert healed.text.encode()[len(removed):].startswith(b"urn")
    assert not unhealed.text.startswith("urn")  # what the user saw before healing


def test_a_past_deadline_stops_before_the_next_forward(tiny_coder, real_code_prompts):
    decoder = SpeculativeDecoder(tiny_coder, method="fastcoder")
    res = decoder.generate(real_code_prompts[0][1], max_new_tokens=64, deadline=time.monotonic() - 1)
    assert res.finish_reason == "deadline" and len(res.token_ids) == 1
    with pytest.raises(ValueError):
        SpeculativeDecoder(tiny_coder, method="hf-prompt-lookup").generate([1, 2, 3], 4, constraint="x")
