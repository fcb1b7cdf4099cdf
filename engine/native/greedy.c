/* The greedy choice inside the LM head's call: each logits row's argmax, taken while the row is still in cache.
 *
 * A decode step's greedy choice (engine.verify.argmax_rows) ran numpy's argmax over the (rows, V) logits right
 * after the forward: ~57 us a call on this project's CPU, nearly all of it numpy's code and data gone cold
 * during the forward (a warm call over the same 7 x 8,192 logits takes ~6 us). fc_gemm_argmax computes the
 * LM head's product (fc_gemm, the same bits) and then each row's argmax in the same call.
 *
 * The argmax is numpy's: the index of the first maximum, where a NaN counts as the maximum (the first NaN's
 * index), -0.0 and +0.0 equal. Not part of the c(n) curve's key (engine.native.FORWARD_SOURCES): a few hundred
 * nanoseconds a row.
 */
#include <stdint.h>

void fc_gemm(const float *x, int64_t m, int64_t k, const float *wp, int64_t n, float *y);

static int64_t argmax_scalar(const float *v, int64_t n) {
    int64_t best = 0;
    float m = v[0];
    if (m != m) return 0;
    for (int64_t i = 1; i < n; i++) {
        float x = v[i];
        if (x != x) return i;
        if (x > m) {
            m = x;
            best = i;
        }
    }
    return best;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TGT __attribute__((target("avx2")))

/* Two passes: the maximum (and whether any NaN) in 8 lanes, then the first index equal to it. */
TGT static int64_t argmax_avx2(const float *v, int64_t n) {
    if (n < 16) return argmax_scalar(v, n);
    __m256 mx = _mm256_loadu_ps(v), unordered = _mm256_cmp_ps(mx, mx, _CMP_UNORD_Q);
    int64_t i = 8;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(v + i);
        unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        mx = _mm256_max_ps(mx, x);
    }
    if (_mm256_movemask_ps(unordered)) return argmax_scalar(v, n);  /* a NaN: the first one (scalar) */
    float lanes[8];
    _mm256_storeu_ps(lanes, mx);
    float m = lanes[0];
    for (int j = 1; j < 8; j++)
        if (lanes[j] > m) m = lanes[j];
    for (int64_t j = i; j < n; j++) {  /* the tail */
        if (v[j] != v[j]) return argmax_scalar(v, n);
        if (v[j] > m) m = v[j];
    }
    __m256 target = _mm256_set1_ps(m);
    for (i = 0; i + 8 <= n; i += 8) {
        int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(v + i), target, _CMP_EQ_OQ));
        if (mask) return i + __builtin_ctz((unsigned)mask);
    }
    for (; i < n; i++)
        if (v[i] == m) return i;
    return 0;  /* not reached: m is one of the values */
}

static int have_avx2(void) {
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return known;
}
#endif

/* argmax_out[r] = the argmax of row r of y ((rows, n) float32, row-major), numpy's rule (see above). */
void fc_rows_argmax(const float *y, int64_t rows, int64_t n, int64_t *argmax_out) {
    for (int64_t r = 0; r < rows; r++) {
        const float *v = y + r * n;
        if (n <= 0) {
            argmax_out[r] = 0;
            continue;
        }
#if defined(__x86_64__) || defined(__i386__)
        argmax_out[r] = have_avx2() ? argmax_avx2(v, n) : argmax_scalar(v, n);
#else
        argmax_out[r] = argmax_scalar(v, n);
#endif
    }
}

/* fc_gemm (y = x @ W^T, x (m, k), y (m, n)), then fc_rows_argmax(y) into argmax_out (m entries). */
void fc_gemm_argmax(const float *x, int64_t m, int64_t k, const float *wp, int64_t n, float *y,
                    int64_t *argmax_out) {
    fc_gemm(x, m, k, wp, n, y);
    if (m > 0) fc_rows_argmax(y, m, n, argmax_out);
}
