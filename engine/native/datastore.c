/* One datastore search step in C: the longest matching context suffix and the continuations after it.
 *
 * engine.datastore.Datastore.search (REST Alg. 1) used to make, per decode step, a Python call per
 * suffix-array probe (libdivsufsort's sa_search) and ~8 numpy calls to read and count the continuations:
 * ~50 us of Python for ~5 us of work. These two functions do the same in one call each and give the same
 * results (tests/test_native_datastore.py compares them with the Python path):
 *
 *   fc_sa_longest: engine.datastore.matching.longest_length over Datastore.find probes, through the very
 *                  sa_search of the pydivsufsort library (its address is passed in);
 *   fc_sa_rows:    sample_range + continuations_at + count_rows(presorted=True) of one suffix-array range.
 *
 * Tokens are stored big-endian as id + 1 (2 or 4 bytes), 0 separating documents; the suffix array holds
 * byte offsets (int32 or int64) of token starts.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int32_t (*sa_search32_fn)(const uint8_t *, int32_t, const uint8_t *, int32_t, const int32_t *, int32_t,
                                  int32_t *);
typedef int64_t (*sa_search64_fn)(const uint8_t *, int64_t, const uint8_t *, int64_t, const int64_t *, int64_t,
                                  int64_t *);

typedef struct {
    const uint8_t *text;
    int64_t text_bytes;
    const void *sa;
    int sa64;
    void *search;
} store;

/* Datastore.find: (left, count) of the m-byte pattern in sa[base : base + size]; count 0 when absent. */
static int64_t find(const store *s, const uint8_t *pattern, int64_t m, int64_t base, int64_t size, int64_t *left) {
    *left = 0;
    if (size <= 0 || m <= 0) return 0;
    if (s->sa64) {
        int64_t l = 0;
        int64_t c = ((sa_search64_fn)s->search)(s->text, s->text_bytes, pattern, m,
                                                (const int64_t *)s->sa + base, size, &l);
        if (c <= 0) return 0;
        *left = base + l;
        return c;
    }
    int32_t l = 0;
    int32_t c = ((sa_search32_fn)s->search)(s->text, (int32_t)s->text_bytes, pattern, (int32_t)m,
                                            (const int32_t *)s->sa + base, (int32_t)size, &l);
    if (c <= 0) return 0;
    *left = base + l;
    return c;
}

/* Longest n in [max(n_min, 1), hi] whose last n tokens of the q_len-token encoded query occur
 * (matching.longest_length). hi < 0: hi = q_len, plain binary search. hi >= 0: min(hi, q_len) is probed
 * first, inside sa[within_left : within_left + within_count] when within_count >= 0, and the binary search
 * runs below it only on a miss. Returns n (0: none); out[0], out[1]: its range's left and count; out[2]: the
 * suffix-array searches made. */
int64_t fc_sa_longest(const uint8_t *text, int64_t text_bytes, const void *sa, int64_t sa_len, int sa64,
                      void *search, const uint8_t *pattern, int64_t q_len, int64_t width, int64_t n_min,
                      int64_t hi, int64_t within_left, int64_t within_count, int64_t *out) {
    store s = {text, text_bytes, sa, sa64, search};
    int64_t lo = n_min > 1 ? n_min : 1, best = 0, l = 0, c = 0;
    int64_t *left = out, *count = out + 1, *probes = out + 2;
    *left = *count = *probes = 0;
    if (hi < 0) {
        hi = q_len;
    } else {
        if (hi > q_len) hi = q_len;
        if (hi >= lo) {
            int64_t base = within_count >= 0 ? within_left : 0, size = within_count >= 0 ? within_count : sa_len;
            c = find(&s, pattern + (q_len - hi) * width, hi * width, base, size, &l);
            *probes += 1;
            if (c > 0) {
                *left = l;
                *count = c;
                return hi;
            }
            hi -= 1;
        }
    }
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        c = find(&s, pattern + (q_len - mid) * width, mid * width, 0, sa_len, &l);
        *probes += 1;
        if (c > 0) {
            best = mid;
            *left = l;
            *count = c;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return best;
}

static int64_t token_at(const uint8_t *text, int64_t pos, int64_t width) {
    const uint8_t *p = text + pos * width;
    return width == 2 ? (int64_t)((p[0] << 8) | p[1])
                      : (int64_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

typedef struct {
    int64_t count, first;
} group;

static int by_count_desc(const void *a, const void *b) {
    const group *x = (const group *)a, *y = (const group *)b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return (x->first > y->first) - (x->first < y->first);  /* stable: the earlier group first */
}

/* The continuations of the match of n tokens at sa[left : left + cnt] (Datastore.search's rows): at most
 * max_matches suffix-array entries (all, or evenly spaced: sample_range), draft_len tokens after each match
 * (ids, -1 from the first separator on), rows starting at a separator dropped, equal rows (adjacent: the
 * suffix array sorts them) counted, ordered by count descending then first appearance (count_rows).
 * Writes the distinct rows to rows_out ((M, draft_len) int32) and counts to counts_out ((M,) int64), both
 * with room for min(cnt, max_matches) rows; rows (k x draft_len int32) and groups (k) are scratch. Returns M. */
static int64_t sa_rows(const uint8_t *text, int64_t n_tokens, int64_t width, const void *sa, int sa64, int64_t n,
                       int64_t left, int64_t cnt, int64_t max_matches, int64_t draft_len, int32_t *rows_out,
                       int64_t *counts_out, int32_t *rows, group *groups, int64_t *starts) {
    int64_t k = cnt <= max_matches ? cnt : max_matches;
    if (k <= 0 || draft_len <= 0) return 0;
    /* The sampled entries are scattered over a store of tens of MB, cold after a verify forward: each row is two
       dependent cache misses (its suffix-array entry, then its tokens). Prefetching every entry, then every row's
       tokens, overlaps the misses instead of taking them one after another. */
    for (int64_t j = 0; j < k; j++) {
        int64_t idx = cnt <= max_matches ? left + j : left + (j * cnt) / max_matches;
        __builtin_prefetch(sa64 ? (const void *)((const int64_t *)sa + idx) : (const void *)((const int32_t *)sa + idx));
    }
    for (int64_t j = 0; j < k; j++) {
        int64_t idx = cnt <= max_matches ? left + j : left + (j * cnt) / max_matches;
        int64_t off = sa64 ? ((const int64_t *)sa)[idx] : (int64_t)((const int32_t *)sa)[idx];
        starts[j] = off / width + n;
        int64_t last = starts[j] + draft_len - 1 < n_tokens - 1 ? starts[j] + draft_len - 1 : n_tokens - 1;
        __builtin_prefetch(text + (starts[j] < n_tokens ? starts[j] : n_tokens - 1) * width);
        __builtin_prefetch(text + last * width);
    }
    int64_t kept = 0, m = 0;
    for (int64_t j = 0; j < k; j++) {
        int64_t start = starts[j];
        int32_t *row = rows + kept * draft_len;
        int dead = 0;
        for (int64_t d = 0; d < draft_len; d++) {
            int64_t pos = start + d;
            if (pos > n_tokens - 1) pos = n_tokens - 1;  /* the last stored token is always a separator */
            int64_t v = dead ? 0 : token_at(text, pos, width);
            if (v == 0) dead = 1;
            row[d] = (int32_t)(v - 1);
        }
        if (row[0] == -1) continue;  /* a match at the end of its document: nothing to draft */
        if (kept && memcmp(row, row - draft_len, sizeof(int32_t) * (size_t)draft_len) == 0) {
            groups[m - 1].count++;
        } else {
            groups[m].count = 1;
            groups[m].first = kept;
            m++;
        }
        kept++;
    }
    qsort(groups, (size_t)m, sizeof(group), by_count_desc);
    for (int64_t g = 0; g < m; g++) {
        memcpy(rows_out + g * draft_len, rows + groups[g].first * draft_len, sizeof(int32_t) * (size_t)draft_len);
        counts_out[g] = groups[g].count;
    }
    return m;
}

/* sa_rows with its scratch allocated here. Returns M, or -1 when scratch memory could not be allocated. */
int64_t fc_sa_rows(const uint8_t *text, int64_t n_tokens, int64_t width, const void *sa, int sa64, int64_t n,
                   int64_t left, int64_t cnt, int64_t max_matches, int64_t draft_len, int32_t *rows_out,
                   int64_t *counts_out) {
    int64_t k = cnt <= max_matches ? cnt : max_matches;
    if (k <= 0 || draft_len <= 0) return 0;
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)(k * draft_len));
    group *groups = malloc(sizeof(group) * (size_t)k);
    int64_t *starts = malloc(sizeof(int64_t) * (size_t)k);
    if (!rows || !groups || !starts) {
        free(rows);
        free(groups);
        free(starts);
        return -1;
    }
    int64_t m = sa_rows(text, n_tokens, width, sa, sa64, n, left, cnt, max_matches, draft_len, rows_out, counts_out,
                        rows, groups, starts);
    free(rows);
    free(groups);
    free(starts);
    return m;
}

/* MatchState's buffer (engine.datastore.matching.MatchState, int64), read and written by fc_ds_search. */
enum { ST_LENGTH, ST_TAIL_LEN, ST_BOUND, ST_N, ST_LEFT, ST_COUNT, ST_PROBES, ST_INCREMENTAL, ST_TAIL };
#define TAIL_MAX 64             /* matching.NATIVE_TAIL_MAX: the longest n_max the native search serves */
#define UNBOUNDED (1LL << 30)   /* matching.UNBOUNDED */

/* Datastore.search's match with its MatchState, in one call: prepare_context (the longest in-vocabulary tail
 * of at most n_max tokens), MatchState.extension (does the context extend the last one searched?), the
 * encoding of the query (big-endian id + 1), Datastore.longest_match (from the state's bound and interval
 * when it does) and MatchState.record. A decode step used to spend ~130 us of Python around the ~10 us of
 * suffix-array work (cold code paths after each forward); the answer is the same, bit for bit.
 *
 * ds: the store, packed once (Datastore._native_match_args): text, text bytes, sa, sa entries, sa64,
 *     sa_search's address, token width (bytes), vocabulary size.
 * st: the state (ST_* layout above, TAIL_MAX tail entries).
 * ctx: the context's last m tokens (ctx[m - 1] is its last token), ctx_len: the whole context's length; m >=
 *     min(ctx_len, n_max), and m >= k + min(old length, n_max) for the extension check to run (else the search
 *     starts afresh, the same answer with more probes).
 * fresh: 1 when the state holds nothing for this store and settings (MatchState.key differs).
 * Returns the match length n (0: none); st[ST_N..ST_COUNT] = (n, left, count), st[ST_PROBES]: sa_search calls
 * made, st[ST_INCREMENTAL]: 1 when the search started from the state. -1, st untouched, unless n_min >= 1,
 * n_max <= TAIL_MAX and 0 <= m <= ctx_len (MatchState.search_native keeps to that). */
int64_t fc_ds_search(const int64_t *ds, int64_t *st, const int64_t *ctx, int64_t m, int64_t ctx_len,
                     int64_t n_min, int64_t n_max, int64_t fresh) {
    const uint8_t *text = (const uint8_t *)(intptr_t)ds[0];
    const void *sa = (const void *)(intptr_t)ds[2];
    void *search = (void *)(intptr_t)ds[5];
    int64_t text_bytes = ds[1], sa_len = ds[3], width = ds[6], vocab = ds[7];
    int sa64 = (int)ds[4];
    if (n_max > TAIL_MAX || n_min < 1 || m < 0 || m > ctx_len) return -1;  /* the caller's contract; st untouched */
    int64_t avail = ctx_len < n_max ? ctx_len : n_max, q_len = 0;
    if (avail > m) avail = m;
    while (q_len < avail && (uint64_t)ctx[m - 1 - q_len] < (uint64_t)vocab) q_len++;
    int64_t k = -1;  /* tokens appended since the last search; -1: not an extension of it */
    if (!fresh) {
        int64_t old = st[ST_LENGTH], t = st[ST_TAIL_LEN];
        k = ctx_len - old;
        if (k >= 0 && t) {
            int64_t first = old - t - (ctx_len - m);
            if (first < 0) {
                k = -1;
            } else {
                for (int64_t j = 0; j < t; j++)
                    if (ctx[first + j] != st[ST_TAIL + j]) {
                        k = -1;
                        break;
                    }
            }
        }
        if (k < 0) k = -1;
    }
    int64_t out[3] = {0, 0, 0}, n = 0;
    st[ST_INCREMENTAL] = 0;
    if (q_len >= n_min) {
        uint8_t pattern[TAIL_MAX * 4];
        for (int64_t i = 0; i < q_len; i++) {
            uint64_t v = (uint64_t)ctx[m - q_len + i] + 1;
            uint8_t *p = pattern + i * width;
            if (width == 2) {
                p[0] = (uint8_t)(v >> 8);
                p[1] = (uint8_t)v;
            } else {
                p[0] = (uint8_t)(v >> 24);
                p[1] = (uint8_t)(v >> 16);
                p[2] = (uint8_t)(v >> 8);
                p[3] = (uint8_t)v;
            }
        }
        int64_t hi = -1, within_left = 0, within_count = -1;
        if (k >= 0) {
            st[ST_INCREMENTAL] = 1;
            int64_t bound = st[ST_BOUND];
            hi = bound >= UNBOUNDED ? q_len : (bound + k < q_len ? bound + k : q_len);
            if (st[ST_N] && k && hi == st[ST_N] + k) {
                within_left = st[ST_LEFT];
                within_count = st[ST_COUNT];
            }
        }
        n = fc_sa_longest(text, text_bytes, sa, sa_len, sa64, search, pattern, q_len, width, n_min, hi,
                          within_left, within_count, out);
        if (!n) out[0] = out[1] = 0;
    }
    int64_t t = ctx_len < n_max ? ctx_len : n_max;
    if (t > m) t = m;
    memcpy(st + ST_TAIL, ctx + (m - t), sizeof(int64_t) * (size_t)t);
    int64_t bound;
    if (q_len < n_min) bound = q_len;
    else if (n == 0) bound = n_min - 1;
    else if (n < q_len) bound = n;
    else if (q_len < n_max) bound = q_len;
    else bound = UNBOUNDED;
    st[ST_LENGTH] = ctx_len;
    st[ST_TAIL_LEN] = t;
    st[ST_BOUND] = bound;
    st[ST_N] = n;
    st[ST_LEFT] = out[0];
    st[ST_COUNT] = out[1];
    st[ST_PROBES] = out[2];
    return n;
}

/* Datastore.search with its MatchState in one call, rows included: fc_ds_search over the context's last m tokens,
 * then, on a match, sa_rows of its interval (the rows Datastore._retrieval gives for it). For the fastcoder step
 * (propose.c), which searches D_r and D_c in the same call as the tree it builds from them.
 * rows_out ((max_matches, draft_len) int32) and counts_out ((max_matches,) int64) receive the rows; scratch holds
 * max_matches * (draft_len * 4 + 24) bytes (8-byte aligned). Returns M, the distinct rows (0: no match or no
 * continuation; st[ST_N] is the match length), -1 where fc_ds_search refuses the settings (st untouched). */
int64_t fc_ds_retrieve(const int64_t *ds, int64_t *st, const int64_t *ctx, int64_t m, int64_t ctx_len,
                       int64_t n_min, int64_t n_max, int64_t fresh, int64_t max_matches, int64_t draft_len,
                       int32_t *rows_out, int64_t *counts_out, void *scratch) {
    int64_t n = fc_ds_search(ds, st, ctx, m, ctx_len, n_min, n_max, fresh);
    if (n <= 0) return n;
    group *groups = (group *)scratch;
    int64_t *starts = (int64_t *)(groups + max_matches);
    int32_t *rows = (int32_t *)(starts + max_matches);
    const uint8_t *text = (const uint8_t *)(intptr_t)ds[0];
    int64_t width = ds[6];
    return sa_rows(text, ds[1] / width, width, (const void *)(intptr_t)ds[2], (int)ds[4], n, st[ST_LEFT],
                   st[ST_COUNT], max_matches, draft_len, rows_out, counts_out, rows, groups, starts);
}
