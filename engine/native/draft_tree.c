/* The cost-sized draft-tree builder of engine/tree_builder.py (_build_sized) in C, the same trees bit for bit.

   Every decode step merges a few sources' continuations (rows of token ids) into a trie, gives each node
   its acceptance estimate (engine/acceptance.py: Beta counts per bucket of source, depth, share and matched
   suffix length), multiplies them along each path, orders the nodes best-first and keeps the prefix that
   maximises expected committed tokens per verify cost c(n) (Sequoia / EAGLE-2 / vLLM adaptive
   verification). The Python builder spends ~0.25 ms a step on that; this file does it in a few us.

   Bit-for-bit equality with the Python builder: every float sum is taken in the same order with the same
   operands (compile with -ffp-contract=off so that no multiply-add is fused), orders break ties exactly as
   Python's sorted((-path, depth, index)) does, and inputs the Python shortcuts leave to the array path (NaN
   estimates, zero denominators, NaN costs) return -1 so that the caller takes that path.

   Plain C with no Python headers: loaded with ctypes (engine/native/__init__.py). */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "draft_head.h"

typedef struct {
    double neg_path;
    int64_t depth;
    int64_t index;
} order_key;

static int cmp_best_first(const void *a, const void *b) {
    const order_key *x = (const order_key *)a, *y = (const order_key *)b;
    if (x->neg_path < y->neg_path) return -1;
    if (x->neg_path > y->neg_path) return 1;
    if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

static int cmp_breadth_first(const void *a, const void *b) {
    const order_key *x = (const order_key *)a, *y = (const order_key *)b;
    if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

/* Python's bisect_right(edges, x) with the same comparisons (a NaN x goes past every edge). */
static int64_t bisect_right_d(const double *edges, int64_t n, double x) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (x < edges[mid]) hi = mid; else lo = mid + 1;
    }
    return lo;
}

static int64_t bisect_right_i(const int64_t *edges, int64_t n, int64_t x) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (x < edges[mid]) hi = mid; else lo = mid + 1;
    }
    return lo;
}

/* Bucket id but for the share of a node (engine.acceptance.bucket_bases). */
static int64_t bucket_base(int64_t source, int64_t match_length, int64_t depth, int64_t depth_buckets,
                           int64_t n_share_edges, const int64_t *match_edges, int64_t n_match_edges,
                           int64_t source_slots) {
    int64_t m = bisect_right_i(match_edges, n_match_edges, match_length);
    int64_t src = ((source % source_slots) + source_slots) % source_slots;
    int64_t d = depth < 1 ? 1 : depth;
    if (d > depth_buckets) d = depth_buckets;
    return (src * depth_buckets + d - 1) * (n_share_edges + 1) * (n_match_edges + 1) + m;
}

/* The draft head's state for one tree (engine/draft_head.py, DepthOneFeature): the output embedding (vocab x dim
   float32), h' (dim float32), params (enabled, lse_hat, w_q, w_f, w_0), and where each adjusted depth-1 node is
   recorded (seen_tokens[0]: the count, then the tokens; seen_values: (q, feature) pairs; room for seen_cap). */
typedef struct {
    const float *embedding;
    const float *hidden;
    int64_t dim, vocab;
    const double *params;
    int64_t *seen_tokens;
    double *seen_values;
    int64_t seen_cap;
} draft_head_args;

/* A depth-1 node's calibrated estimate (DepthOneFeature.feature / calibrated / adjust, the same arithmetic in the
   same order): the head's log-probability of the token, E[token] . h' - lse_hat accumulated in double in index
   order and clipped to [-16, 0], combined with the engine's estimate q by the logistic calibration. */
static double depth_one_estimate(const draft_head_args *head, int64_t tok, double q) {
    const float *e = head->embedding + tok * head->dim;
    double acc = 0.0;
    for (int64_t k = 0; k < head->dim; k++) acc += (double)e[k] * (double)head->hidden[k];
    double f = acc - head->params[1];
    f = f > 0.0 ? 0.0 : (f < -HEAD_FEATURE_FLOOR ? -HEAD_FEATURE_FLOOR : f);
    double out = head_sigmoid(head->params[2] * head_logit(q) + head->params[3] * f + head->params[4]);
    int64_t seen = head->seen_tokens[0];
    if (seen < head->seen_cap) {
        head->seen_tokens[1 + seen] = tok;
        head->seen_values[2 * seen] = q;
        head->seen_values[2 * seen + 1] = f;
        head->seen_tokens[0] = seen + 1;
    }
    return out;
}

/* The learned per-node estimate (engine/node_model.py, NodeModel): packed holds F, H, mean (F), scale (F), w1 (H x F,
   row major), b1 (H), w2 (H), b2, then the coded groups' partial sums (NodeModel.tables): depth codes 1..12, the
   alternative flag, the source bits, the token's and the parent's class codes (12, 2, 32, 64, 64 rows of H), as
   doubles; codes: (vocab,) uint8 class code of every token. */
typedef struct {
    const double *packed;
    const uint8_t *codes;
    int64_t vocab;
} node_model_args;

#define NODE_FEATURES 29
#define NODE_CONTINUOUS 7
#define NODE_CLAMP 5.0
#define NODE_MAX_HIDDEN 64
#define NODE_MAX_DEPTH_CODE 12

/* NodeModel._predict: the continuous features (NodeModel CONTINUOUS order) and the groups' codes. */
static double node_model_predict(const node_model_args *nm, const double *values, int64_t depth_code, int64_t alt,
                                 int64_t src, int64_t tok, int64_t par) {
    static const int columns[NODE_CONTINUOUS] = {0, 5, 6, 7, 8, 9, 11};
    const double *pk = nm->packed;
    int64_t f = (int64_t)pk[0], h = (int64_t)pk[1];
    const double *mean = pk + 2, *scale = mean + f, *w1 = scale + f, *b1 = w1 + h * f, *w2 = b1 + h;
    double b2 = w2[h];
    const double *depth_t = w2 + h + 1, *alt_t = depth_t + NODE_MAX_DEPTH_CODE * h, *src_t = alt_t + 2 * h;
    const double *tok_t = src_t + 32 * h, *par_t = tok_t + 64 * h;
    double x[NODE_CONTINUOUS], acc[NODE_MAX_HIDDEN];
    for (int j = 0; j < NODE_CONTINUOUS; j++) {
        double z = (values[j] - mean[columns[j]]) / scale[columns[j]];
        x[j] = z < -NODE_CLAMP ? -NODE_CLAMP : (z > NODE_CLAMP ? NODE_CLAMP : z);
    }
    const double *dt = depth_t + (depth_code - 1) * h, *at = alt_t + alt * h, *st = src_t + src * h;
    const double *tt = tok_t + tok * h, *pt = par_t + par * h;
    double out = b2;
    for (int64_t k = 0; k < h; k++) {
        const double *wk = w1 + k * f;
        double a = b1[k];
        for (int j = 0; j < NODE_CONTINUOUS; j++) a += wk[columns[j]] * x[j];
        a += dt[k];
        a += at[k];
        a += st[k];
        a += tt[k];
        a += pt[k];
        acc[k] = a;
    }
    for (int64_t k = 0; k < h; k++)
        if (acc[k] > 0.0) out += w2[k] * acc[k];
    return head_sigmoid(out);
}

/* Every node's estimate replaced by the node model's (those at 0 stay 0): NodeModel.adjust. children: (n + 1)
   scratch (children[parent + 1]), below: (n) scratch; first_choice: each parent's first choice (index parent + 1). */
static void node_model_adjust(const node_model_args *nm, int64_t n, const int64_t *token, const int64_t *parent,
                              const int64_t *depth, const int64_t *source, const double *best, const int64_t *match,
                              const double *weight, const int64_t *first_choice, int64_t *children, int64_t *below,
                              double *prob) {
    static const int bits[5] = {0, 1, 2, 3, 6};
    for (int64_t i = 0; i <= n; i++) children[i] = 0;
    for (int64_t i = 0; i < n; i++) { children[parent[i] + 1]++; below[i] = 0; }
    for (int64_t i = n - 1; i >= 0; i--)
        if (parent[i] >= 0) below[parent[i]] += 1 + below[i];
    for (int64_t i = 0; i < n; i++) {
        if (prob[i] == 0.0) continue;
        double q = prob[i], values[NODE_CONTINUOUS];
        q = q < HEAD_EPS ? HEAD_EPS : (q > 1.0 - HEAD_EPS ? 1.0 - HEAD_EPS : q);
        int64_t up = parent[i], tok = token[i], pt = up >= 0 ? token[up] : -1, src = 0;
        values[0] = log(q / (1.0 - q));
        values[1] = best[i];
        values[2] = log1p((double)match[i]) / 3.0;
        values[3] = log1p((double)children[up + 1]);
        values[4] = log1p((double)children[i + 1]);
        values[5] = log1p((double)below[i]) / 3.0;
        values[6] = log1p(weight[i]) / 5.0;
        for (int b = 0; b < 5; b++) src |= ((source[i] >> bits[b]) & 1) << b;
        prob[i] = node_model_predict(nm, values, depth[i] < NODE_MAX_DEPTH_CODE ? depth[i] : NODE_MAX_DEPTH_CODE,
                                     first_choice[up + 1] != i, src,
                                     tok >= 0 && tok < nm->vocab ? nm->codes[tok] : 0,
                                     pt >= 0 && pt < nm->vocab ? nm->codes[pt] : 0);
    }
}

/* Returns the number of kept nodes written to the outputs (>= 0), -1 when the caller must take the
   array path (NaN estimates or costs, a zero denominator), -2 when scratch memory could not be had.
   *n_nodes receives the trie's node count (0: only empty rows).

   rows: (n_rows, width) int64 token ids, a row ends at its first negative id; row_count: each row's count
   (float64, exact); row_part: the source of each row (rows of a source are consecutive, sources in the
   caller's order); part_bit / part_match / part_weight / part_total: each source's bitmask, matched suffix
   length (>= 0), weight and sum of counts (> 0); a row's weight is count x weight, its share count / total. accepted / tried: the estimator's Beta counts (n_buckets each). ctable:
   c(0), c(1), ..., c(ctable_len - 1). Outputs have room for n_rows x width nodes. */
int64_t fc_build_sized(int64_t n_rows, int64_t width, const int64_t *rows, const double *row_count,
                       const int64_t *row_part, int64_t n_parts, const int64_t *part_bit,
                       const int64_t *part_match, const double *part_weight, const double *part_total,
                       int64_t depth_buckets, const double *share_edges, int64_t n_share_edges,
                       const int64_t *match_edges, int64_t n_match_edges, int64_t source_slots,
                       const double *accepted, const double *tried, int64_t n_buckets, double strength,
                       const double *pooled_accepted, const double *pooled_tried, int64_t n_pooled,
                       double pool_strength, int64_t alternative_stride, int64_t source_stride,
                       double alternative_prior,
                       double prior_scale, double min_prob, int64_t budget, const double *ctable,
                       int64_t ctable_len, int64_t *n_nodes,
                       int64_t *o_token, int64_t *o_parent, int64_t *o_depth, int64_t *o_key, uint8_t *o_source,
                       double *o_weight, double *o_prob, const draft_head_args *head,
                       const node_model_args *nodes) {
    int64_t cap = n_rows * width, n = 0, result = 0;
    *n_nodes = 0;
    if (head) head->seen_tokens[0] = 0;
    if (cap <= 0) return 0;
    int64_t *parent = malloc(sizeof(int64_t) * cap), *token = malloc(sizeof(int64_t) * cap);
    int64_t *depth = malloc(sizeof(int64_t) * cap), *source = malloc(sizeof(int64_t) * cap);
    int64_t *match = malloc(sizeof(int64_t) * cap), *base = malloc(sizeof(int64_t) * cap);
    int64_t *first_child = malloc(sizeof(int64_t) * cap), *next_sibling = malloc(sizeof(int64_t) * cap);
    int64_t *touched = malloc(sizeof(int64_t) * cap), *touch_order = malloc(sizeof(int64_t) * cap);
    int64_t *key = malloc(sizeof(int64_t) * cap), *kept = malloc(sizeof(int64_t) * cap);
    int64_t *new_index = malloc(sizeof(int64_t) * cap);
    double *weight = malloc(sizeof(double) * cap), *best = malloc(sizeof(double) * cap);
    double *part_share = malloc(sizeof(double) * cap), *prob = malloc(sizeof(double) * cap);
    double *path = malloc(sizeof(double) * cap);
    int64_t *first_choice = malloc(sizeof(int64_t) * (cap + 1));
    order_key *order = malloc(sizeof(order_key) * cap);
    if (!parent || !token || !depth || !source || !match || !base || !first_child || !next_sibling || !touched ||
        !touch_order || !key || !kept || !new_index || !weight || !best || !part_share || !prob || !path || !order ||
        !first_choice) {
        result = -2;
        goto done;
    }
    int64_t root_first = -1;
    for (int64_t i = 0; i < cap; i++) touched[i] = -1;

    /* The trie: per source, every row inserted in order; node sums in the Python builder's order. */
    int64_t r = 0;
    for (int64_t p = 0; p < n_parts; p++) {
        int64_t bit = part_bit[p], length = part_match[p] > 0 ? part_match[p] : 0;
        int64_t n0 = n, n_touched = 0;
        for (; r < n_rows && row_part[r] == p; r++) {
            double w = row_count[r] * part_weight[p], sh = row_count[r] / part_total[p];
            int64_t node = -1;
            for (int64_t d = 0; d < width; d++) {
                int64_t tok = rows[r * width + d];
                if (tok < 0) break;
                int64_t child = node < 0 ? root_first : first_child[node];
                while (child >= 0 && token[child] != tok) child = next_sibling[child];
                if (child < 0) {  /* a new node */
                    child = n++;
                    parent[child] = node;
                    token[child] = tok;
                    depth[child] = d + 1;
                    weight[child] = 0.0 + w;
                    part_share[child] = 0.0 + sh;
                    first_child[child] = -1;
                    next_sibling[child] = node < 0 ? root_first : first_child[node];
                    if (node < 0) root_first = child; else first_child[node] = child;
                    source[child] = bit;
                    match[child] = length;
                    best[child] = 0.0;
                    base[child] = bucket_base(bit, length, d + 1, depth_buckets, n_share_edges, match_edges,
                                              n_match_edges, source_slots);
                } else {
                    weight[child] += w;
                    if (child >= n0) {
                        part_share[child] += sh;
                    } else if (touched[child] != p) {  /* an earlier source's node, first touch */
                        touched[child] = p;
                        touch_order[n_touched++] = child;
                        part_share[child] = 0.0 + sh;
                    } else {
                        part_share[child] += sh;
                    }
                }
                node = child;
            }
        }
        for (int64_t j = 0; j < n_touched; j++) {  /* nodes of several sources */
            int64_t id = touch_order[j];
            if (part_share[id] > best[id]) best[id] = part_share[id];
            source[id] |= bit;
            if (length > match[id]) match[id] = length;
            base[id] = bucket_base(source[id], match[id], depth[id], depth_buckets, n_share_edges, match_edges,
                                   n_match_edges, source_slots);
        }
        for (int64_t id = n0; id < n; id++) best[id] = part_share[id];
    }
    *n_nodes = n;
    if (n == 0) goto done;

    /* Each parent's first choice (acceptance.alternatives): its child with the largest best share, ties to
       the lowest id; first_choice[parent + 1], the root's at 0. */
    for (int64_t i = 0; i <= n; i++) first_choice[i] = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = first_choice[parent[i] + 1];
        if (j < 0 || best[i] > best[j]) first_choice[parent[i] + 1] = i;
    }

    /* Estimates P(node accepted | parent accepted) and path probabilities (AcceptanceEstimator.estimate). */
    int64_t share_stride = n_match_edges + 1;
    double cut = min_prob - 1e-12, total = 0.0;
    int head_on = head && head->params[0] != 0.0;
    for (int64_t i = 0; i < n; i++) {
        int alternative = first_choice[parent[i] + 1] != i;
        int64_t k = base[i] + share_stride * bisect_right_d(share_edges, n_share_edges, best[i])
                    + (alternative ? alternative_stride : 0);
        if (k < 0 || k >= n_buckets) { result = -1; goto done; }
        int64_t pk = (k / alternative_stride) * source_stride + k % source_stride;
        if (pk < 0 || pk >= n_pooled) { result = -1; goto done; }
        key[i] = k;
        double s = best[i];
        double clipped = s < 0.0 ? 0.0 : (s > 1.0 ? 1.0 : s);
        double prior = prior_scale * clipped;
        if (alternative) prior = prior * alternative_prior;
        double pooled_denominator = pooled_tried[pk] + pool_strength;
        double denominator = tried[k] + strength;
        if (denominator == 0.0 || pooled_denominator == 0.0) { result = -1; goto done; }
        double pooled = (pooled_accepted[pk] + pool_strength * prior) / pooled_denominator;
        double q = (accepted[k] + strength * pooled) / denominator;
        if (min_prob > 0.0 && s < cut) q = 0.0;
        if (!nodes && parent[i] < 0 && head_on && q > 0.0 && token[i] >= 0 && token[i] < head->vocab)
            q = depth_one_estimate(head, token[i], q);
        prob[i] = q;
        path[i] = parent[i] >= 0 ? q * path[parent[i]] : q;
        total += path[i];
    }
    if (nodes) {  /* the learned per-node estimate (engine.node_model), the draft head, the path products again */
        double hidden = nodes->packed[1];
        if ((int64_t)nodes->packed[0] != NODE_FEATURES || hidden < 1.0 || hidden > NODE_MAX_HIDDEN) {
            result = -1;
            goto done;
        }
        int64_t *children = malloc(sizeof(int64_t) * (n + 1)), *below = malloc(sizeof(int64_t) * n);
        if (!children || !below) { free(children); free(below); result = -2; goto done; }
        node_model_adjust(nodes, n, token, parent, depth, source, best, match, weight, first_choice, children,
                          below, prob);
        free(children);
        free(below);
        total = 0.0;
        for (int64_t i = 0; i < n; i++) {
            if (parent[i] < 0 && head_on && prob[i] > 0.0 && token[i] >= 0 && token[i] < head->vocab)
                prob[i] = depth_one_estimate(head, token[i], prob[i]);
            path[i] = parent[i] >= 0 ? prob[i] * path[parent[i]] : prob[i];
            total += path[i];
        }
    }
    if (isnan(total)) { result = -1; goto done; }

    /* Best-first prefix maximising (1 + expected accepted) / c(n) (acceptance.choose_by_cost). */
    for (int64_t i = 0; i < n; i++) {
        order[i].neg_path = -path[i];
        order[i].depth = depth[i];
        order[i].index = i;
    }
    qsort(order, (size_t)n, sizeof(order_key), cmp_best_first);
    int64_t m = n < budget ? n : budget;
    if (m + 1 > ctable_len) { result = -1; goto done; }
    for (int64_t j = 0; j <= m; j++)
        if (isnan(ctable[j])) { result = -1; goto done; }
    double ratio = 1.0 / ctable[0], gain = 0.0;
    int64_t chosen = 0;
    if (ratio == ratio) {
        for (int64_t j = 0; j < m; j++) {
            gain += path[order[j].index];
            double rj = (1.0 + gain) / ctable[j + 1];
            if (rj > ratio) { ratio = rj; chosen = j + 1; }
            else if (rj != rj) { chosen = j + 1; break; }
        }
    }
    for (int64_t i = 0; i < n; i++) kept[i] = 0;
    for (int64_t j = 0; j < chosen; j++)
        if (path[order[j].index] > 0) kept[order[j].index] = 1;
    /* prefix-closed (a float tie could leave a child without its parent), then breadth-first */
    int64_t n_out = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!kept[i]) continue;
        int64_t up = parent[i];
        while (up >= 0 && kept[up]) up = parent[up];
        if (up < 0) {
            order[n_out].neg_path = 0.0;
            order[n_out].depth = depth[i];
            order[n_out].index = i;
            n_out++;
        }
    }
    qsort(order, (size_t)n_out, sizeof(order_key), cmp_breadth_first);
    for (int64_t i = 0; i < n; i++) new_index[i] = -1;
    for (int64_t j = 0; j < n_out; j++) new_index[order[j].index] = j;
    for (int64_t j = 0; j < n_out; j++) {
        int64_t i = order[j].index;
        o_token[j] = token[i];
        o_parent[j] = parent[i] >= 0 ? new_index[parent[i]] : -1;
        o_depth[j] = depth[i];
        o_key[j] = key[i];
        o_source[j] = (uint8_t)(source[i] & 0xFF);
        o_weight[j] = weight[i];
        o_prob[j] = prob[i];
    }
    result = n_out;

done:
    free(parent); free(token); free(depth); free(source); free(match); free(base); free(first_child);
    free(next_sibling); free(touched); free(touch_order); free(key); free(kept); free(new_index); free(weight);
    free(best); free(part_share); free(prob); free(path); free(order); free(first_choice);
    return result;
}

/* fc_build_sized with its arguments in two arrays (one ctypes conversion each instead of forty: ~8 us a call).
   ia: n_rows, width, rows, row_count, row_part, n_parts, part_bit, part_match, part_weight, part_total,
   depth_buckets, share_edges, n_share_edges, match_edges, n_match_edges, source_slots, accepted, tried,
   n_buckets, pooled_accepted, pooled_tried, n_pooled, alternative_stride, source_stride, budget, ctable,
   ctable_len, n_nodes, o_token, o_parent, o_depth, o_key, o_source, o_weight, o_prob, then the draft head's
   embedding, hidden, dim, vocab, params (0: no head), seen_tokens, seen_values, seen_cap (pointers as integers);
   [43:45] the stop tokens (fc_build_sized_parts); [45:48] the node model's packed weights (0: none), token classes
   and vocabulary size (node_model_args); da: strength, pool_strength, alternative_prior, prior_scale, min_prob. */
int64_t fc_build_sized_packed(const int64_t *ia, const double *da) {
#define P(i, T) ((T)(intptr_t)ia[i])
    draft_head_args head = {P(35, const float *), P(36, const float *), ia[37], ia[38], P(39, const double *),
                            P(40, int64_t *), P(41, double *), ia[42]};
    node_model_args nodes = {P(45, const double *), P(46, const uint8_t *), ia[47]};
    return fc_build_sized(ia[0], ia[1], P(2, const int64_t *), P(3, const double *), P(4, const int64_t *), ia[5],
                          P(6, const int64_t *), P(7, const int64_t *), P(8, const double *), P(9, const double *),
                          ia[10], P(11, const double *), ia[12], P(13, const int64_t *), ia[14], ia[15],
                          P(16, const double *), P(17, const double *), ia[18], da[0], P(19, const double *),
                          P(20, const double *), ia[21], da[1], ia[22], ia[23], da[2], da[3], da[4], ia[24],
                          P(25, const double *), ia[26], P(27, int64_t *), P(28, int64_t *), P(29, int64_t *),
                          P(30, int64_t *), P(31, int64_t *), P(32, uint8_t *), P(33, double *), P(34, double *),
                          ia[39] ? &head : NULL, ia[45] ? &nodes : NULL);
#undef P
}

/* One source's counts, validated as engine/tree_builder.py's _sized_rows requires them, and their exact sum.
   kind 0: int64, 1: float64. Returns 0, or -3 for counts the Python preparation must handle (a negative,
   non-finite or non-integral count whose float sum could depend on the order of the additions, a sum of
   2 ** 53 or more). */
static int counts_total(const void *counts, int kind, int64_t n, double *total) {
    const double limit = 9007199254740992.0; /* 2 ** 53 */
    if (kind == 0) {
        const int64_t *c = (const int64_t *)counts;
        int64_t sum = 0;
        for (int64_t i = 0; i < n; i++) {
            if (c[i] < 0 || c[i] >= (int64_t)1 << 53) return -3;
            sum += c[i];
            if (sum >= (int64_t)1 << 53) return -3;
        }
        *total = (double)sum;
        return 0;
    }
    const double *c = (const double *)counts;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double x = c[i];
        if (!(x >= 0.0) || x >= limit) return -3;
        /* two additions or fewer: the order is Python's sum(); more: exact only for whole numbers */
        if (n > 2 && x != floor(x)) return -3;
        sum = sum + x;
        if (n > 2 && sum >= limit) return -3;
    }
    if (!(sum < INFINITY)) return -3;
    *total = sum;
    return 0;
}

static double count_at(const void *counts, int kind, int64_t i) {
    return kind == 0 ? (double)((const int64_t *)counts)[i] : ((const double *)counts)[i];
}

/* Whether a row cut at a stop token keeps that token (1, the rule before 2026-11-29) or loses it too (0, the default).
   The generation ends at a stop token, so a draft node below one is verified for nothing; so is the stop token's own
   node: accepted, it commits the token that the bonus token at its parent (the model's choice there, the same token)
   would have committed in the same step. Its row costs verification and buys no token. A/B runs switch it; a
   negative mode only asks. Returns the mode in use. */
static int64_t stop_token_kept = 0;

int fc_tree_stop_token_kept(int mode) {
    if (mode >= 0)
        stop_token_kept = mode ? 1 : 0;
    return (int)stop_token_kept;
}

/* fc_build_sized_packed on the sources' own arrays: the preparation of engine/tree_builder.py's _sized_rows
   (each source's most frequent max_rows rows, cut to max_depth tokens, its counts' sum) done here, written
   into the scratch arrays ia points at, then the tree built. parts: n_parts x 10 int64 per source: rows
   address, bytes per token id (4 or 8), tokens between row starts, rows, row width, counts address, counts
   kind (0: int64, 1: float64), counts, source bit, match length; weights: each source's weight. ia[43], ia[44]:
   a (V,) uint8 table of stop tokens and V (0: none): each row is cut at its first stop token (see
   stop_token_kept). The scratch holds room_rows x room_width tokens. Returns fc_build_sized's result, or -3 when
   the Python preparation must run (see counts_total; more rows or a wider row than the scratch holds). */
int64_t fc_build_sized_parts(int64_t *ia, const double *da, const int64_t *parts, const double *weights,
                             int64_t n_parts, int64_t max_rows, int64_t max_depth, int64_t room_rows,
                             int64_t room_width) {
    int64_t *rows = (int64_t *)(intptr_t)ia[2], *row_part = (int64_t *)(intptr_t)ia[4];
    double *row_count = (double *)(intptr_t)ia[3];
    int64_t *part_bit = (int64_t *)(intptr_t)ia[6], *part_match = (int64_t *)(intptr_t)ia[7];
    double *part_weight = (double *)(intptr_t)ia[8], *part_total = (double *)(intptr_t)ia[9];
    int64_t n_rows = 0, width = 0;
    const uint8_t *stop = (const uint8_t *)(intptr_t)ia[43]; /* (stop_len,) nonzero: a stop token; 0: none */
    int64_t stop_len = ia[44];
    enum { MAX_PARTS = 64, MAX_PICK = 64 };
    if (n_parts > MAX_PARTS || max_rows > MAX_PICK) return -3;
    int64_t k_of[MAX_PARTS];
    for (int64_t p = 0; p < n_parts; p++) {
        const int64_t *f = parts + p * 10;
        int64_t k = f[3] < f[7] ? f[3] : f[7], w = f[4] < max_depth ? f[4] : max_depth;
        if (counts_total((const void *)(intptr_t)f[5], (int)f[6], f[7], part_total + p) != 0) return -3;
        k_of[p] = k < max_rows ? k : max_rows;
        n_rows += k_of[p];
        if (w > width) width = w;
    }
    if (n_rows > room_rows || width > room_width) return -3;
    for (int64_t i = 0; i < n_rows * width; i++) rows[i] = -1;
    int64_t at = 0;
    for (int64_t p = 0; p < n_parts; p++) {
        const int64_t *f = parts + p * 10;
        const char *base = (const char *)(intptr_t)f[0];
        int64_t item = f[1], stride = f[2], k = f[3] < f[7] ? f[3] : f[7];
        int64_t w = f[4] < max_depth ? f[4] : max_depth;
        const void *counts = (const void *)(intptr_t)f[5];
        int kind = (int)f[6];
        int64_t pick[MAX_PICK];
        if (k > max_rows) { /* np.argsort(-counts[:k], kind="stable")[:max_rows]: by count, then index */
            uint8_t taken[4096];
            if (k > 4096) return -3;
            memset(taken, 0, (size_t)k);
            for (int64_t j = 0; j < max_rows; j++) {
                int64_t b = -1;
                for (int64_t i = 0; i < k; i++)
                    if (!taken[i] && (b < 0 || count_at(counts, kind, i) > count_at(counts, kind, b))) b = i;
                taken[b] = 1;
                pick[j] = b;
            }
        } else {
            for (int64_t j = 0; j < k; j++) pick[j] = j;
        }
        for (int64_t j = 0; j < k_of[p]; j++, at++) {
            const char *src = base + pick[j] * stride * item;
            int64_t *dst = rows + at * width;
            if (item == 4)
                for (int64_t d = 0; d < w; d++) dst[d] = ((const int32_t *)src)[d];
            else
                for (int64_t d = 0; d < w; d++) dst[d] = ((const int64_t *)src)[d];
            if (stop) /* a stop token and what follows it: nothing (engine.tree_builder.cut_at_stop) */
                for (int64_t d = 0; d < w && dst[d] >= 0; d++)
                    if (dst[d] < stop_len && stop[dst[d]]) {
                        for (int64_t e = d + stop_token_kept; e < w; e++) dst[e] = -1;
                        break;
                    }
            row_count[at] = count_at(counts, kind, pick[j]);
            row_part[at] = p;
        }
        part_bit[p] = f[8];
        part_match[p] = f[9] > 0 ? f[9] : 0;
        part_weight[p] = weights[p];
        part_total[p] = part_total[p] > 1e-12 ? part_total[p] : 1e-12;
    }
    ia[0] = n_rows;
    ia[1] = width;
    ia[5] = n_parts;
    return fc_build_sized_packed(ia, da);
}

/* The verify forward's tree inputs for the pending token and n draft nodes (parents[i] < i; -1: the pending
 * token), as DraftTree.attention_mask and DraftTree.position_ids compute them for a decode step:
 *   mask (1 + n, past + 1 + n) float32, row-major: 0 where a row may attend (the past tokens, the pending
 *   token, then the node itself and its ancestors), low elsewhere;
 *   positions (1 + n) int64: past for the pending token, past + depth for node i (depth 1 below it).
 * One call instead of ~10 numpy operations and the ancestor matrix (~80 us a 7-row step with the caches cold
 * after a forward). Returns 0, or -1 (nothing meaningful written) for a parent that does not precede its node. */
int64_t fc_tree_inputs(const int64_t *parents, int64_t n, int64_t past, float low, float *mask, int64_t *positions) {
    int64_t width = past + 1 + n;
    for (int64_t i = 0; i < n; i++)
        if (parents[i] < -1 || parents[i] >= i) return -1;
    positions[0] = past;
    for (int64_t r = 0; r <= n; r++) {
        float *row = mask + r * width;
        for (int64_t j = 0; j <= past; j++) row[j] = 0.0f;
        for (int64_t j = past + 1; j < width; j++) row[j] = low;
        if (r == 0) continue;
        int64_t i = r - 1, p = parents[i];
        positions[r] = (p < 0 ? past : positions[p + 1]) + 1;
        for (int64_t a = i; a >= 0; a = parents[a]) row[past + 1 + a] = 0.0f;
    }
    return 0;
}
