/* A greedy decoding forward in one call: the embedding and rotary rows (fc_gather_inputs), every decoder layer and
 * the final norm (fc_fused_forward), then each row's argmax of the LM head by int8 screening (fc_screen_argmax).
 *
 * The three calls are the ones engine.lean_forward makes one by one; what this saves is the Python between them:
 * checks, three tensor allocations and ~45 converted ctypes arguments a forward, run with the interpreter's caches
 * cold after the previous forward (~270-320 us a step of tiny-py-coder over 1,000 cached tokens on this project's
 * CPU: engine/native/step.py). The arithmetic is theirs, so the chosen tokens are the same bits.
 *
 * A verification (fc_greedy_tree_verify) screens only the rows its greedy walk reads: the pending token's, each
 * accepted node's, in passes of up to 4 rows along the likeliest children (lazy_walk). The head's screen is ~40 us a
 * row in a 4-row pass on an AVX2 CPU (a fifth of a draft row's cost), and a tree's rejected branches and the nodes
 * below its first rejection are never read.
 *
 * The model's constants sit in one int64 array `sa` (engine.native.step.GreedyStep writes it once):
 *   0 ia, 1 da, 2 layers   fc_fused_forward's per-layer arrays and layer count (engine.native.layer.FusedPlan)
 *   3 hidden               the model's width
 *   4 embed, 5 vocab       the embedding (vocab, hidden) float32
 *   6 cos, 7 sin, 8 len, 9 d   the rotary tables (len, d) float32
 *   10 x, 11 cos rows, 12 sin rows, 13 out   scratch (rows, hidden), (rows, d), (rows, d), (rows, hidden) float32
 *   14 final norm weight   (hidden,) float32
 *   15 q, 16 scale, 17 sumq, 18 enorm, 19 wnorm, 20 head weight, 21 head rows   fc_screen_pack's arrays
 *   22 screen scratch      fc_screen_argmax's scratch
 *   23 rows                the scratch's capacity in rows
 *   24 ids, 25 positions   scratch (rows,) int64 each (fc_greedy_tree_step)
 *   26 mask, 27 floats     scratch for a draft tree's mask and its capacity in floats (fc_greedy_tree_step)
 * and `sd` (double): 0 the final norm's eps, 1 a masked-out entry of the tree mask (float32's lowest).
 */
#include <stdint.h>
#include <string.h>

int fc_gather_inputs(const int64_t *ids, int64_t m, const float *embed, int64_t vocab, int64_t hidden,
                     const int64_t *positions, const float *cos_t, const float *sin_t, int64_t len, int64_t d,
                     float *x, float *cos_out, float *sin_out);
int fc_fused_forward(const int64_t *ia, const double *da, int64_t n_layers, float *x, int64_t m, int64_t hidden,
                     const float *cos_, const float *sin_, int64_t past, const void *mask, int mask_kind,
                     const int64_t *ms, int causal, const float *final_norm, double final_eps, float *out);
int64_t fc_screen_argmax(const float *x, int64_t m, int64_t k, const int8_t *q, const float *scale,
                         const int32_t *sumq, const float *enorm, const float *wnorm, const float *w, int64_t v,
                         int64_t *argmax_out, void *scratch);

int64_t fc_tree_inputs(const int64_t *parents, int64_t n, int64_t past, float low, float *mask, int64_t *positions);
int64_t fc_head_step(const int64_t *ia, const double *da, const float *rows, int64_t n_rows, int64_t stride,
                     int64_t row, int64_t first, int64_t pending, double lr);

#define P(i, T) ((T)sa[i])
/* Fields a layer has in fc_fused_forward's ia (decoder_layer.c): 11 kv_heads, 12 head size, 13 and 14 the cache's key
   and value buffers ((1, kv_heads, capacity, head size) float32), 15 their capacity. */
#define LAYER_INTS 16

/* The layers of a greedy forward over m rows (ids and positions: m int64 each) on a cache of `past` entries per layer,
 * with an attention mask as fc_fused_forward takes it (kind 0: none, causal among the rows; 2: float32 added to the
 * scores, strides ms): the final hidden states in the `out` scratch. Returns 0; -1 for an id or a position out of
 * range or more rows than the scratch holds (nothing done); -2 when the layers' scratch memory could not be allocated
 * (the cache may be partly written). */
static int64_t greedy_forward(const int64_t *sa, const double *sd, const int64_t *ids, const int64_t *positions,
                              int64_t m, int64_t past, const void *mask, int mask_kind, const int64_t *ms) {
    int64_t hidden = sa[3];
    if (m < 1 || m > sa[23]) return -1;
    if (fc_gather_inputs(ids, m, P(4, const float *), sa[5], hidden, positions, P(6, const float *),
                         P(7, const float *), sa[8], sa[9], P(10, float *), P(11, float *), P(12, float *)) != 0)
        return -1;
    if (fc_fused_forward(P(0, const int64_t *), P(1, const double *), sa[2], P(10, float *), m, hidden,
                         P(11, const float *), P(12, const float *), past, mask, mask_kind, ms,
                         m > 1 && mask_kind == 0, P(14, const float *), sd[0], P(13, float *)) != 0)
        return -2;
    return 0;
}

/* The greedy tokens of m rows of final hidden states x (m x hidden float32) by the LM head's int8 screen; returns the
 * exact logits computed (>= m), -3 where the screen declined a row (not finite, all zero). */
static int64_t screen_rows_of(const int64_t *sa, const float *x, int64_t m, int64_t *argmax_out) {
    int64_t n = fc_screen_argmax(x, m, sa[3], P(15, const int8_t *), P(16, const float *), P(17, const int32_t *),
                                 P(18, const float *), P(19, const float *), P(20, const float *), sa[21], argmax_out,
                                 P(22, void *));
    return n < 0 ? -3 : n;
}

/* One greedy forward over m rows (greedy_forward), then each row's greedy token (argmax_out: m entries) from the final
 * hidden states left in the `out` scratch. Returns the number of exact logits the screen computed (>= m), or as
 * greedy_forward (-1: nothing done, the caller takes its other path; -2: the caller raises); -3 when the screen
 * declined a row: the hidden states are in `out`, the caller computes the whole head. */
int64_t fc_greedy_step(const int64_t *sa, const double *sd, const int64_t *ids, const int64_t *positions, int64_t m,
                       int64_t past, const void *mask, int mask_kind, const int64_t *ms, int64_t *argmax_out) {
    int64_t got = greedy_forward(sa, sd, ids, positions, m, past, mask, mask_kind, ms);
    return got < 0 ? got : screen_rows_of(sa, P(13, const float *), m, argmax_out);
}

/* The forward of a decode step from the draft tree itself: the pending token (position `past`, the cache holds `past`
 * entries per layer) and below it the n nodes of a draft tree (tokens, parents: n int64 each, a parent -1 or an
 * earlier node), their ids, positions and tree mask written to the scratch (fc_tree_inputs: the same values as
 * engine.draft_tree.DraftTree.forward_inputs) instead of by the caller's tensors; n = 0: a plain step. Returns as
 * greedy_forward, and -1 too when the mask's scratch is too small ((1 + n) * (past + 1 + n) floats) or a parent does
 * not precede its node. */
static int64_t tree_forward(const int64_t *sa, const double *sd, int64_t pending, const int64_t *tokens,
                            const int64_t *parents, int64_t n, int64_t past) {
    int64_t rows = n + 1, keys = past + rows;
    int64_t *ids = P(24, int64_t *), *positions = P(25, int64_t *);
    float *mask = P(26, float *);
    if (n < 0 || past < 0 || rows > sa[23]) return -1;
    ids[0] = pending;
    for (int64_t i = 0; i < n; i++) ids[1 + i] = tokens[i];
    if (n == 0) {
        int64_t none[3] = {0, 0, 0};
        positions[0] = past;
        return greedy_forward(sa, sd, ids, positions, 1, past, 0, 0, none);
    }
    if (rows * keys > sa[27] || fc_tree_inputs(parents, n, past, (float)sd[1], mask, positions) != 0) return -1;
    int64_t ms[3] = {rows * keys, keys, 1};
    return greedy_forward(sa, sd, ids, positions, rows, past, mask, 2, ms);
}

/* tree_forward, then the 1 + n rows' greedy tokens (argmax_out); returns as fc_greedy_step. */
int64_t fc_greedy_tree_step(const int64_t *sa, const double *sd, int64_t pending, const int64_t *tokens,
                            const int64_t *parents, int64_t n, int64_t past, int64_t *argmax_out) {
    int64_t got = tree_forward(sa, sd, pending, tokens, parents, n, past);
    return got < 0 ? got : screen_rows_of(sa, P(13, const float *), n + 1, argmax_out);
}

/* Rows a lazy walk screens in one pass (fc_screen_argmax takes 4 rows at a time), and the least estimated probability,
 * from the pass's first row, of reaching a row the pass screens ahead of the walk. A pass costs ~73 us for 1 row, ~95
 * for 2, ~158 for 4 (tiny-py-coder's 8,192 x 256 head, AVX2): a row screened ahead costs ~25-30 us, a later pass ~75,
 * so a row is worth screening ahead where the walk reaches it with probability >= ~0.4 (replayed on this project's
 * trees: benchmarks/results/2026-11-29f/). */
#define LAZY_PASS_ROWS 4
#define LAZY_REACH 0.4

/* The child of `node` (-1: the pending token) the walk most likely goes to: the largest probs[] (the first of equal
 * ones), or the first child where probs is NULL; -1 where it has none. */
static int64_t likely_child(const int64_t *parents, const double *probs, int64_t n, int64_t node, double *p) {
    int64_t best = -1;
    double bp = 0.0;
    for (int64_t i = node + 1; i < n; i++) /* children follow their parent */
        if (parents[i] == node) {
            double q = probs ? probs[i] : 1.0;
            if (best < 0 || q > bp) {
                best = i;
                bp = q;
            }
            if (!probs) break;
        }
    *p = bp;
    return best;
}

/* The greedy walk from the root (engine.verify.walk_greedy) over the rows of a forward that has run (final hidden
 * states in the `out` scratch), screening only the rows it reads: node -1 is the pending token (row 0), node i's row
 * is 1 + i; at each visited node the row's greedy token goes down to the child with that token (the last such child,
 * as walk_greedy's dict keeps it) or ends the walk as the bonus token. A row not yet screened is screened in a pass
 * with up to LAZY_PASS_ROWS - 1 rows below it along the likeliest children (probs: (n,) float64 P(node accepted |
 * parent accepted), NULL: the first children, no bound) while their estimated reach stays >= LAZY_REACH. A row's
 * token does not depend on which rows share its pass (fc_screen_argmax), so the walk is the one over every row's.
 * Writes the accepted nodes to path, *bonus the token, best[row] for each screened row (-1 for the others: best has
 * 1 + n entries), screened[0] the exact logits computed and screened[1] the rows screened. Returns the accepted count,
 * or -3 where the screen declined a row (the caller's whole head then chooses every row and walks). */
static int64_t lazy_walk(const int64_t *sa, const int64_t *tokens, const int64_t *parents, const double *probs,
                         int64_t n, int64_t *best, int64_t *path, int64_t *bonus, int64_t *screened) {
    for (int64_t r = 0; r <= n; r++) best[r] = -1; /* not screened yet */
    int64_t hidden = sa[3], node = -1, len = 0;
    const float *out = P(13, const float *);
    float *x = P(10, float *); /* the forward's input rows: free once it has run */
    screened[0] = screened[1] = 0;
    for (;;) {
        int64_t row = node + 1;
        if (best[row] < 0) {
            int64_t rows[LAZY_PASS_ROWS], got[LAZY_PASS_ROWS], cnt = 0, at = node;
            double reach = 1.0, p;
            rows[cnt++] = row;
            while (cnt < LAZY_PASS_ROWS) {
                int64_t child = likely_child(parents, probs, n, at, &p);
                if (child < 0 || best[child + 1] >= 0) break;
                if (probs && !((reach *= p) >= LAZY_REACH)) break;
                rows[cnt++] = child + 1;
                at = child;
            }
            for (int64_t r = 0; r < cnt; r++)
                memcpy(x + r * hidden, out + rows[r] * hidden, (size_t)hidden * sizeof(float));
            int64_t e = screen_rows_of(sa, x, cnt, got);
            if (e < 0) return e;
            screened[0] += e;
            screened[1] += cnt;
            for (int64_t r = 0; r < cnt; r++) best[rows[r]] = got[r];
        }
        int64_t token = best[row], child = -1;
        for (int64_t i = node + 1; i < n; i++)
            if (parents[i] == node && tokens[i] == token) child = i;
        if (child < 0) {
            *bonus = token;
            return len;
        }
        path[len++] = child;
        node = child;
    }
}

/* fc_greedy_tree_step's forward, then the greedy walk screening only the rows it reads (lazy_walk; probs NULL or the
 * nodes' (n,) float64 estimates, which only choose the rows screened ahead) and the accepted nodes' keys and values
 * moved into the slots right after the pending token in every layer (engine.verify.compact_cache: the same bytes;
 * rows past + 1 + path[j] to past + 1 + j, parents first so none is read after it was written). committed (n + 1
 * int64) gets the accepted nodes' tokens then the bonus token, path (n int64) the accepted nodes, argmax_out the
 * screened rows' tokens (-1 for the rows not screened), exact (2 int64) the screen's count of exact logits and of rows
 * screened. Returns the accepted count (>= 0; the caches then hold past + 1 + that many entries: the caller sets its
 * fill marks), or as fc_greedy_tree_step when negative (-3: the forward ran, nothing walked or moved, argmax_out
 * not every row's: the caller's whole head chooses, the caller walks and compacts). */
int64_t fc_greedy_tree_verify(const int64_t *sa, const double *sd, int64_t pending, const int64_t *tokens,
                              const int64_t *parents, const double *probs, int64_t n, int64_t past,
                              int64_t *argmax_out, int64_t *path, int64_t *committed, int64_t *exact) {
    int64_t bonus, len = tree_forward(sa, sd, pending, tokens, parents, n, past);
    if (len < 0) return len;
    len = lazy_walk(sa, tokens, parents, probs, n, argmax_out, path, &bonus, exact);
    if (len < 0) return len;
    for (int64_t j = 0; j < len; j++) committed[j] = tokens[path[j]];
    committed[len] = bonus;
    const int64_t *ia = P(0, const int64_t *);
    for (int64_t l = 0; l < sa[2]; l++) {
        const int64_t *f = ia + l * LAYER_INTS;
        int64_t heads = f[11], row = f[12] * (int64_t)sizeof(float), cap = f[15];
        for (int kv = 0; kv < 2; kv++) {
            char *base = (char *)(intptr_t)f[13 + kv];
            for (int64_t h = 0; h < heads; h++, base += cap * row)
                for (int64_t j = 0; j < len; j++)
                    if (path[j] != j)
                        memcpy(base + (past + 1 + j) * row, base + (past + 1 + path[j]) * row, (size_t)row);
        }
    }
    return len;
}

/* Fields of fc_greedy_tree_verify_learn's `learn` (int64). */
enum { L_KEYS, L_SOURCES, L_ACCEPTED, L_TRIED, L_POOLED_ACCEPTED, L_POOLED_TRIED, L_BUCKETS, L_POOLED, L_ALT_STRIDE,
       L_SOURCE_STRIDE, L_HITS, L_LEARNED, L_HEAD_IA, L_HEAD_DA, L_HEAD_LR, L_HEAD_LEARNED };

/* fc_greedy_tree_verify, then what the decoder learns from the walk, as engine.acceptance.AcceptanceEstimator.update
 * and the decoder's per-source count do it: every node whose parent was accepted (or is the pending token) was
 * tried, the path's nodes were accepted (float64 += 1 in the arrays at L_ACCEPTED..L_POOLED_TRIED, bucket
 * keys[i] and its pooled bucket (key / alt stride) * source stride + key % source stride), and hits[sources[node]]
 * += 1 for each accepted node. L_KEYS 0: no estimate to update (hits only); L_HITS 0: no count. Then, where
 * L_HEAD_IA is set, the draft head's step (fc_head_step, draft_head.c: learn from the committed token after the
 * pending one, then h' from the final hidden state of the row that chose the new pending token: row 0 the pending
 * token's, 1 + i node i's; the learning rate a float64 at L_HEAD_LR) with its return in learn[L_HEAD_LEARNED], as
 * engine.draft_head.DepthOneFeature.step does it. learn[L_LEARNED] is set to 1 when all of it was done, 0 when a
 * key was out of its array (nothing updated: the caller's own update runs and raises) or the forward returned a
 * negative code (then nothing was walked either). */
int64_t fc_greedy_tree_verify_learn(const int64_t *sa, const double *sd, int64_t pending, const int64_t *tokens,
                                    const int64_t *parents, const double *probs, int64_t n, int64_t past,
                                    int64_t *argmax_out,
                                    int64_t *path, int64_t *committed, int64_t *exact, int64_t *learn) {
    learn[L_LEARNED] = 0;
    int64_t len = fc_greedy_tree_verify(sa, sd, pending, tokens, parents, probs, n, past, argmax_out, path, committed,
                                        exact);
    if (len < 0) return len;
    const int64_t *keys = (const int64_t *)(intptr_t)learn[L_KEYS];
    const uint8_t *sources = (const uint8_t *)(intptr_t)learn[L_SOURCES];
    if (keys) {
        int64_t buckets = learn[L_BUCKETS], pooled = learn[L_POOLED];
        int64_t alt = learn[L_ALT_STRIDE], src = learn[L_SOURCE_STRIDE];
        for (int64_t i = 0; i < n; i++)
            if (keys[i] < 0 || keys[i] >= buckets || (keys[i] / alt) * src + keys[i] % src >= pooled) return len;
        double *acc = (double *)(intptr_t)learn[L_ACCEPTED], *tried = (double *)(intptr_t)learn[L_TRIED];
        double *pacc = (double *)(intptr_t)learn[L_POOLED_ACCEPTED];
        double *ptried = (double *)(intptr_t)learn[L_POOLED_TRIED];
        /* on[i + 1]: node i accepted; on[0]: the pending token */
        uint8_t on_stack[257], *on = n < 256 ? on_stack : NULL;
        if (!on) return len;
        memset(on, 0, (size_t)(n + 1));
        on[0] = 1;
        for (int64_t j = 0; j < len; j++) on[path[j] + 1] = 1;
        for (int64_t i = 0; i < n; i++)
            if (on[parents[i] + 1]) {
                int64_t k = keys[i];
                tried[k] += 1.0;
                ptried[(k / alt) * src + k % src] += 1.0;
            }
        for (int64_t j = 0; j < len; j++) {
            int64_t k = keys[path[j]];
            acc[k] += 1.0;
            pacc[(k / alt) * src + k % src] += 1.0;
        }
    }
    int64_t *hits = (int64_t *)(intptr_t)learn[L_HITS];
    if (hits && sources)
        for (int64_t j = 0; j < len; j++) hits[sources[path[j]]] += 1;
    if (learn[L_HEAD_IA]) {
        int64_t row = len ? path[len - 1] + 1 : 0; /* the row that chose the new pending token, committed[len] */
        learn[L_HEAD_LEARNED] = fc_head_step((const int64_t *)(intptr_t)learn[L_HEAD_IA],
                                             (const double *)(intptr_t)learn[L_HEAD_DA], P(13, const float *), n + 1,
                                             sa[3], row, committed[0], committed[len],
                                             *(const double *)(intptr_t)learn[L_HEAD_LR]);
    }
    learn[L_LEARNED] = 1;
    return len;
}
