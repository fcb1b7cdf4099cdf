/* Causal attention for a prefill on a CPU: many query rows, blocked (flash-attention style), AVX2/FMA.
 *
 * A cold completion waits for the prefill of its prompt (up to 1,024 tokens), and torch's CPU flash attention ran
 * that causal attention at ~52 GFLOP/s on one thread here (tiny-py-coder: 10 ms a layer, 62 ms of a ~200 ms
 * prefill), while the row-by-row kernel of tree_attention.c (built for the few rows of a decode step) took 24 ms a
 * layer. This kernel blocks 4 query rows x 64 keys: the scores as a small matrix product over the head's keys
 * transposed once per head, an online softmax per row (the running maximum and sum), and the weighted values as a
 * second small product. Query row i sees keys 0 .. s - m + i. Head size 64 only (the caller checks).
 *
 * Not bit-identical to torch's attention (another summation order); every method shares the prefill, and a
 * decode step's attention is still tree_attention.c's, so the lossless property does not depend on it.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#define TGT __attribute__((target("avx2,fma")))
#include "simd_math.h"

#define RB 6  /* query rows a block */
#define KB 64 /* keys a block */
#define HD 64 /* head size */

int64_t fc_thread_count(void); /* small_gemm.c */

/* One head: q (m x HD, row stride qs), k/v (s x HD, row stride ks/vs), out (m rows, row stride os). kt: scratch
   of HD x 16 * ceil(s / 16) floats. */
static TGT void prefill_head(const float *q, int64_t qs, const float *k, int64_t ks, const float *v, int64_t vs,
                             int64_t m, int64_t s, float scale, float *out, int64_t os, float *kt) {
    /* keys in panels of 16: panel p holds, per dim c, keys 16p .. 16p + 15 (contiguous 4 KB a panel; rows of a
       plain transpose lie s floats apart and, at s = 1,024, all in the same L1 sets) */
    for (int64_t j = 0; j < s; j++)
        for (int c = 0; c < HD; c++) kt[(j / 16) * HD * 16 + c * 16 + j % 16] = k[j * ks + c];
    int64_t offset = s - m; /* row i sees keys 0 .. offset + i */
    for (int64_t r0 = 0; r0 < m; r0 += RB) {
        int rows = (int)(m - r0 < RB ? m - r0 : RB);
        float qb[RB][HD], o[RB][HD] __attribute__((aligned(32))), sc[RB][KB] __attribute__((aligned(32)));
        float mx[RB], sum[RB];
        for (int r = 0; r < RB; r++) {
            const float *qr = q + (r0 + (r < rows ? r : 0)) * qs;
            for (int c = 0; c < HD; c++) qb[r][c] = qr[c] * scale, o[r][c] = 0.0f;
            mx[r] = -INFINITY, sum[r] = 0.0f;
        }
        int64_t last = offset + r0 + rows - 1; /* the block's last visible key */
        for (int64_t j0 = 0; j0 <= last; j0 += KB) {
            int64_t n = last + 1 - j0 < KB ? last + 1 - j0 : KB;
            /* scores: RB rows x 16 keys a pass over the head's dims */
            for (int64_t jj = 0; jj < n; jj += 16) {
                const float *kc = kt + (j0 + jj) / 16 * HD * 16;
                if (jj + 16 <= n) { /* named accumulators: GCC keeps an array of them on the stack */
                    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
                    __m256 a8 = a0, a9 = a0, a10 = a0, a11 = a0;
                    for (int c = 0; c < HD; c++) {
                        __m256 k0 = _mm256_loadu_ps(kc + c * 16), k1 = _mm256_loadu_ps(kc + c * 16 + 8), b;
                        b = _mm256_broadcast_ss(&qb[0][c]);
                        a0 = _mm256_fmadd_ps(b, k0, a0), a1 = _mm256_fmadd_ps(b, k1, a1);
                        b = _mm256_broadcast_ss(&qb[1][c]);
                        a2 = _mm256_fmadd_ps(b, k0, a2), a3 = _mm256_fmadd_ps(b, k1, a3);
                        b = _mm256_broadcast_ss(&qb[2][c]);
                        a4 = _mm256_fmadd_ps(b, k0, a4), a5 = _mm256_fmadd_ps(b, k1, a5);
                        b = _mm256_broadcast_ss(&qb[3][c]);
                        a6 = _mm256_fmadd_ps(b, k0, a6), a7 = _mm256_fmadd_ps(b, k1, a7);
                        b = _mm256_broadcast_ss(&qb[4][c]);
                        a8 = _mm256_fmadd_ps(b, k0, a8), a9 = _mm256_fmadd_ps(b, k1, a9);
                        b = _mm256_broadcast_ss(&qb[5][c]);
                        a10 = _mm256_fmadd_ps(b, k0, a10), a11 = _mm256_fmadd_ps(b, k1, a11);
                    }
                    _mm256_storeu_ps(&sc[0][jj], a0), _mm256_storeu_ps(&sc[0][jj + 8], a1);
                    _mm256_storeu_ps(&sc[1][jj], a2), _mm256_storeu_ps(&sc[1][jj + 8], a3);
                    _mm256_storeu_ps(&sc[2][jj], a4), _mm256_storeu_ps(&sc[2][jj + 8], a5);
                    _mm256_storeu_ps(&sc[3][jj], a6), _mm256_storeu_ps(&sc[3][jj + 8], a7);
                    _mm256_storeu_ps(&sc[4][jj], a8), _mm256_storeu_ps(&sc[4][jj + 8], a9);
                    _mm256_storeu_ps(&sc[5][jj], a10), _mm256_storeu_ps(&sc[5][jj + 8], a11);
                } else { /* the last partial 16 (keys past s never read) */
                    for (int r = 0; r < RB; r++)
                        for (int64_t j = jj; j < n; j++) {
                            float t = 0.0f;
                            for (int c = 0; c < HD; c++) t = fmaf(qb[r][c], kc[c * 16 + (j - jj)], t);
                            sc[r][j] = t;
                        }
                }
            }
            /* causal mask, online softmax */
            for (int r = 0; r < rows; r++) {
                int64_t see = offset + r0 + r - j0 + 1; /* keys of this block row r sees */
                if (see > n) see = n;
                float bm = -INFINITY;
                int64_t j = 0;
                if (see >= 8) {
                    __m256 vm = _mm256_loadu_ps(&sc[r][0]);
                    for (j = 8; j + 8 <= see; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(&sc[r][j]));
                    float lm[8];
                    _mm256_storeu_ps(lm, vm);
                    for (int t = 0; t < 8; t++) bm = lm[t] > bm ? lm[t] : bm;
                }
                for (; j < see; j++) bm = sc[r][j] > bm ? sc[r][j] : bm;
                float nm = bm > mx[r] ? bm : mx[r];
                float alpha = mx[r] == -INFINITY ? 0.0f : expf(mx[r] - nm);
                __m256 vnm = _mm256_set1_ps(nm), acc = _mm256_setzero_ps();
                for (j = 0; j + 8 <= see; j += 8) {
                    __m256 p = exp_nonpos(_mm256_sub_ps(_mm256_loadu_ps(&sc[r][j]), vnm));
                    _mm256_storeu_ps(&sc[r][j], p);
                    acc = _mm256_add_ps(acc, p);
                }
                float lanes[8], ps = 0.0f;
                _mm256_storeu_ps(lanes, acc);
                for (int t = 0; t < 8; t++) ps += lanes[t];
                for (; j < see; j++) ps += (sc[r][j] = expf(sc[r][j] - nm));
                for (; j < n; j++) sc[r][j] = 0.0f;
                sum[r] = sum[r] * alpha + ps;
                mx[r] = nm;
                if (alpha != 1.0f) {
                    __m256 va = _mm256_set1_ps(alpha);
                    for (int c = 0; c < HD; c += 8) _mm256_store_ps(&o[r][c], _mm256_mul_ps(_mm256_load_ps(&o[r][c]), va));
                }
            }
            for (int r = rows; r < RB; r++)
                for (int64_t j = 0; j < n; j++) sc[r][j] = 0.0f;
            /* values: two rows x 32 dims a pass over the block's keys */
            for (int r = 0; r < RB; r += 2)
                for (int h = 0; h < HD; h += 32) {
                    __m256 a0 = _mm256_load_ps(&o[r][h]), a1 = _mm256_load_ps(&o[r][h + 8]);
                    __m256 a2 = _mm256_load_ps(&o[r][h + 16]), a3 = _mm256_load_ps(&o[r][h + 24]);
                    __m256 b0 = _mm256_load_ps(&o[r + 1][h]), b1 = _mm256_load_ps(&o[r + 1][h + 8]);
                    __m256 b2 = _mm256_load_ps(&o[r + 1][h + 16]), b3 = _mm256_load_ps(&o[r + 1][h + 24]);
                    for (int64_t j = 0; j < n; j++) {
                        const float *vr = v + (j0 + j) * vs + h;
                        __m256 v0 = _mm256_loadu_ps(vr), v1 = _mm256_loadu_ps(vr + 8);
                        __m256 v2 = _mm256_loadu_ps(vr + 16), v3 = _mm256_loadu_ps(vr + 24);
                        __m256 p = _mm256_broadcast_ss(&sc[r][j]), p1 = _mm256_broadcast_ss(&sc[r + 1][j]);
                        a0 = _mm256_fmadd_ps(p, v0, a0), a1 = _mm256_fmadd_ps(p, v1, a1);
                        a2 = _mm256_fmadd_ps(p, v2, a2), a3 = _mm256_fmadd_ps(p, v3, a3);
                        b0 = _mm256_fmadd_ps(p1, v0, b0), b1 = _mm256_fmadd_ps(p1, v1, b1);
                        b2 = _mm256_fmadd_ps(p1, v2, b2), b3 = _mm256_fmadd_ps(p1, v3, b3);
                    }
                    _mm256_store_ps(&o[r][h], a0), _mm256_store_ps(&o[r][h + 8], a1);
                    _mm256_store_ps(&o[r][h + 16], a2), _mm256_store_ps(&o[r][h + 24], a3);
                    _mm256_store_ps(&o[r + 1][h], b0), _mm256_store_ps(&o[r + 1][h + 8], b1);
                    _mm256_store_ps(&o[r + 1][h + 16], b2), _mm256_store_ps(&o[r + 1][h + 24], b3);
                }
        }
        for (int r = 0; r < rows; r++) {
            float inv = 1.0f / sum[r];
            float *dst = out + (r0 + r) * os;
            for (int c = 0; c < HD; c++) dst[c] = o[r][c] * inv;
        }
    }
}

int fc_prefill_attention_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* softmax(q k^T * scale, causal) v for every head: q (heads, m, 64) with strides qs[0] (head), qs[1] (row); k, v
   (kv_heads, s, 64) likewise (head h reads kv head h / (heads / kv_heads)); out (m, heads, 64) contiguous. Row i
   sees keys 0 .. s - m + i (s >= m). Returns 0, -1 for a head size other than 64, -2 when scratch memory fails. */
int fc_prefill_attention(const float *q, const int64_t *qs, const float *k, const int64_t *ks, const float *v,
                         const int64_t *vs, int64_t heads, int64_t kv_heads, int64_t m, int64_t s, int64_t d,
                         float scale, float *out) {
    if (d != HD || s < m || heads % kv_heads) return -1;
    int64_t group = heads / kv_heads, threads = fc_thread_count();
    int failed = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads((int)(threads < heads ? threads : heads)) schedule(static) if (threads > 1)
#endif
    for (int64_t h = 0; h < heads; h++) {
        float *kt = (float *)malloc((size_t)(HD * ((s + 15) / 16) * 16) * sizeof(float));
        if (kt == NULL) {
            failed = 1;
            continue;
        }
        int64_t g = h / group;
        prefill_head(q + h * qs[0], qs[1], k + g * ks[0], ks[1], v + g * vs[0], vs[1], m, s, scale, out + h * HD,
                     heads * HD, kt);
        free(kt);
    }
    return failed ? -2 : 0;
}
#else
int fc_prefill_attention_supported(void) { return 0; }
int fc_prefill_attention(const float *q, const int64_t *qs, const float *k, const int64_t *ks, const float *v,
                         const int64_t *vs, int64_t heads, int64_t kv_heads, int64_t m, int64_t s, int64_t d,
                         float scale, float *out) {
    (void)q; (void)qs; (void)k; (void)ks; (void)v; (void)vs; (void)heads; (void)kv_heads; (void)m; (void)s; (void)d;
    (void)scale; (void)out;
    return -1;
}
#endif
