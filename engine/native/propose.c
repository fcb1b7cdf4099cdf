/* FastCoder's per-step drafting in one call: the continuations of the per-document cache, the context copy and
   the completion history (engine/drafters.py, FastCoderDrafter.candidates; engine/history.py; engine/context_match.py),
   then the cost-sized tree builder of draft_tree.c over them. The same tree, bit for bit, as the Python path.
   The next step's drafting inside the verification's call (fc_verify_propose, fc_draft_ahead) is in draft_ahead.c.

   Why one call. After each verify forward (which streams ~40 MB of weights and KV cache through the caches) every
   distinct Python or numpy code path costs ~20 us the first time: the Python path ran ~10 of them a step (the cache's
   and the history's dict lookups and list slices, three Candidates objects, the copy's and the builder's ctypes
   calls and marshalling), ~200-250 us of a ~3.5 ms step. Here the sources are searched in int64 mirrors of the
   Python lists (-1 between sequences) by following each token's chain of earlier occurrences (fc_chain_extend,
   kept up to date as the buffers grow), which finds the same occurrences as the Python dict indexes:
   - the cache: the `limit` most recent positions p with buf[p - 2], buf[p - 1] = the context's last two tokens and
     buf[p] a token (FastCoderCache's bigram index holds exactly these, in ascending order);
   - the history: the `max_candidates` most recent positions i + 1 with buf[i] = the context's last token, the end of
     a sequence included (CompletionHistory's map from a token to its continuation starts);
   then each keeps the starts whose preceding tokens agree longest with the context (history.longest_agreement) and
   counts their distinct continuations in first-seen order (history.count_continuations).

   Plain C with no Python headers: loaded with ctypes (engine/native/__init__.py). */

#include <stdint.h>
#include <string.h>

#include "propose.h"
#include "indent_shift.h"

int64_t fc_suffix_draft(const int64_t *toks, int64_t n, int64_t max_candidates, int64_t depth, double factor,
                        double min_prob, int64_t max_tokens, int64_t depth_bound, int64_t *out_tokens,
                        double *out_probs, int64_t *out_match, const int32_t *indent);
int64_t fc_ds_retrieve(const int64_t *ds, int64_t *st, const int64_t *ctx, int64_t m, int64_t ctx_len,
                       int64_t n_min, int64_t n_max, int64_t fresh, int64_t max_matches, int64_t draft_len,
                       int32_t *rows_out, int64_t *counts_out, void *scratch);
int64_t fc_build_sized_parts(int64_t *ia, const double *da, const int64_t *parts, const double *weights,
                             int64_t n_parts, int64_t max_rows, int64_t max_depth, int64_t room_rows,
                             int64_t room_width);

/* Occurrences compared per source, tokens per continuation and context tokens compared, at most (the defaults: 32,
   24 and 16): larger settings take the Python path. */
enum { PROPOSE_MAX_STARTS = 64, PROPOSE_MAX_WIDTH = 64, PROPOSE_MAX_CTX = 256 };

/* Datastore sources given by the caller at most. */
#define PROPOSE_MAX_PREFIX 8

/* The occurrence chains of a token buffer (engine.history.TokenMirror): prev[i] is the last position before i
   holding the same token (-1: none; -1 separators are not chained), head[t] the last position holding token t.
   Extends them over buf[from, to); stops at a token id >= head_len and returns its position (the caller grows
   head and calls again from there), else returns to. */
int64_t fc_chain_extend(const int64_t *buf, int32_t *prev, int32_t *head, int64_t head_len, int64_t from,
                        int64_t to) {
    for (int64_t i = from; i < to; i++) {
        int64_t t = buf[i];
        if (t < 0) {
            prev[i] = -1;
            continue;
        }
        if (t >= head_len) return i;
        prev[i] = head[t];
        head[t] = (int32_t)i;
    }
    return to;
}

/* A token buffer with its occurrence chains (fc_chain_extend over its first len tokens). */
typedef struct {
    const int64_t *buf;
    const int32_t *prev, *head;
    int64_t len, head_len;
} chained;

/* The last position before `before` (exclusive) holding token t, following the chains; -1 when none. */
static int64_t last_before(const chained *c, int64_t t, int64_t before) {
    if (t < 0 || t >= c->head_len) return -1;
    int64_t i = c->head[t];
    while (i >= 0 && i >= before) i = c->prev[i];
    return i;
}

/* One source's continuations: rows (n_rows x width, -1 padded), counts, the longest agreement (match length). */
typedef struct {
    int64_t rows[PROPOSE_MAX_STARTS * PROPOSE_MAX_WIDTH];
    double counts[PROPOSE_MAX_STARTS];
    int64_t n_rows, width, match;
} source_rows;

/* history.longest_agreement: of the (ascending) starts that a token follows, those whose preceding tokens agree
   longest with the end of ctx (at least `agreed` already do). Writes them to found; returns their count and the
   length in *best (0 when none). */
static int64_t longest_agreement(const int64_t *buf, int64_t buf_len, const int64_t *starts, int64_t n_starts,
                                 const int64_t *ctx, int64_t ctx_len, int64_t agreed, int64_t *found, int64_t *best) {
    int64_t n_found = 0, top = 0;
    for (int64_t i = 0; i < n_starts; i++) {
        int64_t s = starts[i], n = agreed;
        if (s >= buf_len || buf[s] == -1) continue;
        while (n < ctx_len && s - n - 1 >= 0 && buf[s - n - 1] == ctx[ctx_len - n - 1]) n++;
        if (n > top) {
            top = n;
            n_found = 0;
            found[n_found++] = s;
        } else if (n == top) {
            found[n_found++] = s;
        }
    }
    *best = top;
    return n_found;
}

/* history.count_continuations + continuation_candidates: the distinct continuations (at most `width` tokens, cut
   at a -1) at the found starts, first seen first, with their counts; rows padded with -1 to `pad` tokens (0: the
   longest continuation). With an indentation table (indent) and the context line's width width_n, each continuation
   is re-indented to the context's line first (indent_shift.h; cut before a width the table cannot spell). */
static void count_continuations(const int64_t *buf, int64_t buf_len, const int64_t *found, int64_t n_found,
                                int64_t width, int64_t pad, source_rows *out, const int32_t *indent, int64_t width_n) {
    int64_t lens[PROPOSE_MAX_STARTS], n_rows = 0, longest = 0, row[PROPOSE_MAX_WIDTH];
    const int64_t stride = PROPOSE_MAX_WIDTH; /* rows are built at this stride, then packed to their width */
    if (width > stride) width = stride;
    for (int64_t i = 0; i < n_found; i++) {
        int64_t s = found[i], len = 0, delta = shift_of(indent, buf, width_n, s);
        while (len < width && s + len < buf_len && buf[s + len] != -1) {
            int64_t t = shifted(indent, buf[s + len], delta);
            if (t < 0) break;
            row[len++] = t;
        }
        if (len == 0) continue;
        int64_t j = 0;
        while (j < n_rows
               && !(lens[j] == len && memcmp(out->rows + j * stride, row, (size_t)len * sizeof(int64_t)) == 0))
            j++;
        if (j == n_rows) {
            memcpy(out->rows + n_rows * stride, row, (size_t)len * sizeof(int64_t));
            lens[n_rows] = len;
            out->counts[n_rows++] = 0.0;
            if (len > longest) longest = len;
        }
        out->counts[j] += 1.0;
    }
    int64_t w = pad > 0 ? pad : longest;
    for (int64_t j = 0; j < n_rows; j++) { /* packed in place: row j moves down from j * stride to j * w */
        int64_t *dst = out->rows + j * w;
        memmove(dst, out->rows + j * stride, (size_t)lens[j] * sizeof(int64_t));
        for (int64_t d = lens[j]; d < w; d++) dst[d] = -1;
    }
    out->n_rows = n_rows;
    out->width = w;
}

/* FastCoderCache.search (limit most recent bigram occurrences, agreement from 2 tokens, rows of draft_len tokens).
   Returns 1 when it found continuations. */
static int cache_search(const chained *c, const int64_t *ctx, int64_t ctx_len, int64_t limit, int64_t draft_len,
                        source_rows *out) {
    const int64_t *buf = c->buf;
    int64_t buf_len = c->len, starts[PROPOSE_MAX_STARTS], found[PROPOSE_MAX_STARTS], n = 0, best;
    if (ctx_len < 2) return 0;
    int64_t a = ctx[ctx_len - 2], b = ctx[ctx_len - 1];
    /* the occurrences q of b, most recent first, with a before and a token after: continuation start q + 1 */
    for (int64_t q = last_before(c, b, buf_len - 1); q >= 1 && n < limit; q = c->prev[q])
        if (buf[q + 1] >= 0 && buf[q - 1] == a) starts[n++] = q + 1;
    if (n == 0) return 0;
    for (int64_t i = 0, j = n - 1; i < j; i++, j--) { /* ascending, as the index lists them */
        int64_t t = starts[i];
        starts[i] = starts[j];
        starts[j] = t;
    }
    int64_t n_found = longest_agreement(buf, buf_len, starts, n, ctx, ctx_len, 2, found, &best);
    count_continuations(buf, buf_len, found, n_found, draft_len, draft_len, out, NULL, -1);
    out->match = best;
    return out->n_rows > 0;
}

/* CompletionHistory.search (indent, width_n: its indentation table and the context line's width, as
   count_continuations'). Returns 1 when it found continuations of a match of at least min_match tokens. */
static int history_search(const chained *c, const int64_t *ctx, int64_t ctx_len, int64_t max_candidates,
                          int64_t min_match, double factor, int64_t draft_len, source_rows *out,
                          const int32_t *indent, int64_t width_n) {
    const int64_t *buf = c->buf;
    int64_t buf_len = c->len, starts[PROPOSE_MAX_STARTS], found[PROPOSE_MAX_STARTS], n = 0, best;
    if (ctx_len < 1 || draft_len < 1) return 0;
    for (int64_t i = last_before(c, ctx[ctx_len - 1], buf_len); i >= 0 && n < max_candidates; i = c->prev[i])
        starts[n++] = i + 1;
    if (n == 0) return 0;
    for (int64_t i = 0, j = n - 1; i < j; i++, j--) {
        int64_t t = starts[i];
        starts[i] = starts[j];
        starts[j] = t;
    }
    int64_t n_found = longest_agreement(buf, buf_len, starts, n, ctx, ctx_len, 1, found, &best);
    int64_t width = (int64_t)(factor * (double)best);
    if (width < 1) width = 1;
    if (draft_len < width) width = draft_len;
    count_continuations(buf, buf_len, found, n_found, width, 0, out, indent, width_n);
    out->match = best;
    return best >= min_match && out->n_rows > 0;
}

static void part_fields(int64_t *f, const int64_t *rows, int64_t n_rows, int64_t width, const double *counts,
                        int64_t source, int64_t match) {
    f[0] = (int64_t)(intptr_t)rows;
    f[1] = 8;
    f[2] = width;
    f[3] = n_rows;
    f[4] = width;
    f[5] = (int64_t)(intptr_t)counts;
    f[6] = 1; /* float64 counts */
    f[7] = n_rows;
    f[8] = source;
    f[9] = match;
}


/* The draft tree of one decode step. pa (int64):
     0 the context (prompt + output, the pending token last; the context copy's sequence), 1 the cache's token
     buffer, 2 the history's token buffer (0: no history), 3 the cache's n_max, 4 its limit, 5 the history's n_max,
     6 its max_candidates, 7 its min_match, 8 draft_len, 9 the copy's max_candidates, 10 its depth, 11 its
     max_tokens, 12 and 13 the tree builder's packed arguments (ia, da of fc_build_sized_packed), 14 max rows and
     15 max depth per source, 16 and 17 the builder's scratch rows and width, 18 the cache's n_min, 19 and 20 the
     datastore sources' fields (fc_build_sized_parts' layout, 10 int64 each) and weights, 21-23 the cache
     buffer's occurrence chains (prev, head, head's length; fc_chain_extend), 24-26 the history's, 27 and 28
     fc_propose_retrieve's datastore arguments (int64) and weights (float64), 29 the datastore search's n_min, 30
     and 31 the special token ids (sorted int64) and their count (FastCoderDrafter._retrieval_key's first rule), 32
     retrieve_beside_copy (1: D_r and D_c are searched at every cache miss, the copy's source beside theirs), 33
     with pa[32], the step's copy kept for the datastores' call that follows (int64: its length, its match length,
     then its tokens; written by a step's first call, read by the second), 34 the copy's depth_bound
     (fc_suffix_draft), 35 the indentation table of the copy and the history (engine.indent_shift.IndentTable; 0:
     continuations as they are);
   pd (float64): 0 the copy's factor, 1 its min_prob, 2 the history's factor;
   ctx_len, cache_len, history_len: the three buffers' lengths (tokens);
   n_prefix: -1 for a step's first call; after PROPOSE_RETRIEVE, the number of datastore sources (D_r, D_c) the
     caller found (0 or more, in pa[19] and pa[20]): the cache is then known to have nothing (and the copy too,
     unless pa[32]), and the tree is built from those sources, the copy's (pa[32]) and the history's (FastCoder
     Alg. 1's order; FastCoderDrafter.candidates).
   Returns the number of tree nodes the builder kept (plus PROPOSE_CACHE_HIT when the cache had a continuation),
   PROPOSE_RETRIEVE when neither the cache nor the copy had one (the caller searches the datastores),
   PROPOSE_NOTHING when no source had one, or another negative number where the Python path must run (settings
   outside the buffers; the builder's own refusals). */
/* The step's context copy kept by its first call (pa[33]) as part n_parts: returns n_parts + 1, or n_parts when the
   copy had no continuation. */
static const double COPY_COUNT[1] = {1.0};
static int64_t kept_copy_part(const int64_t *pa, int64_t *parts, int64_t n_parts) {
    const int64_t *kept = (const int64_t *)(intptr_t)pa[33];
    if (kept == NULL || kept[0] <= 0)
        return n_parts;
    part_fields(parts + 10 * n_parts, kept + 2, 1, kept[0], COPY_COUNT, SOURCE_CONTEXT, kept[1]);
    return n_parts + 1;
}

/* The history's source after `n_parts` given ones, then the tree (fc_propose's last part). */
static int64_t history_and_tree(const int64_t *pa, const double *pd, const int64_t *ctx, int64_t ctx_len,
                                int64_t history_len, int64_t *parts, double *weights, int64_t n_parts, int hit) {
    source_rows history_rows; /* 33 KB of stack */
    const chained history = {(const int64_t *)(intptr_t)pa[2], (const int32_t *)(intptr_t)pa[24],
                             (const int32_t *)(intptr_t)pa[25], history_len, pa[26]};
    if (history.buf != NULL) {
        int64_t tail = ctx_len < pa[5] ? ctx_len : pa[5];
        const int32_t *indent = (const int32_t *)(intptr_t)pa[35];
        int64_t width_n = indent ? line_width(indent, ctx, ctx_len) : -1;
        if (history_search(&history, ctx + ctx_len - tail, tail, pa[6], pa[7], pd[2], pa[8], &history_rows, indent,
                           width_n))
            part_fields(parts + 10 * n_parts++, history_rows.rows, history_rows.n_rows, history_rows.width,
                        history_rows.counts, SOURCE_HISTORY, history_rows.match);
    }
    if (n_parts == 0)
        return PROPOSE_NOTHING;
    int64_t kept = fc_build_sized_parts((int64_t *)(intptr_t)pa[12], (const double *)(intptr_t)pa[13], parts, weights,
                                        n_parts, pa[14], pa[15], pa[16], pa[17]);
    if (kept < 0)
        return kept;
    return kept + (hit ? PROPOSE_CACHE_HIT : 0);
}

/* Whether one of the context's last n_min tokens is one of the n_special sorted ids in special. */
static int special_tail(const int64_t *ctx, int64_t ctx_len, int64_t n_min, const int64_t *special,
                        int64_t n_special) {
    if (special == NULL || n_special <= 0) return 0;
    for (int64_t i = ctx_len - n_min < 0 ? 0 : ctx_len - n_min; i < ctx_len; i++) {
        int64_t lo = 0, hi = n_special - 1, t = ctx[i];
        while (lo <= hi) {
            int64_t mid = (lo + hi) / 2;
            if (special[mid] == t) return 1;
            if (special[mid] < t) lo = mid + 1; else hi = mid - 1;
        }
    }
    return 0;
}

/* fc_propose's settings checks (-2 when outside the C code's buffers). */
static int settings_fit(const int64_t *pa) {
    int64_t draft_len = pa[8];
    return !(draft_len < 1 || draft_len > PROPOSE_MAX_WIDTH || pa[4] > PROPOSE_MAX_STARTS || pa[6] > PROPOSE_MAX_STARTS
             || pa[11] > PROPOSE_MAX_WIDTH || pa[9] > PROPOSE_MAX_STARTS || pa[3] > PROPOSE_MAX_CTX
             || pa[5] > PROPOSE_MAX_CTX || pa[18] != 2);
}

int64_t fc_propose(const int64_t *pa, const double *pd, int64_t ctx_len, int64_t cache_len, int64_t history_len,
                   int64_t n_prefix) {
    source_rows cache_rows; /* 33 KB of stack */
    int64_t copy_tokens[PROPOSE_MAX_WIDTH];
    double copy_probs[PROPOSE_MAX_WIDTH], copy_count[1] = {1.0};
    const int64_t *ctx = (const int64_t *)(intptr_t)pa[0];
    const chained cache = {(const int64_t *)(intptr_t)pa[1], (const int32_t *)(intptr_t)pa[21],
                           (const int32_t *)(intptr_t)pa[22], cache_len, pa[23]};
    int64_t draft_len = pa[8];
    if (!settings_fit(pa) || n_prefix > PROPOSE_MAX_PREFIX)
        return -2;
    int64_t parts[(PROPOSE_MAX_PREFIX + 3) * 10];
    double weights[PROPOSE_MAX_PREFIX + 3];
    int64_t n_parts = 0, hit = 0, match = 0, k = 0;
    for (int64_t i = 0; i < PROPOSE_MAX_PREFIX + 3; i++) weights[i] = 1.0;
    if (n_prefix >= 0) { /* after PROPOSE_RETRIEVE: the datastores' sources, the copy's (pa[32]), the history's */
        memcpy(parts, (const int64_t *)(intptr_t)pa[19], (size_t)n_prefix * 10 * sizeof(int64_t));
        memcpy(weights, (const double *)(intptr_t)pa[20], (size_t)n_prefix * sizeof(double));
        if (pa[32])
            n_prefix = kept_copy_part(pa, parts, n_prefix);
        return history_and_tree(pa, pd, ctx, ctx_len, history_len, parts, weights, n_prefix, 0);
    }
    /* the cache first (Alg. 1): the context's last n_max tokens */
    if (ctx_len >= pa[18]) {
        int64_t tail = ctx_len < pa[3] ? ctx_len : pa[3];
        if (cache_search(&cache, ctx + ctx_len - tail, tail, pa[4], draft_len, &cache_rows)) {
            part_fields(parts, cache_rows.rows, cache_rows.n_rows, cache_rows.width, cache_rows.counts, SOURCE_CACHE,
                        cache_rows.match);
            n_parts = hit = 1;
        }
    }
    k = fc_suffix_draft(ctx, ctx_len, pa[9], pa[10], pd[0], pd[1], pa[11], pa[34], copy_tokens, copy_probs, &match,
                        (const int32_t *)(intptr_t)pa[35]);
    if (pa[32] && pa[33]) { /* kept for the datastores' call, which puts it beside their sources */
        int64_t *kept = (int64_t *)(intptr_t)pa[33];
        kept[0] = k > 0 ? k : 0;
        kept[1] = match;
        if (k > 0)
            memcpy(kept + 2, copy_tokens, (size_t)k * sizeof(int64_t));
    }
    if (!hit && (k <= 0 || pa[32])) { /* the datastores' turn: nothing else, or searched beside the copy (pa[32]) */
        if (!special_tail(ctx, ctx_len, pa[29], (const int64_t *)(intptr_t)pa[30], pa[31]))
            return PROPOSE_RETRIEVE;
        if (k > 0) /* a special token ends the context: no retrieval, the copy and the history */
            part_fields(parts + 10 * n_parts++, copy_tokens, 1, k, copy_count, SOURCE_CONTEXT, match);
        int64_t got = history_and_tree(pa, pd, ctx, ctx_len, history_len, parts, weights, n_parts, 0);
        return got == PROPOSE_NOTHING ? PROPOSE_NOTHING_SKIPPED : got < 0 ? got : got + PROPOSE_SKIPPED;
    }
    if (k > 0) {
        part_fields(parts + 10 * n_parts++, copy_tokens, 1, k, copy_count, SOURCE_CONTEXT, match);
    }
    return history_and_tree(pa, pd, ctx, ctx_len, history_len, parts, weights, n_parts, (int)hit);
}

/* The datastores' arguments (pa[27], int64), RETRIEVE_FIELDS per store j (0: D_r, 1: D_c) from RETRIEVE_FIELDS * j:
     0 the store's packed arguments (fc_ds_search's ds: Datastore._native_match_search), 1 its MatchState's buffer,
     2 the rows' buffer ((max_matches, draft_len) int32), 3 the counts' ((max_matches,) int64), 4 scratch
     (fc_ds_retrieve's), 5 the source bit, 6 written: the distinct rows found (M; 0: none);
   then from 2 * RETRIEVE_FIELDS: n_min, n_max, max_matches. The weights (alpha, beta) are at pa[28] (float64). */

/* After fc_propose returned PROPOSE_RETRIEVE and the caller's policy let the datastores be searched (the missing
   table, the skip token): D_r and D_c searched here (fc_ds_retrieve: Datastore.search with each one's MatchState,
   the same continuations), then the history's source and the tree, as fc_propose with n_prefix >= 0 does from
   sources the caller found. stores: bit j (j = 0, 1) when store j is searched, bit 2 + j when its MatchState holds
   nothing for it (fresh: MatchState.key differs). Returns as fc_propose; each store's M is in its field 6 and its
   match in its MatchState's buffer. */
int64_t fc_propose_retrieve(const int64_t *pa, const double *pd, int64_t ctx_len, int64_t cache_len,
                            int64_t history_len, int64_t stores) {
    const int64_t *ctx = (const int64_t *)(intptr_t)pa[0];
    int64_t *ra = (int64_t *)(intptr_t)pa[27];
    const double *rw = (const double *)(intptr_t)pa[28];
    (void)cache_len;
    if (ra == NULL)
        return -2;
    ra[6] = ra[RETRIEVE_FIELDS + 6] = 0; /* nothing found, whatever is returned */
    if (!settings_fit(pa))
        return -2;
    int64_t parts[(PROPOSE_MAX_PREFIX + 3) * 10];
    double weights[PROPOSE_MAX_PREFIX + 3];
    int64_t n_parts = 0, draft_len = pa[8];
    const int64_t *common = ra + 2 * RETRIEVE_FIELDS;
    for (int64_t i = 0; i < PROPOSE_MAX_PREFIX + 3; i++) weights[i] = 1.0;
    for (int j = 0; j < 2; j++) {
        int64_t *f = ra + RETRIEVE_FIELDS * j;
        if (!(stores >> j & 1))
            continue;
        int64_t *st = (int64_t *)(intptr_t)f[1];
        int32_t *rows = (int32_t *)(intptr_t)f[2];
        int64_t *counts = (int64_t *)(intptr_t)f[3];
        int64_t m = fc_ds_retrieve((const int64_t *)(intptr_t)f[0], st, ctx, ctx_len, ctx_len, common[0], common[1],
                                   stores >> (2 + j) & 1, common[2], draft_len, rows, counts,
                                   (void *)(intptr_t)f[4]);
        if (m < 0)
            return -3;
        f[6] = m;
        if (m > 0) {
            int64_t *p = parts + 10 * n_parts;
            p[0] = f[2];
            p[1] = 4; /* int32 rows */
            p[2] = draft_len;
            p[3] = m;
            p[4] = draft_len;
            p[5] = f[3];
            p[6] = 0; /* int64 counts */
            p[7] = m;
            p[8] = f[5];
            p[9] = st[3]; /* the match length (MatchState's ST_N) */
            weights[n_parts++] = rw[j];
        }
    }
    if (pa[32]) /* searched beside the copy: its source after the datastores' (FastCoderDrafter.candidates) */
        n_parts = kept_copy_part(pa, parts, n_parts);
    return history_and_tree(pa, pd, ctx, ctx_len, history_len, parts, weights, n_parts, 0);
}
