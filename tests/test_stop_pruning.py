"""A stop token's draft node and the nodes below it are not verified: the generation ends at that token, which the
bonus token at its parent gives in the same step (engine.verify.prune_after_stop, engine.tree_builder.cut_at_stop)."""

from __future__ import annotations

import numpy as np

import engine.generation as generation_module
from engine.decoder import SpeculativeDecoder
from engine.draft_tree import SOURCE_CACHE, Candidates, DraftTree
from engine.tree_builder import cut_at_stop
from engine.verify import prune_after_stop


def _tree(tokens, parents):
    parents = np.asarray(parents, dtype=np.int64)
    depths = np.zeros(len(parents), dtype=np.int64)
    for i, p in enumerate(parents):
        depths[i] = 0 if p < 0 else depths[p] + 1
    return DraftTree(np.asarray(tokens, dtype=np.int64), parents, depths, np.ones(len(tokens), dtype=np.uint8),
                     np.ones(len(tokens)))


def test_stop_tokens_and_what_hangs_below_them_are_dropped():
    stop = np.zeros(20, dtype=bool)
    stop[10] = True
    tree = _tree([10, 11, 12, 13, 14, 10], [-1, -1, 0, 1, 2, 1])  # 12 and 14 below a stop; 10 under 11 is one
    for table in (stop, frozenset({10})):  # the (V,) table or the set of ids the decoder passes
        kept = prune_after_stop(tree, table)
        assert kept.tokens.tolist() == [11, 13] and kept.parents.tolist() == [-1, 0]
        assert prune_after_stop(_tree([11, 12], [-1, 0]), table).tokens.tolist() == [11, 12]  # nothing to drop
        assert len(prune_after_stop(_tree([10], [-1]), table)) == 0  # only a stop token: no draft at all
        assert len(prune_after_stop(DraftTree.empty(), table)) == 0
    assert prune_after_stop(_tree([30, 10, 12], [-1, 0, 1]), stop).tokens.tolist() == [30]  # 30: past the table


def test_continuations_are_cut_at_their_first_stop_token():
    stop = np.zeros(20, dtype=np.uint8)
    stop[[10, 12]] = 1
    rows = np.array([[1, 10, 2, 3], [4, 5, 12, -1], [6, 7, -1, -1], [10, 12, 10, 1], [30, 10, 2, -1]])
    part = Candidates(rows, np.ones(5), 1.0, SOURCE_CACHE, 3)
    cut = cut_at_stop(part, stop)
    assert cut.tokens.tolist() == [[1, -1, -1, -1], [4, 5, -1, -1], [6, 7, -1, -1], [-1, -1, -1, -1],
                                   [30, -1, -1, -1]]  # 30: past the table, not a stop
    assert (cut.counts is part.counts and cut.match_length == 3 and cut.source == SOURCE_CACHE
            and cut.tokens.dtype == rows.dtype)
    kept = Candidates(rows[2:3], np.ones(1), 1.0, SOURCE_CACHE)
    assert cut_at_stop(kept, stop) is kept  # no stop token: the same object
    assert cut_at_stop(Candidates(np.array([3, 12, 4]), np.ones(1), 1.0, SOURCE_CACHE), stop).tokens.tolist() \
        == [3, -1, -1]  # one (L,) row


#: Per verify_draft call: whether its tree was the one the call before drafted (verified in place).
DRAFTED: list[bool] = []


def _with_draft(recording, verify, record):
    """``recording`` (a verifier's wrapper) with the bound verifier's ``verify_draft`` (the next step drafted in the
    same call, its tree verified in place) recording each tree it verifies too (copied out of the builder's
    arrays before the call reuses them); ``recording.past`` holds that step's past length."""
    draft = getattr(verify, "verify_draft", None)
    if draft is not None:
        def recording_draft(pending, tree, past_len, ahead):
            recording.past = past_len
            DRAFTED.append(getattr(tree, "in_builder", False))
            record(tree.tree() if getattr(tree, "in_builder", False) else tree)
            return draft(pending, tree, past_len, ahead)
        recording.verify_draft = recording_draft
    return recording


def test_line_completions_verify_nothing_past_the_line_and_stay_exact(tiny_coder, real_code_prompts, monkeypatch):
    """Stop "\\n" (the server's line mode): the same text as ar, no verified node that holds a newline or hangs
    below one, and fewer draft tokens verified than with the pruning switched off."""
    newline = np.array(["\n" in p.decode("utf-8", "ignore") for p in tiny_coder.token_bytes.pieces])
    verified = []
    real_forward = generation_module.tree_forward

    def recording_forward(model, cache, pending, tree, past_len, **kw):
        verified.append(tree)
        return real_forward(model, cache, pending, tree, past_len, **kw)

    real_verifier = generation_module.greedy_verifier

    def recording_verifier(model, cache, *learn):  # greedy steps' verification (the head screened)
        verify = real_verifier(model, cache, *learn)

        def recording(pending, tree, past_len):
            verified.append(tree)
            return verify(pending, tree, past_len)
        return _with_draft(recording, verify, verified.append)

    monkeypatch.setattr(generation_module, "tree_forward", recording_forward)
    monkeypatch.setattr(generation_module, "greedy_verifier", recording_verifier)
    DRAFTED.clear()
    prompts = [ids for _, ids in real_code_prompts[:6]]
    ar = SpeculativeDecoder(tiny_coder, "ar")
    pruned = SpeculativeDecoder(tiny_coder, "fastcoder")
    want = [ar.generate(ids, max_new_tokens=48, stop=["\n"]) for ids in prompts]
    got = [pruned.generate(ids, max_new_tokens=48, stop=["\n"]) for ids in prompts]
    assert [g.text for g in got] == [w.text for w in want]
    assert verified and any(DRAFTED)  # trees drafted inside the verification's call were among them
    for tree in verified:
        assert not newline[tree.tokens].any()
    with_pruning = sum(sum(g.stats["draft_sizes"]) for g in got)
    # the drafter itself cuts its sources' continuations at a stop token before sizing the tree: with the
    # decoder's pruning of built trees switched off, still nothing below a newline is verified
    monkeypatch.setattr(generation_module, "prune_after_stop", lambda tree, stop_tokens: tree)
    verified.clear()
    cut = [SpeculativeDecoder(tiny_coder, "fastcoder").generate(ids, max_new_tokens=48, stop=["\n"])
           for ids in prompts]
    assert [g.text for g in cut] == [w.text for w in want]
    assert verified
    for tree in verified:
        assert not newline[tree.tokens].any()
    monkeypatch.setattr(generation_module, "stop_table", lambda ids, vocab_size: None)  # and the drafter's cut off
    unpruned = SpeculativeDecoder(tiny_coder, "fastcoder")
    again = [unpruned.generate(ids, max_new_tokens=48, stop=["\n"]) for ids in prompts]
    assert [g.text for g in again] == [w.text for w in want]
    assert with_pruning < sum(sum(g.stats["draft_sizes"]) for g in again)


def test_stop_strings_are_searched_only_after_a_token_that_shares_a_byte_with_them(tiny_coder, real_code_prompts,
                                                                                  monkeypatch):
    """The output is decoded and searched for a stop string only when the tokens added since the last search hold
    one of its bytes: the same text, tokens and finish reason as searching after every step (ar and fastcoder,
    line and block stops), with fewer searches."""
    searches = []
    real_hit = SpeculativeDecoder._hit_stop

    def counting_hit(self, out, stop, skip=0):
        searches.append(len(out))
        return real_hit(self, out, stop, skip)

    monkeypatch.setattr(SpeculativeDecoder, "_hit_stop", counting_hit)
    prompts = [ids for _, ids in real_code_prompts[:5]]
    runs = {}
    for filtered in (True, False):
        if not filtered:
            monkeypatch.setattr(SpeculativeDecoder, "_stop_touching", lambda self, stop: None)
        searches.clear()
        results = [SpeculativeDecoder(tiny_coder, method).generate(ids, max_new_tokens=40, stop=stop)
                   for method in ("ar", "fastcoder") for stop in (["\n"], ["\n\n", "):"]) for ids in prompts]
        runs[filtered] = ([(r.text, r.token_ids, r.finish_reason) for r in results],
                          len(searches))
    assert runs[True][0] == runs[False][0]
    assert any(text for text, _, _ in runs[True][0])
    assert 0 < runs[True][1] < runs[False][1] / 2
    touching = tiny_coder.token_bytes.touching_ids(("\n",))
    assert all(b"\n" in tiny_coder.token_bytes.pieces[i] for i in touching) and len(touching) < 0.2 * len(
        tiny_coder.token_bytes.pieces)


def test_no_draft_node_deeper_than_the_tokens_left_is_verified(tiny_coder, real_code_prompts, monkeypatch):
    """A path longer than the tokens the generation may still add is cut at ``max_new_tokens`` whatever it holds:
    such nodes are not verified (trees of a repeated text, whose copies run long), and the output is ar's."""
    seen = []  # (tree, tokens generated before its step)
    real_forward, real_verifier = generation_module.tree_forward, generation_module.greedy_verifier

    def recording_forward(model, cache, pending, tree, past_len, **kw):
        seen.append((tree, past_len))
        return real_forward(model, cache, pending, tree, past_len, **kw)

    def recording_verifier(model, cache, *learn):
        verify = real_verifier(model, cache, *learn)

        def recording(pending, tree, past_len):
            seen.append((tree, past_len))
            return verify(pending, tree, past_len)
        return _with_draft(recording, verify, lambda tree: seen.append((tree, recording.past)))

    monkeypatch.setattr(generation_module, "tree_forward", recording_forward)
    monkeypatch.setattr(generation_module, "greedy_verifier", recording_verifier)
    ar = SpeculativeDecoder(tiny_coder, "ar")
    deepest = 0
    DRAFTED.clear()
    for _, ids in real_code_prompts[:3]:
        ids = list(ids[-150:]) * 3  # the model goes on copying: long drafts from the context
        for method in ("fastcoder", "copyspec"):
            for max_new in (3, 9, 17):
                seen.clear()
                got = SpeculativeDecoder(tiny_coder, method).generate(ids, max_new_tokens=max_new)
                assert got.token_ids == ar.generate(ids, max_new_tokens=max_new).token_ids
                for tree, past_len in seen:
                    done = past_len - len(ids) + 1  # past_len = prompt + generated - 1 (the pending token)
                    if len(tree):
                        assert int(tree.depths.max()) <= max_new - done
                        deepest = max(deepest, int(tree.depths.max()))
    assert deepest >= 3  # long drafts were there to cut
    assert any(DRAFTED)  # among them trees drafted inside the verification's call, cut there


def test_token_ids_end_where_ar_stops_even_when_a_step_commits_past_the_stop(tiny_coder, real_code_prompts):
    """A speculative step commits several tokens, the bonus one past a stop token included, and a short warm prefill
    verifies a draft of the first ones: the result keeps the tokens up to the one that completed the stop, as ar's
    token-by-token search does, whether the loop left at the stop, at max_new or at EOS (the same ``token_ids``, not
    only the same text)."""
    ar, fast = SpeculativeDecoder(tiny_coder, "ar"), SpeculativeDecoder(tiny_coder, "fastcoder")
    stopped = 0
    for _, ids in real_code_prompts[:6]:
        ids = ids[-300:]  # the last 300 of 700 tokens: 72 cold prefills, each ~2.5x cheaper, still code to draft from
        docs = (ar.new_cache(), fast.new_cache())
        for max_new in (3, 7, 40):
            for stop in (["\n"], ["):"]):
                for warm in (False, True):  # warm: the document's KV reused, the prefill verifying a draft
                    prompt = list(ids[:-3]) if warm else list(ids)
                    want = ar.generate(prompt, max_new_tokens=max_new, stop=stop, cache=docs[0] if warm else None)
                    got = fast.generate(prompt, max_new_tokens=max_new, stop=stop, cache=docs[1] if warm else None)
                    assert (got.text, got.token_ids, got.finish_reason) == \
                        (want.text, want.token_ids, want.finish_reason), (max_new, stop, warm)
                    stopped += want.finish_reason == "stop"
    assert stopped > 10


def test_transformers_prompt_lookup_ends_at_the_stop_as_ar_does(tiny_coder, real_code_prompts):
    """The ``hf-prompt-lookup`` baseline runs to max_new (transformers' own ``stop_strings`` also match across the
    prompt's end) and its tokens past the first stop in the new text are cut: the same text, ``token_ids`` and finish
    reason as ar."""
    ar, hf = SpeculativeDecoder(tiny_coder, "ar"), SpeculativeDecoder(tiny_coder, "hf-prompt-lookup")
    stopped = 0
    for _, ids in real_code_prompts[:4]:
        for max_new in (5, 24):
            for stop in (["\n"], ["\n\n", ":"]):
                want = ar.generate(ids, max_new_tokens=max_new, stop=stop)
                got = hf.generate(ids, max_new_tokens=max_new, stop=stop)
                assert (got.text, got.token_ids, got.finish_reason) == \
                    (want.text, want.token_ids, want.finish_reason), (max_new, stop)
                stopped += want.finish_reason == "stop"
    assert stopped > 4


def test_a_line_drafted_with_its_stop_token_takes_one_step_without_verifying_it(tiny_coder, real_code_prompts,
                                                                               monkeypatch):
    """An oracle drafter proposes the rest of ar's line, its newline included, after a cold prefill: the step verifies
    every token of it but the newline, whose place the bonus token takes, so the line still comes in one forward,
    with ar's text and tokens."""
    from engine.decoder import PREFILL_DRAFT_MAX_TOKENS
    from engine.draft_tree import SOURCE_CONTEXT

    ar, fc = SpeculativeDecoder(tiny_coder, "ar"), SpeculativeDecoder(tiny_coder, "copyspec")
    newline = np.array(["\n" in p.decode("utf-8", "ignore") for p in tiny_coder.token_bytes.pieces])
    tried = 0
    for _, ids in real_code_prompts:
        if len(ids) <= PREFILL_DRAFT_MAX_TOKENS:
            continue  # a cold prefill without a draft: the line comes in the decode steps
        want = ar.generate(ids, max_new_tokens=24, stop=["\n"])
        line = want.token_ids
        if want.finish_reason != "stop" or len(line) < 3 or not newline[line[-1]]:
            continue

        class Oracle:
            def reset(self, prompt):
                pass

            def propose(self, context, line=line, n=len(ids)):
                return DraftTree.from_chain(line[len(context) - n:], SOURCE_CONTEXT)

            def observe(self, *args):
                pass

        monkeypatch.setattr(fc, "_make_drafter", lambda *a, **k: Oracle())
        got = fc.generate(ids, max_new_tokens=24, stop=["\n"])
        assert (got.text, got.token_ids, got.finish_reason) == (want.text, want.token_ids, want.finish_reason)
        assert got.stats["draft_sizes"] == [len(line) - 2]  # the pending token came from the prefill; no newline
        assert got.stats["forward_passes"] == 1
        tried += 1
        if tried == 3:
            return
    assert tried, "no prompt whose greedy line ends with a newline token within 24 tokens"
