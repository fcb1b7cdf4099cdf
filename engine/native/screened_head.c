/* The greedy choice of the LM head without its whole product: int8 screening, then exact rescoring.
 *
 * Greedy decoding and greedy verification read one thing from each row of the LM head's output: its argmax.
 * The head is the model's widest product (tiny-py-coder: 8,192 x 256, 29% of a token's multiply-adds and 8 MB
 * of the 29 MB of float32 weights a plain step streams). Here each row's argmax is found exactly from:
 *
 *   1. a screen: every token's weights quantized to int8 (symmetric, one scale per token) and the row to int8
 *      (AVX-512 VNNI) or 7 bits (AVX2, where vpmaddubsw's 16-bit pair sums must not saturate), all V dot products
 *      in exact int32 sums (2 MB of weights), and for each token an upper bound on its true logit from the
 *      quantization errors (Cauchy-Schwarz, below);
 *   2. the exact float32 logit of the screen's best token, then of every token whose upper bound reaches it,
 *      each as the same FMA chain the full head (small_gemm.c) computes for it: the same bits.
 *
 * A token left out has a logit strictly below the exact logit of a computed one, so the argmax over the
 * computed tokens (numpy's rule: the first maximum) is the argmax over all V, bit for bit. On tiny-py-coder's
 * hidden states over third-party code, 1 token is rescored per row at the median, 6 at most (of 8,192).
 *
 * The bound. With h = sh*qh + eh (the row: its int8 values qh, scale sh, error eh) and w_j = s_j*q_j + e_j
 * (token j likewise), exactly in real numbers:
 *     h.w_j = sh*s_j*(qh.q_j) + sh*qh.e_j + eh.w_j <= sh*s_j*(qh.q_j) + |sh*qh|*|e_j| + |eh|*|w_j|.
 * The full head's float32 result differs from h.w_j by at most gamma_k * sum_i |h_i*w_ji| <= gamma_k*|h|*|w_j|
 * (k sequential FMAs: gamma_k = k*u/(1 - k*u), u = 2^-24). |e_j| and |w_j| are computed at packing in double
 * and rounded up; the row's norms likewise per call; the bound's own float arithmetic gets a relative slack
 * far above its rounding (4e-6 of |bound terms|, against ~5 float32 roundings of 6e-8 each, the int32 sum's
 * conversion to float among them). qh.q_j is exact (int32).
 *
 * x86-64 with AVX-512 F/BW/VNNI, or AVX2 and FMA (fc_screen_supported says which, at run time); elsewhere, or for
 * a row that is not finite or all zero (fc_screen_argmax returns -1), the caller computes the whole head.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define QP 16 /* tokens per panel: one 512-bit register of int32 sums */
#define QG 4  /* k values per 32-bit group (one vpdpbusd lane) */
/* k at most this: the int32 sums of (qh + 128) * q_j stay below 2^31 */
#define SCREEN_MAX_K 16384

int64_t fc_screen_kpad(int64_t k) { return (k + QG - 1) / QG * QG; }

/* int8 panel bytes for v tokens of k values: ceil(v/16) panels of (kpad/4) groups of 16 tokens x 4 bytes. */
int64_t fc_screen_bytes(int64_t v, int64_t k) { return (v + QP - 1) / QP * QP * fc_screen_kpad(k); }

/* Round x up to the next float above it (a bound computed in double, stored as float, stays a bound). */
static float up_float(double x) {
    float f = (float)x;
    if ((double)f < x) f = nextafterf(f, INFINITY);
    return f;
}

/* A row's largest |value| and squared norm (in double); -1 for a value that is not finite. */
static int row_stats(const float *x, int64_t k, double *maxabs, double *norm2) {
    double m = 0.0, n2 = 0.0;
    for (int64_t i = 0; i < k; i++) {
        if (!isfinite(x[i])) return -1;
        double a = fabs((double)x[i]);
        m = a > m ? a : m;
        n2 += a * a;
    }
    *maxabs = m;
    *norm2 = n2;
    return 0;
}

int64_t fc_thread_count(void); /* small_gemm.c: the threads fc_set_threads gave (torch's) */

/* One token's pack (see fc_screen_pack); -1 for a weight that is not finite. */
static int pack_token(const float *row, int64_t j, int64_t k, int64_t groups, int8_t *q, float *scale, int32_t *sumq,
                      float *enorm, float *wnorm) {
    double m, wn;
    if (row_stats(row, k, &m, &wn) != 0) return -1;
    float s = (float)(m / 127.0);
    int64_t p = j / QP, t = j % QP;
    double en = 0.0;
    int32_t sum = 0;
    for (int64_t i = 0; i < k; i++) {
        long qi = s > 0.0f ? lrint((double)row[i] / s) : 0;
        qi = qi > 127 ? 127 : (qi < -127 ? -127 : qi);
        q[((p * groups + i / QG) * QP + t) * QG + i % QG] = (int8_t)qi;
        sum += (int32_t)qi;
        double e = (double)row[i] - (double)s * (double)qi; /* s*qi is exact in double */
        en += e * e;
    }
    scale[j] = s;
    sumq[j] = sum;
    enorm[j] = up_float(sqrt(en) * (1.0 + 1e-12));
    wnorm[j] = up_float(sqrt(wn) * (1.0 + 1e-12));
    return 0;
}

/* Pack w ((v, k) float32, row-major) for the screen: q (fc_screen_bytes bytes: panel p, group g, token t,
 * byte b at ((p * kpad/4 + g) * 16 + t) * 4 + b = the int8 of w[p*16+t][g*4+b], zero past v or k), per token
 * its scale (max |w_j| / 127), the sum of its int8 values, and upper bounds on |e_j| and |w_j| (see above).
 * Tokens split over fc_thread_count() threads. Returns 0, or -1 (nothing usable) when k is out of range or a
 * weight is not finite. */
int fc_screen_pack(const float *w, int64_t v, int64_t k, int8_t *q, float *scale, int32_t *sumq, float *enorm,
                   float *wnorm) {
    if (k < 1 || k > SCREEN_MAX_K || v < 1) return -1;
    int64_t groups = fc_screen_kpad(k) / QG;
    int threads = (int)fc_thread_count(), failed = 0;
    memset(q, 0, (size_t)fc_screen_bytes(v, k));
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) reduction(| : failed) if (threads > 1 && v >= 4096)
#endif
    for (int64_t j = 0; j < v; j++) failed |= pack_token(w + j * k, j, k, groups, q, scale, sumq, enorm, wnorm) != 0;
    (void)threads;
    return failed ? -1 : 0;
}

/* The full head's float32 logit of one token: the FMA chain of small_gemm.c's kernels (k = 0 .. K-1 from 0). */
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("fma")))
#endif
static float exact_logit(const float *x, const float *wj, int64_t k) {
    float acc = 0.0f;
    for (int64_t i = 0; i < k; i++) acc = fmaf(x[i], wj[i], acc);
    return acc;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TGT512 __attribute__((target("avx512f,avx512bw,avx512vnni,fma")))
#define TGT2 __attribute__((target("avx2,fma")))

/* Instruction sets: 2 AVX-512 VNNI (rows in int8, u8 x s8 sums in int32: vpdpbusd), 1 AVX2 (rows in 7 bits, so
   that vpmaddubsw's 16-bit pair sums, at most 2 * 127 * 127, never saturate; then vpmaddwd into int32), 0 none. */
#define ISA_NONE 0
#define ISA_AVX2 1
#define ISA_VNNI 2
static int screen_isa = -1;

static int best_isa(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return ISA_NONE;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vnni"))
        return ISA_VNNI;
    return ISA_AVX2;
}

/* The instruction set the screen uses (see above): the best this CPU has unless fc_screen_use chose another. */
int fc_screen_supported(void) {
    if (screen_isa < 0) screen_isa = best_isa();
    return screen_isa;
}

/* Use `isa` (0: the best this CPU has; 1: AVX2, e.g. to test its path on a VNNI CPU; 2: VNNI) when the CPU has
   it, else none; returns the one in use. Packs do not depend on it; calls after it use it. */
int fc_screen_use(int isa) {
    int best = best_isa();
    screen_isa = isa <= 0 ? best : (isa <= best ? isa : ISA_NONE);
    return screen_isa;
}

/* R rows (unsigned bytes, kpad each, stride kp) x P panels from panel `p0`: int32 sums into s (row stride ldS),
   before the -offset * sum(q_j) correction. VNNI: one 512-bit register holds a panel's 16 sums. */
#define SCREEN_KERNEL(R, P)                                                                                 \
    static TGT512 void screen##R##x##P(const uint8_t *u, int64_t kp, const int8_t *q, int64_t p0, int32_t *s, \
                                       int64_t ldS) {                                                       \
        __m512i acc[R][P];                                                                                  \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                                \
            _Pragma("GCC unroll 16") for (int c = 0; c < P; c++) acc[r][c] = _mm512_setzero_si512();        \
        int64_t groups = kp / QG;                                                                           \
        for (int64_t g = 0; g < groups; g++) {                                                              \
            __m512i wv[P];                                                                                  \
            _Pragma("GCC unroll 16") for (int c = 0; c < P; c++)                                            \
                wv[c] = _mm512_loadu_si512((const void *)(q + ((p0 + c) * groups + g) * QP * QG));          \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                          \
                int32_t word;                                                                               \
                memcpy(&word, u + r * kp + g * QG, 4);                                                      \
                __m512i b = _mm512_set1_epi32(word);                                                        \
                _Pragma("GCC unroll 16") for (int c = 0; c < P; c++)                                        \
                    acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], b, wv[c]);                                   \
            }                                                                                               \
        }                                                                                                   \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                                \
            _Pragma("GCC unroll 16") for (int c = 0; c < P; c++)                                            \
                _mm512_storeu_si512((void *)(s + r * ldS + (p0 + c) * QP), acc[r][c]);                      \
    }

/* The same on AVX2: a panel's 16 sums in two 256-bit registers (tokens 0-7, 8-15); per 4-value group a token's
   4 products summed by vpmaddubsw (pairs, exact in 16 bits for 7-bit rows) and vpmaddwd (into int32). */
#define SCREEN2_KERNEL(R, P)                                                                                \
    static TGT2 void screen2_##R##x##P(const uint8_t *u, int64_t kp, const int8_t *q, int64_t p0, int32_t *s, \
                                       int64_t ldS) {                                                       \
        __m256i acc[R][P][2];                                                                               \
        const __m256i ones = _mm256_set1_epi16(1);                                                          \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                                \
            _Pragma("GCC unroll 16") for (int c = 0; c < P; c++)                                            \
                acc[r][c][0] = acc[r][c][1] = _mm256_setzero_si256();                                       \
        int64_t groups = kp / QG;                                                                           \
        for (int64_t g = 0; g < groups; g++) {                                                              \
            __m256i lo[P], hi[P];                                                                           \
            _Pragma("GCC unroll 16") for (int c = 0; c < P; c++) {                                          \
                const int8_t *wp = q + ((p0 + c) * groups + g) * QP * QG;                                   \
                lo[c] = _mm256_loadu_si256((const __m256i *)wp);                                            \
                hi[c] = _mm256_loadu_si256((const __m256i *)(wp + 32));                                     \
            }                                                                                               \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                          \
                int32_t word;                                                                               \
                memcpy(&word, u + r * kp + g * QG, 4);                                                      \
                __m256i b = _mm256_set1_epi32(word);                                                        \
                _Pragma("GCC unroll 16") for (int c = 0; c < P; c++) {                                      \
                    acc[r][c][0] = _mm256_add_epi32(acc[r][c][0],                                           \
                                                    _mm256_madd_epi16(_mm256_maddubs_epi16(b, lo[c]), ones)); \
                    acc[r][c][1] = _mm256_add_epi32(acc[r][c][1],                                           \
                                                    _mm256_madd_epi16(_mm256_maddubs_epi16(b, hi[c]), ones)); \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++)                                                \
            _Pragma("GCC unroll 16") for (int c = 0; c < P; c++) {                                          \
                _mm256_storeu_si256((__m256i *)(s + r * ldS + (p0 + c) * QP), acc[r][c][0]);                \
                _mm256_storeu_si256((__m256i *)(s + r * ldS + (p0 + c) * QP + 8), acc[r][c][1]);            \
            }                                                                                               \
    }

SCREEN_KERNEL(1, 8)
SCREEN_KERNEL(1, 1)
SCREEN_KERNEL(2, 4)
SCREEN_KERNEL(2, 1)
SCREEN_KERNEL(4, 2)
SCREEN_KERNEL(4, 1)
SCREEN2_KERNEL(1, 4)
SCREEN2_KERNEL(1, 1)
SCREEN2_KERNEL(2, 2)
SCREEN2_KERNEL(2, 1)
SCREEN2_KERNEL(4, 1)

/* Panels [p, end) for a block of 1, 2 or 4 rows. */
static void screen_range(int isa, int rows, const uint8_t *u, int64_t kp, const int8_t *q, int64_t p, int64_t end,
                         int32_t *s, int64_t ldS) {
    if (isa == ISA_VNNI) {
        if (rows == 1) {
            for (; p + 8 <= end; p += 8) screen1x8(u, kp, q, p, s, ldS);
            for (; p < end; p++) screen1x1(u, kp, q, p, s, ldS);
        } else if (rows == 2) {
            for (; p + 4 <= end; p += 4) screen2x4(u, kp, q, p, s, ldS);
            for (; p < end; p++) screen2x1(u, kp, q, p, s, ldS);
        } else {
            for (; p + 2 <= end; p += 2) screen4x2(u, kp, q, p, s, ldS);
            for (; p < end; p++) screen4x1(u, kp, q, p, s, ldS);
        }
    } else if (rows == 1) {
        for (; p + 4 <= end; p += 4) screen2_1x4(u, kp, q, p, s, ldS);
        for (; p < end; p++) screen2_1x1(u, kp, q, p, s, ldS);
    } else if (rows == 2) {
        for (; p + 2 <= end; p += 2) screen2_2x2(u, kp, q, p, s, ldS);
        for (; p < end; p++) screen2_2x1(u, kp, q, p, s, ldS);
    } else {
        for (; p < end; p++) screen2_4x1(u, kp, q, p, s, ldS);
    }
}

/* Every panel for a block of rows, split over fc_thread_count() threads in contiguous ranges of 8 panels when
   the product is large enough (each sum is the same whatever thread computes it). */
static void screen_rows(int isa, int rows, const uint8_t *u, int64_t kp, const int8_t *q, int64_t panels,
                        int32_t *s, int64_t ldS) {
    int threads = (int)fc_thread_count();
    if (threads <= 1 || panels * kp * rows < (1 << 20)) {
        screen_range(isa, rows, u, kp, q, 0, panels, s, ldS);
        return;
    }
    int64_t chunks = (panels + 7) / 8;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
    for (int64_t c = 0; c < chunks; c++) {
        int64_t end = (c + 1) * 8 < panels ? (c + 1) * 8 : panels;
        screen_range(isa, rows, u, kp, q, c * 8, end, s, ldS);
    }
}

/* One row's quantization to `levels` (127 or 63) either side of zero: u (kpad bytes, the value + levels + 1,
   zero-padded as levels + 1), its scale, and upper bounds on |sh*qh| and |eh| and |h|. Returns 0, or -1 for a
   row that is not finite or all zero. */
static int quantize_row(const float *x, int64_t k, int64_t kp, int levels, uint8_t *u, float *sh, double *qnorm,
                        double *enorm, double *hnorm) {
    double m, hn;
    if (row_stats(x, k, &m, &hn) != 0 || m == 0.0) return -1;
    float s = (float)(m / levels);
    double qn = 0.0, en = 0.0;
    for (int64_t i = 0; i < k; i++) {
        long qi = lrint((double)x[i] / s);
        qi = qi > levels ? levels : (qi < -levels ? -levels : qi);
        u[i] = (uint8_t)(qi + levels + 1);
        double d = (double)s * (double)qi;
        qn += d * d;
        en += ((double)x[i] - d) * ((double)x[i] - d);
    }
    for (int64_t i = k; i < kp; i++) u[i] = (uint8_t)(levels + 1);
    *sh = s;
    *qnorm = sqrt(qn) * (1.0 + 1e-12);
    *enorm = sqrt(en) * (1.0 + 1e-12);
    *hnorm = sqrt(hn) * (1.0 + 1e-12);
    return 0;
}

/* One row's argmax from its screen sums `sr` (before the -offset * sum(q_j) correction): the bound of every token
   into `upper`, the exact logit of the screen's best, then of every token whose bound reaches it, in index order.
   Writes the argmax to *out; returns the number of exact logits computed. */
static TGT2 int64_t choose_row(const float *xr, const int32_t *sr, int32_t offset, float shr, float a, float e,
                               const float *scale, const int32_t *sumq, const float *enorm, const float *wnorm,
                               const float *w, int64_t v, int64_t k, float *upper, int64_t *out) {
    const __m256 vsh = _mm256_set1_ps(shr), va = _mm256_set1_ps(a), ve = _mm256_set1_ps(e);
    const __m256 slack = _mm256_set1_ps(4e-6f), tiny = _mm256_set1_ps(1e-30f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i voff = _mm256_set1_epi32(offset), step = _mm256_set1_epi32(8);
    __m256 best_ap = _mm256_set1_ps(-INFINITY);
    __m256i best_ix = _mm256_setzero_si256(), ix = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int64_t j = 0;
    for (; j + 8 <= v; j += 8) {
        __m256i sj = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(sr + j)),
                                      _mm256_mullo_epi32(voff, _mm256_loadu_si256((const __m256i *)(sumq + j))));
        __m256 ap = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sj), vsh), _mm256_loadu_ps(scale + j));
        __m256 err = _mm256_fmadd_ps(va, _mm256_loadu_ps(enorm + j), _mm256_mul_ps(ve, _mm256_loadu_ps(wnorm + j)));
        /* the float arithmetic above is within a few ulps of |ap| + err: a relative slack covers it */
        __m256 mag = _mm256_add_ps(_mm256_andnot_ps(sign, ap), err);
        _mm256_storeu_ps(upper + j, _mm256_add_ps(_mm256_add_ps(ap, err), _mm256_fmadd_ps(slack, mag, tiny)));
        __m256 better = _mm256_cmp_ps(ap, best_ap, _CMP_GT_OQ);
        best_ap = _mm256_blendv_ps(best_ap, ap, better);
        best_ix = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(best_ix), _mm256_castsi256_ps(ix), better));
        ix = _mm256_add_epi32(ix, step);
    }
    float lanes_ap[8];
    int32_t lanes_ix[8];
    _mm256_storeu_ps(lanes_ap, best_ap);
    _mm256_storeu_si256((__m256i *)lanes_ix, best_ix);
    float top = -INFINITY;
    int64_t star = 0;
    for (int t = 0; t < 8; t++)
        if (lanes_ap[t] > top) top = lanes_ap[t], star = lanes_ix[t];
    for (; j < v; j++) { /* the tail, scalar, the same arithmetic */
        float ap = ((float)(sr[j] - offset * sumq[j]) * shr) * scale[j];
        float err = fmaf(a, enorm[j], e * wnorm[j]);
        upper[j] = (ap + err) + fmaf(4e-6f, fabsf(ap) + err, 1e-30f);
        if (ap > top) top = ap, star = j;
    }
    float thr = exact_logit(xr, w + star * k, k);
    int64_t exact = 1, best = -1;
    float best_val = -INFINITY;
    /* every token whose bound reaches thr (star among them, as upper >= its logit), in index order */
    const __m256 vthr = _mm256_set1_ps(thr);
    for (j = 0; j + 8 <= v; j += 8) {
        unsigned hit = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(upper + j), vthr, _CMP_GE_OQ));
        while (hit) {
            int64_t c = j + __builtin_ctz(hit);
            hit &= hit - 1;
            float val = c == star ? thr : exact_logit(xr, w + c * k, k);
            exact += c != star;
            if (best < 0 || val > best_val) best = c, best_val = val;
        }
    }
    for (; j < v; j++) {
        if (!(upper[j] >= thr) && j != star) continue;
        float val = j == star ? thr : exact_logit(xr, w + j * k, k);
        exact += j != star;
        if (best < 0 || val > best_val) best = j, best_val = val;
    }
    /* star's own bound reaches its logit; should rounding ever say otherwise, it still competes */
    if (best < 0 || thr > best_val || (thr == best_val && star < best)) best = star;
    *out = best;
    return exact;
}

/* The argmax (numpy's rule) of each row of x @ w^T, x (m, k) float32 row-major, w (v, k) float32 row-major
 * with fc_screen_pack's q/scale/sumq/enorm/wnorm; into argmax_out (m entries). `scratch`: at least
 * 16 * ceil(v/16) * (4 * 4 + 4) + 4 * kpad bytes, no alignment required. Returns the number of exact logits
 * computed over all rows (>= m), or -1 with nothing written when the CPU has no screen or a row is not finite or
 * all zero (the caller computes the whole head for the call). */
int64_t fc_screen_argmax(const float *x, int64_t m, int64_t k, const int8_t *q, const float *scale,
                         const int32_t *sumq, const float *enorm, const float *wnorm, const float *w, int64_t v,
                         int64_t *argmax_out, void *scratch) {
    int isa = fc_screen_supported();
    if (m <= 0) return 0;
    if (isa == ISA_NONE || k < 1 || k > SCREEN_MAX_K) return -1;
    int levels = isa == ISA_VNNI ? 127 : 63;
    int64_t kp = fc_screen_kpad(k), panels = (v + QP - 1) / QP, vp = panels * QP;
    int32_t *sums = (int32_t *)scratch;               /* 4 rows x vp */
    float *upper = (float *)(sums + 4 * vp);          /* vp */
    uint8_t *u = (uint8_t *)(upper + vp);             /* 4 rows x kp */
    float sh[4];
    double qn[4], en[4], hn[4];
    /* gamma_k of the full head's k FMAs, inflated */
    double unit = ldexp(1.0, -24), gamma = (double)k * unit / (1.0 - (double)k * unit) * 1.01;
    int64_t exact = 0;
    int rows;
    for (int64_t r0 = 0; r0 < m; r0 += rows) {
        rows = (int)(m - r0 >= 4 ? 4 : (m - r0 >= 2 ? 2 : 1));
        for (int r = 0; r < rows; r++)
            if (quantize_row(x + (r0 + r) * k, k, kp, levels, u + r * kp, &sh[r], &qn[r], &en[r], &hn[r]) != 0)
                return -1;
        screen_rows(isa, rows, u, kp, q, panels, sums, vp);
        for (int r = 0; r < rows; r++)
            exact += choose_row(x + (r0 + r) * k, sums + r * vp, levels + 1, sh[r], up_float(qn[r]),
                                up_float(en[r] + gamma * hn[r]), scale, sumq, enorm, wnorm, w, v, k, upper,
                                argmax_out + r0 + r);
    }
    return exact;
}
#else
int fc_screen_supported(void) { return 0; }
int fc_screen_use(int isa) { (void)isa; return 0; }
int64_t fc_screen_argmax(const float *x, int64_t m, int64_t k, const int8_t *q, const float *scale,
                         const int32_t *sumq, const float *enorm, const float *wnorm, const float *w, int64_t v,
                         int64_t *argmax_out, void *scratch) {
    (void)x; (void)m; (void)k; (void)q; (void)scale; (void)sumq; (void)enorm; (void)wnorm; (void)w; (void)v;
    (void)argmax_out; (void)scratch;
    return -1;
}
#endif
