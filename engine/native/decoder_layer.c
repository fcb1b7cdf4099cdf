/* One Llama-family decoder layer over the few rows of a decode step or a verified draft tree, in one call.
 *
 * The lean forward (engine/lean_forward.py) runs a layer as ~150 torch operations from Python: two RMSNorms
 * of six operations each, seven linear layers, the rotary embedding (slices, negation, concatenation), the
 * cache write, the attention, residual additions, SiLU. For the 1-65 rows of a verify forward on tiny-py-coder
 * (hidden 256) each operation costs more in dispatch than in arithmetic: ~900 torch calls a forward. This file
 * does the same layer in C over float32 buffers, calling the native few-row product (fc_gemm, small_gemm.c)
 * and attention (fc_attention, tree_attention.c):
 *
 *   h = RMSNorm1(x); q, k, v = h Wq^T, h Wk^T, h Wv^T; rotary on q and k (cos, sin per row);
 *   k, v written into the KV cache buffers at positions past .. past + m - 1;
 *   a = attention(q, cache[:past + m], mask); x += a Wo^T;
 *   h = RMSNorm2(x); x += (silu(h Wg^T) * (h Wu^T)) Wd^T.
 *
 * Row independence: every step is per row (the norms, the rotary, SiLU) or row-independent by construction
 * (fc_gemm's FMA chains, fc_attention's per-row key lists), so a row's output is the same bits whatever the
 * number of rows: a plain decode step and the same token inside a verified draft tree agree exactly, which is
 * what keeps speculative decoding lossless. The results differ from torch's by float rounding only (the
 * norms' sums run in another order, SiLU's exp is a polynomial; tests/test_fused_layer.py compares them).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TGT __attribute__((target("avx2,fma")))
#include "simd_math.h"

/* g[i] = silu(g[i]) * u[i] over one row of n values, 8 lanes at a time: silu(x) = x * s(x), the logistic s from
 * e = exp(-|x|) (which cannot overflow): 1 / (1 + e) for x >= 0, e / (1 + e) below. The last n % 8 values go
 * through the same lanes from a padded copy, so a value's result depends on it alone, not on its column or on
 * the number of rows. libm's expf, one value at a time, took ~30 us a layer for a 7-row tree of tiny-py-coder
 * (768 values a row); this ~3. The fused layer only runs where fc_gemm's AVX2 and FMA are (native/layer.py). */
static TGT void silu_mul_row(float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        float gt[8] = {0}, ut[8] = {0};
        int64_t left = n - i < 8 ? n - i : 8;
        float *gp = g + i;
        const float *up = u + i;
        if (left < 8) {
            memcpy(gt, gp, sizeof(float) * (size_t)left);
            memcpy(ut, up, sizeof(float) * (size_t)left);
            gp = gt, up = ut;
        }
        __m256 x = _mm256_loadu_ps(gp);
        __m256 e = exp_nonpos(_mm256_or_ps(x, sign));
        __m256 num = _mm256_blendv_ps(one, e, _mm256_cmp_ps(x, zero, _CMP_LT_OQ));
        __m256 s = _mm256_div_ps(num, _mm256_add_ps(one, e));
        _mm256_storeu_ps(gp, _mm256_mul_ps(_mm256_mul_ps(x, s), _mm256_loadu_ps(up)));
        if (left < 8) memcpy(g + i, gt, sizeof(float) * (size_t)left);
    }
}
#else
static void silu_mul_row(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = (g[i] / (1.0f + expf(-g[i]))) * u[i];
}
#endif

void fc_gemm(const float *x, int64_t m, int64_t k, const float *wp, int64_t n, float *y);
int fc_attention(const float *q, const int64_t *qs, const float *k, const int64_t *ks, const float *v,
                 const int64_t *vs, int64_t b_count, int64_t heads, int64_t kv_heads, int64_t m_count,
                 int64_t s_count, int64_t d, const void *mask, int mask_kind, const int64_t *ms, int causal,
                 float scale, float *out);
typedef struct attention_rows attention_rows;
attention_rows *fc_attention_rows(int64_t b, int64_t m_count, int64_t s_count, const void *mask, int mask_kind,
                                  const int64_t *ms, int causal);
void fc_attention_rows_free(attention_rows *r);
int fc_attention_planned(const attention_rows *rows, int64_t b, const float *q, const int64_t *qs, const float *k,
                         const int64_t *ks, const float *v, const int64_t *vs, int64_t heads, int64_t kv_heads,
                         int64_t d, float scale, float *out);

/* out = w * (x * 1 / sqrt(mean(x^2) + eps)) per row (LlamaRMSNorm), 8 partial sums in a fixed order. */
static void rms_norm(const float *x, int64_t m, int64_t n, const float *w, float eps, float *out) {
    for (int64_t r = 0; r < m; r++) {
        const float *xr = x + r * n;
        float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; j++) part[j] += xr[i + j] * xr[i + j];
        for (; i < n; i++) part[0] += xr[i] * xr[i];
        float sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
        float inv = 1.0f / sqrtf(sum / (float)n + eps);
        for (i = 0; i < n; i++) out[r * n + i] = w[i] * (xr[i] * inv);
    }
}

/* The rotary embedding in place on (m, heads, d) rows: x * cos + rotate_half(x) * sin (apply_rotary_pos_emb). */
static void rotary(float *x, int64_t m, int64_t heads, int64_t d, const float *cos_, const float *sin_) {
    int64_t half = d / 2;
    float tmp[512];
    for (int64_t r = 0; r < m; r++)
        for (int64_t h = 0; h < heads; h++) {
            float *v = x + (r * heads + h) * d;
            const float *c = cos_ + r * d, *s = sin_ + r * d;
            memcpy(tmp, v, sizeof(float) * (size_t)d);
            for (int64_t i = 0; i < half; i++) v[i] = tmp[i] * c[i] + (-tmp[i + half]) * s[i];
            for (int64_t i = half; i < d; i++) v[i] = tmp[i] * c[i] + tmp[i - half] * s[i];
        }
}

int fc_fused_layer_supported(int64_t head_dim) { return head_dim > 0 && head_dim <= 512 && head_dim % 2 == 0; }

/* One layer over m rows; x (m, hidden) float32 is updated in place. Weights are fc_gemm_pack panels: wq
 * (heads * d outputs), wk and wv (kv_heads * d), wo (hidden), wg and wu (inter), wd (hidden). cos/sin: (m, d).
 * kbuf/vbuf: the layer's cache buffers (kv_heads, cap, d) holding past entries; the m new ones are written
 * after them (the caller checked past + m <= cap). mask: as fc_attention's (kind 0: none, 1: bool, 2: float
 * added to the scores), with strides ms over (batch, row, column) and causal when kind is 0.
 * Returns 0, -1 when scratch memory could not be had, or fc_attention's error. */
static int fused_layer(float *x, int64_t m, int64_t hidden, const float *norm1, const float *norm2, float eps,
                       const float *wq, const float *wk, const float *wv, const float *wo, const float *wg,
                       const float *wu, const float *wd, int64_t inter, int64_t heads, int64_t kv_heads, int64_t d,
                       const float *cos_, const float *sin_, float *kbuf, float *vbuf, int64_t cap, int64_t past,
                       const void *mask, int mask_kind, const int64_t *ms, int causal, float scale,
                       const attention_rows *rows) {
    int64_t nq = heads * d, nkv = kv_heads * d;
    int64_t width = hidden > nq ? hidden : nq;
    float *h = malloc(sizeof(float) * (size_t)(m * width));
    float *q = malloc(sizeof(float) * (size_t)(m * nq));
    float *k = malloc(sizeof(float) * (size_t)(m * nkv));
    float *v = malloc(sizeof(float) * (size_t)(m * nkv));
    float *a = malloc(sizeof(float) * (size_t)(m * nq));
    float *g = malloc(sizeof(float) * (size_t)(m * inter));
    float *u = malloc(sizeof(float) * (size_t)(m * inter));
    int rc = -1;
    if (!h || !q || !k || !v || !a || !g || !u) goto done;

    rms_norm(x, m, hidden, norm1, eps, h);
    fc_gemm(h, m, hidden, wq, nq, q);
    fc_gemm(h, m, hidden, wk, nkv, k);
    fc_gemm(h, m, hidden, wv, nkv, v);
    rotary(q, m, heads, d, cos_, sin_);
    rotary(k, m, kv_heads, d, cos_, sin_);
    for (int64_t r = 0; r < m; r++)  /* (m, kv_heads, d) -> buffers (kv_heads, cap, d) at past + r */
        for (int64_t j = 0; j < kv_heads; j++) {
            memcpy(kbuf + (j * cap + past + r) * d, k + (r * kv_heads + j) * d, sizeof(float) * (size_t)d);
            memcpy(vbuf + (j * cap + past + r) * d, v + (r * kv_heads + j) * d, sizeof(float) * (size_t)d);
        }
    {
        int64_t qs[3] = {m * nq, d, nq}, ks[3] = {kv_heads * cap * d, cap * d, d};
        rc = rows ? fc_attention_planned(rows, 0, q, qs, kbuf, ks, vbuf, ks, heads, kv_heads, d, scale, a)
                  : fc_attention(q, qs, kbuf, ks, vbuf, ks, 1, heads, kv_heads, m, past + m, d, mask, mask_kind, ms,
                                 causal, scale, a);
        if (rc != 0) goto done;
    }
    fc_gemm(a, m, nq, wo, hidden, h);
    for (int64_t i = 0; i < m * hidden; i++) x[i] = x[i] + h[i];

    rms_norm(x, m, hidden, norm2, eps, h);
    fc_gemm(h, m, hidden, wg, inter, g);
    fc_gemm(h, m, hidden, wu, inter, u);
    for (int64_t r = 0; r < m; r++) silu_mul_row(g + r * inter, u + r * inter, inter);
    fc_gemm(g, m, inter, wd, hidden, h);
    for (int64_t i = 0; i < m * hidden; i++) x[i] = x[i] + h[i];
    rc = 0;
done:
    free(h); free(q); free(k); free(v); free(a); free(g); free(u);
    return rc;
}

int fc_fused_layer(float *x, int64_t m, int64_t hidden, const float *norm1, const float *norm2, float eps,
                   const float *wq, const float *wk, const float *wv, const float *wo, const float *wg,
                   const float *wu, const float *wd, int64_t inter, int64_t heads, int64_t kv_heads, int64_t d,
                   const float *cos_, const float *sin_, float *kbuf, float *vbuf, int64_t cap, int64_t past,
                   const void *mask, int mask_kind, const int64_t *ms, int causal, float scale) {
    return fused_layer(x, m, hidden, norm1, norm2, eps, wq, wk, wv, wo, wg, wu, wd, inter, heads, kv_heads, d, cos_,
                       sin_, kbuf, vbuf, cap, past, mask, mask_kind, ms, causal, scale, NULL);
}

/* Fields of one layer in fc_fused_forward's ia (int64): the norms' weights, the seven panels, the intermediate
   size, heads, kv_heads, head size, the cache buffers and their capacity; da (double): eps, scale. */
#define LAYER_INTS 16
#define LAYER_DOUBLES 2

/* Every decoder layer of a forward over m rows in one call (fc_fused_layer per layer, the same arithmetic),
 * then, when final_norm is not NULL, the model's final RMSNorm of x into out (m, hidden): one call instead
 * of one per layer plus torch's six norm operations (~50 us, and ~28 converted arguments a layer). Every
 * layer's cache holds `past` entries. Returns 0 or the first layer's error. */
int fc_fused_forward(const int64_t *ia, const double *da, int64_t n_layers, float *x, int64_t m, int64_t hidden,
                     const float *cos_, const float *sin_, int64_t past, const void *mask, int mask_kind,
                     const int64_t *ms, int causal, const float *final_norm, double final_eps, float *out) {
    /* which keys each row sees: read from the mask once for every layer (the per-layer read was ~7 us a layer
       at 7 rows over 1,000 cached tokens); NULL (no memory): each layer reads it itself */
    attention_rows *rows = fc_attention_rows(0, m, past + m, mask, mask_kind, ms, causal);
    int rc = 0;
    for (int64_t l = 0; l < n_layers && rc == 0; l++) {
        const int64_t *f = ia + l * LAYER_INTS;
        const double *g = da + l * LAYER_DOUBLES;
        rc = fused_layer(x, m, hidden, (const float *)f[0], (const float *)f[1], (float)g[0], (const float *)f[2],
                         (const float *)f[3], (const float *)f[4], (const float *)f[5], (const float *)f[6],
                         (const float *)f[7], (const float *)f[8], f[9], f[10], f[11], f[12], cos_, sin_,
                         (float *)f[13], (float *)f[14], f[15], past, mask, mask_kind, ms, causal, (float)g[1], rows);
    }
    fc_attention_rows_free(rows);
    if (rc != 0) return rc;
    if (final_norm) rms_norm(x, m, hidden, final_norm, (float)final_eps, out);
    return 0;
}

/* A forward's inputs gathered in one call: x (m, hidden) = rows ids[r] of the embedding (vocab, hidden); cos and
 * sin (m, d) = rows positions[r] of the rotary tables (len, d). Copies, so the same bits as torch's embedding and
 * index_select. Returns 0, or -1 for an id or a position out of range (nothing meaningful written: the caller
 * then takes torch's path, which raises its own error). */
int fc_gather_inputs(const int64_t *ids, int64_t m, const float *embed, int64_t vocab, int64_t hidden,
                     const int64_t *positions, const float *cos_t, const float *sin_t, int64_t len, int64_t d,
                     float *x, float *cos_out, float *sin_out) {
    for (int64_t r = 0; r < m; r++)
        if (ids[r] < 0 || ids[r] >= vocab || positions[r] < 0 || positions[r] >= len) return -1;
    for (int64_t r = 0; r < m; r++) {
        memcpy(x + r * hidden, embed + ids[r] * hidden, sizeof(float) * (size_t)hidden);
        memcpy(cos_out + r * d, cos_t + positions[r] * d, sizeof(float) * (size_t)d);
        memcpy(sin_out + r * d, sin_t + positions[r] * d, sizeof(float) * (size_t)d);
    }
    return 0;
}
