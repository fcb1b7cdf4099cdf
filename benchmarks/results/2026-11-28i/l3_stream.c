/* 2026-11-28i: one core sweeps a float32 buffer of argv[1] MB argv[2] times; best and mean ms a sweep.
   argv[3] = 1: the last argv[4] MB
   read with prefetchnta. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t mb=atoi(argv[1]); size_t n=mb*1024*1024/4; int reps=atoi(argv[2]); int nt = argc>3 ? atoi(argv[3]) : 0;
  size_t ntpart = argc>4 ? (size_t)atoi(argv[4])*1024*1024/4 : 0;  /* the last ntpart floats read with prefetchnta */
  float*a=aligned_alloc(64,n*4); for(size_t i=0;i<n;i++)a[i]=i*1e-7f;
  __m256 acc=_mm256_setzero_ps(), acc2=_mm256_setzero_ps();
  double best=1e9,sum=0;
  for(int r=0;r<reps;r++){double t=now();
    size_t split = n - ntpart;
    for(size_t i=0;i<split;i+=16){
      acc=_mm256_add_ps(acc,_mm256_load_ps(a+i));acc2=_mm256_add_ps(acc2,_mm256_load_ps(a+i+8));}
    for(size_t i=split;i<n;i+=16){ if(nt) _mm_prefetch((const char*)(a+i+256),_MM_HINT_NTA);
      acc=_mm256_add_ps(acc,_mm256_load_ps(a+i));acc2=_mm256_add_ps(acc2,_mm256_load_ps(a+i+8));}
    t=now()-t; if(r>0){sum+=t; if(t<best)best=t;}}
  float o[8];_mm256_storeu_ps(o,_mm256_add_ps(acc,acc2));
  printf("%zu MB nt=%d ntpart=%zuMB: best %.3f ms (%.1f GB/s) mean %.3f ms  [%g]\n",
         mb,nt,ntpart*4/1024/1024,best*1e3,mb/1024.0/best,sum/(reps-1)*1e3,o[0]);
}
