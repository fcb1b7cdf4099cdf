"""SDSAT decoding (engine/sdsat/drafter.py): methods ``sdsat`` and ``fastcoder+sdsat``.

- greedy output equals the model's own greedy output (any model: drafts never change what is committed);
- the drafts read off the adaptive branch continue the right position (an oracle that knows the true
  continuation at exactly the offsets SDSAT eq. 1 promises gets them accepted);
- sampling: the nucleus variant's joint distribution of 4 tokens matches ``ar``'s exact one (chi-square);
- a model without adaptive-token metadata gets a clear error.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from engine import SpeculativeDecoder
from engine.sdsat import NotAnSdsatModel, SdsatConfig, load_sdsat_config, save_sdsat_config
from engine.sdsat.drafter import AdaptiveDrafter
from tests.conftest import loaded_random
from tests.test_lossless import perturbed_datastore, reference_greedy
from tests.test_sampling import ALPHA, PARAMS, chi_square_gof_p, exact_distribution, peaked_llama

SDSAT_METHODS = ("sdsat", "fastcoder+sdsat")


def sdsat_random(family: str = "llama", vocab: int = 512, seed: int = 1, adaptive_id: int = 7, window: int = 4):
    loaded = loaded_random(family, vocab, seed=seed)
    loaded.sdsat = SdsatConfig(adaptive_token_id=adaptive_id, max_window=window)
    return loaded


def repeating_prompt(vocab: int, seed: int = 2) -> list[int]:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, vocab, 24).tolist()
    return base + rng.integers(0, vocab, 10).tolist() + base[:12]


@pytest.mark.parametrize("family,vocab", [("llama", 512), ("gpt2", 300)])
@pytest.mark.parametrize("size_by_cost", [True, False])
def test_sdsat_methods_are_lossless_greedy(family, vocab, size_by_cost):
    loaded = sdsat_random(family, vocab)
    prompt = repeating_prompt(vocab)
    ref = reference_greedy(loaded, prompt, 48)
    store = perturbed_datastore(ref, prompt, vocab)
    for method in SDSAT_METHODS:
        for k in (1, 4, 8):
            dec = SpeculativeDecoder(loaded, method=method, repo_datastore=store, common_datastore=store,
                                     size_by_cost=size_by_cost, adaptive_tokens=k)
            res = dec.generate(prompt, max_new_tokens=48)
            assert res.token_ids == ref, f"{family}/{method}/k={k} diverged from greedy"
            assert res.stats["draft_sizes"], "no draft tree was verified"


def test_adaptive_drafts_continue_the_position_eq1_promises(monkeypatch):
    """An oracle adaptive branch: the j-th adaptive token 'predicts' the true token j + 1 positions after
    the pending one. If the decoder read the drafts at any other offset, none would be accepted."""
    loaded = sdsat_random()
    prompt = repeating_prompt(512, seed=5)
    ref = reference_greedy(loaded, prompt, 64)
    truth = prompt + ref
    real = AdaptiveDrafter.observe_logits

    def oracle(self, context, tree, logits, path, accepted):
        real(self, context, tree, logits, path, accepted)
        if self._drafts is None:
            return
        start = self._drafts_at  # the first draft continues the new pending token: truth[start]
        main = self._drafts.tokens[0]
        want = truth[start:start + len(main)]
        main[:len(want)] = want
        main[len(want):] = -1

    monkeypatch.setattr(AdaptiveDrafter, "observe_logits", oracle)
    for every_step in (False, True):
        dec = SpeculativeDecoder(loaded, method="sdsat", size_by_cost=False, adaptive_tokens=6,
                                 adaptive_every_step=every_step)
        res = dec.generate(prompt, max_new_tokens=64)
        assert res.token_ids == ref
        assert res.stats["hits"]["adaptive"] > 20, res.stats
        # all 6 drafts accepted: forwards alternate 7 tokens (6 drafts + the model's own) and 1 (draft step 1)
        assert res.stats["mean_accepted_length"] >= 3.5, res.stats


def test_fastcoder_sdsat_merges_both_sources_in_one_tree(monkeypatch):
    loaded = sdsat_random()
    prompt = repeating_prompt(512, seed=3)
    ref = reference_greedy(loaded, prompt, 48)
    store = perturbed_datastore(ref, prompt, 512)
    seen = []
    real = AdaptiveDrafter.propose

    def spy(self, context):
        tree = real(self, context)
        seen.append((tree.n_adaptive, int(np.bitwise_or.reduce(tree.sources[:tree.n_draft], initial=0))))
        return tree

    monkeypatch.setattr(AdaptiveDrafter, "propose", spy)
    dec = SpeculativeDecoder(loaded, method="fastcoder+sdsat", repo_datastore=store, common_datastore=store,
                             size_by_cost=False, adaptive_tokens=4)
    res = dec.generate(prompt, max_new_tokens=48)
    assert res.token_ids == ref
    assert all(n == 4 for n, _ in seen), "fastcoder+sdsat forwards an adaptive branch with every tree"
    from engine.draft_tree import SOURCE_ADAPTIVE
    assert any(bits & SOURCE_ADAPTIVE for _, bits in seen), "adaptive drafts never joined the tree"
    assert any(bits & ~SOURCE_ADAPTIVE for _, bits in seen), "retrieval drafts never joined the tree"
    assert sum(res.stats["hits"].values()) > 0


def test_model_without_adaptive_metadata_gets_a_clear_error(tmp_path):
    loaded = loaded_random("llama", 512, seed=1)
    for method in SDSAT_METHODS:
        with pytest.raises(NotAnSdsatModel, match="train-sdsat"):
            SpeculativeDecoder(loaded, method=method)
    assert load_sdsat_config(tmp_path) is None
    save_sdsat_config(tmp_path, SdsatConfig(adaptive_token_id=7, adaptive_token="<|reserved_0|>", max_window=8))
    assert load_sdsat_config(tmp_path).adaptive_token_id == 7
    (tmp_path / "sdsat.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a valid SDSAT"):
        load_sdsat_config(tmp_path)
    with pytest.raises(ValueError, match="adaptive_tokens"):
        SpeculativeDecoder(sdsat_random(), method="sdsat", adaptive_tokens=99)


@pytest.fixture(scope="module")
def sampling_case():
    torch.set_num_threads(1)
    loaded = peaked_llama()
    loaded.sdsat = SdsatConfig(adaptive_token_id=5, max_window=4)
    greedy = SpeculativeDecoder(loaded, method="ar").generate([3], max_new_tokens=40).token_ids
    prompt = ([3] + greedy)[-16:]
    return loaded, prompt


def _draw(decoder, prompt, arm: int, n: int = 1000):
    counts: Counter = Counter()
    accepted = []
    for i in range(n):
        res = decoder.generate(prompt, max_new_tokens=4, seed=arm * 10**5 + i, **PARAMS)
        counts[tuple(res.token_ids)] += 1
        accepted.append(res.stats["mean_accepted_length"])
    return counts, float(np.mean(accepted))


def test_sdsat_nucleus_samples_the_model_distribution(sampling_case):
    """Section 2.1.2: the top-3 candidates of each adaptive position form a tree, verified with the
    exact per-node rule; the 4-token joint distribution must match ar's."""
    loaded, prompt = sampling_case
    exact = exact_distribution(loaded, prompt, 4)  # ar's own: tests/test_sampling.py checks its draws against it
    assert sum(q >= 0.01 for q in exact.values()) >= 8, "degenerate reference distribution"
    dec = SpeculativeDecoder(loaded, method="sdsat", size_by_cost=False, adaptive_tokens=3,
                             adaptive_every_step=True)
    counts, mean_accepted = _draw(dec, prompt, arm=7)
    assert mean_accepted > 1.2, f"adaptive drafts rarely accepted ({mean_accepted:.2f}): nothing was tested"
    p = chi_square_gof_p(counts, exact)
    assert p > ALPHA, f"sdsat sampling differs from ar (chi-square p={p:.2e})"


@pytest.mark.parametrize("method", SDSAT_METHODS)
def test_adaptive_tokens_not_worth_their_cost_are_left_out(method, monkeypatch):
    """A steep verify cost (each tree token +50% of a decode step): the expected tokens of an SDSAT loop
    never pay for its adaptive tokens, so forwards carry none, except the periodic probe."""
    from engine.cost_model import VerifyCost
    from engine.draft_tree import DraftTree
    from engine.sdsat.drafter import PROBE_EVERY

    branches = []
    real = DraftTree.with_adaptive_branch

    def counting(self, token_id, k):
        branches.append(k)
        return real(self, token_id, k)

    monkeypatch.setattr(DraftTree, "with_adaptive_branch", counting)
    loaded = sdsat_random()
    prompt = repeating_prompt(512)
    ref = reference_greedy(loaded, prompt, 64)
    steep = VerifyCost([1, 2, 4, 8, 16, 64], [1 + 0.5 * n for n in (1, 2, 4, 8, 16, 64)], 1.0, 0, {"kind": "steep"})
    res = SpeculativeDecoder(loaded, method=method, verify_cost=steep, adaptive_tokens=8).generate(prompt, 64)
    assert res.token_ids == ref
    forwards = res.stats["forward_passes"]
    assert len(branches) <= forwards // PROBE_EVERY + 1 and set(branches) <= {1}, (branches, forwards)
    branches.clear()
    flat = SpeculativeDecoder(loaded, method=method, verify_cost=VerifyCost.flat(), adaptive_tokens=8)
    forwards = flat.generate(prompt, max_new_tokens=64).stats["forward_passes"]
    assert len(branches) > forwards // 3, "a flat cost keeps the adaptive branch"
