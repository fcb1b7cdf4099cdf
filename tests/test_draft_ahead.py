"""The next step drafted inside the verification's native call (engine.native.propose.DraftAhead,
``fc_verify_propose``; BoundVerify.verify_draft): the tree it leaves in the builder's arrays is the drafter's own for
that context, cut to the tokens left, and a generation through it is the model's own output."""

from __future__ import annotations

import numpy as np
import pytest

import engine.drafters as drafters_module
from engine.cost_model import VerifyCost
from engine.decoder import SpeculativeDecoder
from engine.native import library
from engine.native import draft_ahead as native_ahead
from engine.native import propose as native_propose
from engine.native import step_loop as native_loop
from engine.native.bound_verify import BoundVerify
from test_native_propose import _chains_hold

pytestmark = pytest.mark.skipif(library() is None, reason="no C compiler: the native step is not built here")


def _counting(monkeypatch) -> dict:
    """Count the fused calls and the steps whose tree one of them drafted (verified in place); one call a step (the
    native step loop off: tests/test_step_loop.py holds it to these calls)."""
    monkeypatch.setenv(native_loop.STEP_LOOP_ENV, "0")
    seen = {"calls": 0, "in_place": 0}
    real = BoundVerify.verify_draft

    def verify_draft(self, pending, tree, past, ahead):
        seen["calls"] += 1
        seen["in_place"] += bool(getattr(tree, "in_builder", False))
        return real(self, pending, tree, past, ahead)
    monkeypatch.setattr(BoundVerify, "verify_draft", verify_draft)
    return seen


def test_generations_drafted_in_the_verification_call_are_the_models_own(tiny_coder, real_code_prompts, monkeypatch):
    """Whole functions, line completions (stop at the newline) and a few tokens (max_new 5, the tree cut in C to the
    tokens left): fastcoder's text and tokens are ar's, most steps verify the tree the call before drafted, and the
    drafting timed in C is reported as drafting."""
    seen = _counting(monkeypatch)
    ar = SpeculativeDecoder(tiny_coder, "ar")
    fast = SpeculativeDecoder(tiny_coder, "fastcoder")
    for _, ids in real_code_prompts[:4]:
        for stop, max_new in ((None, 48), (["\n"], 32), (None, 5)):
            want = ar.generate(ids, max_new_tokens=max_new, stop=stop)
            got = fast.generate(ids, max_new_tokens=max_new, stop=stop)
            assert (got.text, got.token_ids) == (want.text, want.token_ids)
            assert got.stats["retrieval_ms"] > 0
    assert seen["calls"] > 0 and seen["in_place"] > seen["calls"] / 3, seen


def test_a_generations_first_tree_is_drafted_in_the_fields_too(tiny_coder, real_code_prompts, monkeypatch):
    """The step after a cold prefill, and one whose context the call before did not draft for (a cost curve's bucket
    crossed), draft their trees by fc_draft_ahead in the fused step's fields (DraftAhead.draft_first) instead of the
    drafter's propose: no propose at all in these generations, the text ar's; the tree is the drafter's own (the next
    test's comparison covers it: draft_first goes through next_tree)."""
    seen = _counting(monkeypatch)
    proposed = []
    real_propose = drafters_module.FastCoderDrafter.propose
    monkeypatch.setattr(drafters_module.FastCoderDrafter, "propose",
                        lambda self, context: proposed.append(len(context)) or real_propose(self, context))
    firsts = []
    real_first = native_ahead.DraftAhead.draft_first

    def draft_first(self, context, out_len):
        got = real_first(self, context, out_len)
        firsts.append(type(got[0]).__name__)
        return got
    monkeypatch.setattr(native_ahead.DraftAhead, "draft_first", draft_first)
    ar = SpeculativeDecoder(tiny_coder, "ar")
    fast = SpeculativeDecoder(tiny_coder, "fastcoder")
    runs = 0
    for _, ids in real_code_prompts[:4]:
        for stop, max_new in ((["\n"], 24), (None, 32)):
            want = ar.generate(ids, max_new_tokens=max_new, stop=stop)
            got = fast.generate(ids, max_new_tokens=max_new, stop=stop)
            assert (got.text, got.token_ids) == (want.text, want.token_ids)
            runs += len(got.token_ids) > 1
    assert proposed == [], proposed
    assert len(firsts) >= runs and set(firsts) <= {"BuilderTree", "DraftTree"}, firsts
    assert seen["calls"] > 0 and seen["in_place"] > seen["calls"] / 2, seen  # the rest: the datastores' empty trees


def test_the_tree_drafted_in_the_call_is_the_drafters_own_for_that_context(tiny_coder, real_code_prompts,
                                                                           monkeypatch):
    """Every tree the call left in the builder's arrays equals fc_propose's tree for the same context called from
    Python after the drafter observed the step (the call made the same additions to the cache's mirror first), its
    first nodes within the tokens left; sized on the cost curve of the new context's bucket where the step crossed
    into it. The mirror then equals the cache's list, chains included."""
    compared, crossed, added = [], [], []  # per tree; whether the call added to the cache first
    real_next = native_ahead.DraftAhead.next_tree
    monkeypatch.setenv(native_loop.STEP_LOOP_ENV, "0")  # every step's tree (test_step_loop.py: the loop's)

    def next_tree(self, context):
        got, cut = real_next(self, context)
        if type(got) is native_propose.BuilderTree and not int(self.vp[native_ahead.VP_RETRIEVED]):
            mine = got.tree()
            drafter = self.drafter
            mirror = drafter.cache.mirror
            buf = drafter.cache._buf
            assert mirror.length == len(buf) and np.array_equal(mirror.array[:len(buf)], buf)
            assert _chains_hold(mirror, buf)
            added.append(int(self.vp[native_ahead.VP_CACHE_LEN_OUT]) > int(self.vp[native_ahead.VP_CACHE_LEN]))
            want = native_propose.propose_native(drafter, context, drafter.cost_at(len(context)))
            left = int(self.vp[native_ahead.VP_MAX_NEW]) - int(self.vp[native_ahead.VP_OUT_LEN]) \
                - (len(context) - int(self.vp[native_ahead.VP_CTX_LEN]))
            keep = int((want.depths <= left).sum())
            assert cut and len(mine) == keep
            for field in ("tokens", "parents", "depths", "sources", "keys"):
                assert np.array_equal(getattr(mine, field), getattr(want, field)[:keep]), field
            assert np.allclose(mine.probs, want.probs[:keep])
            compared.append(keep)
            crossed.append(len(context) >= int(self.vp[native_ahead.VP_BUCKET_END]))  # drafted on the next curve
        return got, cut
    monkeypatch.setattr(native_ahead.DraftAhead, "next_tree", next_tree)
    sizes = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64]
    short = [1.37, 1.51, 1.64, 1.85, 1.98, 2.12, 2.47, 2.72, 3.42, 4.15]  # tests/data/verify_cost_cpu.json's
    # from 544 tokens on verification is nearly free: the curve of the bucket a step ends in sizes wider trees
    cost = VerifyCost(sizes, short, 5.68, 512, long_ratios=[1.0 + 0.01 * n for n in sizes], long_context=544,
                      long_decode_ms=7.0)
    fast = SpeculativeDecoder(tiny_coder, "fastcoder", verify_cost=cost)
    for _, ids in real_code_prompts[:3]:
        for max_new in (64, 6):
            # a repeated text (long copies to cut) of 500 tokens: its steps cross into the buckets of 512 and 544
            fast.generate(list(ids[-250:]) * 2, max_new_tokens=max_new)
    assert len(compared) > 10 and max(compared) > 3 and any(crossed) and any(added)


def test_the_datastores_turn_in_the_call_is_the_drafters_own(tiny_coder, real_code_prompts, monkeypatch):
    """With D_r and D_c (their searches, the missing table, the skip token's coin at line starts taken in the call
    where fc_propose gives the datastores their turn): the same text, the same trees verified step by step as with
    the drafter's propose before each verification, and the same counts (lookups, skips, the missing table, the
    stores' probes and their match states' searches). Real code with stores from other files, and prompts drawn
    from a few tokens and newlines with stores of other tokens (misses recur: the missing table and the coin act)."""
    from engine.datastore import Datastore

    docs = [list(ids) for _, ids in real_code_prompts]
    rng = np.random.default_rng(0)
    info = tiny_coder.token_info
    newlines = [int(t) for t in np.flatnonzero(info.ends_with_newline_ws)[:3]]
    pool = rng.choice(tiny_coder.vocab_size, 12, replace=False).tolist() + newlines
    other = [t for t in range(tiny_coder.vocab_size) if t not in pool][:200]
    scenarios = [([d[:200] for d in docs[4:6]], [d[:200] for d in docs[6:]],
                  [d[:len(d) // 2][-300:] for d in docs[:4]], {}),
                 ([rng.choice(other, 300).tolist()], [rng.choice(other, 300).tolist()],
                  [rng.choice(pool, 300).tolist() for _ in range(4)], {}),
                 # D_r and D_c searched at every cache miss beside the copy: a missed pair comes back to them
                 ([rng.choice(other, 300).tolist()], [rng.choice(other, 300).tolist()],
                  [rng.choice(pool, 300).tolist() for _ in range(4)], {"retrieve_beside_copy": True})]
    real_make, real_draft, real_call = SpeculativeDecoder._make_drafter, BoundVerify.verify_draft, BoundVerify.__call__
    real_ready = native_ahead.DraftAhead.ready
    turns, steady = [], []
    monkeypatch.setenv(native_loop.STEP_LOOP_ENV, "0")  # each step's tree recorded (test_step_loop.py: the loop's)

    def ready(self, n_ctx, out_len):  # whether the step after a drafting call only moved the lengths
        steady.append(self.steady is not None and self.steady[:2] == (n_ctx, out_len))
        return real_ready(self, n_ctx, out_len)
    monkeypatch.setattr(native_ahead.DraftAhead, "ready", ready)
    for repo_docs, common_docs, prompts, options in scenarios:
        runs = {}
        for fused in (True, False):
            repo = Datastore.from_documents(repo_docs, tiny_coder.vocab_size)
            common = Datastore.from_documents(common_docs, tiny_coder.vocab_size)
            trees, drafters = [], []

            def make(self, cache, greedy=True, line=False, fused=fused, drafters=drafters):
                d = real_make(self, cache, greedy, line)
                drafters.append(d)
                if not fused:
                    d.draft_ahead = lambda eos, max_new: None
                return d

            def verify_draft(self, pending, tree, past, ahead, trees=trees):
                trees.append(tree.tree() if getattr(tree, "in_builder", False) else tree)
                got = real_draft(self, pending, tree, past, ahead)
                turns.append(int(ahead.vp[native_ahead.VP_RETRIEVED]))
                return got

            def call(self, pending, tree, past, trees=trees):
                if len(tree):
                    trees.append(tree)
                return real_call(self, pending, tree, past)
            monkeypatch.setattr(SpeculativeDecoder, "_make_drafter", make)
            monkeypatch.setattr(BoundVerify, "verify_draft", verify_draft)
            monkeypatch.setattr(BoundVerify, "__call__", call)
            dec = SpeculativeDecoder(tiny_coder, "fastcoder", repo_datastore=repo, common_datastore=common, **options)
            texts = [dec.generate(ids, max_new_tokens=64, stop=stop).text for ids in prompts
                     for stop in (None, ["\n"])]
            counts = [(d.cache.lookups, d.cache.hits, d.skipped, sorted(d.missing), d.repo_state.searches,
                       d.common_state.searches) for d in drafters]
            runs[fused] = (texts, [(t.tokens.tolist(), t.parents.tolist()) for t in trees if len(t)], counts,
                           repo.probes, common.probes)
        assert runs[True] == runs[False]
    kinds = {t & (native_ahead.DREW_COIN - 1) for t in turns}
    assert {native_ahead.SEARCHED, native_ahead.SKIP_MISSING} <= kinds, sorted(set(turns))
    assert any(t & native_ahead.DREW_COIN for t in turns)  # the coin drawn ahead, consumed in the call
    assert sum(steady) > len(steady) // 4  # the steps after a call that drafted from the sources it was given


def test_drafting_ahead_can_be_switched_off(tiny_coder, real_code_prompts, monkeypatch):
    """$FASTCODER_DRAFT_AHEAD=0: every step drafted by the drafter's propose (no fused call), the same text."""
    ids = real_code_prompts[0][1]
    want = SpeculativeDecoder(tiny_coder, "fastcoder").generate(ids, max_new_tokens=32)
    seen = _counting(monkeypatch)
    monkeypatch.setenv(native_ahead.DRAFT_AHEAD_ENV, "0")
    got = SpeculativeDecoder(tiny_coder, "fastcoder").generate(ids, max_new_tokens=32)
    assert got.token_ids == want.token_ids and seen["calls"] == 0
