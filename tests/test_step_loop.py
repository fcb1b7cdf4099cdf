"""fastcoder's steps back to back in one native call (``fc_verify_propose_loop``; BoundVerify.verify_loop, StepLoop,
Generation._replay): the same output, trees, accepted lengths and drafter state as one call a step, with several
steps run in a call, none past a token that may complete a stop string."""

from __future__ import annotations

import numpy as np
import pytest

from engine.datastore import Datastore
from engine.decoder import SpeculativeDecoder
from engine.native import library
from engine.native.screened_head import screened_head
from engine.native.bound_verify import BoundVerify
from engine.native import draft_ahead as native_ahead
from engine.native import step_loop as native_loop
from engine.stops import stop_touching

pytestmark = pytest.mark.skipif(library() is None, reason="no C compiler: the native step is not built here")

CASES = ((None, 64), (["\n"], 32), (["\n\n"], 64), (None, 5), (["self."], 48))
_REAL_MAKE, _REAL_LOOP = SpeculativeDecoder._make_drafter, BoundVerify.verify_loop


def _run(tiny_coder, prompts, monkeypatch, loop: bool, stores=None, cases=CASES) -> tuple[list, list, list]:
    """Each prompt x ``cases`` through a fresh fastcoder decoder: (results, drafters, per loop call the stop strings
    of its generation and the committed tokens of the steps it logged)."""
    monkeypatch.setenv(native_loop.STEP_LOOP_ENV, "1" if loop else "0")
    drafters, calls, turns, current = [], [], [], [None]
    real_make, real_loop = _REAL_MAKE, _REAL_LOOP

    def make(self, cache, greedy=True, line=False):
        d = real_make(self, cache, greedy, line)
        drafters.append(d)
        return d

    def verify_loop(self, pending, tree, past, ahead, step_loop):
        got = real_loop(self, pending, tree, past, ahead, step_loop)
        calls.append((current[0], [step.committed for step in got[4]]))
        turns.extend(step.retrieved for step in got[4])
        return got
    monkeypatch.setattr(SpeculativeDecoder, "_make_drafter", make)
    monkeypatch.setattr(BoundVerify, "verify_loop", verify_loop)
    options = {} if stores is None else {"repo_datastore": stores[0](), "common_datastore": stores[1]()}
    dec = SpeculativeDecoder(tiny_coder, "fastcoder", **options)
    results = []
    for ids in prompts:
        for stop, max_new in cases:
            current[0] = stop
            results.append(dec.generate(ids, max_new_tokens=max_new, stop=stop))
    _run.turns = turns
    return results, drafters, calls


def _state(results, drafters) -> list:
    out = [(r.text, r.token_ids, r.finish_reason, r.stats["draft_sizes"], r.stats["accepted_lengths"])
           for r in results]
    return out + [(d.cache.lookups, d.cache.hits, d.skipped, list(d.cache._buf), d._chunk_from, sorted(d.missing),
                   d.missing_changes, *((s.searches, s.incremental, s.key and s.key[1:], s.length, s.match)
                                        for s in (d.repo_state, d.common_state) if s is not None)) for d in drafters]


def test_steps_run_back_to_back_as_one_call_a_step(tiny_coder, real_code_prompts, monkeypatch):
    """Whole functions, line and block completions (stops "\\n", "\\n\\n"), a few tokens, and a stop string that spans
    tokens ("self."): ar's text, tokens and finish reason; the same trees (sizes), accepted lengths, drafter counts
    and cache as without the loop; calls that ran several steps, and no logged step under "\\n" or "\\n\\n" committed a
    token sharing a byte with it; the LM head's screen read the same rows (the walk's, counted from the loop's log),
    fewer than the steps' forwards."""
    prompts = [ids for _, ids in real_code_prompts[:3]]
    ar = SpeculativeDecoder(tiny_coder, "ar")
    want = [ar.generate(ids, max_new_tokens=max_new, stop=stop) for ids in prompts for stop, max_new in CASES]
    screen = screened_head(tiny_coder.model.lm_head)
    read = screen.rows
    looped, drafters, calls = _run(tiny_coder, prompts, monkeypatch, True)
    read, looped_rows = screen.rows, screen.rows - read
    assert [(r.text, r.token_ids, r.finish_reason) for r in looped] == \
        [(r.text, r.token_ids, r.finish_reason) for r in want]
    single, single_drafters, single_calls = _run(tiny_coder, prompts, monkeypatch, False)
    assert not single_calls  # switched off: no loop call
    assert _state(looped, drafters) == _state(single, single_drafters)
    forward_rows = sum(len(sizes) + sum(sizes) for sizes in (r.stats["draft_sizes"] for r in looped))
    assert looped_rows == screen.rows - read < forward_rows, (looped_rows, screen.rows - read, forward_rows)
    steps = [len(c) for _, c in calls]
    assert max(steps) >= 3 and sum(steps) >= len(steps) // 2, steps  # several steps in a call, often
    touching = stop_touching(["\n"], tiny_coder)
    free = [tok for stop, c in calls if stop is None for committed in c for tok in committed]
    stopped = [tok for stop, c in calls if stop in (["\n"], ["\n\n"]) for committed in c for tok in committed]
    assert any(tok in touching for tok in free)  # without a stop string newlines ran in loops
    assert stopped and not any(tok in touching for tok in stopped)  # under "\n" or "\n\n": none


def test_steps_back_to_back_with_the_datastores_keep_their_counts(tiny_coder, real_code_prompts, monkeypatch):
    """With D_r and D_c: the datastores' turns taken inside a loop (searched, or skipped by the missing table) leave
    the same text, trees, accepted lengths, counts, cache, missing table and match states as one call a step."""
    docs = [list(ids) for _, ids in real_code_prompts]
    # D_r holds the prompts' files (searches answer: the loop takes those turns), D_c other files' starts
    stores = (lambda: Datastore.from_documents(docs[:4], tiny_coder.vocab_size),
              lambda: Datastore.from_documents([d[:200] for d in docs[4:]], tiny_coder.vocab_size))
    prompts = [d[:len(d) // 2][-300:] for d in docs[:3]]
    looped, drafters, calls = _run(tiny_coder, prompts, monkeypatch, True, stores)
    turns = _run.turns
    single, single_drafters, _ = _run(tiny_coder, prompts, monkeypatch, False, stores)
    assert _state(looped, drafters) == _state(single, single_drafters)
    assert any(len(c) >= 2 for _, c in calls)
    assert native_ahead.SEARCHED in turns, turns  # a search inside a loop


def test_misses_noted_inside_a_loop_skip_the_datastores_as_one_call_a_step(tiny_coder, monkeypatch):
    """Prompts of a few tokens and newlines, D_r and D_c of other tokens: the searches miss and the misses recur (a
    miss ends a loop: Python notes it in the missing table, which later turns skip on): the same state as one call a
    step."""
    rng = np.random.default_rng(0)
    newlines = [int(t) for t in np.flatnonzero(tiny_coder.token_info.ends_with_newline_ws)[:3]]
    pool = rng.choice(tiny_coder.vocab_size, 12, replace=False).tolist() + newlines
    other = [t for t in range(tiny_coder.vocab_size) if t not in pool][:200]
    repo_doc, common_doc = rng.choice(other, 300).tolist(), rng.choice(other, 300).tolist()
    stores = (lambda: Datastore.from_documents([repo_doc], tiny_coder.vocab_size),
              lambda: Datastore.from_documents([common_doc], tiny_coder.vocab_size))
    prompts = [rng.choice(pool, 300).tolist() for _ in range(4)]
    looped, drafters, _ = _run(tiny_coder, prompts, monkeypatch, True, stores, cases=((None, 128),))
    single, single_drafters, _ = _run(tiny_coder, prompts, monkeypatch, False, stores, cases=((None, 128),))
    assert _state(looped, drafters) == _state(single, single_drafters)
    assert any(d.missing for d in drafters) and any(d.repo_state.searches for d in drafters)


def test_a_loop_runs_at_most_its_steps(tiny_coder, real_code_prompts, monkeypatch):
    """StepLoop.max_steps bounds a call (a cancel or deadline waits for at most that many steps)."""
    monkeypatch.setattr(native_loop, "LOOP_STEPS", 3)
    prompts = [ids for _, ids in real_code_prompts[:2]]
    _, _, calls = _run(tiny_coder, prompts, monkeypatch, True)
    assert calls and max(len(c) for _, c in calls) == 2  # two logged, the third the call's last


def test_a_step_loops_log_holds_every_row():
    """A StepLoop's log holds a step's committed tokens for every row the forward may take."""
    loop = native_loop.StepLoop(max_rows=17, need_counted=True, touch=np.zeros(8, dtype=np.uint8), max_steps=4)
    assert loop.log.shape == (4, native_loop.LOG_COMMITTED + 18)
    assert loop.lp[native_loop.LP_NEED_COUNTED] == 1 and loop.lp[native_loop.LP_N_TOUCH] == 8
    assert loop.logged([]) == []


class _CallbackCancel:
    """A cancel with callbacks (as lsp_server.backends.CancelEvent): ``fire()`` runs them; ``is_set()`` reads True only
    once ``seen`` is set, so a test decides when the Python side sees it."""

    def __init__(self):
        self.callbacks, self.seen, self.removed = [], False, []

    def add_callback(self, fn):
        self.callbacks.append(fn)

    def remove_callback(self, fn):
        self.removed.append(fn)

    def fire(self):
        for fn in self.callbacks:
            fn()

    def is_set(self):
        return self.seen


def _first_calls(tiny_coder, ids, monkeypatch, before_first=None, **generate):
    """One fastcoder generation of ``ids`` with the loop on: (result, steps logged by each loop call);
    ``before_first()`` runs just before the first loop call."""
    monkeypatch.setenv(native_loop.STEP_LOOP_ENV, "1")
    logged = []

    def verify_loop(self, pending, tree, past, ahead, step_loop):
        if not logged and before_first is not None:
            before_first()
        got = _REAL_LOOP(self, pending, tree, past, ahead, step_loop)
        logged.append(len(got[4]))
        return got
    monkeypatch.setattr(BoundVerify, "verify_loop", verify_loop)
    res = SpeculativeDecoder(tiny_coder, "fastcoder").generate(ids, max_new_tokens=64, **generate)
    return res, logged


def test_a_cancel_that_calls_back_ends_the_call_after_its_step(tiny_coder, real_code_prompts, monkeypatch):
    """A cancel set while a loop call runs (its callback writes the loop's word) ends that call after the step under
    way, not after up to LOOP_STEPS steps; the generation ends "cancelled" with that step's tokens and the callback is
    removed. Without the cancel the same first call runs several steps."""
    ids = list(real_code_prompts[0][1])
    _, free = _first_calls(tiny_coder, ids, monkeypatch)
    assert free[0] >= 2, free  # the first call ran several steps on its own
    cancel = _CallbackCancel()

    def fire():  # as if the editor cancelled while the native call runs: Python sees it only after the call
        cancel.fire()
        cancel.seen = True
    res, logged = _first_calls(tiny_coder, ids, monkeypatch, fire, cancel=cancel)
    assert logged == [0]  # one call, one step: the word was seen after its first step
    assert res.finish_reason == "cancelled" and len(res.stats["accepted_lengths"]) == 1
    assert cancel.removed == cancel.callbacks and len(cancel.callbacks) == 1
    want = SpeculativeDecoder(tiny_coder, "ar").generate(ids, max_new_tokens=64)
    assert want.token_ids[:len(res.token_ids)] == res.token_ids


def test_a_passed_deadline_ends_each_call_after_its_step(tiny_coder, real_code_prompts, monkeypatch):
    """A deadline on time.monotonic()'s clock: once the C loop's clock is past it, every call ends after one step.
    Python's own check is held before it here (its clock pinned at 0), so the generation runs on, one step a call,
    to ar's output."""
    import types

    import engine.generation as generation

    ids = list(real_code_prompts[0][1])
    pinned = types.SimpleNamespace(perf_counter=generation.time.perf_counter, monotonic=lambda: 0.0)
    monkeypatch.setattr(generation, "time", pinned)
    res, logged = _first_calls(tiny_coder, ids, monkeypatch, deadline=1e-3)
    assert logged and set(logged) == {0}, logged
    want = SpeculativeDecoder(tiny_coder, "ar").generate(ids, max_new_tokens=64)
    assert res.token_ids == want.token_ids and res.finish_reason == want.finish_reason
    far, far_logged = _first_calls(tiny_coder, ids, monkeypatch, deadline=1e12)
    assert max(far_logged) >= 2 and far.token_ids == want.token_ids


def test_a_deadline_that_is_no_clock_reading_leaves_the_check_to_python():
    """StepLoop.watch: a deadline the C clock cannot hold (inf, nan, past int64 ns) sets none there (no crash); a
    past one is a reading in the past; a cancel without callbacks (a plain Event) leaves the word unwatched."""
    import threading

    loop = native_loop.StepLoop(max_rows=8, need_counted=False, touch=None)
    for deadline in (float("inf"), float("nan"), 1e12, None):
        loop.watch(threading.Event(), deadline)
        assert loop.lp[native_loop.LP_DEADLINE_NS] == 0 and loop.lp[native_loop.LP_CANCEL] == 0
    loop.watch(None, -5.0)
    assert loop.lp[native_loop.LP_DEADLINE_NS] == 1
    loop.watch(None, 2.5)
    assert loop.lp[native_loop.LP_DEADLINE_NS] == 2_500_000_000
    loop.unwatch()
