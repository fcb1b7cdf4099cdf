"""What a generation returns (:meth:`engine.decoder.SpeculativeDecoder.generate`): its text, tokens, finish reason and
statistics as plain data, made from the decode loop's counters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .draft_tree import hits_by_source
from .stops import stop_cut


@dataclass
class GenerationResult:
    """What :meth:`engine.decoder.SpeculativeDecoder.generate` returns.

    Attributes:
        text: the decoded new text (cut before a stop string); "" without a tokenizer.
        token_ids: the new token ids (EOS excluded).
        finish_reason: ``"eos"``, ``"length"``, ``"stop"``, ``"cancelled"`` or ``"deadline"``.
        stats: plain-data statistics (see :func:`generation_result`; the decoder adds its own timings).
    """

    text: str
    token_ids: list[int]
    finish_reason: str
    stats: dict = field(default_factory=dict)


def ms(seconds: float) -> float:
    """Seconds as milliseconds, rounded to the microsecond."""
    return round(seconds * 1000.0, 3)


def generation_result(tokenizer, method: str, ids: Sequence[int], out: list[int], finish: str, t0: float,
                      t_prefill: float, t_end: float, accepted_lengths: list[int], hits, retrieval_s: float,
                      truncated: bool, stop: Sequence[str] | None, skip: int = 0) -> GenerationResult:
    """The result of a generation of ``out`` (new token ids) after the prompt ``ids``: the text decoded by
    ``tokenizer`` (None: "") and cut before the first stop string found after its first ``skip`` characters (the
    finish reason then "stop", unless "cancelled"); statistics from the loop's ``perf_counter`` times ``t0`` (start),
    ``t_prefill`` (prefill done), ``t_end`` (seconds), the accepted length of each forward, the accepted draft nodes
    per source bitmask ``hits`` ((256,) counts) and the drafting seconds ``retrieval_s``."""
    text = ""
    if tokenizer is not None and out:
        text = tokenizer.decode(out, skip_special_tokens=True)
    if stop:
        cut = stop_cut(text, stop, skip)
        if cut >= 0:  # a cancelled request stays cancelled: its caller no longer wants the answer
            text, finish = text[:cut], ("cancelled" if finish == "cancelled" else "stop")
    forward_passes = len(accepted_lengths)
    stats = {
        "method": method,
        "prompt_tokens": len(ids),
        "truncated_prompt": truncated,
        "new_tokens": len(out),
        "forward_passes": forward_passes,
        "mean_accepted_length": round(sum(accepted_lengths) / forward_passes, 4) if forward_passes else 0.0,
        "accepted_lengths": accepted_lengths,
        "prefill_ms": ms(t_prefill - t0),
        "decode_ms": ms(t_end - t_prefill),
        "retrieval_ms": ms(retrieval_s),
        "hits": hits_by_source(hits),
    }
    return GenerationResult(text, out, finish, stats)
