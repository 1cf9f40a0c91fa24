/* The forward's products, Y [T x N] = X [T x K] Wᵀ with W stored [N x K] row-major as checkpoints store it, on the
 * GEMM libraries tdyn could use: OpenBLAS's cblas_sgemm (what tdyn calls today), oneDNN's dnnl_sgemm (what PyTorch
 * uses), and oneDNN's matmul primitive with the weights reordered once into its own layout (a pre-packed weight:
 * what packing at load would give). Each line: GFLOP/s (2 T N K / seconds, best of REPS after a warm-up), with
 * PEAK (GFLOP/s) the share of it, and every library's result against OpenBLAS's (max |difference| / max |Y|). Run it
 * through bench/gemm_candidates.sh, which builds it, measures the peak and sets one thread for every library.
 *   gemm_candidates [REPS] [PEAK]
 */
#define _POSIX_C_SOURCE 199309L
#include <cblas.h>
#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void check(dnnl_status_t s, const char* what) {
  if (s != dnnl_success) {
    fprintf(stderr, "gemm_candidates: %s failed (oneDNN status %d)\n", what, (int)s);
    exit(1);
  }
}

static float* random_floats(long n, unsigned seed) {
  float* p = malloc(sizeof(float) * n);
  for (long i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = ((seed >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  return p;
}

static double max_abs(const float* y, long n) {
  double m = 0;
  for (long i = 0; i < n; ++i) m = fmax(m, fabs(y[i]));
  return m;
}

static double max_diff(const float* a, const float* b, long n) {
  double m = 0;
  for (long i = 0; i < n; ++i) m = fmax(m, fabs((double)a[i] - b[i]));
  return m;
}

/* oneDNN matmul Y = X Wᵀ with W reordered once into the primitive's chosen layout. */
typedef struct {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  dnnl_primitive_t matmul;
  dnnl_memory_t x, w_packed, y;
} PackedMatmul;

static void packed_init(PackedMatmul* p, long T, long N, long K, float* x, float* w, float* y) {
  check(dnnl_engine_create(&p->engine, dnnl_cpu, 0), "engine");
  check(dnnl_stream_create(&p->stream, p->engine, dnnl_stream_default_flags), "stream");
  dnnl_memory_desc_t x_md, w_plain_md, w_any_md, y_md;
  const dnnl_dims_t x_dims = {T, K}, w_dims = {K, N}, y_dims = {T, N};
  check(dnnl_memory_desc_init_by_tag(&x_md, 2, x_dims, dnnl_f32, dnnl_ab), "x desc");
  check(dnnl_memory_desc_init_by_tag(&w_plain_md, 2, w_dims, dnnl_f32, dnnl_ba), "w desc");  // K x N, W's [N x K] rows
  check(dnnl_memory_desc_init_by_tag(&w_any_md, 2, w_dims, dnnl_f32, dnnl_format_tag_any), "w any");
  check(dnnl_memory_desc_init_by_tag(&y_md, 2, y_dims, dnnl_f32, dnnl_ab), "y desc");
  dnnl_matmul_desc_t desc;
  check(dnnl_matmul_desc_init(&desc, &x_md, &w_any_md, NULL, &y_md), "matmul desc");
  dnnl_primitive_desc_t pd;
  check(dnnl_primitive_desc_create(&pd, &desc, NULL, p->engine, NULL), "matmul primitive desc");
  const dnnl_memory_desc_t* w_chosen = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  check(dnnl_primitive_create(&p->matmul, pd), "matmul");
  dnnl_memory_t w_plain;
  check(dnnl_memory_create(&w_plain, &w_plain_md, p->engine, w), "w memory");
  check(dnnl_memory_create(&p->w_packed, w_chosen, p->engine, DNNL_MEMORY_ALLOCATE), "packed w memory");
  dnnl_primitive_desc_t reorder_pd;
  check(dnnl_reorder_primitive_desc_create(&reorder_pd, &w_plain_md, p->engine, w_chosen, p->engine, NULL), "reorder desc");
  dnnl_primitive_t reorder;
  check(dnnl_primitive_create(&reorder, reorder_pd), "reorder");
  dnnl_exec_arg_t reorder_args[2] = {{DNNL_ARG_FROM, w_plain}, {DNNL_ARG_TO, p->w_packed}};
  check(dnnl_primitive_execute(reorder, p->stream, 2, reorder_args), "reorder run");
  check(dnnl_stream_wait(p->stream), "wait");
  check(dnnl_memory_create(&p->x, &x_md, p->engine, x), "x memory");
  check(dnnl_memory_create(&p->y, &y_md, p->engine, y), "y memory");
  dnnl_primitive_destroy(reorder);
  dnnl_primitive_desc_destroy(reorder_pd);
  dnnl_primitive_desc_destroy(pd);
  dnnl_memory_destroy(w_plain);
}

static void packed_run(PackedMatmul* p) {
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, p->x}, {DNNL_ARG_WEIGHTS, p->w_packed}, {DNNL_ARG_DST, p->y}};
  check(dnnl_primitive_execute(p->matmul, p->stream, 3, args), "matmul run");
  check(dnnl_stream_wait(p->stream), "wait");
}

static void packed_free(PackedMatmul* p) {
  dnnl_primitive_destroy(p->matmul);
  dnnl_memory_destroy(p->x), dnnl_memory_destroy(p->w_packed), dnnl_memory_destroy(p->y);
  dnnl_stream_destroy(p->stream);
  dnnl_engine_destroy(p->engine);
}

enum { kOpenBlas, kDnnlSgemm, kDnnlPacked, kCandidates };
static const char* const kNames[kCandidates] = {"OpenBLAS cblas_sgemm", "oneDNN dnnl_sgemm", "oneDNN matmul, W packed once"};

/* The best seconds of `reps` runs of candidate `c` after one warm-up. */
static double best_seconds(int c, int reps, long T, long N, long K, const float* x, const float* w, float* y, PackedMatmul* p) {
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    const double start = now();
    if (c == kOpenBlas) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, N, K, 1.0f, x, K, w, K, 0.0f, y, N);
    if (c == kDnnlSgemm) check(dnnl_sgemm('N', 'T', T, N, K, 1.0f, x, K, w, K, 0.0f, y, N), "dnnl_sgemm");
    if (c == kDnnlPacked) packed_run(p);
    const double seconds = now() - start;
    if (r > 0 && seconds < best) best = seconds;  // run 0 warms caches and the libraries' own set-up
  }
  return best;
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 7;
  const double peak = argc > 2 ? atof(argv[2]) : 0;
  /* The products of a d = 768 Llama-shaped layer (q/k/v stacked, o, gate/up stacked, down) and of the 8B shape's
   * attention projection, over prompt lengths from one token (decoding) to 4096. */
  const long shapes[][2] = {{2304, 768}, {768, 768}, {4096, 768}, {768, 2048}, {4096, 4096}};
  const long lengths[] = {1, 16, 128, 256, 1024, 4096};
  printf("%-6s %-11s %16s %16s %16s   %s\n", "T", "N x K", "OpenBLAS", "dnnl_sgemm", "dnnl packed", "max |diff| / max |Y| vs OpenBLAS");
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
    for (size_t t = 0; t < sizeof lengths / sizeof lengths[0]; ++t) {
      const long T = lengths[t], N = shapes[s][0], K = shapes[s][1];
      if (N * K > 4096L * 4096 && T > 1024) continue;
      float *x = random_floats(T * K, 1), *w = random_floats(N * K, 2);
      float* y[kCandidates];
      double gflops[kCandidates];
      for (int c = 0; c < kCandidates; ++c) y[c] = calloc(T * N, sizeof(float));
      PackedMatmul packed;
      packed_init(&packed, T, N, K, x, w, y[kDnnlPacked]);
      for (int c = 0; c < kCandidates; ++c) {
        const double seconds = best_seconds(c, reps, T, N, K, x, w, y[c], &packed);
        gflops[c] = 2.0 * T * N * K / seconds * 1e-9;
      }
      const double scale = max_abs(y[kOpenBlas], T * N);
      char shape[32];
      snprintf(shape, sizeof shape, "%ldx%ld", N, K);
      printf("%-6ld %-11s", T, shape);
      for (int c = 0; c < kCandidates; ++c) {
        if (peak > 0) printf(" %8.1f (%3.0f %%)", gflops[c], 100 * gflops[c] / peak);
        else printf(" %16.1f", gflops[c]);
      }
      printf("   %.1e %.1e\n", max_diff(y[kDnnlSgemm], y[kOpenBlas], T * N) / scale,
             max_diff(y[kDnnlPacked], y[kOpenBlas], T * N) / scale);
      packed_free(&packed);
      for (int c = 0; c < kCandidates; ++c) free(y[c]);
      free(x), free(w);
    }
  }
  for (int c = 0; c < kCandidates; ++c) printf("%s%s", c ? ", " : "columns, GFLOP/s: ", kNames[c]);
  printf("\n");
  return 0;
}
