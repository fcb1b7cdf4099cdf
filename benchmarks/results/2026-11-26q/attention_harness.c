/* Old vs new fc_attention (engine/native/tree_attention.c), alternating, on 6 layers of random KV (4 heads x 64 dims),
 * a chain tree mask over S keys (S = argv[1]); checks the outputs bit for bit. Build from the repository root:
 *   git show 07b32b6:engine/native/tree_attention.c > /tmp/old_ta.c && cp engine/native/simd_math.h /tmp/
 *   gcc -O2 -std=c99 -shared -fPIC -ffp-contract=off -fopenmp -o /tmp/libold.so /tmp/old_ta.c engine/native/small_gemm.c -lm
 *   gcc -O2 -std=c99 -shared -fPIC -ffp-contract=off -fopenmp -o /tmp/libnew.so engine/native/tree_attention.c engine/native/small_gemm.c -lm
 *   gcc -O2 -o /tmp/cmp benchmarks/results/2026-11-26q/attention_harness.c -ldl -lm && cd /tmp && OMP_NUM_THREADS=1 ./cmp 1024
 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <math.h>
#include <dlfcn.h>
typedef int (*attn_t)(const float *, const int64_t *, const float *, const int64_t *, const float *, const int64_t *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const void *, int, const int64_t *, int, float, float *);
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char **argv){
  void *ho = dlopen("./libold.so", RTLD_NOW|RTLD_LOCAL), *hn = dlopen("./libnew.so", RTLD_NOW|RTLD_LOCAL);
  attn_t fo = (attn_t)dlsym(ho, "fc_attention"), fn = (attn_t)dlsym(hn, "fc_attention");
  int64_t S = atoi(argv[1]), H = 4, D = 64, L = 6, cap = S + 64;
  float *K[6], *V[6];
  for (int l = 0; l < L; l++) { K[l] = malloc(4*H*cap*D); V[l] = malloc(4*H*cap*D);
    for (int64_t i = 0; i < H*cap*D; i++) { K[l][i] = (rand()%2000)/1000.f - 1.f; V[l][i] = (rand()%2000)/1000.f - 1.f; } }
  float *q = malloc(4*H*16*D), *o1 = malloc(4*H*16*D), *o2 = malloc(4*H*16*D), *mask = malloc(4*16*cap);
  for (int i = 0; i < H*16*D; i++) q[i] = (rand()%2000)/1000.f - 1.f;
  int rows[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12};
  for (int mi = 0; mi < 10; mi++) {
    int64_t m = rows[mi], keys = S + m;
    for (int64_t i = 0; i < m; i++) for (int64_t j = 0; j < keys; j++) mask[i*keys + j] = j <= S + i ? (j % 7 == 3 && i == 1 ? 0.25f : 0.f) : -INFINITY;
    int64_t qs[3] = {H*m*D, m*D, D}, ks[3] = {H*cap*D, cap*D, D}, mss[3] = {0, keys, 1};
    int same = 1;
    for (int l = 0; l < L; l++) {
      fo(q, qs, K[l], ks, V[l], ks, 1, H, H, m, keys, D, m > 1 ? mask : NULL, m > 1 ? 2 : 0, mss, 0, 0.125f, o1);
      fn(q, qs, K[l], ks, V[l], ks, 1, H, H, m, keys, D, m > 1 ? mask : NULL, m > 1 ? 2 : 0, mss, 0, 0.125f, o2);
      if (memcmp(o1, o2, 4*m*H*D)) same = 0;
    }
    double t[2] = {0, 0}; double best[2] = {1e9, 1e9};
    for (int r = 0; r < 300; r++) for (int w = 0; w < 2; w++) {
      attn_t f = ((r + w) % 2) ? fo : fn; int idx = f == fo ? 0 : 1;
      double t0 = now();
      for (int l = 0; l < L; l++) f(q, qs, K[l], ks, V[l], ks, 1, H, H, m, keys, D, m > 1 ? mask : NULL, m > 1 ? 2 : 0, mss, 0, 0.125f, o1);
      double dt = now() - t0; t[idx] += dt; if (dt < best[idx]) best[idx] = dt;
    }
    printf("S=%ld rows=%2ld same-bits=%d  old %.1f us (best %.1f)  new %.1f us (best %.1f)  new/old %.3f\n", S, m, same, t[0]/300*1e6, best[0]*1e6, t[1]/300*1e6, best[1]*1e6, t[1]/t[0]);
  }
}
