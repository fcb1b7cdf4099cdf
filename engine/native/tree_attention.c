/* Attention for the few query rows of a decode step or a verified draft tree, on a CPU.
 *
 * A plain decode step has 1 query row and a draft-tree forward 2-65, each attending to a KV cache of
 * hundreds of tokens. torch's CPU flash attention blocks for long query sequences; for a few rows with a
 * tree mask it took ~200 us a layer here (6 rows x 512 keys x 4 heads x 64 dims: ~16 GFLOP/s). This file
 * computes the same softmax(q k^T * scale + mask) v row by row with AVX2/FMA.
 *
 * Row independence. Each query row first lists the keys it may see (the mask's allowed entries, in cache
 * order); everything after works on that list by list index: 8 dot products at a time, each one the same
 * fixed sum whatever slot it has; the max; exp; the sum of weights in 8 lanes by list index; the weighted
 * sum of values in list order. A row's output therefore depends only on its own query and the keys and
 * values it sees, not on the number of rows, on masked-out keys between them, or on where the tree put its
 * ancestors in the cache: a node of a verified tree gets the same bits as the same token decoded alone after
 * the same accepted tokens.
 *
 * x86-64 with AVX2 and FMA only (fc_attention_supported checks at run time); elsewhere stubs return 0.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma")))
#include "simd_math.h"
#ifdef _OPENMP
#include <omp.h>
#endif

int64_t fc_thread_count(void); /* small_gemm.c: the threads fc_set_threads gave */
/* Rows x keys x head size at least (a 1-row step over 256 cached tokens at 64 dims) for the heads to be split
   over threads; below, a parallel region would cost about what a head does. */
#define ATTENTION_THREAD_WORK 16384

int fc_attention_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* Sum of the 8 lanes of each of a[0..7] -> lane i holds the sum of a[i]. The same adds for every i. */
static inline TGT __m256 hsum8(const __m256 *a) {
    __m256 s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
    __m256 s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
    __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
    /* s0123 lanes: [a0.lo a1.lo a2.lo a3.lo | a0.hi a1.hi a2.hi a3.hi], likewise s4567 for a4..a7 */
    __m256 lo = _mm256_permute2f128_ps(s0123, s4567, 0x20), hi = _mm256_permute2f128_ps(s0123, s4567, 0x31);
    return _mm256_add_ps(lo, hi);
}

static inline TGT float hsum(__m256 v) {
    float t[8];
    _mm256_storeu_ps(t, v);
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

static inline TGT float hmax(__m256 v) {
    float t[8], m;
    _mm256_storeu_ps(t, v);
    m = t[0];
    for (int i = 1; i < 8; i++) m = t[i] > m ? t[i] : m;
    return m;
}

/* Scores of one query row for one block of 8 listed keys (kp[0..7]; lanes at or past `valid` are padding):
   s[t] = q . k_t * scale (+ bias[t]), padding lanes -inf; vmax (8 floats) takes their lane-wise max. */
static inline TGT void score_block(const float *q, int64_t d, const float *const *kp, const float *bias, int64_t valid,
                                   __m256 vscale, float *s, float *vmax) {
    __m256 acc[8];
    {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        for (int64_t c = 0; c < d; c += 8) {
            __m256 qv = _mm256_loadu_ps(q + c);
            a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp[0] + c), a0);
            a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp[1] + c), a1);
            a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp[2] + c), a2);
            a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp[3] + c), a3);
            a4 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp[4] + c), a4);
            a5 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp[5] + c), a5);
            a6 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp[6] + c), a6);
            a7 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp[7] + c), a7);
        }
        acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3, acc[4] = a4, acc[5] = a5, acc[6] = a6, acc[7] = a7;
    }
    __m256 sc = _mm256_mul_ps(hsum8(acc), vscale);
    if (bias) {
        float b[8];
        for (int t = 0; t < 8; t++) b[t] = t < valid ? bias[t] : 0.0f;
        sc = _mm256_add_ps(sc, _mm256_loadu_ps(b));
    }
    if (valid < 8) { /* padding lanes: -inf, so they add nothing below */
        float t8[8];
        _mm256_storeu_ps(t8, sc);
        for (int64_t t = valid; t < 8; t++) t8[t] = -INFINITY;
        sc = _mm256_loadu_ps(t8);
    }
    _mm256_storeu_ps(s, sc);
    _mm256_storeu_ps(vmax, _mm256_max_ps(_mm256_loadu_ps(vmax), sc));
}

/* Scores of one row for its listed keys from list index j_from (a multiple of 8) to its end n. */
static TGT void score_rest(const float *q, int64_t d, const float *const *keys, const float *bias, int64_t j_from,
                           int64_t n, __m256 vscale, float *s, float *vmax) {
    for (int64_t j0 = j_from; j0 < n; j0 += 8) {
        const float *kp[8];
        for (int t = 0; t < 8; t++) kp[t] = keys[j0 + t < n ? j0 + t : j0];
        score_block(q, d, kp, bias ? bias + j0 : NULL, n - j0 < 8 ? n - j0 : 8, vscale, s + j0, vmax);
    }
}

/* Softmax weights in place: s[j] = exp(s[j] - max) for j < n (n + 8 floats of room); returns 1 / their sum. */
static TGT float softmax_weights(float *s, int64_t n, const float *vmax) {
    const __m256 m = _mm256_set1_ps(hmax(_mm256_loadu_ps(vmax)));
    __m256 vsum = _mm256_setzero_ps();
    for (int64_t j0 = 0; j0 < n; j0 += 8) {
        __m256 p = exp_nonpos(_mm256_sub_ps(_mm256_loadu_ps(s + j0), m));
        _mm256_storeu_ps(s + j0, p);
        vsum = _mm256_add_ps(vsum, p);
    }
    return 1.0f / hsum(vsum);
}

/* acc (d floats) += sum over listed keys j in [j_from, j_to) of s[j] * vals[j], one FMA chain per output in j
   order (carried across calls through acc: the same chain as one pass over every j). */
static TGT void weighted_values(const float *s, const float *const *vals, int64_t j_from, int64_t j_to, int64_t d,
                                float *acc) {
    int64_t c0 = 0;
    for (; c0 + 64 <= d; c0 += 64) { /* 8 accumulators of 8 floats per chunk of 64 dims */
        float *o = acc + c0;
        __m256 a0 = _mm256_loadu_ps(o), a1 = _mm256_loadu_ps(o + 8), a2 = _mm256_loadu_ps(o + 16),
               a3 = _mm256_loadu_ps(o + 24), a4 = _mm256_loadu_ps(o + 32), a5 = _mm256_loadu_ps(o + 40),
               a6 = _mm256_loadu_ps(o + 48), a7 = _mm256_loadu_ps(o + 56);
        for (int64_t j = j_from; j < j_to; j++) {
            __m256 p = _mm256_broadcast_ss(s + j);
            const float *vp = vals[j] + c0;
            a0 = _mm256_fmadd_ps(p, _mm256_loadu_ps(vp), a0);
            a1 = _mm256_fmadd_ps(p, _mm256_loadu_ps(vp + 8), a1);
            a2 = _mm256_fmadd_ps(p, _mm256_loadu_ps(vp + 16), a2);
            a3 = _mm256_fmadd_ps(p, _mm256_loadu_ps(vp + 24), a3);
            a4 = _mm256_fmadd_ps(p, _mm256_loadu_ps(vp + 32), a4);
            a5 = _mm256_fmadd_ps(p, _mm256_loadu_ps(vp + 40), a5);
            a6 = _mm256_fmadd_ps(p, _mm256_loadu_ps(vp + 48), a6);
            a7 = _mm256_fmadd_ps(p, _mm256_loadu_ps(vp + 56), a7);
        }
        _mm256_storeu_ps(o, a0);
        _mm256_storeu_ps(o + 8, a1);
        _mm256_storeu_ps(o + 16, a2);
        _mm256_storeu_ps(o + 24, a3);
        _mm256_storeu_ps(o + 32, a4);
        _mm256_storeu_ps(o + 40, a5);
        _mm256_storeu_ps(o + 48, a6);
        _mm256_storeu_ps(o + 56, a7);
    }
    for (; c0 < d; c0 += 8) { /* the rest, 8 dims at a time: the same chain per output */
        __m256 a = _mm256_loadu_ps(acc + c0);
        for (int64_t j = j_from; j < j_to; j++)
            a = _mm256_fmadd_ps(_mm256_broadcast_ss(s + j), _mm256_loadu_ps(vals[j] + c0), a);
        _mm256_storeu_ps(acc + c0, a);
    }
}

/* The same work for several rows at once where the CPU has AVX-512F and AVX-512VL (fc_attention_use): the
   keys and values every row sees (the cache before a draft tree) are loaded into registers once for two or four
   rows. Each row's every score, weight and output is still the same chain of operations in the same order as in
   score_block and weighted_values (lane for lane: the same bits); only the register blocking differs. */
#define TGT512 __attribute__((target("avx512f,avx512vl,avx2,fma")))

/* Multi-row scores prefetch the shared keys kv_pf blocks of 8 ahead (into L1): the pair kernel's FMAs between its
   loads leave fewer key lines in flight than the one-row loop. In one process at 1,000 cached tokens, alternating
   per forward (benchmarks/results/2026-11-27c/ab_prefetch.py, four runs): tree forwards of 2-5 draft tokens
   x0.94-0.97, 1 x0.95-1.00, 7-12 x0.98-0.99; 2 blocks ahead about the same, 4 and 8 up to 5% slower.
   fc_attention_kv_pf sets it (0: off). */
static int kv_pf = 1;
int fc_attention_kv_pf(int blocks) {
    int was = kv_pf;
    if (blocks >= 0) kv_pf = blocks;
    return was;
}

static int attn512 = -1; /* 1: the kernels below serve blocks of rows; 0: one row at a time; -1: not decided yet */

static int use512(void) {
    if (attn512 < 0) {
        __builtin_cpu_init();
        attn512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    }
    return attn512;
}

/* isa 0: the CPU's best kernels; 1: AVX2 only. Returns the kernels now in use: 2 AVX-512, 1 AVX2. */
int fc_attention_use(int isa) {
    attn512 = -1;
    if (isa == 1 || !use512())
        attn512 = 0;
    return attn512 ? 2 : 1;
}

/* score_block's end for a full block (8 keys, none padding): the same operations on one row's accumulators. */
static inline TGT void finish_block(const __m256 *acc, const float *bias, __m256 vscale, float *s, float *vmax) {
    __m256 sc = _mm256_mul_ps(hsum8(acc), vscale);
    if (bias)
        sc = _mm256_add_ps(sc, _mm256_loadu_ps(bias));
    _mm256_storeu_ps(s, sc);
    _mm256_storeu_ps(vmax, _mm256_max_ps(_mm256_loadu_ps(vmax), sc));
}

/* score_block for two rows and one full block of 8 keys: 16 accumulators, the 8 keys' chunks loaded once for both
   rows (AVX-512VL gives 32 vector registers). IN_REGISTER keeps GCC from folding each load into both FMAs as a
   memory operand (18 loads a step instead of 10): 4-9% less time at 4-12 rows over 1,024 keys (C harness,
   interleaved). */
#define IN_REGISTER(v) __asm__("" : "+v"(v))
static TGT512 void score_block2(const float *q0, const float *q1, int64_t d, const float *const *kp,
                                const float *bias0, const float *bias1, __m256 vscale, float *s0, float *s1,
                                float *vmax0, float *vmax1) {
    __m256 a[8], b[8];
    {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0, b4 = a0, b5 = a0, b6 = a0, b7 = a0;
        const float *k0 = kp[0], *k1 = kp[1], *k2 = kp[2], *k3 = kp[3], *k4 = kp[4], *k5 = kp[5], *k6 = kp[6],
                    *k7 = kp[7];
        for (int64_t c = 0; c < d; c += 8) {
            __m256 x = _mm256_loadu_ps(q0 + c), y = _mm256_loadu_ps(q1 + c), k;
            k = _mm256_loadu_ps(k0 + c); IN_REGISTER(k); a0 = _mm256_fmadd_ps(x, k, a0); b0 = _mm256_fmadd_ps(y, k, b0);
            k = _mm256_loadu_ps(k1 + c); IN_REGISTER(k); a1 = _mm256_fmadd_ps(x, k, a1); b1 = _mm256_fmadd_ps(y, k, b1);
            k = _mm256_loadu_ps(k2 + c); IN_REGISTER(k); a2 = _mm256_fmadd_ps(x, k, a2); b2 = _mm256_fmadd_ps(y, k, b2);
            k = _mm256_loadu_ps(k3 + c); IN_REGISTER(k); a3 = _mm256_fmadd_ps(x, k, a3); b3 = _mm256_fmadd_ps(y, k, b3);
            k = _mm256_loadu_ps(k4 + c); IN_REGISTER(k); a4 = _mm256_fmadd_ps(x, k, a4); b4 = _mm256_fmadd_ps(y, k, b4);
            k = _mm256_loadu_ps(k5 + c); IN_REGISTER(k); a5 = _mm256_fmadd_ps(x, k, a5); b5 = _mm256_fmadd_ps(y, k, b5);
            k = _mm256_loadu_ps(k6 + c); IN_REGISTER(k); a6 = _mm256_fmadd_ps(x, k, a6); b6 = _mm256_fmadd_ps(y, k, b6);
            k = _mm256_loadu_ps(k7 + c); IN_REGISTER(k); a7 = _mm256_fmadd_ps(x, k, a7); b7 = _mm256_fmadd_ps(y, k, b7);
        }
        a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3, a[4] = a4, a[5] = a5, a[6] = a6, a[7] = a7;
        b[0] = b0, b[1] = b1, b[2] = b2, b[3] = b3, b[4] = b4, b[5] = b5, b[6] = b6, b[7] = b7;
    }
    finish_block(a, bias0, vscale, s0, vmax0);
    finish_block(b, bias1, vscale, s1, vmax1);
}

/* weighted_values for R rows over the same keys [j_from, j_to) (d a multiple of 64): per key, its values loaded
   once into four 512-bit registers (64 dims) for all R rows; row r's output dims are one FMA chain each in j order,
   lane for lane the chain of weighted_values. */
#define WEIGHTED_VALUES_ROWS(R)                                                                                     \
    static TGT512 void weighted_values##R(const float *const *s, const float *const *vals, int64_t j_from,          \
                                          int64_t j_to, int64_t d, float *const *acc) {                             \
        for (int64_t c0 = 0; c0 + 64 <= d; c0 += 64) {                                                              \
            __m512 a[R][4];                                                                                         \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                                     \
                _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) a[r][u] = _mm512_loadu_ps(acc[r] + c0 + 16 * u); \
            for (int64_t j = j_from; j < j_to; j++) {                                                               \
                const float *vp = vals[j] + c0;                                                                     \
                __m512 v0 = _mm512_loadu_ps(vp), v1 = _mm512_loadu_ps(vp + 16), v2 = _mm512_loadu_ps(vp + 32),     \
                       v3 = _mm512_loadu_ps(vp + 48);                                                               \
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                               \
                    __m512 p = _mm512_set1_ps(s[r][j]);                                                             \
                    a[r][0] = _mm512_fmadd_ps(p, v0, a[r][0]);                                                      \
                    a[r][1] = _mm512_fmadd_ps(p, v1, a[r][1]);                                                      \
                    a[r][2] = _mm512_fmadd_ps(p, v2, a[r][2]);                                                      \
                    a[r][3] = _mm512_fmadd_ps(p, v3, a[r][3]);                                                      \
                }                                                                                                   \
            }                                                                                                       \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                                     \
                _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) _mm512_storeu_ps(acc[r] + c0 + 16 * u, a[r][u]); \
        }                                                                                                           \
    }
WEIGHTED_VALUES_ROWS(2)
WEIGHTED_VALUES_ROWS(3)
WEIGHTED_VALUES_ROWS(4)

/* Keys per chunk of the shared weighted sum of values: every row's pass over a chunk finds its values in L1. */
#define VALUE_CHUNK 32

/* The keys each query row may see, read from the mask once per forward: the same lists serve every layer and head
 * (the fused forward, decoder_layer.c, plans once for its six layers; ~7 us a layer at 7 rows over 1,000 keys).
 * Per row i: its visible keys in cache order (idx, stride entries a row), their mask values (bias; use_bias: any
 * nonzero), their count; shared: the longest list prefix every row has, shared_blocks that rounded down to 8. */
typedef struct attention_rows {
    int64_t m_count, s_count, stride, shared, shared_blocks;
    int64_t *idx, *count;
    float *bias;
    int *use_bias;
} attention_rows;

void fc_attention_rows_free(attention_rows *r) {
    if (!r) return;
    free(r->idx);
    free(r->bias);
    free(r->count);
    free(r->use_bias);
    free(r);
}

/* The row plan of batch entry b of a mask (kinds and strides as fc_attention's); NULL when memory ran out. */
attention_rows *fc_attention_rows(int64_t b, int64_t m_count, int64_t s_count, const void *mask, int mask_kind,
                                  const int64_t *ms, int causal) {
    attention_rows *r = calloc(1, sizeof(attention_rows));
    if (!r) return NULL;
    int64_t stride = s_count + 8;
    r->m_count = m_count, r->s_count = s_count, r->stride = stride;
    r->idx = malloc(sizeof(int64_t) * (size_t)(m_count * stride));
    r->bias = malloc(sizeof(float) * (size_t)(m_count * stride));
    r->count = malloc(sizeof(int64_t) * (size_t)m_count);
    r->use_bias = malloc(sizeof(int) * (size_t)m_count);
    if (!r->idx || !r->bias || !r->count || !r->use_bias) {
        fc_attention_rows_free(r);
        return NULL;
    }
    for (int64_t i = 0; i < m_count; i++) { /* the keys row i sees: the same list for every head */
        int64_t n = 0, *ix = r->idx + i * stride;
        float *bi = r->bias + i * stride;
        r->use_bias[i] = 0;
        if (mask_kind == 0) {
            int64_t last = causal ? s_count - m_count + i : s_count - 1;
            for (int64_t j = 0; j <= last; j++) ix[n++] = j;
        } else if (mask_kind == 1) {
            const uint8_t *row = (const uint8_t *)mask + b * ms[0] + i * ms[1];
            for (int64_t j = 0; j < s_count; j++)
                if (row[j * ms[2]]) ix[n++] = j;
        } else {
            const float *row = (const float *)mask + b * ms[0] + i * ms[1];
            for (int64_t j = 0; j < s_count; j++) {
                float x = row[j * ms[2]];
                if (x > -1e30f) {
                    bi[n] = x;
                    r->use_bias[i] |= x != 0.0f;
                    ix[n++] = j;
                }
            }
        }
        r->count[i] = n;
    }
    /* shared: the longest list prefix every row has (keys, not mask values); scored in whole blocks of 8 */
    int64_t shared = 0;
    if (m_count > 0)
        shared = r->count[0];
    for (int64_t i = 1; i < m_count && shared > 0; i++) {
        int64_t lim = r->count[i] < shared ? r->count[i] : shared, j = 0;
        const int64_t *a = r->idx, *c = r->idx + i * stride;
        while (j < lim && a[j] == c[j]) j++;
        shared = j;
    }
    r->shared = shared;
    r->shared_blocks = shared / 8 * 8;
    return r;
}

/* out[b, i, h, :] = softmax(q[b, h, i] . k[b, g(h), j] * scale + mask[b, i, j]) v[b, g(h), j] over the
 * keys j row i may see, g(h) = h / (heads / kv_heads), for one batch entry b whose rows' keys `rows` lists
 * (fc_attention_rows of the same mask and b): q, k, v, strides, out as fc_attention's. Returns 0, or -1 when
 * scratch memory could not be allocated. */
TGT int fc_attention_planned(const attention_rows *rows, int64_t b, const float *q, const int64_t *qs, const float *k,
                             const int64_t *ks, const float *v, const int64_t *vs, int64_t heads, int64_t kv_heads,
                             int64_t d, float scale, float *out) {
    int64_t m_count = rows->m_count, s_count = rows->s_count, stride = rows->stride;
    int64_t group = heads / kv_heads;
    const int64_t *idx = rows->idx, *count = rows->count;
    const float *bias = rows->bias;
    const int *use_bias = rows->use_bias;
    int64_t shared = rows->shared, shared_blocks = rows->shared_blocks;
    /* heads split over fc_gemm's threads when there is enough work a head (each thread its own scratch) */
    int64_t threads = fc_thread_count();
    if (threads > heads)
        threads = heads;
    if (m_count * s_count * d < ATTENTION_THREAD_WORK)
        threads = 1;
    /* per thread and row: scores, accumulators, 1 / sum, running maxima; per thread: key and value pointers */
    float *scores_all = malloc(sizeof(float) * (size_t)(threads * m_count * stride));
    float *acc_all = malloc(sizeof(float) * (size_t)(threads * m_count * d));
    float *inv_all = malloc(sizeof(float) * (size_t)(threads * m_count));
    float *vmax_all = malloc(sizeof(float) * 8 * (size_t)(threads * m_count));
    const float **kp_all = malloc(sizeof(float *) * (size_t)(threads * stride * 2));
    int rc = 0;
    if (!scores_all || !acc_all || !inv_all || !vmax_all || !kp_all) {
        rc = -1;
        goto done;
    }
    const __m256 vscale = _mm256_set1_ps(scale);
    const int wide = m_count > 1 && use512(); /* rows in blocks (the AVX-512 kernels) */
    /* heads outer: one kv head's keys and values stay in cache for all rows. Each head's outputs are its own
       and computed the same way on any thread: the same bits on any number of threads. */
#ifdef _OPENMP
#pragma omp parallel for num_threads((int)threads) schedule(static) if (threads > 1)
#endif
    for (int64_t h = 0; h < heads; h++) {
#ifdef _OPENMP
        int64_t tid = threads > 1 ? omp_get_thread_num() : 0;
#else
        int64_t tid = 0;
#endif
        float *scores = scores_all + tid * m_count * stride, *acc = acc_all + tid * m_count * d;
        float *inv = inv_all + tid * m_count, *vmax = vmax_all + tid * 8 * m_count;
        const float **kp = kp_all + tid * stride * 2, **vp = kp + stride;
        int64_t g = h / group;
        const float *kb = k + b * ks[0] + g * ks[1], *vb = v + b * vs[0] + g * vs[1];
        for (int64_t j = 0; j < shared; j++) {
            kp[j] = kb + idx[j] * ks[2];
            vp[j] = vb + idx[j] * vs[2];
        }
        for (int64_t i = 0; i < 8 * m_count; i++) vmax[i] = -INFINITY;
        const float *qh = q + b * qs[0] + h * qs[1];
        for (int64_t j0 = 0; j0 < shared_blocks; j0 += 8) { /* each block of shared keys: every row */
            int64_t i = 0;
            if (kv_pf && m_count > 1)
                for (int64_t t = j0 + 8 * kv_pf; t < j0 + 8 * kv_pf + 8 && t < shared; t++)
                    for (int64_t c = 0; c < d; c += 16) _mm_prefetch((const char *)(kp[t] + c), _MM_HINT_T0);
            if (wide) /* two rows at a time */
                for (; i + 2 <= m_count; i += 2)
                    score_block2(qh + i * qs[2], qh + (i + 1) * qs[2], d, kp + j0,
                                 use_bias[i] ? bias + i * stride + j0 : NULL,
                                 use_bias[i + 1] ? bias + (i + 1) * stride + j0 : NULL, vscale,
                                 scores + i * stride + j0, scores + (i + 1) * stride + j0, vmax + 8 * i,
                                 vmax + 8 * (i + 1));
            for (; i < m_count; i++)
                score_block(qh + i * qs[2], d, kp + j0, use_bias[i] ? bias + i * stride + j0 : NULL, 8, vscale,
                            scores + i * stride + j0, vmax + 8 * i);
        }
        for (int64_t i = 0; i < m_count; i++) { /* each row's own keys */
            int64_t n = count[i];
            const int64_t *ix = idx + i * stride;
            if (n == 0) continue;
            const float **row_k = vp + shared; /* scratch for row i's own key pointers (values come later) */
            if (i == 0) {
                for (int64_t j = shared; j < n; j++) kp[j] = kb + ix[j] * ks[2];
                score_rest(q + b * qs[0] + h * qs[1], d, kp, use_bias[0] ? bias : NULL, shared_blocks, n,
                           vscale, scores, vmax);
            } else {
                /* row_k[j - shared_blocks] for list index j >= shared_blocks */
                for (int64_t j = shared_blocks; j < n; j++) row_k[j - shared_blocks] = kb + ix[j] * ks[2];
                score_rest(q + b * qs[0] + h * qs[1] + i * qs[2], d, row_k - shared_blocks,
                           use_bias[i] ? bias + i * stride : NULL, shared_blocks, n, vscale, scores + i * stride,
                           vmax + 8 * i);
            }
            inv[i] = softmax_weights(scores + i * stride, n, vmax + 8 * i);
        }
        for (int64_t i = 0; i < m_count * d; i++) acc[i] = 0.0f;
        for (int64_t j0 = 0; j0 < shared; j0 += VALUE_CHUNK) { /* shared values: every row per chunk */
            int64_t j1 = j0 + VALUE_CHUNK < shared ? j0 + VALUE_CHUNK : shared;
            int64_t i = 0;
            if (wide && d % 64 == 0) { /* four rows, then three or two, at a time */
                const float *sr[4];
                float *ar[4];
                for (; i + 4 <= m_count; i += 4) {
                    for (int r = 0; r < 4; r++) sr[r] = scores + (i + r) * stride, ar[r] = acc + (i + r) * d;
                    weighted_values4(sr, vp, j0, j1, d, ar);
                }
                if (i + 3 == m_count) { /* one pass for the last three (a pair and a single row were two) */
                    for (int r = 0; r < 3; r++) sr[r] = scores + (i + r) * stride, ar[r] = acc + (i + r) * d;
                    weighted_values3(sr, vp, j0, j1, d, ar);
                    i += 3;
                }
                for (; i + 2 <= m_count; i += 2) {
                    for (int r = 0; r < 2; r++) sr[r] = scores + (i + r) * stride, ar[r] = acc + (i + r) * d;
                    weighted_values2(sr, vp, j0, j1, d, ar);
                }
            }
            for (; i < m_count; i++)
                weighted_values(scores + i * stride, vp, j0, j1, d, acc + i * d);
        }
        for (int64_t i = 0; i < m_count; i++) {
            int64_t n = count[i];
            const int64_t *ix = idx + i * stride;
            float *o = out + ((b * m_count + i) * heads + h) * d;
            if (n == 0) { /* nothing visible: zeros */
                for (int64_t c = 0; c < d; c++) o[c] = 0.0f;
                continue;
            }
            if (n > shared) {
                const float **row_v = vp + shared; /* past the shared pointers */
                for (int64_t j = shared; j < n; j++) row_v[j - shared] = vb + ix[j] * vs[2];
                weighted_values(scores + i * stride, row_v - shared, shared, n, d, acc + i * d);
            }
            const __m256 vi = _mm256_set1_ps(inv[i]);
            for (int64_t c = 0; c < d; c += 8)
                _mm256_storeu_ps(o + c, _mm256_mul_ps(_mm256_loadu_ps(acc + i * d + c), vi));
        }
    }
done:
    free(scores_all);
    free(acc_all);
    free(inv_all);
    free(vmax_all);
    free(kp_all);
    return rc;
}

/* out[b, i, h, :] = softmax(q[b, h, i] . k[b, g(h), j] * scale + mask[b, i, j]) v[b, g(h), j] over the
 * keys j row i may see, g(h) = h / (heads / kv_heads).
 *
 * q: (B, H, M, D) with strides qs[0..2] (D contiguous); k, v: (B, Hkv, S, D) with strides ks/vs;
 * mask_kind 0: none (every key visible; with causal != 0 row i sees keys 0 .. S - M + i);
 * 1: bool (B, M, S) bytes with strides ms[0..2], nonzero = visible;
 * 2: float (B, M, S) with strides ms, visible where > -1e30, the value added to the scaled score.
 * out: (B, M, H, D) contiguous. Returns 0, or -1 when scratch memory could not be allocated.
 *
 * Rows share their keys: the first keys of every row's list are the same (the whole cache before a draft
 * tree), so those blocks are read from memory once per head and found in L1 by the other rows (a draft tree
 * of 8 rows over 1,000 cached tokens read every key and value 8 times before). Each row still computes every
 * score, weight and output with the same operations in the same order as alone. */
int fc_attention(const float *q, const int64_t *qs, const float *k, const int64_t *ks, const float *v,
                 const int64_t *vs, int64_t b_count, int64_t heads, int64_t kv_heads, int64_t m_count,
                 int64_t s_count, int64_t d, const void *mask, int mask_kind, const int64_t *ms, int causal,
                 float scale, float *out) {
    for (int64_t b = 0; b < b_count; b++) {
        attention_rows *rows = fc_attention_rows(b, m_count, s_count, mask, mask_kind, ms, causal);
        int rc = rows ? fc_attention_planned(rows, b, q, qs, k, ks, v, vs, heads, kv_heads, d, scale, out) : -1;
        fc_attention_rows_free(rows);
        if (rc != 0) return rc;
    }
    return 0;
}

#else

int fc_attention_supported(void) { return 0; }

int fc_attention_kv_pf(int blocks) {
    (void)blocks;
    return 0;
}

int fc_attention_use(int isa) {
    (void)isa;
    return 0;
}

typedef struct attention_rows attention_rows;

attention_rows *fc_attention_rows(int64_t b, int64_t m_count, int64_t s_count, const void *mask, int mask_kind,
                                  const int64_t *ms, int causal) {
    (void)b; (void)m_count; (void)s_count; (void)mask; (void)mask_kind; (void)ms; (void)causal;
    return NULL;
}

void fc_attention_rows_free(attention_rows *r) { (void)r; }

int fc_attention_planned(const attention_rows *rows, int64_t b, const float *q, const int64_t *qs, const float *k,
                         const int64_t *ks, const float *v, const int64_t *vs, int64_t heads, int64_t kv_heads,
                         int64_t d, float scale, float *out) {
    (void)rows; (void)b; (void)q; (void)qs; (void)k; (void)ks; (void)v; (void)vs; (void)heads; (void)kv_heads;
    (void)d; (void)scale; (void)out;
    return -1;
}

int fc_attention(const float *q, const int64_t *qs, const float *k, const int64_t *ks, const float *v,
                 const int64_t *vs, int64_t b_count, int64_t heads, int64_t kv_heads, int64_t m_count,
                 int64_t s_count, int64_t d, const void *mask, int mask_kind, const int64_t *ms, int causal,
                 float scale, float *out) {
    (void)q; (void)qs; (void)k; (void)ks; (void)v; (void)vs; (void)b_count; (void)heads; (void)kv_heads;
    (void)m_count; (void)s_count; (void)d; (void)mask; (void)mask_kind; (void)ms; (void)causal; (void)scale;
    (void)out;
    return -1;
}

#endif
