/* One core's read bandwidth on this machine (2026-11-26m/README.md, section 3).
   ./bandwidth cold: 1-16 interleaved streams over 28.8 MB (tiny-py-coder's weights), a 64 MB buffer written first;
   ./bandwidth warm: 1 and 4 streams over working sets of 1-32 MB, repeated without flushing.
   Build: gcc -O2 -o /tmp/bandwidth bandwidth.c */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

/* S streams, each reading one 64-byte line per step */
__attribute__((target("avx2"))) static float streams(const float *p, long n, int S) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    long q = n / S;
    for (long i = 0; i < q; i += 16)
        for (int s = 0; s < S; s++) {
            a0 = _mm256_add_ps(a0, _mm256_load_ps(p + s * q + i));
            a1 = _mm256_add_ps(a1, _mm256_load_ps(p + s * q + i + 8));
        }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(a0, a1));
    return t[0] + t[7];
}

static float *filled(long n) {
    float *p = aligned_alloc(64, (size_t)n * 4);
    for (long i = 0; i < n; i++) p[i] = i * 1e-9f;
    return p;
}

int main(int argc, char **argv) {
    int cold = argc > 1 && strcmp(argv[1], "cold") == 0;
    float s = 0;
    if (cold) {
        long n = 7200000, m = 64L << 20;
        float *p = filled(n);
        char *ev = malloc(m);
        memset(ev, 1, m);
        int counts[] = {1, 2, 3, 4, 6, 8, 12, 16};
        for (int round = 0; round < 2; round++)
            for (int c = 0; c < 8; c++) {
                int S = counts[c];
                double best = 1e9, tot = 0;
                for (int r = 0; r < 15; r++) {
                    for (long i = 0; i < m; i += 64) ev[i]++;
                    double t0 = now();
                    s += streams(p, n - n % (S * 16), S);
                    double t = now() - t0;
                    best = t < best ? t : best;
                    tot += t;
                }
                printf("streams %2d best %.3f ms mean %.3f ms -> %.1f GB/s\n", S, best * 1e3, tot / 15 * 1e3, n * 4 / best / 1e9);
            }
    } else {
        long sizes[] = {1, 2, 4, 8, 12, 16, 20, 24, 28, 32};
        for (int k = 0; k < 10; k++) {
            long n = sizes[k] * (1 << 20) / 4;
            float *p = filled(n);
            for (int S = 1; S <= 4; S *= 4) {
                double best = 1e9, tot = 0;
                for (int r = 0; r < 30; r++) {
                    double t0 = now();
                    s += streams(p, n - n % (S * 16), S);
                    double t = now() - t0;
                    if (r > 2) { best = t < best ? t : best; tot += t; }
                }
                printf("%3ld MB streams %d: best %.1f GB/s mean %.1f GB/s\n", sizes[k], S, n * 4 / best / 1e9, n * 4 / (tot / 27) / 1e9);
            }
            free(p);
        }
    }
    printf("(checksum %f)\n", s);
    return 0;
}
