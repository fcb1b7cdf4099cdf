/* Experiment (2026-11-25 night): a plain C argmax, compiled by exp_amax2.py. */
#include <stdint.h>
#include <immintrin.h>
__attribute__((target("avx2")))
void fc_argmax_rows(const float *x, int64_t rows, int64_t n, int64_t *out) {
    for (int64_t r = 0; r < rows; r++) {
        const float *p = x + r * n;
        float best = p[0]; int64_t bi = 0;
        for (int64_t i = 1; i < n; i++) if (p[i] > best || (p[i] != p[i] && best == best)) { best = p[i]; bi = i; }
        out[r] = bi;
    }
}
