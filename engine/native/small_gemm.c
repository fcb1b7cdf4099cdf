/* Few-row matrix products for the verify forward on a CPU: y = x @ W^T for a handful of rows.
 *
 * A decode step multiplies 1 row (plain decode) or 2-65 rows (the pending token and a draft tree) by every
 * weight matrix of the model. BLAS libraries tune for large products; for a few rows MKL on this project's
 * AMD CPU ran 2-3x below what the same work costs when each weight is read once and all rows are
 * multiplied by it while it sits in registers (measured: the 43 products of tiny-py-coder at 9 rows took
 * 6.7 ms through F.linear and 2.6 ms here).
 *
 * The weight (N x K, row-major as nn.Linear keeps it) is packed once into panels of 16 output features:
 * panel j holds K rows of 16 floats, panels[(j * K + k) * 16 + c] = W[j * 16 + c][k] (zero past N). A
 * micro-kernel keeps up to 6 rows x 16 outputs in 12 AVX2 registers (kern7: 7 rows in 14) and walks k,
 * one fused multiply-add per (row, output, k) in order k = 0 .. K-1. Every output is therefore the same FMA
 * chain whatever the number of rows or the blocking: a row's result does not depend on how many rows share
 * the call (a plain decode step and the same token inside a verified tree get the same bits out of every
 * linear layer).
 *
 * x86-64 with AVX2 and FMA only (checked at run time by fc_gemm_supported); elsewhere the functions are
 * stubs and fc_gemm_supported() returns 0.
 */
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define NR 16

/* Threads fc_gemm splits its panels over (fc_set_threads; the caller passes torch's thread count). 1 without
   OpenMP. Each thread takes a contiguous range of whole panels, so every output keeps its FMA chain and the
   bits do not depend on the thread count either. */
static int gemm_threads = 1;

void fc_set_threads(int64_t n) {
#ifdef _OPENMP
    gemm_threads = n < 1 ? 1 : (n > 64 ? 64 : (int)n);
#else
    (void)n;
#endif
}

/* The thread count fc_set_threads gave (the attention splits its heads over as many). */
int64_t fc_thread_count(void) { return gemm_threads; }

/* Software prefetch distance, in k steps (one 64-byte panel line each): the multi-row kernels ask for the
   panel line they will read PF (the AVX-512 kernels) or pf_avx2 (the AVX2 ones, below) steps ahead. The hardware prefetcher alone left their FMAs waiting on the
   weight stream: tiny-py-coder's 43 products at 4-16 rows took 10-16% less time with it
   (benchmarks/measure_gemm.py-style A/B, weights evicted before each call). One row (kern1x4, four streams)
   was not faster with it, so it has none. A prefetch changes no arithmetic: the same bits. Reading lines
   past a panel's end is harmless (a prefetch never faults). */
#ifndef PF
#define PF 16
#endif
/* The AVX2 kernels' distance (lines), a variable that fc_gemm_prefetch sets (A/B runs; the same bits at any). On the
   project's AVX2-only EPYC (2026-11-27, benchmarks/measure_gemm.py --defines, 61 interleaved calls) 16 lines left
   the single weight stream short: the 43 products at 2-6 rows took 8-13% less warm and 5-6% less cold at 48 (64-96:
   11-16% warm, no better cold), 7 and 9 rows 6-8% / 1.5-4%; in the nine bench cells, paired per task run against 16
   (fc_gemm_prefetch(16) around the other methods' generations), fastcoder's decode 1.018 (0.993-1.045; `function`
   1.045, 1.014-1.079), SuffixDecoding's 1.017 (0.995-1.039) (benchmarks/results/2026-11-27i/). The AVX-512 kernels
   keep PF (measured on a Zen 4). */
#ifndef PF_AVX2
#define PF_AVX2 48
#endif
static int64_t pf_avx2 = PF_AVX2;

/* Sets the AVX2 kernels' prefetch distance in lines (lines >= 0) and returns the distance in use. */
int64_t fc_gemm_prefetch(int64_t lines) {
    if (lines >= 0)
        pf_avx2 = lines;
    return pf_avx2;
}
/* The prefetches' locality hint (an experiment's -DPF_HINT=_MM_HINT_NTA asks for lines that do not stay in the
   caches), and PF1 > 0 gives the one-row kernel prefetches that many lines ahead on each of its streams. */
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T0
#endif
#ifndef PF1
#define PF1 0
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

int fc_gemm_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

#define TGT __attribute__((target("avx2,fma")))
#ifndef REM_HINT
#define REM_HINT _MM_HINT_T1
#endif

/* Prefetches the line at p: into L2 (REM_HINT) for a pass that fetches the next panel group (rows_panels' `l2`),
   else as the streaming kernels do (PF_HINT). */
static inline TGT void prefetch_line(const float *p, int l2) {
    if (l2)
        _mm_prefetch((const char *)p, REM_HINT);
    else
        _mm_prefetch((const char *)p, PF_HINT);
}

static inline TGT void store_panel(float *y, __m256 lo, __m256 hi, int64_t cols) {
    if (cols >= NR) {
        _mm256_storeu_ps(y, lo);
        _mm256_storeu_ps(y + 8, hi);
    } else {
        float tmp[NR];
        _mm256_storeu_ps(tmp, lo);
        _mm256_storeu_ps(tmp + 8, hi);
        memcpy(y, tmp, (size_t)cols * sizeof(float));
    }
}

/* MR rows (stride ldx) x one panel (16 outputs, `cols` of them stored) into y (row stride ldy); prefetches `ahead`
   floats past the k step it reads (with `l2`: the next panel group, into L2; rows_panels). */
#define KERNEL(MR)                                                                                     \
    static TGT void kern##MR(const float *x, int64_t ldx, const float *wp, int64_t k, float *y,         \
                             int64_t ldy, int64_t cols, int64_t ahead, int l2) {                       \
        __m256 lo[MR], hi[MR];                                                                         \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                                         \
            lo[r] = _mm256_setzero_ps();                                                               \
            hi[r] = _mm256_setzero_ps();                                                               \
        }                                                                                              \
        for (int64_t kk = 0; kk < k; kk++) {                                                           \
            prefetch_line(wp + ahead + kk * NR, l2);                                                   \
            __m256 w0 = _mm256_loadu_ps(wp + kk * NR), w1 = _mm256_loadu_ps(wp + kk * NR + 8);         \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                                     \
                __m256 xb = _mm256_broadcast_ss(x + r * ldx + kk);                                     \
                lo[r] = _mm256_fmadd_ps(xb, w0, lo[r]);                                                \
                hi[r] = _mm256_fmadd_ps(xb, w1, hi[r]);                                                \
            }                                                                                          \
        }                                                                                              \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) store_panel(y + r * ldy, lo[r], hi[r], cols); \
    }

KERNEL(1)
KERNEL(2)
KERNEL(3)
KERNEL(4)
KERNEL(5)
KERNEL(6)

/* Seven rows x one panel in one pass: 14 accumulators, the panel's low half in a register and one broadcast
   register (AVX2 has 16), the high half as the FMAs' memory operand. Written in C, the compiler loads both weight
   halves into registers and spills accumulators; the inline assembly keeps them in place. A 7-row product (the
   pending token and a 6-node tree) used to take a 6-row pass plus a 1-row pass over the weights: tiny-py-coder's 43
   products at 7 rows 2.72 -> 2.52 ms, 2.97 -> 2.81 and 3.24 -> 2.90 on a loaded machine (benchmarks/measure_gemm.py
   --cold, interleaved). Both halves as memory operands (21 loads a k step for 14 FMAs) left it load-bound; with the
   low half in a register (15 loads) 2.03 -> 1.68 ms warm, 2.25 -> 1.93 cold (2026-11-28, 41 / 31 interleaved
   calls; AMD EPYC with AVX2 only). Each output's FMA chain is the same as in kern1: the same bits. */
#define FMA_MEM(acc, b, mem) \
    __asm__("vfmadd231ps %[w], %[x], %[a]" : [a] "+x"(acc) : [x] "x"(b), [w] "m"(*(const __m256_u *)(mem)))
#define FMA_REG(acc, b, wr) __asm__("vfmadd231ps %[w], %[x], %[a]" : [a] "+x"(acc) : [x] "x"(b), [w] "x"(wr))
static TGT void kern7(const float *x, int64_t ldx, const float *wp, int64_t k, float *y, int64_t ldy,
                      int64_t cols) {
    __m256 l0 = _mm256_setzero_ps(), l1 = l0, l2 = l0, l3 = l0, l4 = l0, l5 = l0, l6 = l0;
    __m256 h0 = l0, h1 = l0, h2 = l0, h3 = l0, h4 = l0, h5 = l0, h6 = l0;
    const int64_t pf = pf_avx2;
    for (int64_t kk = 0; kk < k; kk++) {
        const float *w = wp + kk * NR;
        _mm_prefetch((const char *)(w + pf * NR), PF_HINT);
        __m256 b;
        __m256 w0 = _mm256_loadu_ps(w);
        b = _mm256_broadcast_ss(x + kk);           FMA_REG(l0, b, w0); FMA_MEM(h0, b, w + 8);
        b = _mm256_broadcast_ss(x + ldx + kk);     FMA_REG(l1, b, w0); FMA_MEM(h1, b, w + 8);
        b = _mm256_broadcast_ss(x + 2 * ldx + kk); FMA_REG(l2, b, w0); FMA_MEM(h2, b, w + 8);
        b = _mm256_broadcast_ss(x + 3 * ldx + kk); FMA_REG(l3, b, w0); FMA_MEM(h3, b, w + 8);
        b = _mm256_broadcast_ss(x + 4 * ldx + kk); FMA_REG(l4, b, w0); FMA_MEM(h4, b, w + 8);
        b = _mm256_broadcast_ss(x + 5 * ldx + kk); FMA_REG(l5, b, w0); FMA_MEM(h5, b, w + 8);
        b = _mm256_broadcast_ss(x + 6 * ldx + kk); FMA_REG(l6, b, w0); FMA_MEM(h6, b, w + 8);
    }
    store_panel(y, l0, h0, cols);
    store_panel(y + ldy, l1, h1, cols);
    store_panel(y + 2 * ldy, l2, h2, cols);
    store_panel(y + 3 * ldy, l3, h3, cols);
    store_panel(y + 4 * ldy, l4, h4, cols);
    store_panel(y + 5 * ldy, l5, h5, cols);
    store_panel(y + 6 * ldy, l6, h6, cols);
}

/* One row, four full panels at once: eight independent FMA chains (one row alone has two, and an FMA's
   latency would leave the units idle); each output's chain is the same as in kern1. Named accumulators, not
   an array: GCC -O2 kept an a[8] array's accumulators on the stack and stored them at every k step (in this
   kernel and kern2x2; objdump). Without the stores the 43 products of tiny-py-coder took 6-10% less at 1
   row and 13-20% less at 2 rows, weights warm or evicted (benchmarks/measure_gemm.py, interleaved). */
static TGT void kern1x4(const float *x, const float *wp, int64_t k, float *y, int64_t ahead, int l2) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    const float *p0 = wp, *p1 = wp + k * NR, *p2 = wp + 2 * k * NR, *p3 = wp + 3 * k * NR;
    for (int64_t kk = 0; kk < k; kk++) {
        if (l2) {
            prefetch_line(p0 + ahead + kk * NR, 1);
            prefetch_line(p1 + ahead + kk * NR, 1);
            prefetch_line(p2 + ahead + kk * NR, 1);
            prefetch_line(p3 + ahead + kk * NR, 1);
        } else if (PF1 > 0) {
            _mm_prefetch((const char *)(p0 + (kk + PF1) * NR), PF_HINT);
            _mm_prefetch((const char *)(p1 + (kk + PF1) * NR), PF_HINT);
            _mm_prefetch((const char *)(p2 + (kk + PF1) * NR), PF_HINT);
            _mm_prefetch((const char *)(p3 + (kk + PF1) * NR), PF_HINT);
        }
        __m256 xb = _mm256_broadcast_ss(x + kk);
        a0 = _mm256_fmadd_ps(xb, _mm256_loadu_ps(p0 + kk * NR), a0);
        a1 = _mm256_fmadd_ps(xb, _mm256_loadu_ps(p0 + kk * NR + 8), a1);
        a2 = _mm256_fmadd_ps(xb, _mm256_loadu_ps(p1 + kk * NR), a2);
        a3 = _mm256_fmadd_ps(xb, _mm256_loadu_ps(p1 + kk * NR + 8), a3);
        a4 = _mm256_fmadd_ps(xb, _mm256_loadu_ps(p2 + kk * NR), a4);
        a5 = _mm256_fmadd_ps(xb, _mm256_loadu_ps(p2 + kk * NR + 8), a5);
        a6 = _mm256_fmadd_ps(xb, _mm256_loadu_ps(p3 + kk * NR), a6);
        a7 = _mm256_fmadd_ps(xb, _mm256_loadu_ps(p3 + kk * NR + 8), a7);
    }
    _mm256_storeu_ps(y, a0);
    _mm256_storeu_ps(y + 8, a1);
    _mm256_storeu_ps(y + 16, a2);
    _mm256_storeu_ps(y + 24, a3);
    _mm256_storeu_ps(y + 32, a4);
    _mm256_storeu_ps(y + 40, a5);
    _mm256_storeu_ps(y + 48, a6);
    _mm256_storeu_ps(y + 56, a7);
}

/* Two rows, two full panels at once: eight independent FMA chains (two rows of one panel have four, and
   leave the FMA units waiting on latency: 2 rows cost 1.5x one row, 6 rows 1.8x, before the one-panel kernels
   prefetched); each output's chain is the same as in kern2. Since 2026-11-27 only for two rows whose panels are
   in L2 (rows_panels). */
static TGT void kern2x2(const float *x, int64_t ldx, const float *wp, int64_t k, float *y, int64_t ldy,
                        int64_t ahead, int l2) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    const float *p0 = wp, *p1 = wp + k * NR, *x0 = x, *x1 = x + ldx;
    for (int64_t kk = 0; kk < k; kk++) {
        prefetch_line(p0 + ahead + kk * NR, l2);
        prefetch_line(p1 + ahead + kk * NR, l2);
        __m256 w0 = _mm256_loadu_ps(p0 + kk * NR), w1 = _mm256_loadu_ps(p0 + kk * NR + 8);
        __m256 w2 = _mm256_loadu_ps(p1 + kk * NR), w3 = _mm256_loadu_ps(p1 + kk * NR + 8);
        __m256 b0 = _mm256_broadcast_ss(x0 + kk), b1 = _mm256_broadcast_ss(x1 + kk);
        a0 = _mm256_fmadd_ps(b0, w0, a0);
        a1 = _mm256_fmadd_ps(b0, w1, a1);
        a2 = _mm256_fmadd_ps(b0, w2, a2);
        a3 = _mm256_fmadd_ps(b0, w3, a3);
        a4 = _mm256_fmadd_ps(b1, w0, a4);
        a5 = _mm256_fmadd_ps(b1, w1, a5);
        a6 = _mm256_fmadd_ps(b1, w2, a6);
        a7 = _mm256_fmadd_ps(b1, w3, a7);
    }
    _mm256_storeu_ps(y, a0);
    _mm256_storeu_ps(y + 8, a1);
    _mm256_storeu_ps(y + 16, a2);
    _mm256_storeu_ps(y + 24, a3);
    _mm256_storeu_ps(y + ldy, a4);
    _mm256_storeu_ps(y + ldy + 8, a5);
    _mm256_storeu_ps(y + ldy + 16, a6);
    _mm256_storeu_ps(y + ldy + 24, a7);
}

/* The same products with AVX-512F where the CPU has it (fc_gemm_use): 2-8 rows x one panel per pass, one 512-bit
   accumulator per row = the panel's 16 outputs, one broadcast of x and one fused multiply-add per (row, k) in order
   k = 0 .. K-1: each output's FMA chain is the one of every kernel above, so the same bits. One panel at a time
   reads the packed weights as one sequential stream, and 32 registers hold eight rows' accumulators: the 43
   products of tiny-py-coder (1 thread, warm, median of 61 interleaved rounds, AVX2 kernels -> these) at 2 rows
   1.50 -> 1.19 ms, 5 rows 1.51 -> 1.39, 6 rows 1.62 -> 1.48, 7 rows 1.99 -> 1.65, 12 rows 2.58 -> 2.37; one row
   keeps kern1x4 (bound by memory). Two or four panels at once (more independent chains, more streams) were slower
   from 3 rows up (6 rows 1.43 -> 1.79 ms with two) and at 2 rows (1.19 -> 1.28 with four). */
#define TGT512 __attribute__((target("avx512f,avx2,fma")))
#define KZ(MR)                                                                                                 \
    static TGT512 void kz##MR(const float *x, int64_t ldx, const float *wp, int64_t k, float *y, int64_t ldy) { \
        __m512 acc[MR];                                                                                        \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) acc[r] = _mm512_setzero_ps();                    \
        for (int64_t kk = 0; kk < k; kk++) {                                                                   \
            _mm_prefetch((const char *)(wp + (kk + PF) * NR), PF_HINT);                                       \
            __m512 w = _mm512_loadu_ps(wp + kk * NR);                                                          \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                               \
                acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * ldx + kk]), w, acc[r]);                          \
        }                                                                                                      \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) _mm512_storeu_ps(y + r * ldy, acc[r]);            \
    }
KZ(2)
KZ(3)
KZ(4)
KZ(5)
KZ(6)
KZ(7)
KZ(8)

/* Which kernels fc_gemm runs: 1 the AVX-512 ones for 2-8 rows, 0 the AVX2 ones; -1 until first asked (then the
   CPU decides: AVX-512F present). Both give the same bits; fc_gemm_use switches (tests, measurements). */
static int use512 = -1;

static int has512(void) {
    if (use512 < 0) {
        __builtin_cpu_init();
        use512 = __builtin_cpu_supports("avx512f") ? 1 : 0;
    }
    return use512;
}

/* isa 0: the CPU's best kernels; 1: the AVX2 ones. Returns the kernels now in use: 2 AVX-512, 1 AVX2. */
int fc_gemm_use(int isa) {
    use512 = -1;
    if (isa == 1 || !has512())
        use512 = 0;
    return use512 ? 2 : 1;
}

/* Full panels [j, j1) of rows [0, mr) (2 <= mr <= 8) with the AVX-512 kernels; returns the first panel not done. */
static int64_t rows_panels512(const float *px, int64_t mr, int64_t k, const float *wp, int64_t n, float *py,
                              int64_t j, int64_t j1) {
    int64_t full = n / NR;
    for (; j < j1 && j < full; j++) {
        const float *pw = wp + j * k * NR;
        float *o = py + j * NR;
        switch (mr) {
        case 2: kz2(px, k, pw, k, o, n); break;
        case 3: kz3(px, k, pw, k, o, n); break;
        case 4: kz4(px, k, pw, k, o, n); break;
        case 5: kz5(px, k, pw, k, o, n); break;
        case 6: kz6(px, k, pw, k, o, n); break;
        case 7: kz7(px, k, pw, k, o, n); break;
        default: kz8(px, k, pw, k, o, n); break;
        }
    }
    return j;
}

static int two_rows_streamed = 1;

/* Whether a product of two rows alone streams one panel at a time (1, the default) or takes kern2x2 like the rows
   left after blocks (0): A/B measurements switch it; both give the same bits. A negative mode only asks. Returns the
   mode in use. */
int fc_gemm_two_rows(int mode) {
    if (mode >= 0)
        two_rows_streamed = mode ? 1 : 0;
    return two_rows_streamed;
}

/* Panels per group in fc_gemm: 4 panels of K = 256-768 inputs are 64-192 KiB, held in L2 while every block of
   rows passes over them. Measured on the 43 products of tiny-py-coder (1 thread, ms, median of 15 interleaved
   calls, weights warm / evicted from the caches first), rows outermost -> groups of 4 panels:
     7 rows  3.38 -> 3.06 / 3.68 -> 3.26;  8 rows  3.89 -> 3.20 / 4.25 -> 3.56;
     12 rows 4.32 -> 3.64 / 4.77 -> 3.97;  16 rows 5.55 -> 4.25 / 5.62 -> 4.85;
   groups of 2, 8 and 16 panels were within 5% of 4, slower at 13-16 rows; 1 panel (each pass right after the
   other) 5-10% slower at 8-12 rows (2026-11-28). */
#ifndef PANEL_GROUP
#define PANEL_GROUP 4
#endif
/* Whether the passes over a panel group that do not stream it from memory (the second 6-row block, the rows left)
   prefetch the next group into L2 (1, the default) or keep the streaming distance inside their own panels, which are
   already cached (0). Same bits either way; A/B runs switch it. Before, the memory stream stopped while those
   passes ran: tiny-py-coder's 43 products at 8 / 9 / 13 rows 1.99 / 2.14 / 2.83 -> 1.80 / 1.90 / 2.68 ms warm, but
   2.38 / 2.47 / 3.23 -> 2.55 / 2.50 / 3.04 with the weights evicted from every cache (measure_gemm.py); in the
   engine's greedy tree forward 8-13 rows 4-10% / 0-8% / 0-6% less at 64 / 512 / 1,000 cached tokens
   (benchmarks/results/2026-11-28b/group_prefetch_ab.txt). The hint is T1: into L2 (T0 was slower than none). A
   negative mode only asks; returns the mode in use. */
static int group_prefetch = 1;

int fc_gemm_group_prefetch(int mode) {
    if (mode >= 0)
        group_prefetch = mode ? 1 : 0;
    return group_prefetch;
}
/* Rows [r0, r0 + mr) (mr <= 7, or 8 with the AVX-512 kernels) times panels [j0, j1); one row takes 4 full panels
   at once; a last panel of fewer than 16 outputs takes the AVX2 kernels. Two rows (AVX2) take 2 panels at once
   (kern2x2) only where the panels are already in L2 (`streamed` 0 or 2: the rows left after the blocks of a larger
   product); a product of two rows alone streams the weights from memory one panel at a time (kern2, with its
   prefetch), which cost less: the 43 products of tiny-py-coder at 2 rows 1.99 -> 1.71 ms warm, 2.29 -> 1.83 ms
   with the weights evicted, while at 8 and 14 rows (6 + 2 in panel groups) kern2 for the 2 was 1.5-5% slower
   (the project's 2-core AMD EPYC without AVX-512, 1 thread, median of 41 interleaved calls,
   benchmarks/measure_gemm.py --defines; 2026-11-27).
   c(1) of the verify-cost curve fell from 1.20-1.31 to 1.07-1.08 there; in the nine bench cells fastcoder's decode
   speed against the same engine with kern2x2 (fc_gemm_two_rows(0), trees sized on the curve measured with it) was
   1.008 (0.983-1.032) paired per task run: within the noise (benchmarks/results/2026-11-27i/).
   `streamed`: 1 the product's only pass (it streams the weights), 0 a group's first 6-row block (it streams the
   group), 2 a later pass over a group already in L2 (it prefetches the next group: group_prefetch). */
static TGT void rows_panels(const float *x, int64_t r0, int64_t mr, int64_t k, const float *wp, int64_t n,
                            float *y, int64_t j0, int64_t j1, int streamed) {
    int64_t full = n / NR, j = j0;
    int l2 = group_prefetch && streamed == 2; /* fetch the next group into L2, else stream this one */
    int64_t ahead = l2 ? PANEL_GROUP * k * NR : pf_avx2 * NR;
    const float *px = x + r0 * k;
    float *py = y + r0 * n;
    if (mr >= 2 && has512())
        j = rows_panels512(px, mr, k, wp, n, py, j, j1);
    if (mr == 1)
        for (; j + 4 <= j1 && j + 4 <= full; j += 4) kern1x4(px, wp + j * k * NR, k, py + j * NR, ahead, l2);
    if (mr == 2 && !(streamed == 1 && two_rows_streamed))
        for (; j + 2 <= j1 && j + 2 <= full; j += 2) kern2x2(px, k, wp + j * k * NR, k, py + j * NR, n, ahead, l2);
    for (; j < j1; j++) {
        const float *pw = wp + j * k * NR;
        int64_t cols = n - j * NR < NR ? n - j * NR : NR;
        switch (mr) {
        case 1: kern1(px, k, pw, k, py + j * NR, n, cols, ahead, l2); break;
        case 2: kern2(px, k, pw, k, py + j * NR, n, cols, ahead, l2); break;
        case 3: kern3(px, k, pw, k, py + j * NR, n, cols, ahead, l2); break;
        case 4: kern4(px, k, pw, k, py + j * NR, n, cols, ahead, l2); break;
        case 5: kern5(px, k, pw, k, py + j * NR, n, cols, ahead, l2); break;
        case 6: kern6(px, k, pw, k, py + j * NR, n, cols, ahead, l2); break;
        case 7: kern7(px, k, pw, k, py + j * NR, n, cols); break;
        default: /* 8 rows (AVX-512 blocks): two passes of 4 */
            kern4(px, k, pw, k, py + j * NR, n, cols, ahead, l2);
            kern4(px + 4 * k, k, pw, k, py + 4 * n + j * NR, n, cols, ahead, l2);
            break;
        }
    }
}


/* y (m x n, row-major) = x (m x k, row-major) @ W^T, W packed by fc_gemm_pack. Up to 7 rows: one register
   block streams every panel (one row takes 4 panels at once). More rows: panels outermost, in groups of
   PANEL_GROUP; each group is read from memory once by the first 6-row block and found in L2 by the others
   and by the 1-5 rows left. Blocks of 7, or as even as possible, were slower at 8 and 14 rows (4 + 4: 3.13-3.18
   -> 3.39-3.56 ms). A single row left used to join the last block (6 + 7 with kern7: 13 rows 3.9-4.1 -> 3.7-3.8
   ms when measured); since kern7 is load-bound (seven broadcasts and fourteen memory operands per k step) that
   stopped paying: 13 rows 4.44 -> 4.01 ms with the weights evicted first, 4.03 -> 3.58 warm, 19 rows 5.70 ->
   5.29 / 5.10 -> 4.92 with 6 + 6 + 1 (benchmarks/measure_gemm.py --defines, 40 interleaved rounds, 2026-11-26).
   Seven rows alone still take kern7 (2.48 vs 2.68 ms as 6 + 1). (Rows outermost read every weight again for
   each block: a 7th row cost as much as a 2nd weight pass.) With the AVX-512 kernels (has512) a register block
   holds 8 rows: up to 8 rows stream every panel once, more go through the groups in blocks of 8 and the rest
   (9 rows: 8 + 1; blocks as even as possible, 5 + 4, were no faster at 8-20 rows). The blocking changes no
   output's FMA chain, so results are the same bits. */
static void gemm_range(const float *x, int64_t m, int64_t k, const float *wp, int64_t n, float *y, int64_t p0,
                       int64_t p1) {
    int64_t block = has512() ? 8 : 6; /* rows a register block holds */
    if (m <= (block == 8 ? 8 : 7)) {
        rows_panels(x, 0, m, k, wp, n, y, p0, p1, 1);
        return;
    }
    for (int64_t j0 = p0; j0 < p1; j0 += PANEL_GROUP) {
        int64_t j1 = j0 + PANEL_GROUP < p1 ? j0 + PANEL_GROUP : p1, r0 = 0;
        for (; m - r0 >= block; r0 += block) rows_panels(x, r0, block, k, wp, n, y, j0, j1, r0 ? 2 : 0);
        if (r0 < m)
            rows_panels(x, r0, m - r0, k, wp, n, y, j0, j1, 2);
    }
}

/* Panels per thread at least (below, one thread does the product: a parallel region costs a few us). */
#define MIN_THREAD_PANELS 8

void fc_gemm(const float *x, int64_t m, int64_t k, const float *wp, int64_t n, float *y) {
    if (m <= 0 || n <= 0)
        return;
    int64_t panels = (n + NR - 1) / NR;
    int threads = gemm_threads;
    if (threads > panels / MIN_THREAD_PANELS)
        threads = (int)(panels / MIN_THREAD_PANELS);
    if (threads <= 1) {
        gemm_range(x, m, k, wp, n, y, 0, panels);
        return;
    }
#ifdef _OPENMP
    /* contiguous ranges of whole groups of 4 panels (kern1x4's step and PANEL_GROUP's) */
    int64_t groups = (panels + 3) / 4;
#pragma omp parallel num_threads(threads)
    {
        int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
        int64_t p0 = groups * t / team * 4, p1 = groups * (t + 1) / team * 4;
        if (p1 > panels)
            p1 = panels;
        if (p0 < p1)
            gemm_range(x, m, k, wp, n, y, p0, p1);
    }
#endif
}

/* fc_gemm on the calling thread alone: for products too small for a parallel region (the draft head's 256 x 256, where
   OpenMP's fork and join cost more than the arithmetic). */
void fc_gemm_serial(const float *x, int64_t m, int64_t k, const float *wp, int64_t n, float *y) {
    if (m > 0 && n > 0)
        gemm_range(x, m, k, wp, n, y, 0, (n + NR - 1) / NR);
}

#else

int fc_gemm_supported(void) { return 0; }

int fc_gemm_use(int isa) {
    (void)isa;
    return 0;
}

int fc_gemm_two_rows(int mode) {
    (void)mode;
    return 0;
}

int fc_gemm_group_prefetch(int mode) {
    (void)mode;
    return 0;
}

void fc_gemm_serial(const float *x, int64_t m, int64_t k, const float *wp, int64_t n, float *y) {
    (void)x; (void)m; (void)k; (void)wp; (void)n; (void)y;
}

void fc_gemm(const float *x, int64_t m, int64_t k, const float *wp, int64_t n, float *y) {
    (void)x; (void)m; (void)k; (void)wp; (void)n; (void)y;
}

#endif

/* Pack W (n x k, row-major) into 16-output panels (see the top of this file); out holds
   ceil(n / 16) * 16 * k floats. */
void fc_gemm_pack(const float *w, int64_t n, int64_t k, float *out) {
    int64_t panels = (n + NR - 1) / NR;
    for (int64_t j = 0; j < panels; j++)
        for (int c = 0; c < NR; c++) {
            int64_t row = j * NR + c;
            float *dst = out + j * k * NR + c;
            if (row < n) {
                const float *src = w + row * k;
                for (int64_t kk = 0; kk < k; kk++) dst[kk * NR] = src[kk];
            } else {
                for (int64_t kk = 0; kk < k; kk++) dst[kk * NR] = 0.0f;
            }
        }
}
