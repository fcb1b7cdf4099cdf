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
 * with room for min(cnt, max_matches) rows. Returns M, or -1 when scratch memory could not be allocated. */
int64_t fc_sa_rows(const uint8_t *text, int64_t n_tokens, int64_t width, const void *sa, int sa64, int64_t n,
                   int64_t left, int64_t cnt, int64_t max_matches, int64_t draft_len, int32_t *rows_out,
                   int64_t *counts_out) {
    int64_t k = cnt <= max_matches ? cnt : max_matches;
    if (k <= 0 || draft_len <= 0) return 0;
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)(k * draft_len));
    group *groups = malloc(sizeof(group) * (size_t)k);
    if (!rows || !groups) {
        free(rows);
        free(groups);
        return -1;
    }
    int64_t kept = 0, m = 0;
    for (int64_t j = 0; j < k; j++) {
        int64_t idx = cnt <= max_matches ? left + j : left + (j * cnt) / max_matches;
        int64_t off = sa64 ? ((const int64_t *)sa)[idx] : (int64_t)((const int32_t *)sa)[idx];
        int64_t start = off / width + n;
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
    free(rows);
    free(groups);
    return m;
}
