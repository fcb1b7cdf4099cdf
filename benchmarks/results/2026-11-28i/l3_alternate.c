/* 2026-11-28i: one core sweeps a float32 buffer of argv[1] MB argv[2] times; best and mean ms a sweep.
   argv[3] = 1: every other sweep in
   reverse block order (64 KB blocks). */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t mb=atoi(argv[1]); size_t n=mb*1024*1024/4; int reps=atoi(argv[2]); int alt=atoi(argv[3]);
  size_t blk = 64*1024/4; /* 64 KB blocks, each read forward */
  float*a=aligned_alloc(64,n*4); for(size_t i=0;i<n;i++)a[i]=i*1e-7f;
  __m256 acc=_mm256_setzero_ps(), acc2=_mm256_setzero_ps();
  double best=1e9,sum=0;
  for(int r=0;r<reps;r++){double t=now();
    int rev = alt && (r&1);
    size_t nb=n/blk;
    for(size_t b=0;b<nb;b++){ size_t bb = rev? nb-1-b : b; float*p=a+bb*blk;
      for(size_t i=0;i<blk;i+=16){
        acc=_mm256_add_ps(acc,_mm256_load_ps(p+i));acc2=_mm256_add_ps(acc2,_mm256_load_ps(p+i+8));}}
    t=now()-t; if(r>0){sum+=t; if(t<best)best=t;}}
  float o[8];_mm256_storeu_ps(o,_mm256_add_ps(acc,acc2));
  printf("%zu MB alt=%d: best %.3f ms (%.1f GB/s) mean %.3f ms [%g]\n",
         mb,alt,best*1e3,mb/1024.0/best,sum/(reps-1)*1e3,o[0]);
}
