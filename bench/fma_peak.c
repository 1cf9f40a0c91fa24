/* The machine's float64 multiply-add peak, the bound of the particle step's products: THREADS OpenMP threads each
 * run 12 independent chains of fused multiply-adds FMA_BYTES wide (64: AVX-512, the default; 32: AVX2) on registers
 * alone; the best of 3 passes of all threads together. Virtual cores that are hyperthreads of one physical core
 * share its FMA units: two threads then reach what one does.
 *   cc -O3 -march=native -fopenmp fma_peak.c                  the widest vectors (build with -march=native)
 *   cc -O3 -mavx2 -mfma -DFMA_BYTES=32 -fopenmp fma_peak.c     the AVX2 peak, also on an AVX-512 host, where code
 *                                                             built for AVX2 (OpenBLAS's Haswell kernels) is bound by it
 *   fma_peak THREADS     prints GFLOP/s
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef FMA_BYTES
#define FMA_BYTES 64
#endif
typedef double vec __attribute__((vector_size(FMA_BYTES)));
enum { kChains = 12, kLanes = FMA_BYTES / 8 };  // 12 chains cover the FMA latency of two pipes (4-5 cycles each)

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 1;
  const long rounds = 100000000;
  double best = 0, checksum = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const double start = omp_get_wtime();
    double sum = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
    {
      // Factors known only at run time, so that no chain can be folded.
      const vec factor = (vec){0} + (1 - 1e-12 * (omp_get_thread_num() + argc)), addend = (vec){0} + 1e-9;
      vec chain[kChains];
      for (int c = 0; c < kChains; ++c) chain[c] = (vec){0} + c;
      for (long r = 0; r < rounds; ++r)
        for (int c = 0; c < kChains; ++c) chain[c] = chain[c] * factor + addend;
      for (int c = 0; c < kChains; ++c)
        for (int l = 0; l < kLanes; ++l) sum += chain[c][l];
    }
    const double gflops = 2.0 * kLanes * kChains * rounds * threads / (omp_get_wtime() - start) / 1e9;
    if (gflops > best) best = gflops;
    checksum += sum;
  }
  printf("%.1f\n", best);
  fprintf(stderr, "(checksum %g)\n", checksum);
  return 0;
}
