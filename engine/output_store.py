"""The output store: the model's own greedy output on code outside the workspace, which warms the completion history.

The completion history (:mod:`engine.history`, SuffixDecoding's global tree of earlier outputs) starts empty, so
the first completions of a session draft nothing from it, though a model writes the same habits everywhere: its
own docstrings, ``self.`` chains, argument lists, the way it ends a middle. SuffixDecoding (Oliaro et al., NeurIPS
2025, section 3) grows its tree from every earlier request; REST (He et al., NAACL 2024, section 3.1) drafts from a
corpus prepared in advance. An output store is both: earlier requests prepared in advance. ``fastcoder
build-output-store`` (:mod:`engine.bench.fit_outputs`) runs the benchmark's three task kinds on packages the user
names (never the workspace) and keeps each greedy output with the last prompt tokens before it; at start the
history is filled with them (:func:`new_completion_history`), and the user's own completions join it as before.

Measured (tiny-py-coder, the project's 2-core CPU, 1 thread; ``benchmarks/results/2026-11-28c/``): a store of
71,040 output tokens from 18 third-party packages that are not the benchmark's raised fastcoder's accepted length
3-11% in the oracle replay of the benchmark's nine cells and its predicted speedup over ``ar`` 3.1% (geometric
mean; -3.3% to +6.1%) with 64 occurrences compared per query instead of 32. Put into D_c instead (the standard
library's suffix array), the same outputs gave +0.1%. In wall clock, the nine cells against the cold history in one
run, paired per task run: 1.048 (1.016-1.081; ``function`` 1.052, ``fim-line`` 1.019 with one-line completions
drafting from the session's own completions, ``fim-block`` 1.073).

Lossless: the store only proposes drafts; verification decides what is accepted.

The file (``.npz``): ``tokens`` (T,) int32, every sequence's prompt tail then its output; ``offsets`` (S+1,) int64
where each sequence starts in ``tokens``; ``tails`` (S,) int32, how many of its tokens are prompt; ``meta``, JSON:
the format, :func:`engine.acceptance_prior.model_identity` of the model and what it was built from.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .cache_paths import cache_root
from .history import CompletionHistory

__all__ = ["OutputStore", "WarmHistory", "STORE_ENV", "PACKAGED_DIR", "WARM_MAX_CANDIDATES", "default_store_folder",
           "find_output_store", "new_completion_history", "store_file_name"]

STORE_ENV = "FASTCODER_OUTPUT_STORE"
#: Stores shipped with the package (tiny-py-coder's).
PACKAGED_DIR = Path(__file__).resolve().parent / "data" / "output_store"
FORMAT = 1
#: Occurrences of the context's last token a warm history compares per query (32 for a cold one): with the store's
#: ~70K tokens the 32 most recent occurrences of a common token left out matches the replay found with 64 (+0.7%
#: predicted speedup; 64 is the most the native drafting step takes).
WARM_MAX_CANDIDATES = 64


@dataclass
class OutputStore:
    """Greedy outputs of one model, each with the prompt tokens before it.

    Attributes:
        tokens: (T,) int32 token ids, the sequences one after another (each: prompt tail, then output).
        offsets: (S+1,) int64, sequence s is ``tokens[offsets[s]:offsets[s + 1]]``.
        tails: (S,) int32, the number of prompt tokens at each sequence's start.
        model: :func:`engine.acceptance_prior.model_identity` of the model that wrote the outputs.
        info: what it was built from (packages, task kinds, tasks, tokens): plain data.
    Raises:
        ValueError: arrays that do not describe sequences (offsets not rising from 0 to T, a tail longer than its
            sequence, a negative token id).
    """

    tokens: np.ndarray
    offsets: np.ndarray
    tails: np.ndarray
    model: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        self.tokens = np.ascontiguousarray(self.tokens, dtype=np.int32)
        self.offsets = np.ascontiguousarray(self.offsets, dtype=np.int64)
        self.tails = np.ascontiguousarray(self.tails, dtype=np.int32)
        n = len(self.tails)
        lengths = np.diff(self.offsets) if len(self.offsets) == n + 1 else None
        if lengths is None or self.offsets[0] != 0 or self.offsets[-1] != len(self.tokens) or (lengths < 0).any() \
                or (self.tails < 0).any() or (self.tails > lengths).any() or (self.tokens < 0).any():
            raise ValueError("output store arrays do not describe sequences")

    @classmethod
    def from_sequences(cls, sequences: Sequence[tuple[Sequence[int], Sequence[int]]], model: dict | None = None,
                       info: dict | None = None) -> "OutputStore":
        """A store of (prompt tail, output) token-id pairs; pairs with an empty output are left out."""
        kept = [(list(tail), list(out)) for tail, out in sequences if len(out)]
        tokens = [t for tail, out in kept for t in (*tail, *out)]
        offsets = np.zeros(len(kept) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(tail) + len(out) for tail, out in kept])
        return cls(np.asarray(tokens, dtype=np.int32), offsets, np.asarray([len(t) for t, _ in kept], np.int32),
                   dict(model or {}), dict(info or {}))

    @property
    def num_sequences(self) -> int:
        return len(self.tails)

    @property
    def output_tokens(self) -> int:
        """Tokens of output (prompt tails not counted)."""
        return int(len(self.tokens) - self.tails.sum())

    def sequences(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Each sequence as (prompt tail, output), int32 views."""
        for s in range(self.num_sequences):
            start, mid, end = self.offsets[s], self.offsets[s] + self.tails[s], self.offsets[s + 1]
            yield self.tokens[start:mid], self.tokens[mid:end]

    def save(self, path: str | os.PathLike) -> Path:
        """Write as ``.npz`` to a temporary file renamed into place; returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = json.dumps({"format": FORMAT, "model": self.model, "info": self.info})
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npz", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            np.savez_compressed(fh, tokens=self.tokens, offsets=self.offsets, tails=self.tails,
                                meta=np.frombuffer(meta.encode(), dtype=np.uint8))
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shipped store from other users
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "OutputStore":
        """Raises OSError (unreadable) or ValueError (not an output store of this format)."""
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(bytes(z["meta"]).decode())
                if meta.get("format") != FORMAT:
                    raise ValueError(f"{path}: not an output store of format {FORMAT}")
                return cls(z["tokens"], z["offsets"], z["tails"], dict(meta.get("model") or {}),
                           dict(meta.get("info") or {}))
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{path}: not an output store ({err})") from None
        except (ValueError, OSError):
            raise
        except Exception as err:  # noqa: BLE001 - zipfile / numpy errors of a corrupt file
            raise ValueError(f"{path}: not an output store ({err})") from None

    @classmethod
    def merged(cls, stores: Sequence["OutputStore"], info: dict | None = None) -> "OutputStore":
        """One store holding every sequence of ``stores``, in order (their ``info["built_on"]`` lists joined).

        Raises:
            ValueError: no store, or stores of different models (their :attr:`model` identities differ).
        """
        if not stores:
            raise ValueError("no output store to merge")
        model = stores[0].model
        for other in stores[1:]:
            if other.model != model:
                raise ValueError(f"output stores of different models: {model} and {other.model}")
        sizes = np.asarray([len(st.tokens) for st in stores], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        offsets = np.concatenate([[0]] + [st.offsets[1:] + start for st, start in zip(stores, starts)])
        built_on = [b for st in stores for b in st.info.get("built_on", [])]
        return cls(np.concatenate([st.tokens for st in stores]), offsets, np.concatenate([st.tails for st in stores]),
                   dict(model), {**dict(info or {}), "built_on": built_on})

    def describe(self) -> dict:
        """Plain data for status and benchmark reports."""
        return {"model": self.model, "sequences": self.num_sequences, "output_tokens": self.output_tokens,
                **self.info}


def default_store_folder() -> Path:
    """Where ``fastcoder build-output-store`` writes and :func:`find_output_store` looks first."""
    return cache_root() / "output_store"


def store_file_name(identity: dict) -> str:
    """The file name of the store for a model of ``identity`` (:func:`engine.acceptance_prior.model_identity`)."""
    from .acceptance_prior import fitted_file_name  # noqa: PLC0415

    return fitted_file_name(identity, ".npz")


_MODEL_ATTR = "_fastcoder_output_store"


def find_output_store(model, folders: list[Path] | None = None) -> OutputStore | None:
    """The output store for ``model`` (a transformers model), or None. ``$FASTCODER_OUTPUT_STORE``: ``off`` gives
    None, a path that store whatever the model (unreadable: logged, then the search below). Otherwise the first
    store built for this model in ``folders`` (default: :func:`default_store_folder`, then :data:`PACKAGED_DIR`).
    Found once per model object; never raises (:func:`engine.acceptance_prior.find_fitted`)."""
    from .acceptance_prior import find_fitted  # noqa: PLC0415

    return find_fitted(model, STORE_ENV, OutputStore.load, "*.npz",
                       folders if folders is not None else [default_store_folder(), PACKAGED_DIR],
                       None if folders is not None else _MODEL_ATTR, "output store")


class WarmHistory(CompletionHistory):
    """A completion history that starts with an output store's sequences, and beside it ``session``, a plain
    :class:`engine.history.CompletionHistory` of this session's completions only (each :meth:`add` goes to both).

    One-line completions draft from ``session`` (:meth:`for_completion`): in the benchmark's ``fim-line`` cells the
    store's matches replaced the context copy's as often as they added to it (accepted length 1.80 and 1.76 with
    and without it on jinja2 and pluggy) while the trees grew 0.2-0.6 draft tokens and the prefill's draft compared
    twice the occurrences: -6.6% in wall clock (``benchmarks/results/2026-11-28c/store_ab``). Longer completions
    gained (``function`` +5.3%, ``fim-block`` +2.2%).

    Args:
        store: the sequences to start with (:class:`OutputStore`).
    The buffer holds twice the store (the user's completions fill the other half before the oldest half is
    dropped) and a query compares :data:`WARM_MAX_CANDIDATES` occurrences. ``store`` is the store's
    :meth:`OutputStore.describe`; ``num_completions`` counts this session's completions, from 0.
    """

    def __init__(self, store: OutputStore):
        size = 1 << 15
        while size < 2 * (len(store.tokens) + store.num_sequences):
            size <<= 1
        super().__init__(max_tokens=size, max_candidates=WARM_MAX_CANDIDATES)
        for tail, out in store.sequences():
            super().add(tail, out)
        self.num_completions = 0
        self.store = store.describe()
        self.session = _SessionHistory(self)

    def add(self, prompt_tail: Sequence[int], output: Sequence[int]) -> None:
        """:meth:`engine.history.CompletionHistory.add` to this history and to ``session``."""
        super().add(prompt_tail, output)
        CompletionHistory.add(self.session, prompt_tail, output)

    def for_completion(self, one_line: bool) -> CompletionHistory:
        """The history a completion drafts from: ``session`` for a one-line one, else this one."""
        return self.session if one_line else self


class _SessionHistory(CompletionHistory):
    """:attr:`WarmHistory.session`: a completion that drafted from it adds its output to the warm history too."""

    def __init__(self, warm: WarmHistory):
        super().__init__()
        self.warm = warm

    def add(self, prompt_tail: Sequence[int], output: Sequence[int]) -> None:
        super().add(prompt_tail, output)
        CompletionHistory.add(self.warm, prompt_tail, output)


def new_completion_history(model=None, store: OutputStore | None = None) -> CompletionHistory:
    """The completion history of a server or a benchmark run: a :class:`WarmHistory` of ``store`` or, when None and
    ``model`` is given, of the store :func:`find_output_store` finds for it; a plain, empty
    :class:`engine.history.CompletionHistory` (``store`` None) where there is none."""
    if store is None and model is not None:
        store = find_output_store(model)
    if store is None or not store.num_sequences:
        return CompletionHistory()
    return WarmHistory(store)
