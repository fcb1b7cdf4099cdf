/* FastCoder's per-step drafting in one call: the continuations of the per-document cache, the context copy and
   the completion history (engine/drafters.py, FastCoderDrafter.candidates; engine/history.py; engine/context_match.py),
   then the cost-sized tree builder of draft_tree.c over them. The same tree, bit for bit, as the Python path.

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

#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdint.h>
#include <string.h>
#include <time.h>

int64_t fc_suffix_draft(const int64_t *toks, int64_t n, int64_t max_candidates, int64_t depth, double factor,
                        double min_prob, int64_t max_tokens, int64_t depth_bound, int64_t *out_tokens,
                        double *out_probs, int64_t *out_match);
int64_t fc_ds_retrieve(const int64_t *ds, int64_t *st, const int64_t *ctx, int64_t m, int64_t ctx_len,
                       int64_t n_min, int64_t n_max, int64_t fresh, int64_t max_matches, int64_t draft_len,
                       int32_t *rows_out, int64_t *counts_out, void *scratch);
int64_t fc_build_sized_parts(int64_t *ia, const double *da, const int64_t *parts, const double *weights,
                             int64_t n_parts, int64_t max_rows, int64_t max_depth, int64_t room_rows,
                             int64_t room_width);

/* Occurrences compared per source, tokens per continuation and context tokens compared, at most (the defaults: 32,
   24 and 16): larger settings take the Python path. */
enum { PROPOSE_MAX_STARTS = 64, PROPOSE_MAX_WIDTH = 64, PROPOSE_MAX_CTX = 256 };

/* Returned when neither the cache nor the context copy has a continuation: the caller searches D_r and D_c
   (FastCoder Alg. 1) and calls again with what they gave (n_prefix >= 0). */
#define PROPOSE_RETRIEVE (-100)
/* Returned when no source has a continuation (the caller's empty tree). */
#define PROPOSE_NOTHING (-101)
/* Datastore sources given by the caller at most. */
#define PROPOSE_MAX_PREFIX 8
/* Added to the result when the cache had a continuation (the cache's hit counter). */
#define PROPOSE_CACHE_HIT ((int64_t)1 << 40)
/* Added to the result when neither the cache nor the copy had one and the context's last n_min tokens hold a
   special token (pa[30], pa[31]): no datastore continues it, the retrieval is skipped here (the drafter's skipped
   counter) and the tree built from the history's source. */
#define PROPOSE_SKIPPED ((int64_t)1 << 41)
/* Returned for such a step when the history had nothing either. */
#define PROPOSE_NOTHING_SKIPPED (-102)

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
   longest continuation). */
static void count_continuations(const int64_t *buf, int64_t buf_len, const int64_t *found, int64_t n_found,
                                int64_t width, int64_t pad, source_rows *out) {
    int64_t lens[PROPOSE_MAX_STARTS], n_rows = 0, longest = 0;
    const int64_t *conts[PROPOSE_MAX_STARTS];
    for (int64_t i = 0; i < n_found; i++) {
        int64_t s = found[i], len = 0;
        while (len < width && s + len < buf_len && buf[s + len] != -1) len++;
        if (len == 0) continue;
        int64_t j = 0;
        while (j < n_rows && !(lens[j] == len && memcmp(conts[j], buf + s, (size_t)len * sizeof(int64_t)) == 0)) j++;
        if (j == n_rows) {
            conts[n_rows] = buf + s;
            lens[n_rows] = len;
            out->counts[n_rows++] = 0.0;
            if (len > longest) longest = len;
        }
        out->counts[j] += 1.0;
    }
    int64_t w = pad > 0 ? pad : longest;
    for (int64_t j = 0; j < n_rows; j++) {
        int64_t *row = out->rows + j * w;
        memcpy(row, conts[j], (size_t)lens[j] * sizeof(int64_t));
        for (int64_t d = lens[j]; d < w; d++) row[d] = -1;
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
    count_continuations(buf, buf_len, found, n_found, draft_len, draft_len, out);
    out->match = best;
    return out->n_rows > 0;
}

/* CompletionHistory.search. Returns 1 when it found continuations of a match of at least min_match tokens. */
static int history_search(const chained *c, const int64_t *ctx, int64_t ctx_len, int64_t max_candidates,
                          int64_t min_match, double factor, int64_t draft_len, source_rows *out) {
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
    count_continuations(buf, buf_len, found, n_found, width, 0, out);
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

/* The sources' bits (engine/draft_tree.py). */
#define SOURCE_CACHE 1
#define SOURCE_CONTEXT 8
#define SOURCE_HISTORY 64

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
     (fc_suffix_draft);
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
        if (history_search(&history, ctx + ctx_len - tail, tail, pa[6], pa[7], pd[2], pa[8], &history_rows))
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
    k = fc_suffix_draft(ctx, ctx_len, pa[9], pa[10], pd[0], pd[1], pa[11], pa[34], copy_tokens, copy_probs, &match);
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
enum { RETRIEVE_FIELDS = 7 };

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

/* step.c: a greedy tree step's forward, walk, compaction and learning in one call. */
int64_t fc_greedy_tree_verify_learn(const int64_t *sa, const double *sd, int64_t pending, const int64_t *tokens,
                                    const int64_t *parents, int64_t n, int64_t past, int64_t *argmax_out,
                                    int64_t *path, int64_t *committed, int64_t *exact, int64_t *learn);

/* fc_verify_propose's fields (vp, int64): the verification's buffers (the step scratch's), where the tree comes
   from, the generation's state and its end conditions; then what the call writes. */
enum { VP_TOKENS, VP_PARENTS, VP_ARGMAX, VP_PATH, VP_COMMITTED, VP_EXACT, VP_FROM_BUILDER, VP_CTX_LEN, VP_CTX_CAP,
       VP_CACHE_LEN, VP_HISTORY_LEN, VP_OUT_LEN, VP_MAX_NEW, VP_EOS, VP_N_EOS, VP_STOP, VP_N_STOP, VP_BUCKET_END,
       VP_FOUND, VP_PROPOSE_NS, VP_FIRST_SOURCE, VP_NEXT_N, VP_NEXT_TABLE, VP_NEXT_TABLE_LEN, VP_NEXT_END,
       VP_OBSERVE, VP_CACHE_CAP, VP_CACHE_MAX_TOKENS, VP_CACHE_N_MIN, VP_N_MAX, VP_PROMPT_LEN, VP_CHUNK_FROM,
       VP_OUTPUT_CHUNK, VP_CACHE_LEN_OUT, VP_RETRIEVE, VP_STORES, VP_STRATEGY, VP_MISSING, VP_MISSING_MASK,
       VP_LINE_TABLES, VP_N_LINE_TABLE, VP_COIN, VP_RETRIEVED, VP_FIELDS };
/* vp[VP_RETRIEVED]: what the call did at the datastores' turn (fc_propose returned PROPOSE_RETRIEVE). */
enum { RETRIEVED_NONE, RETRIEVED_SKIP_MISSING, RETRIEVED_SKIP_LINE, RETRIEVED_SEARCHED };
/* Added to vp[VP_RETRIEVED] when the turn drew the skip coin (vp[VP_COIN]). */
#define RETRIEVED_COIN 16

/* Whether the token pair (a, b) is in the missing table: open addressing over mask + 1 int64 slots holding
   ((a + 1) << 32 | (b + 1)), 0 for an empty slot (engine.native.propose.DraftAhead keeps it as the drafter's set). */
static int missing_holds(const int64_t *table, int64_t mask, int64_t a, int64_t b) {
    if (!table || a < 0 || b < 0) return 0;
    uint64_t code = ((uint64_t)(a + 1) << 32) | (uint64_t)(b + 1);
    for (uint64_t i = (code * 0x9E3779B97F4A7C15ULL) >> 20 & (uint64_t)mask;; i = (i + 1) & (uint64_t)mask) {
        if (table[i] == 0) return 0;
        if ((uint64_t)table[i] == code) return 1;
    }
}

/* engine.model.TokenInfo.at_line_start over the context's last 64 tokens: tables (two uint8 tables of n tokens:
   ends with a newline and whitespace, whitespace only). */
static int at_line_start(const int64_t *ctx, int64_t len, const uint8_t *tables, int64_t n) {
    for (int64_t i = len - 1; i >= 0 && i >= len - 64; i--) {
        int64_t t = ctx[i];
        if (t < 0 || t >= n) return 0;
        if (tables[t]) return 1;
        if (!tables[n + t]) return 0;
    }
    return 0;
}

/* FastCoderDrafter._retrieval_key's remaining rules and the datastores' search after fc_propose returned
   PROPOSE_RETRIEVE for ctx[0..len): with the strategy on (vp[VP_STRATEGY]), a context whose last two tokens are in the
   missing table skips the search, and so does one at a line start when the drawn coin (vp[VP_COIN], a double's bits)
   is at least the skip probability (pd[3]); else D_r and D_c are searched (fc_propose_retrieve with the stores' bits
   vp[VP_STORES]). A skipped search drafts from the history's source (and the copy's, beside it). Writes
   vp[VP_RETRIEVED]; returns as fc_propose. */
static int64_t retrieve_turn(const int64_t *pa, const double *pd, int64_t *vp, const int64_t *ctx, int64_t len,
                             int64_t cache_len) {
    int64_t skip = RETRIEVED_NONE, coin = 0;
    if (vp[VP_STRATEGY]) {
        if (missing_holds((const int64_t *)(intptr_t)vp[VP_MISSING], vp[VP_MISSING_MASK], ctx[len - 2], ctx[len - 1]))
            skip = RETRIEVED_SKIP_MISSING;
        else if (vp[VP_LINE_TABLES]
                 && at_line_start(ctx, len, (const uint8_t *)(intptr_t)vp[VP_LINE_TABLES], vp[VP_N_LINE_TABLE])) {
            double drawn;
            memcpy(&drawn, &vp[VP_COIN], sizeof drawn);
            coin = RETRIEVED_COIN;
            if (drawn >= pd[3]) skip = RETRIEVED_SKIP_LINE;
        }
    }
    if (skip) {
        vp[VP_RETRIEVED] = skip + coin;
        return fc_propose(pa, pd, len, cache_len, vp[VP_HISTORY_LEN], 0);
    }
    vp[VP_RETRIEVED] = RETRIEVED_SEARCHED + coin;
    return fc_propose_retrieve(pa, pd, len, cache_len, vp[VP_HISTORY_LEN], vp[VP_STORES]);
}

/* FastCoderCache.add into the cache's int64 mirror (pa[1]; its chains pa[21], pa[22], pa[23]) of `len` tokens,
   `cap` long: seq[0..k) without negative ids, then a -1, its chains extended; sequences of at most n_min tokens are
   ignored. Returns the new length, or -1 (nothing written) where Python's add must run: the cache would evict
   (past max_tokens), the mirror is full, or a token id is past the chains' head table. */
static int64_t mirror_add(const int64_t *pa, int64_t len, int64_t cap, int64_t max_tokens, int64_t n_min,
                          const int64_t *seq, int64_t k) {
    int64_t *buf = (int64_t *)(intptr_t)pa[1], head_len = pa[23], kept = 0;
    for (int64_t i = 0; i < k; i++) {
        if (seq[i] < 0) continue;
        if (seq[i] >= head_len) return -1;
        kept++;
    }
    if (kept <= n_min) return len;
    if (len + kept + 1 > max_tokens || len + kept + 1 > cap) return -1;
    int64_t at = len;
    for (int64_t i = 0; i < k; i++)
        if (seq[i] >= 0) buf[at++] = seq[i];
    buf[at++] = -1;
    fc_chain_extend(buf, (int32_t *)(intptr_t)pa[21], (int32_t *)(intptr_t)pa[22], head_len, len, at);
    return at;
}

/* FastCoderDrafter.observe_path into the mirror (the verified retrieved sequence, then the output chunk): the
   context's ctx_len tokens before the step, its m committed tokens (got of them the accepted path's). Returns the
   mirror's new length, or -1 where Python's add must run. */
static int64_t observe_in_mirror(const int64_t *pa, int64_t *vp, const int64_t *ctx, int64_t ctx_len,
                                 const int64_t *committed, int64_t m, int64_t got) {
    int64_t len = vp[VP_CACHE_LEN], n_max = vp[VP_N_MAX], seq[512];
    int64_t cap = vp[VP_CACHE_CAP], max_tokens = vp[VP_CACHE_MAX_TOKENS], n_min = vp[VP_CACHE_N_MIN];
    if (got && (vp[VP_FIRST_SOURCE] & (SOURCE_CACHE | 2 | 4))) { /* the cache, D_r or D_c: a retrieved sequence */
        int64_t lo = ctx_len > n_max ? ctx_len - n_max : 0, k = ctx_len - lo;
        if (k + got > 512) return -1;
        memcpy(seq, ctx + lo, (size_t)k * sizeof(int64_t));
        memcpy(seq + k, committed, (size_t)got * sizeof(int64_t));
        if ((len = mirror_add(pa, len, cap, max_tokens, n_min, seq, k + got)) < 0) return -1;
    }
    int64_t end = ctx_len + m, from = vp[VP_CHUNK_FROM];
    if (end - from >= vp[VP_OUTPUT_CHUNK]) {
        int64_t lo = from - n_max > vp[VP_PROMPT_LEN] ? from - n_max : vp[VP_PROMPT_LEN], k = ctx_len - lo;
        if (k < 0 || k + m > 512) return -1;
        memcpy(seq, ctx + lo, (size_t)k * sizeof(int64_t));
        memcpy(seq + k, committed, (size_t)m * sizeof(int64_t));
        if ((len = mirror_add(pa, len, cap, max_tokens, n_min, seq, k + m)) < 0) return -1;
    }
    return len;
}
/* VP_FOUND when the call drafted nothing for the next step (the generation ends, or the next step's context is past
   the cost curve's bucket or the buffer: the caller drafts it). */
#define PROPOSE_NOT_RUN (-200)
/* VP_NEXT_N when the next tree's nodes within the tokens left are not a prefix of it (the caller cuts it). */
#define NEXT_UNCUT (-1)

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* fc_propose (and the datastores' turn where it gives them one) over ctx[0..len) (pa[0]) with the mirror's cache_len
   tokens, the output then out_len tokens; with next_curve the next curve's table (vp[VP_NEXT_TABLE]) sizes the tree,
   the builder's own restored after. Writes vp[VP_FOUND], vp[VP_RETRIEVED] and vp[VP_NEXT_N] (the nodes no deeper than
   the tokens left, NEXT_UNCUT where they are not the tree's first nodes). */
static void draft_tree_at(const int64_t *pa, const double *pd, int64_t *vp, int64_t len, int64_t cache_len,
                          int64_t out_len, int64_t next_curve) {
    const int64_t *ia = (const int64_t *)(intptr_t)pa[12];
    int64_t *ctx = (int64_t *)(intptr_t)pa[0];
    int64_t *table = (int64_t *)(intptr_t)pa[12] + 25, held[2] = {table[0], table[1]};
    if (next_curve) {
        table[0] = vp[VP_NEXT_TABLE];
        table[1] = vp[VP_NEXT_TABLE_LEN];
    }
    int64_t found = fc_propose(pa, pd, len, cache_len, vp[VP_HISTORY_LEN], -1);
    vp[VP_RETRIEVED] = RETRIEVED_NONE;
    if (found == PROPOSE_RETRIEVE && vp[VP_RETRIEVE] && len >= 2)
        found = retrieve_turn(pa, pd, vp, ctx, len, cache_len);
    table[0] = held[0];
    table[1] = held[1];
    vp[VP_FOUND] = found;
    if (found >= 0) {  /* the nodes within the tokens left: the first ones of a breadth-first tree */
        int64_t kept = found & (PROPOSE_CACHE_HIT - 1), left = vp[VP_MAX_NEW] - out_len, cut = 0;
        const int64_t *depths = (const int64_t *)(intptr_t)ia[30];
        while (cut < kept && depths[cut] <= left) cut++;
        for (int64_t i = cut; i < kept; i++)
            if (depths[i] <= left) {
                cut = NEXT_UNCUT;
                break;
            }
        vp[VP_NEXT_N] = cut;
    }
}

/* One greedy step of the fastcoder decoder in one call: the verification of this step's tree
   (fc_greedy_tree_verify_learn: forward, walk, compaction, acceptance counts, per-source hits, the draft head's step),
   then, unless the generation ends there, the next step's drafting (fc_propose) over the context with the committed
   tokens appended, its tree left in the builder's outputs for the next call to verify in place. Between the two the
   decoder used to spend ~100 us of Python a step with the caches cold after the forward (the drafter's arguments,
   the context copy's extension, the tree's arrays, the verification's copies of them).
   sa, sd, pending, n, past, learn: as fc_greedy_tree_verify_learn (n: the tree's nodes; learn's keys and sources
     where the caller points them); the tree's tokens and parents are the builder's outputs (the scratch of pa[12])
     when vp[VP_FROM_BUILDER], else the step scratch's (vp[VP_TOKENS], vp[VP_PARENTS]).
   pa, pd: fc_propose's arguments (pa[0]: the context's buffer, vp[VP_CTX_CAP] tokens long, holding vp[VP_CTX_LEN]
     tokens, the pending token last).
   The next step is drafted when no committed token is an end-of-sequence id (vp[VP_EOS], vp[VP_N_EOS] int64) or a
   stop token (vp[VP_STOP]: (vp[VP_N_STOP],) uint8 table, 0: none), the output then holds fewer than vp[VP_MAX_NEW]
   tokens (vp[VP_OUT_LEN] before the step, the pending token counted) and the context stays below
   vp[VP_BUCKET_END] tokens (where the cost curve the builder holds stops serving) or, with the next curve's c(0..)
   table (vp[VP_NEXT_TABLE], vp[VP_NEXT_TABLE_LEN] float64; 0: none), below vp[VP_NEXT_END] (that table drafts it,
   the builder's own restored after), and within the buffer; the committed tokens are appended to the context's
   buffer first. With vp[VP_OBSERVE] the drafter's observation of the step is made before, into the cache's
   mirror (observe_in_mirror: vp[VP_CACHE_CAP] its room, vp[VP_CACHE_MAX_TOKENS] and vp[VP_CACHE_N_MIN] the cache's
   bounds, vp[VP_N_MAX] the query suffix, vp[VP_PROMPT_LEN], vp[VP_CHUNK_FROM] and vp[VP_OUTPUT_CHUNK] the output
   chunk's state; vp[VP_CACHE_LEN_OUT] written: the mirror's length after it, -1 where Python's add must run (then
   nothing is drafted and the mirror may hold part of it), -2 where the step was not observed here), so that the next tree is the one the drafter's propose gives after its observe.
   Writes vp[VP_FOUND] (fc_propose's result or PROPOSE_NOT_RUN), vp[VP_PROPOSE_NS] (the
   drafting's wall time, ns), vp[VP_FIRST_SOURCE] (the source bits of the first accepted node, 0: none) and
   vp[VP_NEXT_N] (the next tree's nodes no deeper than the tokens left, NEXT_UNCUT where they are not its first
   nodes). Returns as fc_greedy_tree_verify_learn (the accepted count, or negative with nothing drafted). */
int64_t fc_verify_propose(const int64_t *sa, const double *sd, int64_t pending, int64_t n, int64_t past,
                          int64_t *learn, const int64_t *pa, const double *pd, int64_t *vp) {
    const int64_t *tokens = (const int64_t *)(intptr_t)vp[VP_TOKENS];
    const int64_t *parents = (const int64_t *)(intptr_t)vp[VP_PARENTS];
    const int64_t *ia = (const int64_t *)(intptr_t)pa[12];  /* the tree builder's packed arguments (native/tree.py) */
    const uint8_t *sources = (const uint8_t *)(intptr_t)learn[1];
    vp[VP_FOUND] = PROPOSE_NOT_RUN;
    vp[VP_PROPOSE_NS] = vp[VP_FIRST_SOURCE] = vp[VP_NEXT_N] = 0;
    vp[VP_CACHE_LEN_OUT] = -2; /* not observed here */
    if (vp[VP_FROM_BUILDER]) {
        tokens = (const int64_t *)(intptr_t)ia[28];
        parents = (const int64_t *)(intptr_t)ia[29];
    }
    int64_t *path = (int64_t *)(intptr_t)vp[VP_PATH], *committed = (int64_t *)(intptr_t)vp[VP_COMMITTED];
    int64_t got = fc_greedy_tree_verify_learn(sa, sd, pending, tokens, parents, n, past,
                                              (int64_t *)(intptr_t)vp[VP_ARGMAX], path, committed,
                                              (int64_t *)(intptr_t)vp[VP_EXACT], learn);
    if (got < 0) return got;
    if (got > 0 && sources) vp[VP_FIRST_SOURCE] = sources[path[0]];
    int64_t m = got + 1, ctx_len = vp[VP_CTX_LEN], out_len = vp[VP_OUT_LEN] + m;
    const int64_t *eos = (const int64_t *)(intptr_t)vp[VP_EOS];
    const uint8_t *stop = (const uint8_t *)(intptr_t)vp[VP_STOP];
    int64_t next_curve = ctx_len + m >= vp[VP_BUCKET_END];
    if (out_len >= vp[VP_MAX_NEW] || ctx_len + m > vp[VP_CTX_CAP]
        || (next_curve && (!vp[VP_NEXT_TABLE] || ctx_len + m >= vp[VP_NEXT_END])))
        return got;
    for (int64_t j = 0; j < m; j++) {
        int64_t t = committed[j];
        for (int64_t e = 0; e < vp[VP_N_EOS]; e++)
            if (eos[e] == t) return got;
        if (stop && t >= 0 && t < vp[VP_N_STOP] && stop[t]) return got;
    }
    int64_t *ctx = (int64_t *)(intptr_t)pa[0], t0 = now_ns(), cache_len = vp[VP_CACHE_LEN];
    if (vp[VP_OBSERVE]) { /* the drafter's observation first, as the decoder's order has it */
        cache_len = observe_in_mirror(pa, vp, ctx, ctx_len, committed, m, got);
        vp[VP_CACHE_LEN_OUT] = cache_len;
        if (cache_len < 0) return got;
    }
    memcpy(ctx + ctx_len, committed, (size_t)m * sizeof(int64_t));
    draft_tree_at(pa, pd, vp, ctx_len + m, cache_len, out_len, next_curve);
    vp[VP_PROPOSE_NS] = now_ns() - t0;
    return got;
}

/* A generation's first tree drafted as fc_verify_propose drafts each next one, without a verification before it:
   the context's buffer (pa[0]) holds vp[VP_CTX_LEN] tokens, the pending token last, the output vp[VP_OUT_LEN] tokens
   (the pending one counted), the cache's mirror vp[VP_CACHE_LEN] and the history's vp[VP_HISTORY_LEN]; the builder
   holds the cost curve of this context's bucket. The drafter's propose right after a cold prefill spent ~100 us of
   Python around ~20 us of C (benchmarks/results/2026-11-27g). Writes vp[VP_FOUND], vp[VP_RETRIEVED], vp[VP_NEXT_N]
   and vp[VP_PROPOSE_NS] as fc_verify_propose does; returns vp[VP_FOUND]. */
int64_t fc_draft_ahead(const int64_t *pa, const double *pd, int64_t *vp) {
    int64_t t0 = now_ns();
    vp[VP_FOUND] = PROPOSE_NOT_RUN;
    vp[VP_NEXT_N] = 0;
    vp[VP_CACHE_LEN_OUT] = -2;
    if (vp[VP_CTX_LEN] < 1 || vp[VP_CTX_LEN] > vp[VP_CTX_CAP] || vp[VP_OUT_LEN] >= vp[VP_MAX_NEW]) return PROPOSE_NOT_RUN;
    draft_tree_at(pa, pd, vp, vp[VP_CTX_LEN], vp[VP_CACHE_LEN], vp[VP_OUT_LEN], 0);
    vp[VP_PROPOSE_NS] = now_ns() - t0;
    return vp[VP_FOUND];
}
