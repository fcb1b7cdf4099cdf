"""Measures of an SDSAT model: loss on standard tokens, and acceptance per adaptive position.

- :func:`standard_loss`: mean next-token cross-entropy (nats per token) on held-out text with no
  adaptive token in it, the paper's check that fine-tuning left standard tokens unharmed (appendix A).
- :func:`fim_middle_loss`: the same on the middle of fill-in-the-middle samples, for a FIM model (what
  an editor asks of it must survive the fine-tuning too).
- :func:`adaptive_acceptance`: the paper's Figure 3 "accept rate" per adaptive position under greedy
  decoding: after a context, k adaptive tokens are appended; position j counts as accepted when the
  drafts of positions 1..j all equal the model's own greedy continuation (tokens 2..j + 1 after the
  context, since the j-th adaptive token drafts the token j + 1 positions ahead).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .train import chunk_tokens, corpus_files, fim_sample, tokenize_corpus


@torch.inference_mode()
def standard_loss(model, tokenizer, corpus: str | Path, seq_len: int = 512, max_sequences: int = 64) -> float:
    """Mean cross-entropy (nats/token, float) of ``model`` on up to ``max_sequences`` windows of
    ``seq_len + 1`` tokens from the .py files under ``corpus``; NaN when the corpus is too small."""
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    windows = chunk_tokens(tokenize_corpus(tokenizer, corpus_files(corpus), eos,
                                           max_tokens=(seq_len + 1) * max_sequences + 1), seq_len)[:max_sequences]
    if len(windows) == 0:
        return float("nan")
    model.eval()
    total, count = 0.0, 0
    for w in windows:
        ids = torch.from_numpy(w)[None].to(model.device)
        logits = model(input_ids=ids[:, :-1]).logits.float()
        total += float(torch.nn.functional.cross_entropy(logits[0], ids[0, 1:], reduction="sum"))
        count += ids.shape[1] - 1
    return round(total / count, 4)


@torch.inference_mode()
def fim_middle_loss(model, tokenizer, corpus: str | Path, fim_ids: tuple[int, int, int], seq_len: int = 512,
                    max_sequences: int = 64, seed: int = 0) -> float:
    """Mean cross-entropy (nats/token, float) on the middle tokens of PSM FIM samples
    (:func:`engine.sdsat.train.fim_sample`, seeded: the same samples for every model) made from up to
    ``max_sequences`` windows of the .py files under ``corpus``; NaN when the corpus is too small."""
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    windows = chunk_tokens(tokenize_corpus(tokenizer, corpus_files(corpus), eos,
                                           max_tokens=(seq_len + 1) * max_sequences + 1), seq_len)[:max_sequences]
    if len(windows) == 0:
        return float("nan")
    rng = np.random.default_rng(seed)
    model.eval()
    total, count = 0.0, 0
    for w in windows:
        sample, start = fim_sample(w, fim_ids, rng)
        ids = torch.from_numpy(sample)[None].to(model.device)
        logits = model(input_ids=ids[:, :-1]).logits.float()
        # the logits at position t predict sample[t + 1]: the middle's tokens are predicted from start - 1 on
        total += float(torch.nn.functional.cross_entropy(logits[0, start - 1:], ids[0, start:], reduction="sum"))
        count += ids.shape[1] - start
    return round(total / count, 4)


@torch.inference_mode()
def adaptive_acceptance(model, tokenizer, corpus: str | Path, adaptive_id: int, k: int = 8,
                        contexts: int = 64, context_len: int = 256, seed: int = 0) -> dict:
    """Acceptance per adaptive position j = 1..k (greedy; see the module docstring).

    Args:
        corpus: folder of .py files (third-party code for an honest number).
        contexts: cut points sampled (uniformly, seeded) from the tokenized corpus.
        context_len: tokens of context before each cut.
    Returns:
        ``{"k": k, "contexts": n, "prefix_accept": [k floats], "position_match": [k floats]}``:
        the share of contexts whose drafts 1..j all match (Figure 3) and the share whose j-th draft
        matches on its own.
    """
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    tokens = tokenize_corpus(tokenizer, corpus_files(corpus), eos, max_tokens=400_000)
    if len(tokens) < context_len + 2:
        raise ValueError(f"corpus {corpus} has too few tokens ({len(tokens)})")
    rng = np.random.default_rng(seed)
    cuts = rng.integers(context_len, len(tokens) - 1, size=contexts)
    prefix = np.zeros(k)
    match = np.zeros(k)
    model.eval()
    for cut in cuts.tolist():
        ctx = torch.from_numpy(tokens[cut - context_len:cut].astype(np.int64))[None].to(model.device)
        # the model's own greedy continuation: k + 1 tokens
        greedy = model.generate(ctx, attention_mask=torch.ones_like(ctx), do_sample=False, max_new_tokens=k + 1,
                                min_new_tokens=k + 1, pad_token_id=eos)[0, ctx.shape[1]:].tolist()
        probe = torch.cat([ctx, torch.full((1, k), adaptive_id, dtype=torch.long, device=ctx.device)], dim=1)
        drafts = model(input_ids=probe).logits[0, -k:].argmax(-1).tolist()
        ok = True
        for j in range(k):
            hit = drafts[j] == greedy[j + 1]
            match[j] += hit
            ok = ok and hit
            prefix[j] += ok
    n = len(cuts)
    return {"k": k, "contexts": n, "prefix_accept": [round(x / n, 4) for x in prefix],
            "position_match": [round(x / n, 4) for x in match]}
