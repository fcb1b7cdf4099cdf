"""Token-level suffix-array datastore (REST, He et al., NAACL 2024, Sec. 3 and Alg. 1).

A :class:`Datastore` holds a corpus of token-id documents and answers one question fast:
*which continuations follow the longest suffix of a context that occurs in the corpus?*

Layout (kept minimal, so a memory-mapped store costs ~ (w + 4) bytes per token):

- ``tokens``: the documents concatenated, each followed by one separator, encoded as
  **big-endian unsigned integers of width w** (w = 2 bytes when ``vocab_size <= 65_535``, else 4):
  a token id ``t`` is stored as ``t + 1`` and the separator (:data:`SEPARATOR`, -1) as 0.
  Big-endian fixed width makes byte-wise lexicographic order equal token-wise order, so the
  C suffix-array search of libdivsufsort (``sa_search``) works on the raw bytes, and numpy reads
  the same buffer back as token values through a ``>u2``/``>u4`` view (no second copy).
- ``sa``: the suffix array of the token sequence, stored as **byte offsets** (token index * w),
  int32 (int64 once ``num_tokens * w >= 2**31``), built with pydivsufsort's libdivsufsort over
  the bytes and keeping the suffixes that start on a token boundary.

Search (REST Alg. 1): the longest ``n`` in ``[n_min, n_max]`` whose last-``n``-token suffix of the
context occurs; occurrence is monotone in ``n`` (a suffix of an occurring pattern occurs), so ``n``
is found by binary search, each probe one ``sa_search`` call (O(n log N) byte compares, in C).

Incremental search (a decoder's context only grows between steps): a :class:`MatchState` passed to
:meth:`Datastore.search` keeps the last context's tail, an upper bound on its longest occurring suffix
and the suffix-array interval found. When the new context extends that one by k tokens, its longest
occurring suffix is at most ``bound + k`` (the first tokens of an occurring pattern occur), so the
search probes that length first, inside the previous interval when the pattern extends the previous
match (one ``sa_search`` over a few entries), and binary-searches only below it on a miss. Results
are exactly those of a fresh search.

With :mod:`engine.native` built, a search given a :class:`MatchState` and an int64 array context is one C call
(``fc_ds_search``: the query, the extension check, the probes and the state's update), the state kept in a
buffer that call reads and writes; the answer and the state are those of the Python path
(tests/test_native_datastore.py).

Modules: :mod:`.matching` (the search result, query helpers and :class:`MatchState`), :mod:`.store` (the
:class:`Datastore` class), :mod:`.files` (saving and loading).
"""

from __future__ import annotations

from .files import FORMAT_VERSION, MMAP_MIN_BYTES, remove_stale_temporaries
from .matching import (ROWS_CACHE_ENTRIES, SEPARATOR, UNBOUNDED, DatastoreError, MatchState, Retrieval, count_rows,
                       longest_length, prepare_context, sample_range, token_width)
from .store import HAVE_C_SEARCH, Datastore

__all__ = ["SEPARATOR", "FORMAT_VERSION", "Datastore", "DatastoreError", "MatchState", "Retrieval",
           "HAVE_C_SEARCH", "MMAP_MIN_BYTES", "ROWS_CACHE_ENTRIES", "UNBOUNDED", "count_rows", "longest_length",
           "prepare_context", "remove_stale_temporaries", "sample_range", "token_width"]
