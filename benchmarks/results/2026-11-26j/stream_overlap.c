/* A stream over n floats in s regions, fma (0/1: 12 FMAs) per 64-byte line, software prefetch pf lines ahead
   (exp_stream_overlap.py). */
#include <immintrin.h>
#include <stdint.h>
#define TGT __attribute__((target("avx2,fma")))
TGT float run(const float *w, int64_t n, int s, int fma, int pf) {
    __m256 a0 = _mm256_set1_ps(0.f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0;
    __m256 x = _mm256_set1_ps(1.0001f);
    int64_t per = n / s, lines = per / 16;
    for (int64_t l = 0; l < lines; l++) {
        for (int j = 0; j < s; j++) {
            const float *p = w + j * per + l * 16;
            if (pf) _mm_prefetch((const char *)(p + pf * 16), _MM_HINT_T0);
            __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
            if (fma) {
                a0 = _mm256_fmadd_ps(a, x, a0); a1 = _mm256_fmadd_ps(b, x, a1);
                a2 = _mm256_fmadd_ps(a, x, a2); a3 = _mm256_fmadd_ps(b, x, a3);
                a4 = _mm256_fmadd_ps(a, x, a4); a5 = _mm256_fmadd_ps(b, x, a5);
                a6 = _mm256_fmadd_ps(a, x, a6); a7 = _mm256_fmadd_ps(b, x, a7);
                a8 = _mm256_fmadd_ps(a, x, a8); a9 = _mm256_fmadd_ps(b, x, a9);
                a10 = _mm256_fmadd_ps(a, x, a10); a11 = _mm256_fmadd_ps(b, x, a11);
            } else {
                a0 = _mm256_add_ps(a0, a); a1 = _mm256_add_ps(a1, b);
            }
        }
    }
    __m256 t = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)), _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    t = _mm256_add_ps(t, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float o[8]; _mm256_storeu_ps(o, t);
    return o[0] + o[7];
}
