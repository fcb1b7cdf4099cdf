/* The draft head's per-step work (engine/draft_head.py, DepthOneFeature): h' from the final hidden state of the
   row that chose the pending token (fc_head_hidden) and the online learning of its logistic calibration from the
   token the model committed (fc_head_step, called by step.c's verification after the walk). The tree builder
   (draft_tree.c) reads h' and the calibration to estimate depth-1 nodes. Source: Medusa-style heads (Cai et al.,
   2024) with Hydra's pending-token term; benchmarks/HISTORY.md, update of 2026-11-26 (12:19-).

   Plain C with no Python headers: loaded with ctypes (engine/native/__init__.py). */

#include <math.h>
#include <stdint.h>

#include "draft_head.h"

void fc_gemm_serial(const float *x, int64_t m, int64_t k, const float *wp, int64_t n, float *y); /* small_gemm.c */

/* The draft head on one final hidden state h (dim floats) and the pending token: h' = h + W2 SiLU(W1 h + T[pending]
   + b1) + b2 into out (T: the head's pending table, vocab x rank floats, Hydra's W1e E[pending] of each token; no
   table, or a pending token outside it: that term left out), and
   lse_hat = lse_w . h' + lse_b into params[1], params[0] = 1 (0 when lse_hat is not finite). W1 and W2 packed by
   fc_gemm_pack (one-row products through small_gemm.c's kernels: 9-12 us a call for d = 256, where numpy's two matrix-vector
   products and the conversions took ~48 us a step; on the calling thread: a parallel region cost ~60 us here). W1 is
   rank x dim, W2 dim x rank. ia: W1 panels, b1, W2 panels, b2, lse_w, scratch (rank floats), out, dim, params, rank
   (pointers as integers), [10] [11] (fc_head_step's), [12] T (0: none), [13] T's rows; da: lse_b. Callers check
   fc_gemm_supported first. */
void fc_head_hidden(const int64_t *ia, const double *da, const float *h, int64_t pending) {
#define Q(i, T) ((T)(intptr_t)ia[i])
    const float *b1 = Q(1, const float *), *b2 = Q(3, const float *), *lse_w = Q(4, const float *);
    float *a = Q(5, float *), *out = Q(6, float *);
    int64_t d = ia[7], r = ia[9];
    double *params = Q(8, double *);
    fc_gemm_serial(h, 1, d, Q(0, const float *), r, a);
    const float *table = Q(12, const float *);
    if (table && pending >= 0 && pending < ia[13]) {
        const float *t = table + pending * r;
        for (int64_t i = 0; i < r; i++) a[i] += t[i];
    }
    for (int64_t i = 0; i < r; i++) {
        float v = a[i] + b1[i];
        a[i] = v / (1.0f + expf(-v));
    }
    fc_gemm_serial(a, 1, r, Q(2, const float *), d, out);
    double lse = da[0];
    for (int64_t i = 0; i < d; i++) {
        out[i] = h[i] + (out[i] + b2[i]);
        lse += (double)lse_w[i] * (double)out[i];
    }
    params[1] = lse;
    params[0] = isfinite(lse) ? 1.0 : 0.0;
#undef Q
}

/* DepthOneFeature.learn in C (the same arithmetic in the same order): one SGD step (rate lr) of the calibration
   (params[2..4]) per depth-1 node the last tree build recorded (seen_tokens, seen_values: see draft_head_args),
   towards 1 where its token is `first`, the token the model committed after the pending one (whether or not the
   node was verified: the model's choice there is known either way), else 0. Resets the record; returns the nodes
   learned from. */
static int64_t head_learn(double *params, int64_t *seen_tokens, const double *seen_values, int64_t first, double lr) {
    int64_t seen = seen_tokens[0];
    double wq = params[2], wf = params[3], w0 = params[4];
    for (int64_t j = 0; j < seen; j++) {
        double x = head_logit(seen_values[2 * j]), f = seen_values[2 * j + 1];
        double step = lr * ((seen_tokens[1 + j] == first ? 1.0 : 0.0) - head_sigmoid(wq * x + wf * f + w0));
        wq = wq + step * x;
        wf = wf + step * f;
        w0 = w0 + step;
    }
    params[2] = wq;
    params[3] = wf;
    params[4] = w0;
    seen_tokens[0] = 0;
    return seen;
}

/* One decode step's draft-head work in one call, after verification: learn from the last build's depth-1 nodes
   (head_learn; first < 0 or lr == 0: nothing learned, the record dropped), then fc_head_hidden on row `row` of a
   (n_rows x dim, row stride `stride` floats) block of final hidden states and `pending`, that row's choice (out of
   range: the head disabled, params[0] = 0). ia: fc_head_hidden's, [10] seen_tokens, [11] seen_values. Returns the
   nodes learned from. */
int64_t fc_head_step(const int64_t *ia, const double *da, const float *rows, int64_t n_rows, int64_t stride,
                     int64_t row, int64_t first, int64_t pending, double lr) {
    double *params = (double *)(intptr_t)ia[8];
    int64_t *seen_tokens = (int64_t *)(intptr_t)ia[10];
    int64_t learned = 0;
    if (first >= 0 && lr != 0.0)
        learned = head_learn(params, seen_tokens, (const double *)(intptr_t)ia[11], first, lr);
    seen_tokens[0] = 0;
    if (row < 0 || row >= n_rows) {
        params[0] = 0.0;
        return learned;
    }
    fc_head_hidden(ia, da, rows + row * stride, pending);
    return learned;
}
