/* A plain single-threaded C forward pass and greedy decoder for llama2.c legacy checkpoints: the baseline
 * that bench/run_vs_reference.sh measures `tdyn run` against. Straightforward loops, float32, one token at a
 * time with a KV cache, no BLAS, no threads.
 *
 *   reference_forward MODEL.bin STEPS [TOKEN ...]   prints the generated ids and tokens/s on stderr
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  int dim, hidden, layers, heads, kv_heads, vocab, seq_len;
} Header;

static float* read_all(const char* path, Header* h, long* n_floats) {
  FILE* f = fopen(path, "rb");
  if (!f) { perror(path); exit(1); }
  if (fread(h, sizeof(int), 7, f) != 7) { fprintf(stderr, "short header\n"); exit(1); }
  fseek(f, 0, SEEK_END);
  long bytes = ftell(f) - 28;
  fseek(f, 28, SEEK_SET);
  float* data = malloc(bytes);
  if (fread(data, 1, bytes, f) != (size_t)bytes) { fprintf(stderr, "short read\n"); exit(1); }
  fclose(f);
  *n_floats = bytes / 4;
  return data;
}

static void rmsnorm(float* out, const float* x, const float* w, int n) {
  float ss = 0;
  for (int i = 0; i < n; i++) ss += x[i] * x[i];
  ss = 1.0f / sqrtf(ss / n + 1e-5f);
  for (int i = 0; i < n; i++) out[i] = w[i] * (ss * x[i]);
}

/* out[d] = W[d, n] x[n] */
static void matvec(float* out, const float* x, const float* w, int n, int d) {
  for (int i = 0; i < d; i++) {
    float s = 0;
    for (int j = 0; j < n; j++) s += w[i * n + j] * x[j];
    out[i] = s;
  }
}

int main(int argc, char** argv) {
  if (argc < 3) { fprintf(stderr, "usage: %s MODEL.bin STEPS [TOKEN ...]\n", argv[0]); return 1; }
  Header h;
  long n_floats;
  float* p = read_all(argv[1], &h, &n_floats);
  int shared = h.vocab > 0, vocab = abs(h.vocab), dim = h.dim, hd = dim / h.heads, kv_dim = hd * h.kv_heads;
  int L = h.layers, hidden = h.hidden, steps = atoi(argv[2]);
  float *emb = p, *rms_att = emb + (long)vocab * dim, *wq = rms_att + (long)L * dim, *wk = wq + (long)L * dim * dim;
  float *wv = wk + (long)L * dim * kv_dim, *wo = wv + (long)L * dim * kv_dim, *rms_ffn = wo + (long)L * dim * dim;
  float *w1 = rms_ffn + (long)L * dim, *w2 = w1 + (long)L * dim * hidden, *w3 = w2 + (long)L * dim * hidden;
  float *rms_final = w3 + (long)L * dim * hidden;
  float *wcls = shared ? emb : rms_final + dim + (long)h.seq_len * hd;
  float *x = malloc(dim * 4), *xb = malloc(dim * 4), *xb2 = malloc(dim * 4), *q = malloc(dim * 4);
  float *hb = malloc(hidden * 4), *hb2 = malloc(hidden * 4), *att = malloc(h.seq_len * 4), *logits = malloc(vocab * 4);
  float *kc = malloc((long)L * h.seq_len * kv_dim * 4), *vc = malloc((long)L * h.seq_len * kv_dim * 4);
  int n_prompt = argc - 3, token = n_prompt > 0 ? atoi(argv[3]) : 1;
  if (steps > h.seq_len) steps = h.seq_len;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int pos = 0; pos < steps; pos++) {
    memcpy(x, emb + (long)token * dim, dim * 4);
    for (int l = 0; l < L; l++) {
      rmsnorm(xb, x, rms_att + l * dim, dim);
      float* k = kc + ((long)l * h.seq_len + pos) * kv_dim;
      float* v = vc + ((long)l * h.seq_len + pos) * kv_dim;
      matvec(q, xb, wq + (long)l * dim * dim, dim, dim);
      matvec(k, xb, wk + (long)l * dim * kv_dim, dim, kv_dim);
      matvec(v, xb, wv + (long)l * dim * kv_dim, dim, kv_dim);
      for (int i = 0; i < dim; i += 2) {  /* interleaved RoPE */
        float freq = 1.0f / powf(10000.0f, (float)(i % hd) / hd), c = cosf(pos * freq), s = sinf(pos * freq);
        for (int which = 0; which < (i < kv_dim ? 2 : 1); which++) {
          float* vec = which == 0 ? q : k;
          float a = vec[i], b = vec[i + 1];
          vec[i] = a * c - b * s;
          vec[i + 1] = a * s + b * c;
        }
      }
      for (int hh = 0; hh < h.heads; hh++) {
        int kvh = hh / (h.heads / h.kv_heads);
        float max = -1e30f, sum = 0;
        for (int t = 0; t <= pos; t++) {
          float* kt = kc + ((long)l * h.seq_len + t) * kv_dim + kvh * hd;
          float s = 0;
          for (int i = 0; i < hd; i++) s += q[hh * hd + i] * kt[i];
          att[t] = s / sqrtf((float)hd);
          if (att[t] > max) max = att[t];
        }
        for (int t = 0; t <= pos; t++) { att[t] = expf(att[t] - max); sum += att[t]; }
        float* o = xb + hh * hd;
        memset(o, 0, hd * 4);
        for (int t = 0; t <= pos; t++) {
          float* vt = vc + ((long)l * h.seq_len + t) * kv_dim + kvh * hd;
          for (int i = 0; i < hd; i++) o[i] += att[t] / sum * vt[i];
        }
      }
      matvec(xb2, xb, wo + (long)l * dim * dim, dim, dim);
      for (int i = 0; i < dim; i++) x[i] += xb2[i];
      rmsnorm(xb, x, rms_ffn + l * dim, dim);
      matvec(hb, xb, w1 + (long)l * dim * hidden, dim, hidden);
      matvec(hb2, xb, w3 + (long)l * dim * hidden, dim, hidden);
      for (int i = 0; i < hidden; i++) hb[i] = hb[i] / (1.0f + expf(-hb[i])) * hb2[i];
      matvec(xb, hb, w2 + (long)l * dim * hidden, hidden, dim);
      for (int i = 0; i < dim; i++) x[i] += xb[i];
    }
    rmsnorm(x, x, rms_final, dim);
    matvec(logits, x, wcls, dim, vocab);
    int next = 0;
    for (int i = 1; i < vocab; i++) if (logits[i] > logits[next]) next = i;
    if (pos + 1 < n_prompt) next = atoi(argv[4 + pos]);
    printf("%d ", next);
    token = next;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
  printf("\n");
  fprintf(stderr, "reference: %d positions, %.1f tok/s\n", steps, steps / s);
  (void)n_floats;
  return 0;
}
