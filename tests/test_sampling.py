"""Invariant 2 (DESIGN.md): sampled output has the model's own distribution, for every drafter.

The per-node rule (engine.verify.accept, DESIGN.md "Verification"): at each visited tree node draw one
token from the warped model distribution; descend if it is a child, else emit it and stop. Each
emitted token is then an ancestral sample of the model, so the joint distribution of a continuation
equals plain (``ar``) sampling. The statistical test below compares the two with a chi-square test
on the 3-token joint distribution against the model's exact one (``exact_distribution``: enumerated with the
same warping ``ar`` samples from, and checked against ``ar``'s own draws) and must reject REST's published
(biased) resampling rule.

Speed: a tiny random Llama (vocabulary 16, hidden 32, 2 layers) with a sharpened lm_head, one
thread, ``max_new_tokens=3``; about 10 ms per generate() call.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from engine import SpeculativeDecoder
from engine.datastore import Datastore
from engine.model import LoadedModel
from engine.verify import SamplingParams, choose_token, warp_probs

VOCAB = 16
DRAFTING = ("rest", "copyspec", "fastcoder")
METHODS = ("ar", "hf-prompt-lookup") + DRAFTING
#: draws per arm of the chi-square test (disjoint seed ranges per arm: see ``draw``)
N_DRAWS = 1000
#: significance: an exact method must give p > ALPHA; the biased rule must give p < ALPHA
ALPHA = 1e-3
#: exercised in the statistical test: temperature, top-k and top-p all active
PARAMS = dict(temperature=0.9, top_k=10, top_p=0.95)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def peaked_llama(seed: int = 0, sharpen: float = 40.0) -> LoadedModel:
    """A tiny random Llama (V=16) whose lm_head is scaled by ``sharpen`` so a few tokens dominate
    each next-token distribution (drafts then hit often). No EOS, so every draw has 3 tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      bos_token_id=0, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpen)
    return LoadedModel(model=model, tokenizer=None, device=torch.device("cpu"), dtype=torch.float32,
                       name="peaked-llama")


@pytest.fixture(scope="module")
def setup():
    """(loaded model, prompt, datastore): the prompt is the tail of the model's greedy output, which
    cycles, so copy drafts (CopySpec, FastCoder's context source) fire; the datastore holds the 3 most
    frequent continuations of 100 draws (seeds no test arm uses), so REST drafts fire and cover part,
    not all, of the probability mass (rejections happen too)."""
    torch.set_num_threads(1)
    loaded = peaked_llama()
    greedy = SpeculativeDecoder(loaded, method="ar").generate([3], max_new_tokens=40).token_ids
    prompt = ([3] + greedy)[-16:]
    ar = SpeculativeDecoder(loaded, method="ar")
    seen = Counter(tuple(ar.generate(prompt, max_new_tokens=4, seed=10**6 + i, **PARAMS).token_ids)
                   for i in range(100))
    docs = [prompt[-4:] + list(cont) for cont, _ in seen.most_common(3)]
    return loaded, prompt, Datastore.from_documents(docs, VOCAB)


def decoder_for(loaded, method: str, store) -> SpeculativeDecoder:
    return SpeculativeDecoder(loaded, method=method, repo_datastore=store if method == "fastcoder" else None,
                              common_datastore=store if method in ("rest", "fastcoder") else None)


def draw(decoder, prompt, arm: int, n: int = N_DRAWS) -> tuple[Counter, float]:
    """``n`` 3-token continuations with seeds ``arm * 10**5 + i``; returns (counts, mean draft tokens
    accepted per continuation: in the prefill's forward, which verifies a draft for a prompt this short,
    and in decode forwards).

    Seeds must differ between arms: the exact rule consumes one draw per emitted token, just like
    ``ar`` (torch.multinomial uses a fixed amount of randomness per call), so equal seeds would make
    the two arms' samples (almost) identical and the comparison meaningless."""
    counts: Counter = Counter()
    accepted = []
    for i in range(n):
        res = decoder.generate(prompt, max_new_tokens=3, seed=arm * 10**5 + i, **PARAMS)
        counts[tuple(res.token_ids)] += 1
        accepted.append(res.stats.get("prefill_draft_accepted", 0)
                        + sum(a - 1 for a in res.stats.get("accepted_lengths", [])))
    return counts, float(np.mean(accepted))


def exact_distribution(loaded: LoadedModel, prompt: list[int], n_tokens: int, floor: float = 1e-7) -> dict:
    """The joint distribution of the next ``n_tokens`` tokens that ``ar`` draws from with :data:`PARAMS` (each step
    :func:`engine.verify.warp_probs` of the model's logits, as :func:`engine.verify.choose_token` samples), enumerated
    level by level with one batched forward (no KV cache) per level: {continuation tuple: probability}. Prefixes
    below ``floor`` are not extended; the mass left out is ``1 - sum(values)``."""
    params = SamplingParams(**PARAMS)
    level = {(): 1.0}
    for _ in range(n_tokens):
        prefixes = [(k, q) for k, q in level.items() if q >= floor]
        ids = torch.tensor([prompt + list(k) for k, _ in prefixes], dtype=torch.long)
        with torch.no_grad():
            probs = warp_probs(loaded.model(ids).logits[:, -1].float(), params)
        level = {k + (t,): q * float(row[t]) for (k, q), row in zip(prefixes, probs)
                 for t in torch.nonzero(row > 0).flatten().tolist()}
    return {k: q for k, q in level.items() if q >= floor}


def chi_square_gof_p(counts: Counter, probs: dict, min_expected: float = 5.0) -> float:
    """p-value of scipy's chi-square goodness-of-fit test of the sample ``counts`` against the exact ``probs``
    (:func:`exact_distribution`). The continuations expected fewer than ``min_expected`` times and those left out of
    ``probs`` share one pooled cell, joined by the least likely others until it is expected ``min_expected`` times."""
    from scipy.stats import chisquare

    n = sum(counts.values())
    keys = sorted((k for k, q in probs.items() if q * n >= min_expected), key=probs.get)
    rest = n - sum(probs[k] * n for k in keys)  # the pooled cell's expected count
    while keys and rest < min_expected:
        rest += probs[keys.pop(0)] * n
    observed = [counts[k] for k in keys]
    expected = [probs[k] * n for k in keys]
    observed.append(n - sum(observed))
    expected.append(n - sum(expected))
    return float(chisquare(observed, expected).pvalue)


@pytest.fixture(scope="module")
def ar_probs(setup):
    """The exact 3-token distribution ``ar`` samples from (:func:`exact_distribution`)."""
    loaded, prompt, _ = setup
    probs = exact_distribution(loaded, prompt, 3)
    assert sum(q >= 0.01 for q in probs.values()) >= 8, "the distribution is degenerate: the test would prove little"
    return probs


def test_ar_samples_the_exact_distribution(setup, ar_probs):
    """The reference the drafters are held to is ``ar``'s own: its draws fit the enumerated distribution."""
    loaded, prompt, store = setup
    counts, _ = draw(decoder_for(loaded, "ar", store), prompt, arm=0, n=300)
    p = chi_square_gof_p(counts, ar_probs)
    assert p > ALPHA, f"ar's draws do not fit the enumerated distribution (chi-square p={p:.2e})"


@pytest.mark.parametrize("arm,method", list(enumerate(DRAFTING, start=1)))
def test_drafters_sample_the_model_distribution(setup, ar_probs, arm, method):
    loaded, prompt, store = setup
    counts, mean_accepted = draw(decoder_for(loaded, method, store), prompt, arm)
    # max_new_tokens=3: a prefill forward that verifies a draft, then at most two more; few accepted
    # draft tokens would mean the exact rule was hardly exercised and nothing was tested
    assert mean_accepted >= 0.8, f"{method}: drafts rarely accepted ({mean_accepted:.2f} per continuation)"
    p = chi_square_gof_p(counts, ar_probs)
    assert p > ALPHA, f"{method}: 3-token joint distribution differs from ar sampling (chi-square p={p:.2e})"


def rest_published_accept(logits, tree, params, generator):
    """REST's published rule (He et al., 2024): on a rejection, discard the verifier's draw and draw
    the bonus token again. A draft token is then emitted with probability p + (1 - p) * p: biased."""
    children = tree.children
    path: list[int] = []
    node = -1
    while True:
        token = choose_token(logits[node + 1], params, generator)
        child = children.get((node, token))
        if child is None:
            return path, choose_token(logits[node + 1], params, generator)
        path.append(child)
        node = child


def test_chi_square_rejects_rest_published_rule(setup, ar_probs, monkeypatch):
    """The same test must fail REST's biased rule. CopySpec drafts a single chain, where the bias
    (a draft token emitted with probability p + (1 - p) * p instead of p) is largest."""
    loaded, prompt, store = setup
    monkeypatch.setattr("engine.generation.accept", rest_published_accept)
    counts, mean_accepted = draw(decoder_for(loaded, "copyspec", store), prompt, arm=9, n=600)
    assert mean_accepted >= 0.8
    p = chi_square_gof_p(counts, ar_probs)
    assert p < ALPHA, f"the biased rule passed the test (p={p:.3f}): the test has no power"


# ---------------------------------------------------------------------------------- warping

def transformers_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Softmax after transformers' own warpers, in the order generate() applies them."""
    from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TopPLogitsWarper)

    scores = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_k:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return scores.softmax(-1)


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.2, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.9), (0.8, 20, 0.5), (0.5, 1, 0.3),
    (1.0, 0, 0.01), (2.0, 49, 0.99), (1.0, 50, 1.0), (1.0, 500, 0.8),
])
def test_warp_probs_matches_transformers(temperature, top_k, top_p):
    gen = torch.Generator().manual_seed(int(temperature * 100) + top_k)
    logits = torch.randn(8, 50, generator=gen) * 3
    ours = warp_probs(logits, SamplingParams(temperature, top_p, top_k))
    theirs = transformers_probs(logits, temperature, top_k, top_p)
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
    assert torch.equal(ours > 0, theirs > 0), "different tokens kept"


# ------------------------------------------------------------------------ seeds, greedy, errors

@pytest.fixture(scope="module")
def tiny_sampling_case():
    """A small random Llama (V=64, unsharpened) with a repeating prompt and a datastore of its greedy
    continuation, so every drafter drafts; 24 new tokens leave room for seeds to differ."""
    from tests.conftest import loaded_random

    loaded = loaded_random("llama", 64, seed=3)
    rng = np.random.default_rng(4)
    base = rng.integers(0, 64, 12).tolist()
    prompt = base + rng.integers(0, 64, 6).tolist() + base[:8]
    ref = SpeculativeDecoder(loaded, method="ar").generate(prompt, max_new_tokens=24).token_ids
    store = Datastore.from_documents([prompt[-8:] + ref, rng.integers(0, 64, 200)], 64)
    return loaded, prompt, store, ref


@pytest.mark.parametrize("method", METHODS)
def test_same_seed_same_output_different_seeds_differ(tiny_sampling_case, method):
    loaded, prompt, store, _ = tiny_sampling_case
    dec = decoder_for(loaded, method, store)
    kwargs = dict(max_new_tokens=24, temperature=1.0, top_p=0.95)
    first = dec.generate(prompt, seed=7, **kwargs).token_ids
    assert first, f"{method}: nothing generated"
    assert dec.generate(prompt, seed=7, **kwargs).token_ids == first, f"{method}: same seed, different output"
    others = [dec.generate(prompt, seed=s, **kwargs).token_ids for s in (8, 9, 10)]
    assert any(o != first for o in others), f"{method}: the seed has no effect"


@pytest.mark.parametrize("method", METHODS)
def test_temperature_zero_is_greedy(tiny_sampling_case, method):
    loaded, prompt, store, ref = tiny_sampling_case
    dec = decoder_for(loaded, method, store)
    out = dec.generate(prompt, max_new_tokens=24, temperature=0.0, top_p=0.5, top_k=3, seed=11).token_ids
    assert out == ref, f"{method}: temperature 0 is not the greedy output"


@pytest.mark.parametrize("kwargs,name", [
    (dict(temperature=-0.1), "temperature"), (dict(temperature=1.0, top_p=0.0), "top_p"),
    (dict(temperature=1.0, top_p=1.5), "top_p"), (dict(temperature=1.0, top_p=-0.2), "top_p"),
    (dict(temperature=1.0, top_k=-1), "top_k"),
])
def test_invalid_sampling_parameters_raise(tiny_sampling_case, kwargs, name):
    loaded, prompt, _, _ = tiny_sampling_case
    dec = SpeculativeDecoder(loaded, method="ar")
    with pytest.raises(ValueError, match=name):
        dec.generate(prompt, max_new_tokens=4, **kwargs)


def test_nan_temperature_raises_value_error(tiny_sampling_case):
    loaded, prompt, _, _ = tiny_sampling_case
    with pytest.raises(ValueError, match="temperature"):
        SpeculativeDecoder(loaded, method="ar").generate(prompt, max_new_tokens=4, temperature=math.nan)


def test_argmax_rows_equals_torch_argmax_with_ties_and_nans():
    """The greedy choice through numpy (engine.verify.argmax_rows) picks torch's index: the first of tied
    maxima, a NaN as the maximum; other dtypes and tensors that need grad go through torch."""
    from engine.verify import argmax_rows

    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 4, (9, 50), generator=gen).float()  # many ties
    x[3, 7] = float("nan")
    x[5, :] = float("-inf")
    x[6, 10] = x[6, 20] = float("inf")
    for t in (x, x.double(), x.bfloat16(), x[:, ::2], x.clone().requires_grad_()):
        assert argmax_rows(t) == t.detach().argmax(-1).tolist()
