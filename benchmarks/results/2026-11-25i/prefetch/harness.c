#include DSC
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
/* times (ns) of fc_sa_rows over `rounds` cold calls: 64 MB written between calls */
void bench(const uint8_t *text, int64_t n_tokens, int64_t width, const void *sa, int sa64, int64_t n, int64_t left,
           int64_t cnt, int64_t rounds, double *out, uint8_t *junk, int64_t junk_len) {
    int32_t rows[128 * 16];
    int64_t counts[128];
    for (int64_t r = 0; r < rounds; r++) {
        for (int64_t i = 0; i < junk_len; i += 64) junk[i]++;
        double t = now();
        fc_sa_rows(text, n_tokens, width, sa, sa64, n, left, cnt, 128, 16, rows, counts);
        out[r] = now() - t;
    }
}
