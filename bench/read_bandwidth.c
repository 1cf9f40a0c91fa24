/* The machine's memory read bandwidth, the bound of a decoding step: the best of 5 passes summing a 1 GiB buffer
 * (far larger than any cache), with THREADS OpenMP threads each reading its own contiguous part.
 *   read_bandwidth THREADS     prints GB/s
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 1;
  const long n = (1L << 30) / sizeof(float);
  float* data = malloc(n * sizeof(float));
  if (!data) { perror("malloc"); return 1; }
  for (long i = 0; i < n; ++i) data[i] = (float)(i & 1023);
  double best = 0, total = 0;
  for (int pass = 0; pass < 5; ++pass) {
    const double start = omp_get_wtime();
    float sum = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : sum) schedule(static)
    for (long i = 0; i < n; ++i) sum += data[i];
    const double gbs = n * sizeof(float) / (omp_get_wtime() - start) / 1e9;
    if (gbs > best) best = gbs;
    total += sum;
  }
  printf("%.2f\n", best);
  fprintf(stderr, "(checksum %g)\n", total);
  free(data);
  return 0;
}
