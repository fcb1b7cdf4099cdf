/* The fused step's drafting: the next step's tree drafted inside the verification's native call (fc_verify_propose),
   and a generation's first tree drafted into the same fields (fc_draft_ahead), with fc_propose and the datastores'
   turn (propose.c) over the context with the committed tokens appended; the Python side is
   engine/native/draft_ahead.py (DraftAhead: the vp fields below, one array per generation). Between a verification
   and the next propose the decoder used to spend ~100 us of Python a step with the caches cold after the forward.

   Plain C with no Python headers: loaded with ctypes (engine/native/__init__.py). */

#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "propose.h"

/* step.c: a greedy tree step's forward, walk, compaction and learning in one call. */
int64_t fc_greedy_tree_verify_learn(const int64_t *sa, const double *sd, int64_t pending, const int64_t *tokens,
                                    const int64_t *parents, const double *probs, int64_t n, int64_t past,
                                    int64_t *argmax_out,
                                    int64_t *path, int64_t *committed, int64_t *exact, int64_t *learn);

/* fc_verify_propose's fields (vp, int64): the verification's buffers (the step scratch's), where the tree comes
   from, the generation's state and its end conditions; then what the call writes. */
enum { VP_TOKENS, VP_PARENTS, VP_ARGMAX, VP_PATH, VP_COMMITTED, VP_EXACT, VP_FROM_BUILDER, VP_CTX_LEN, VP_CTX_CAP,
       VP_CACHE_LEN, VP_HISTORY_LEN, VP_OUT_LEN, VP_MAX_NEW, VP_EOS, VP_N_EOS, VP_STOP, VP_N_STOP, VP_BUCKET_END,
       VP_FOUND, VP_PROPOSE_NS, VP_FIRST_SOURCE, VP_NEXT_N, VP_NEXT_TABLE, VP_NEXT_TABLE_LEN, VP_NEXT_END,
       VP_OBSERVE, VP_CACHE_CAP, VP_CACHE_MAX_TOKENS, VP_CACHE_N_MIN, VP_N_MAX, VP_PROMPT_LEN, VP_CHUNK_FROM,
       VP_OUTPUT_CHUNK, VP_CACHE_LEN_OUT, VP_RETRIEVE, VP_STORES, VP_STRATEGY, VP_MISSING, VP_MISSING_MASK,
       VP_LINE_TABLES, VP_N_LINE_TABLE, VP_COIN, VP_RETRIEVED, VP_PROBS, VP_FIELDS };
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
     where the caller points them); the tree's tokens, parents and node estimates (the lazy walk's choice of the rows
     it screens ahead) are the builder's outputs (the scratch of pa[12]) when vp[VP_FROM_BUILDER], else the step
     scratch's (vp[VP_TOKENS], vp[VP_PARENTS], vp[VP_PROBS]: 0 for a tree without estimates).
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
    const double *probs = (const double *)(intptr_t)vp[VP_PROBS];
    const int64_t *ia = (const int64_t *)(intptr_t)pa[12];  /* the tree builder's packed arguments (native/tree.py) */
    const uint8_t *sources = (const uint8_t *)(intptr_t)learn[1];
    vp[VP_FOUND] = PROPOSE_NOT_RUN;
    vp[VP_PROPOSE_NS] = vp[VP_FIRST_SOURCE] = vp[VP_NEXT_N] = 0;
    vp[VP_CACHE_LEN_OUT] = -2; /* not observed here */
    if (vp[VP_FROM_BUILDER]) {
        tokens = (const int64_t *)(intptr_t)ia[28];
        parents = (const int64_t *)(intptr_t)ia[29];
        probs = (const double *)(intptr_t)ia[34];
    }
    int64_t *path = (int64_t *)(intptr_t)vp[VP_PATH], *committed = (int64_t *)(intptr_t)vp[VP_COMMITTED];
    int64_t got = fc_greedy_tree_verify_learn(sa, sd, pending, tokens, parents, probs, n, past,
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

/* fc_verify_propose_loop's fields (lp, int64). */
enum { LP_MAX_STEPS, LP_MAX_ROWS, LP_MASK_FLOATS, LP_KV_CAPACITY, LP_NEED_COUNTED, LP_LOG, LP_LOG_STRIDE, LP_STEPS,
       LP_KEYS, LP_SOURCES, LP_TOUCH, LP_N_TOUCH, LP_LAST_N, LP_LAST_PAST, LP_OUT_OFFSET, LP_NOTE_MISS, LP_CANCEL,
       LP_DEADLINE_NS, LP_FIELDS };
/* A step's record in the loop's log (int64, LP_LOG_STRIDE apart): then its committed tokens. LOG_STORES: after a
   datastores' search (LOG_RETRIEVED), per store j the 5 outputs its MatchState's buffer holds (from
   lp[LP_OUT_OFFSET]: n, left, count, probes, incremental) and its rows found (field 6 of its retrieve fields). */
enum { LOG_GOT, LOG_N, LOG_FIRST_SOURCE, LOG_PROPOSE_NS, LOG_FOUND, LOG_CACHE_LEN_OUT, LOG_EXACT, LOG_LEARNED,
       LOG_HEAD_LEARNED, LOG_COMMITTED_N, LOG_RETRIEVED, LOG_SCREENED, LOG_STORES, LOG_COMMITTED = LOG_STORES + 12 };

/* After a step whose next tree took the datastores' turn (vp[VP_RETRIEVED]): the turn's outputs into the step's log
   record and what DraftAhead._turn_taken and the next DraftAhead.ready would change for the steps after, done here:
   a searched store's MatchState holds its search (its "fresh" bit 2 + j in vp[VP_STORES] cleared). Returns 0 where
   the loop must stop instead: a coin drawn (Python draws the next), or a search neither store answered where
   FastCoderDrafter.note_miss puts the context into the missing table (lp[LP_NOTE_MISS]: the strategy on and a
   datastore given). */
static int turn_taken(int64_t *vp, const int64_t *pa, const int64_t *lp, int64_t *rec) {
    int64_t turn = vp[VP_RETRIEVED];
    rec[LOG_RETRIEVED] = turn;
    if (turn & RETRIEVED_COIN) return 0;
    if (turn != RETRIEVED_SEARCHED) return turn == RETRIEVED_SKIP_MISSING;
    const int64_t *ra = (const int64_t *)(intptr_t)pa[27];
    int64_t stores = vp[VP_STORES], rows = 0;
    for (int j = 0; j < 2; j++) {
        int64_t *out = rec + LOG_STORES + 6 * j;
        memset(out, 0, 6 * sizeof(int64_t));
        if (!(stores >> j & 1)) continue;
        memcpy(out, (const int64_t *)(intptr_t)ra[RETRIEVE_FIELDS * j + 1] + lp[LP_OUT_OFFSET], 5 * sizeof(int64_t));
        out[5] = ra[RETRIEVE_FIELDS * j + 6];
        rows += out[5] > 0;
        stores &= ~((int64_t)4 << j);
    }
    if (!rows && lp[LP_NOTE_MISS]) return 0; /* a miss for the missing table: Python notes it (note_miss) */
    vp[VP_STORES] = stores;
    return 1;
}

/* Several fastcoder steps in one call: fc_verify_propose, and while the step it ran left the decoder nothing to do in
   Python before the next one, that next step at once, on the tree the call drafted (verified in place in the builder's
   outputs). Between two steps the decoder spent ~200-250 us of Python with the caches cold after the forward (its
   objects and the interpreter's code evicted by the weights' and the KV cache's stream: a 0.5 us call took 11 us on
   2026-11-29's machine); what it did there is what this loop does in C: the next step's lengths (the pending token,
   the KV cache's entries, the context's and the output's lengths, the cache mirror's length and the output chunk's
   start, as DraftAhead.ready's steady case), the tree taken from the builder (its learning fields lp[LP_KEYS],
   lp[LP_SOURCES]). Python then replays each logged step's bookkeeping (the output, the drafter's list cache, the
   counts) in order, warm, and handles the last step as after one call.
   A step continues the loop only where the call drafted the next tree itself (vp[VP_FOUND] >= 0, its cut known:
   vp[VP_NEXT_N] >= 0; after a datastores' turn only where turn_taken keeps what Python would, logged for its
   replay), observed the step in the mirror (vp[VP_CACHE_LEN_OUT] >= 0), learned it where the draft head needs it
   (lp[LP_NEED_COUNTED]: learn[11] set), committed no token that shares a byte with a stop string (lp[LP_TOUCH]:
   (lp[LP_N_TOUCH],) uint8 table; 0: no stop strings), stays inside the cost curve's bucket (vp[VP_BUCKET_END]), and
   the next tree fits the step's scratch (lp[LP_MAX_ROWS] rows, lp[LP_MASK_FLOATS] mask entries) and the KV cache
   (lp[LP_KV_CAPACITY] entries), the int64 word at lp[LP_CANCEL] (0: none) is still 0 and the clock (CLOCK_MONOTONIC,
   ns: Python's time.monotonic) is before lp[LP_DEADLINE_NS] (0: none); and at most lp[LP_MAX_STEPS] steps run.
   The steps before the last are logged (lp[LP_LOG], lp[LP_LOG_STRIDE] int64 each: LOG_*, the committed tokens
   last), their count written to lp[LP_STEPS], the last step's tree size and KV-cache entries before it to
   lp[LP_LAST_N] and lp[LP_LAST_PAST]; vp and the step's buffers hold the last step's results as after one
   fc_verify_propose. Arguments otherwise as fc_verify_propose's (pending, n, past: the first step's). Returns the last
   step's as it does. */
int64_t fc_verify_propose_loop(const int64_t *sa, const double *sd, int64_t pending, int64_t n, int64_t past,
                               int64_t *learn, const int64_t *pa, const double *pd, int64_t *vp, int64_t *lp) {
    const uint8_t *touch = (const uint8_t *)(intptr_t)lp[LP_TOUCH];
    int64_t *log = (int64_t *)(intptr_t)lp[LP_LOG];
    const int64_t *committed = (const int64_t *)(intptr_t)vp[VP_COMMITTED];
    const int64_t *exact = (const int64_t *)(intptr_t)vp[VP_EXACT];
    lp[LP_STEPS] = 0;
    for (int64_t s = 0;; s++) {
        lp[LP_LAST_N] = n;
        lp[LP_LAST_PAST] = past;
        int64_t got = fc_verify_propose(sa, sd, pending, n, past, learn, pa, pd, vp);
        if (got < 0 || s + 1 >= lp[LP_MAX_STEPS]) return got;
        /* a cancel (another thread sets the word while this call runs without the GIL) or a deadline passed: Python
           ends the generation as after one call a step */
        if (lp[LP_CANCEL] && *(volatile const int64_t *)(intptr_t)lp[LP_CANCEL]) return got;
        if (lp[LP_DEADLINE_NS] && now_ns() >= lp[LP_DEADLINE_NS]) return got;
        if (vp[VP_FOUND] < 0 || vp[VP_NEXT_N] < 0 || vp[VP_CACHE_LEN_OUT] < 0 || (lp[LP_NEED_COUNTED] && !learn[11]))
            return got;
        int64_t m = got + 1, ctx_len = vp[VP_CTX_LEN] + m, next_n = vp[VP_NEXT_N], rows = next_n + 1;
        if (ctx_len >= vp[VP_BUCKET_END] || rows > lp[LP_MAX_ROWS] || past + m + rows > lp[LP_KV_CAPACITY]
            || (next_n && rows * (past + m + rows) > lp[LP_MASK_FLOATS]) || m > lp[LP_LOG_STRIDE] - LOG_COMMITTED)
            return got;
        if (touch)
            for (int64_t j = 0; j < m; j++)
                if (committed[j] < 0 || committed[j] >= lp[LP_N_TOUCH] || touch[committed[j]]) return got;
        int64_t *rec = log + s * lp[LP_LOG_STRIDE];
        rec[LOG_RETRIEVED] = 0;
        if (vp[VP_RETRIEVED] && !turn_taken(vp, pa, lp, rec)) return got;
        rec[LOG_GOT] = got;
        rec[LOG_N] = n;
        rec[LOG_FIRST_SOURCE] = vp[VP_FIRST_SOURCE];
        rec[LOG_PROPOSE_NS] = vp[VP_PROPOSE_NS];
        rec[LOG_FOUND] = vp[VP_FOUND];
        rec[LOG_CACHE_LEN_OUT] = vp[VP_CACHE_LEN_OUT];
        rec[LOG_EXACT] = exact[0];
        rec[LOG_SCREENED] = exact[1];
        rec[LOG_LEARNED] = learn[11];
        rec[LOG_HEAD_LEARNED] = learn[15];
        rec[LOG_COMMITTED_N] = m;
        memcpy(rec + LOG_COMMITTED, committed, (size_t)m * sizeof(int64_t));
        lp[LP_STEPS] = s + 1;
        /* the next step, as DraftAhead.ready's steady case and BoundVerify.verify_draft on a builder's tree set it */
        if (vp[VP_OBSERVE] && vp[VP_CTX_LEN] + m - vp[VP_CHUNK_FROM] >= vp[VP_OUTPUT_CHUNK])
            vp[VP_CHUNK_FROM] = vp[VP_CTX_LEN] + m; /* FastCoderDrafter.observe_path's output chunk */
        vp[VP_CACHE_LEN] = vp[VP_CACHE_LEN_OUT];
        vp[VP_CTX_LEN] = ctx_len;
        vp[VP_OUT_LEN] += m;
        vp[VP_FROM_BUILDER] = 1;
        learn[0] = lp[LP_KEYS];
        learn[1] = lp[LP_SOURCES];
        pending = committed[m - 1];
        past += m;
        n = next_n;
    }
}
