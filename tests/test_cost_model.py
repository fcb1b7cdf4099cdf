"""Verify-cost model and cost-sized draft trees (issue #9)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import loaded_random
from engine.acceptance import AcceptanceEstimator, alternatives, bucket_keys, choose_by_cost
from engine.cost_model import VerifyCost, load_or_measure_verify_cost, measure_verify_cost
from engine.draft_tree import SOURCE_CONTEXT, SOURCE_REPO, Candidates
from engine.tree_builder import build_draft_tree


@pytest.fixture(autouse=True)
def _no_drift_check(monkeypatch):
    """Loads here do not time the device against a cached curve (the counted fakes below stand in for
    measurements); the test of the check turns it on."""
    import engine.cost_model as cm

    monkeypatch.setattr(cm, "DRIFT_ROUNDS", 0)


def _candidates(rows, counts, source=SOURCE_REPO, match=6):
    width = max(len(r) for r in rows)
    arr = np.full((len(rows), width), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        arr[i, :len(r)] = r
    return Candidates(arr, np.asarray(counts, dtype=np.float64), 1.0, source, match)


def _steep() -> VerifyCost:  # verification costs a lot: each draft token +50% of a decode step
    sizes = [1, 2, 4, 8, 16, 32, 64]
    return VerifyCost(sizes, [1 + 0.5 * n for n in sizes], 1.0, 0, {"kind": "steep"})


WIDE = [[1, 2, 3, 4], [1, 2, 5, 6], [1, 7, 8], [9, 10, 11], [9, 12], [13, 14, 15, 16], [17, 18]]


def test_the_cost_curve_interpolates_and_never_falls():
    cost = VerifyCost([1, 4, 16], [1.1, 1.5, 1.4], 2.0, 128)
    assert cost.c(0) == 1.0
    assert cost.c(4) == pytest.approx(1.5) and cost.c(16) >= 1.5  # made monotone
    assert cost.c(2) == pytest.approx(1.1 + (1.5 - 1.1) / 3)
    assert cost.c(32) >= cost.c(16)


def test_flat_cost_gives_wide_trees_and_steep_cost_chains_or_nothing():
    est = AcceptanceEstimator()
    parts = [_candidates(WIDE, [5, 4, 3, 3, 2, 2, 1])]
    wide = build_draft_tree(parts, 64, 0.0, est, VerifyCost.flat())
    steep = build_draft_tree(parts, 64, 0.0, est, _steep())
    assert len(wide) == sum(1 for _ in set((tuple(r[:k]) for r in WIDE for k in range(1, len(r) + 1))))
    assert len(steep) < len(wide)
    assert int((steep.parents == -1).sum()) <= 1  # at most one branch at the root: a chain or nothing
    # an estimator that learned these drafts are never accepted proposes no draft at all
    bad = AcceptanceEstimator()
    keys = wide.keys
    for _ in range(200):
        bad.update(keys, wide.parents, [])
    assert len(build_draft_tree(parts, 64, 0.0, bad, _steep())) == 0


def test_kept_trees_are_prefix_closed_and_capped():
    est = AcceptanceEstimator()
    tree = build_draft_tree([_candidates(WIDE, [5, 4, 3, 3, 2, 2, 1])], 5, 0.0, est, VerifyCost.flat())
    assert len(tree) <= 5
    assert all(p < i for i, p in enumerate(tree.parents.tolist()))  # BFS: parents first, all kept


def test_acceptance_estimates_converge_to_the_true_rate():
    """A synthetic drafter whose depth-1 nodes are accepted with probability 0.3 (context copy, share 1)."""
    rng = np.random.default_rng(0)
    est = AcceptanceEstimator()
    keys = bucket_keys(np.array([SOURCE_CONTEXT]), np.array([1]), np.array([1.0]), np.array([3]))
    for _ in range(3000):
        est.update(keys, np.array([-1]), [0] if rng.random() < 0.3 else [])
    assert est.estimate(keys, np.array([1.0]))[0] == pytest.approx(0.3, abs=0.03)
    # a child is only "tried" when its parent was accepted
    est2 = AcceptanceEstimator()
    k2 = bucket_keys(np.array([SOURCE_REPO] * 2), np.array([1, 2]), np.array([0.5, 0.5]), np.array([4, 4]))
    est2.update(k2, np.array([-1, 0]), [])
    assert est2.tried[k2[1]] == 0 and est2.tried[k2[0]] == 1


def test_choose_by_cost_prefers_zero_drafts_when_they_do_not_pay():
    cost = _steep()
    assert len(choose_by_cost(np.array([0.2, 0.1]), np.array([1, 2]), cost, 64)) == 0
    assert len(choose_by_cost(np.array([0.95, 0.9]), np.array([1, 2]), cost, 64)) == 2


def test_measurement_takes_more_rounds_within_its_time_budget(tmp_path, monkeypatch):
    """At least ``repeats`` rounds; more while within ``budget_s``, ``max_repeats`` at most; and the first
    load measures with a budget (a noisy 7-round curve mis-sized trees on a shared CPU)."""
    import engine.cost_model as cm

    loaded = loaded_random("llama")
    assert measure_verify_cost(loaded, context=16, sizes=(1, 2), repeats=2).rounds == 2
    assert measure_verify_cost(loaded, context=16, sizes=(1, 2), repeats=2, budget_s=60.0, max_repeats=5).rounds == 5
    budgets = []
    real = cm.measure_verify_cost
    monkeypatch.setattr(cm, "measure_verify_cost",
                        lambda m, **kw: budgets.append(kw.get("budget_s", 0.0)) or real(m, context=16, sizes=(1, 2)))
    assert load_or_measure_verify_cost(loaded, tmp_path).rounds == 7
    # two curves (a short and a long KV cache), each within half the budget; a measurement that a loaded
    # machine spoils (c(1) > 2 for this tiny model) is taken again, two curves each time
    assert budgets and len(budgets) % 2 == 0 and set(budgets) == {cm.MEASURE_BUDGET_S / 2} and cm.MEASURE_BUDGET_S > 0


def test_the_curve_times_the_decoders_own_step_calls(monkeypatch):
    """c(n) is what the decode loop pays: each round times the plain step (``decode_one_token``) once and
    ``tree_forward`` once per size over a chain of n draft tokens at the prefilled length, the cache back
    at that length after each (a causal forward whose mask transformers built read c(1..5) 0.1-0.14 high)."""
    import engine.steps as steps
    import engine.verify as ver

    loaded = loaded_random("llama")
    calls = []
    plain, verify = steps.decode_one_token, ver.tree_forward

    def counted_plain(model, cache, token, position=None):
        assert position == cache.get_seq_length()
        calls.append((0, position))
        return plain(model, cache, token, position)

    def counted_verify(model, cache, pending, tree, past_len, prefix=()):
        assert (tree.parents == np.arange(-1, len(tree) - 1)).all() and not prefix
        calls.append((len(tree), past_len))
        return verify(model, cache, pending, tree, past_len, prefix)

    monkeypatch.setattr(steps, "decode_one_token", counted_plain)
    monkeypatch.setattr(ver, "tree_forward", counted_verify)
    cost = measure_verify_cost(loaded, context=16, sizes=(1, 3), repeats=2)
    from engine.cost_model import SMALL_SAMPLES as samples  # noqa: PLC0415  (sizes up to SMALL_SIZES: each round)
    assert sorted(calls) == [(0, 16)] * 2 * samples + [(1, 16)] * 2 * samples + [(3, 16)] * 2 * samples
    assert cost.rounds == 2 and len(cost.ratios) == 2


def test_measured_curve_is_cached_per_model_device_dtype_threads(tmp_path, monkeypatch):
    import engine.cost_model as cm

    loaded = loaded_random("llama")
    measured = measure_verify_cost(loaded, context=32, sizes=(1, 4, 8), repeats=2)
    assert len(measured.ratios) == 3 and measured.decode_ms > 0
    # the caching below must not depend on this machine's load (a loaded machine measures an implausible
    # c(1), which is never cached): measurements are counted fakes from here on
    calls = []

    def fake_measure(loaded_model, context=512, **kwargs):
        calls.append(context)
        return VerifyCost([1, 4, 8], [1.2, 1.5, 1.9 + len(calls)], 5.0, context, cm.cost_key(loaded_model))

    monkeypatch.setattr(cm, "measure_verify_cost", fake_measure)
    monkeypatch.setattr(cm, "SHORT_CONTEXT", 64)  # within the random model's context
    monkeypatch.setattr(cm, "LONG_CONTEXT", 256)
    first = load_or_measure_verify_cost(loaded, tmp_path)
    again = load_or_measure_verify_cost(loaded, tmp_path)
    assert calls == [cm.SHORT_CONTEXT, cm.LONG_CONTEXT]  # one measurement: a short and a long curve
    assert again.ratios == first.ratios and again.long_ratios == first.long_ratios == [1.2, 1.5, 3.9]
    assert again.long_context == cm.LONG_CONTEXT and again.at(cm.LONG_CONTEXT).ratios == [1.2, 1.5, 3.9]
    assert again.key["device"] == "cpu" and again.key["threads"] >= 1
    (next(tmp_path.iterdir())).write_text("{broken")
    assert load_or_measure_verify_cost(loaded, tmp_path).sizes and len(calls) == 4  # a broken cache is measured again


def test_a_curve_cached_on_another_processor_is_measured_again(tmp_path, monkeypatch):
    """One cache folder on two machines (a home directory on NFS): each keeps its own curve."""
    import engine.cost_model as cm

    loaded = loaded_random("llama")
    calls = []

    def fake_measure(loaded_model, context=512, **kwargs):
        calls.append(context)
        return VerifyCost([1, 4, 8], [1.2, 1.5, 1.9 + len(calls)], 5.0, context, cm.cost_key(loaded_model))

    monkeypatch.setattr(cm, "measure_verify_cost", fake_measure)
    monkeypatch.setattr(cm, "SHORT_CONTEXT", 64)
    monkeypatch.setattr(cm, "LONG_CONTEXT", 256)
    assert cm.cost_key(loaded)["processor"].endswith(f"x{os.cpu_count()}")  # this machine's CPU and its count
    monkeypatch.setattr(cm, "device_name", lambda device: "CPU A x2")
    first = load_or_measure_verify_cost(loaded, tmp_path)
    monkeypatch.setattr(cm, "device_name", lambda device: "CPU B x16")
    other = load_or_measure_verify_cost(loaded, tmp_path)
    assert len(calls) == 4 and other.key["processor"] == "CPU B x16" and other.ratios != first.ratios
    monkeypatch.setattr(cm, "device_name", lambda device: "CPU A x2")
    assert load_or_measure_verify_cost(loaded, tmp_path).ratios == first.ratios and len(calls) == 4  # still cached


def test_a_cached_curve_the_device_drifted_from_is_measured_again(tmp_path, monkeypatch):
    """Each process's first load of a cached curve times c(8) now: within 12% of the cached value the curve serves;
    further off (the machine got faster or slower since) the whole curve is measured again and cached."""
    import engine.cost_model as cm

    loaded = loaded_random("llama")
    curves, spots = [], []
    now = {"c8": 1.9}

    def fake_measure(loaded_model, context=512, sizes=cm.SIZES, **kwargs):
        if tuple(sizes) == (cm.DRIFT_SIZE,):
            spots.append((context, kwargs.get("repeats")))
            return VerifyCost([cm.DRIFT_SIZE], [now["c8"]], 5.0, context, cm.cost_key(loaded_model))
        curves.append(context)
        return VerifyCost([1, 4, 8], [1.2, 1.5, 1.9 + 0.1 * len(curves)], 5.0, context, cm.cost_key(loaded_model))

    monkeypatch.setattr(cm, "measure_verify_cost", fake_measure)
    monkeypatch.setattr(cm, "SHORT_CONTEXT", 64)
    monkeypatch.setattr(cm, "LONG_CONTEXT", 256)
    monkeypatch.setattr(cm, "DRIFT_ROUNDS", 5)
    first = load_or_measure_verify_cost(loaded, tmp_path)  # measured: nothing to check
    assert (len(curves), spots, first.c(8)) == (2, [], 2.0)
    cm._LOADED.clear()  # another process
    now["c8"] = 2.2  # 10% off: kept
    assert load_or_measure_verify_cost(loaded, tmp_path).ratios == first.ratios
    assert len(curves) == 2 and spots == [(64, 5)]
    assert load_or_measure_verify_cost(loaded, tmp_path).ratios == first.ratios and len(spots) == 1  # once a process
    cm._LOADED.clear()
    now["c8"] = 1.7  # 15% off: measured again, and the new curve cached
    again = load_or_measure_verify_cost(loaded, tmp_path)
    assert len(curves) == 4 and again.c(8) == pytest.approx(2.2) and len(spots) == 2
    cm._LOADED.clear()
    now["c8"] = 2.2
    assert load_or_measure_verify_cost(loaded, tmp_path).c(8) == pytest.approx(2.2) and len(curves) == 4


def test_a_curve_spoiled_by_load_is_measured_again_and_never_cached(tmp_path, monkeypatch):
    import engine.cost_model as cm

    loaded = loaded_random("llama")
    spoiled = VerifyCost([1, 4, 8], [9.5, 10.0, 11.0], 5.0, 32, cm.cost_key(loaded))
    calls = []
    monkeypatch.setattr(cm, "measure_verify_cost", lambda *a, **k: calls.append(1) or spoiled)
    got = load_or_measure_verify_cost(loaded, tmp_path)
    assert got.ratios == spoiled.ratios and len(calls) == 3 * 2  # the first try and two more, two curves each
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # used for this process, not cached


def test_a_noisy_measurement_becomes_the_closest_non_decreasing_curve():
    from engine.cost_model import isotonic_curve

    # measured under load on this machine: c(1) 1.63 > c(2) 1.48 > c(4) 1.36
    fitted = isotonic_curve([1.63, 1.48, 1.36, 1.86, 2.14, 2.25, 3.5, 2.73, 3.36, 3.77])
    assert fitted == pytest.approx([1.49, 1.49, 1.49, 1.86, 2.14, 2.25, 3.12, 3.12, 3.36, 3.77], abs=0.01)
    assert all(a <= b for a, b in zip(fitted, fitted[1:]))
    assert isotonic_curve([0.9, 1.2, 1.1]) == pytest.approx([1.0, 1.15, 1.15])  # floored at 1, pooled
    assert isotonic_curve([1.05, 1.3, 1.9]) == [1.05, 1.3, 1.9]  # a clean curve is kept as is


def test_one_local_model_has_one_cost_curve_however_its_path_is_spelled(tmp_path, monkeypatch):
    from engine.cost_model import cost_key

    loaded = loaded_random("llama")
    (tmp_path / "m").mkdir()
    monkeypatch.chdir(tmp_path)
    keys = []
    for spelled in ("m", "./m", str(tmp_path / "m")):
        loaded.name = spelled
        keys.append(cost_key(loaded))
    assert keys[0] == keys[1] == keys[2] and keys[0]["model"] == str((tmp_path / "m").resolve())
    loaded.name = "Qwen/Qwen2.5-Coder-1.5B"  # a hub id stays as it is
    assert cost_key(loaded)["model"] == "Qwen/Qwen2.5-Coder-1.5B"


def test_learning_from_small_and_large_trees_counts_the_same():
    """The Python loop for the decoder's small trees and the array path count exactly alike."""
    import engine.acceptance as acc

    rng = np.random.default_rng(0)
    for n in (1, 3, 9, 40, 64, 65, 200):
        parents = np.array([-1] + [int(rng.integers(-1, i)) for i in range(1, n)], dtype=np.int64)
        keys = rng.integers(0, acc.NUM_BUCKETS, n).astype(np.int64)
        keys[rng.integers(0, n, n // 3)] = keys[0]  # repeated buckets count once per node
        path, node = [], -1
        while True:  # a root-to-node path
            children = np.flatnonzero(parents == node)
            if not len(children) or rng.random() < 0.3:
                break
            node = int(rng.choice(children))
            path.append(node)
        small, large = AcceptanceEstimator(), AcceptanceEstimator()
        small.update(keys, parents, path)
        old = acc.UPDATE_PYTHON_NODES
        acc.UPDATE_PYTHON_NODES = -1  # force the array path
        try:
            large.update(keys, parents, path)
        finally:
            acc.UPDATE_PYTHON_NODES = old
        assert np.array_equal(small.tried, large.tried) and np.array_equal(small.accepted, large.accepted)
        assert np.array_equal(small.pooled_tried, large.pooled_tried)
        assert np.array_equal(small.pooled_accepted, large.pooled_accepted)
        assert small.tried.sum() == np.isin(parents, [-1, *path]).sum() and small.accepted.sum() == len(path)


def test_alternatives_are_the_siblings_of_each_parents_largest_share():
    # root children 0 (share 0.5), 1 (0.7), 4 (0.7: a tie, the earlier id wins); node 0's children 2, 3
    parents = [-1, -1, 0, 0, -1]
    shares = [0.5, 0.7, 0.2, 0.2, 0.7]
    assert alternatives(parents, shares) == [True, False, False, True, True]
    assert alternatives([], []) == []


def test_what_one_source_learns_carries_to_the_others():
    """Buckets back off to the pooled estimate over sources: a run that learned that deep unanimous context
    copies are accepted 96% of the time estimates a repository node of the same depth, share and match
    length far above the untrained prior (PRIOR_SCALE x share), before the repository's own bucket has data."""
    import engine.acceptance as acc

    rng = np.random.default_rng(0)
    est = AcceptanceEstimator()
    ctx = bucket_keys(np.array([SOURCE_CONTEXT]), np.array([6]), np.array([1.0]), np.array([13]))
    repo = bucket_keys(np.array([SOURCE_REPO]), np.array([6]), np.array([1.0]), np.array([13]))
    fresh = est.estimate(repo, np.array([1.0]))[0]
    for _ in range(300):
        est.update(ctx, np.array([-1]), [0] if rng.random() < 0.96 else [])
    assert est.tried[repo[0]] == 0
    assert fresh == pytest.approx(acc.PRIOR_SCALE)
    assert est.estimate(repo, np.array([1.0]))[0] == pytest.approx(0.96, abs=0.03)
    assert est.estimate(ctx, np.array([1.0]))[0] == pytest.approx(0.96, abs=0.03)


def test_alternatives_are_estimated_apart_from_first_choices():
    """Two sources that each agree with themselves but propose different tokens give both children a share
    of 1: the alternative starts lower, and what it learns leaves the first choice's estimate alone."""
    est = AcceptanceEstimator()
    args = (np.array([SOURCE_CONTEXT] * 2), np.array([1, 1]), np.array([1.0, 1.0]), np.array([4, 4]))
    first, alt = bucket_keys(*args, np.array([False, True]))
    before = est.estimate(np.array([first, alt]), np.array([1.0, 1.0]))
    assert before[1] < 0.5 * before[0]
    for _ in range(200):  # the first choice accepted, its alternative never
        est.update(np.array([first, alt]), np.array([-1, -1]), [0])
    after = est.estimate(np.array([first, alt]), np.array([1.0, 1.0]))
    assert after[0] > 0.95 and after[1] < 0.03


def test_a_trained_estimator_prunes_alternatives_from_the_tree():
    """Two continuations of equal share from one source: the first (the earlier id) is always the one
    accepted. Pooled in one bucket each would be estimated 0.5 and both kept; as first choice and
    alternative, the tree becomes the first choice's chain (the other branch no longer pays)."""
    est = AcceptanceEstimator()
    parts = [_candidates([[1, 2, 3, 4], [7, 8, 9]], [1, 1], SOURCE_CONTEXT, 9)]
    cost = VerifyCost([1, 2, 4, 8], [1.1, 1.2, 1.3, 1.5], 7.0, 512)
    wide = build_draft_tree(parts, 16, 0.0, est, cost)
    assert {int(t) for t in wide.tokens[wide.depths == 1]} == {1, 7}
    for _ in range(100):
        tree = build_draft_tree(parts, 16, 0.0, est, cost)
        est.update(tree.keys, tree.parents, [i for i, t in enumerate(tree.tokens.tolist()) if t in (1, 2, 3, 4)])
    chain = build_draft_tree(parts, 16, 0.0, est, cost)
    assert chain.tokens.tolist() == [1, 2, 3, 4]


def test_the_cost_key_names_the_native_forward_kernels_version(monkeypatch):
    """A changed C kernel changes c(n): the key of a curve measured with the native kernels carries the
    forward kernels' version (a hash of their sources), so the curve is measured again after an update;
    a change to the drafting code's C (another library version, the same forward kernels) keeps it."""
    from types import SimpleNamespace  # noqa: PLC0415

    from engine import cost_model as cm  # noqa: PLC0415
    from engine import native  # noqa: PLC0415

    if native.library() is None:
        pytest.skip("no native library on this machine")
    loaded = loaded_random("llama")
    loaded.packing = SimpleNamespace(kernel="native", layers=["0"])
    version = native.forward_version()
    assert len(version) == 16 and version != native.version()
    # and which instruction set the kernels run: $FASTCODER_ISA=avx2 on an AVX-512 CPU measures its own curve
    isa = native.kernel_isa(native.library())
    assert cm.cost_key(loaded)["kernel"] == f"native-{version}-{isa}"
    monkeypatch.setitem(native._state, "version", "1" * 16)  # the drafting sources changed
    assert cm.cost_key(loaded)["kernel"] == f"native-{version}-{isa}"
    monkeypatch.setitem(native._state, "forward_version", "0" * 16)  # another build of the kernels
    assert cm.cost_key(loaded)["kernel"] == "native-" + "0" * 16 + f"-{isa}"
    monkeypatch.setattr("engine.native._ISA", {"isa": "avx2"})  # $FASTCODER_ISA=avx2
    assert cm.cost_key(loaded)["kernel"] == "native-" + "0" * 16 + "-avx2"
    loaded.packing = SimpleNamespace(kernel="mkl", layers=["0"])
    assert cm.cost_key(loaded)["kernel"] == "mkl"


def test_the_curve_follows_the_kv_cache_length():
    """Attention over a longer KV cache makes each extra row dearer: the curve at a context between the
    two measured ones is interpolated, clamped outside them, and kept per bucket."""
    cost = VerifyCost([1, 4, 8], [1.1, 1.3, 1.5], 3.0, 512, {}, 7, [1.3, 1.7, 2.1], 1024, 4.0)
    assert cost.at(100).ratios == cost.ratios and cost.at(512).c(4) == pytest.approx(1.3)
    assert cost.at(1024).ratios == [1.3, 1.7, 2.1] and cost.at(5000).ratios == [1.3, 1.7, 2.1]
    assert cost.at(768).c(8) == pytest.approx(1.8) and cost.at(768) is cost.at(770)  # one bucket, kept
    assert cost.at(600).c(8) < cost.at(900).c(8)
    single = VerifyCost([1, 4], [1.1, 1.3], 3.0, 512)
    assert single.at(2000) is single
    assert cost.as_dict()["c_long"] == {"1": 1.3, "4": 1.7, "8": 2.1}


def test_trees_are_sized_for_the_context_they_are_verified_on():
    """The same drafts, a context copy of a repeated line: a cheap short-context curve drafts them, a long
    context whose curve makes every draft token dear drafts fewer (here none)."""
    from engine.drafters import FastCoderDrafter, FastCoderOptions  # noqa: PLC0415

    line = [5, 6, 7, 8, 9, 10, 11, 12, 13]
    cheap = [1.0 + 0.01 * n for n in (1, 2, 4, 8, 16, 32, 64)]
    dear = [1.0 + 1.0 * n for n in (1, 2, 4, 8, 16, 32, 64)]
    cost = VerifyCost([1, 2, 4, 8, 16, 32, 64], cheap, 1.0, 64, {}, 7, dear, 256)
    sizes = {}
    for length in (64, 256):
        filler = [100 + (i % 50) for i in range(length - 3 * len(line) - 3)]
        context = np.asarray(filler + line * 3 + line[:3], dtype=np.int64)
        assert len(context) == length
        drafter = FastCoderDrafter(None, None, None, options=FastCoderOptions(), estimator=AcceptanceEstimator(),
                                   cost=cost)
        drafter.reset(context)
        sizes[length] = len(drafter.propose(context))
    assert sizes[64] >= 3 and sizes[256] < sizes[64]


def test_a_curve_file_in_the_environment_keeps_its_long_context_curve(tmp_path, monkeypatch):
    """$FASTCODER_VERIFY_COST (tests, the replay's fixed curve) carries both curves, as the cache does."""
    import json  # noqa: PLC0415

    import engine.cost_model as cm  # noqa: PLC0415

    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps({"sizes": [1, 4], "ratios": [1.1, 1.3], "decode_ms": 3.0, "context": 512,
                                 "long_ratios": [1.2, 1.6], "long_context": 1024, "long_decode_ms": 4.0}))
    monkeypatch.setenv(cm.COST_ENV, str(curve))
    cost = load_or_measure_verify_cost(loaded_random("llama"))
    assert cost.long_ratios == [1.2, 1.6] and cost.at(1024).c(4) == pytest.approx(1.6)


def test_cheap_verification_searches_every_source_beside_the_copy():
    """Where a wider tree costs next to nothing (a GPU's flat c(n)) fastcoder drafts from D_r and D_c beside the
    context copy and copies further; on a CPU's steep curve, and where the options say otherwise, it does not."""
    from engine import SpeculativeDecoder
    from engine.cost_model import CHEAP_VERIFY_DRAFTING, verification_is_cheap

    h200 = VerifyCost([1, 4, 8, 16, 32, 64], [1.21, 1.21, 1.23, 1.27, 1.28, 1.28], 3.19, 512)
    cpu = VerifyCost([1, 4, 8, 16, 32, 64], [1.29, 1.51, 2.05, 2.99, 5.26, 14.3], 1.91, 512)
    assert verification_is_cheap(VerifyCost.flat()) and verification_is_cheap(h200)
    assert not verification_is_cheap(cpu) and not verification_is_cheap(_steep())
    # a flat short-context curve is not enough when the long-context one is steep
    assert not verification_is_cheap(VerifyCost(list(h200.sizes), list(h200.ratios), 3.19, 512,
                                                long_ratios=list(cpu.ratios), long_context=1024))
    loaded = loaded_random("llama")

    def drafter_opts(cost, **options):
        return SpeculativeDecoder(loaded, method="fastcoder", verify_cost=cost, **options)._make_drafter(None).opts

    drafter = SpeculativeDecoder(loaded, method="fastcoder", verify_cost=h200)._make_drafter(None)
    chosen = {**vars(drafter.ret), **vars(drafter.opts)}  # retrieval options (draft_len) and FastCoder's
    assert {k: chosen[k] for k in CHEAP_VERIFY_DRAFTING} == CHEAP_VERIFY_DRAFTING
    cpu_drafter = SpeculativeDecoder(loaded, method="fastcoder", verify_cost=cpu)._make_drafter(None)
    assert (cpu_drafter.opts.tree_max_depth, cpu_drafter.opts.copy_max_depth, cpu_drafter.ret.draft_len) == (24, 24, 24)
    assert (drafter_opts(cpu).retrieve_beside_copy, drafter_opts(cpu).copy_factor) == (False, 3.0)
    assert drafter_opts(h200, retrieve_beside_copy=False).retrieve_beside_copy is False  # explicit wins
