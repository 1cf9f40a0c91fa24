#include "model/ops.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/serial_blas.h"
#include "kernels/team.h"
#include "model/op_formulas.h"

namespace tdyn {

void rms_norm(const float* x, int64_t rows, int64_t d, const Norm& w, double eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* o = out + r * d;
    const float inv = static_cast<float>(norm_statistics(NormKind::RMSNorm, xr, d, eps).inverse_scale);
    for (int64_t i = 0; i < d; ++i) o[i] = (w.w ? w.w[i] : 1.0f) * (xr[i] * inv);
  }
}

void layer_norm(const float* x, int64_t rows, int64_t d, const Norm& w, double eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* o = out + r * d;
    const NormStatistics s = norm_statistics(NormKind::LayerNorm, xr, d, eps);
    for (int64_t i = 0; i < d; ++i) {
      double y = (xr[i] - s.mean) * s.inverse_scale;
      o[i] = static_cast<float>(y * (w.w ? w.w[i] : 1.0f) + (w.b ? w.b[i] : 0.0f));
    }
  }
}

void apply_norm(NormKind kind, const float* x, int64_t rows, int64_t d, const Norm& w, double eps, float* out) {
  if (kind == NormKind::RMSNorm) rms_norm(x, rows, d, w, eps, out);
  else layer_norm(x, rows, d, w, eps, out);
}

float activate(Activation a, float x) { return activation(a, x); }

namespace {

// f(begin, end) over [0, n), shared over the threads from 2^15 elements. Below that it runs here without opening a
// parallel region: `omp parallel if (false)` still opens a one-thread one, which inside a decoding step's team
// (kernels/team.h) is a nested region whose start and end wake libgomp's threads through the kernel.
template <class F>
void elementwise(int64_t n, const F& f) {
  on_thread_shares(n > (int64_t{1} << 15), n, f);
}

}  // namespace

void activate_inplace(Activation a, float* x, int64_t n) {
  elementwise(n, [&](int64_t begin, int64_t end) {
    if (a == Activation::SiLU) {  // the common case, as one vectorised loop
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) x[i] = silu(x[i]);
    } else {
      for (int64_t i = begin; i < end; ++i) x[i] = activate(a, x[i]);
    }
  });
}

void gated_activate(Activation a, const float* gate, float* up, int64_t n) {
  elementwise(n, [&](int64_t begin, int64_t end) {
    if (a == Activation::SiLU) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) up[i] *= silu(gate[i]);
    } else {
      for (int64_t i = begin; i < end; ++i) up[i] *= activate(a, gate[i]);
    }
  });
}

void softcap_inplace(float* x, int64_t n, double cap) {
  const float c = static_cast<float>(cap);
  for (int64_t i = 0; i < n; ++i) x[i] = c * std::tanh(x[i] / c);
}

namespace {

// cos and sin of pos * inv_freq[i], computed in double and rounded to float.
void rope_angles(const std::vector<double>& inv_freq, int64_t pos, float* cos_out, float* sin_out) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    cos_out[i] = static_cast<float>(std::cos(static_cast<double>(pos) * inv_freq[i]));
    sin_out[i] = static_cast<float>(std::sin(static_cast<double>(pos) * inv_freq[i]));
  }
}

}  // namespace

RopeTable::RopeTable(RopeStyle style, std::vector<double> inv_freq, int64_t tabled_positions)
    : style_(style), inv_freq_(std::move(inv_freq)) {
  if (style_ == RopeStyle::None) return;
  tabled_ = tabled_positions;
  const int64_t half = pairs();
  cos_.resize(tabled_ * half);
  sin_.resize(tabled_ * half);
  for (int64_t pos = 0; pos < tabled_; ++pos) rope_angles(inv_freq_, pos, cos_.data() + pos * half, sin_.data() + pos * half);
}

std::pair<const float*, const float*> RopeTable::at(int64_t pos, float* scratch) const {
  const int64_t half = pairs();
  if (pos < tabled_) return {cos_.data() + pos * half, sin_.data() + pos * half};
  rope_angles(inv_freq_, pos, scratch, scratch + half);
  return {scratch, scratch + half};
}

void apply_rope(const RopeTable& rope, float* x, int64_t rows, int64_t n_heads, int64_t d_head, int64_t start_pos) {
  if (rope.style() == RopeStyle::None) return;
  // With partial rotary embeddings the dimensions past 2 * half pass through.
  const int64_t half = rope.pairs();
  TDYN_CHECK(2 * half <= d_head);
  std::vector<float> scratch;  // the angles of positions past the table
  if (start_pos + rows > rope.tabled_positions()) scratch.resize(2 * half);
  for (int64_t r = 0; r < rows; ++r) {
    const auto [cos_t, sin_t] = rope.at(start_pos + r, scratch.data());
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (r * n_heads + h) * d_head;
      for (int64_t i = 0; i < half; ++i) {
        const auto [a, b] = rope_pair(rope.style(), i, half);
        rotate(v[a], v[b], cos_t[i], sin_t[i]);
      }
    }
  }
}

KeyRange visible_keys(const AttentionShape& s, int64_t pos) {
  if (!s.causal) return {0, s.n_keys - 1};
  const int64_t last = std::min(pos, s.n_keys - 1);
  const int64_t first = s.sliding_window > 0 ? std::max<int64_t>(0, pos - s.sliding_window + 1) : 0;
  return {first, last};
}

namespace {

// Scores softmax(row) over the visible keys [first, last] of one query, in place; masked entries become 0.
void softmax_visible(float* row, int64_t n_keys, KeyRange keys) {
  float max_score = -std::numeric_limits<float>::infinity();
  for (int64_t j = keys.first; j <= keys.last; ++j) max_score = std::max(max_score, row[j]);
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = keys.first; j <= keys.last; ++j) {
    row[j] = exp_vectorizable(row[j] - max_score);
    sum += row[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = keys.first; j <= keys.last; ++j) row[j] *= inv;
  std::fill(row, row + keys.first, 0.0f);
  std::fill(row + keys.last + 1, row + n_keys, 0.0f);
}

// Many queries (a prompt): per head, scores = scale Q Kᵀ and z = P V as two BLAS products with the softmax between
// them. The threads take whole heads, each on its own thread's BLAS (as project() splits its products); with one
// head, or inside a parallel region, the softmax rows are split instead.
void attention_products(const AttentionShape& s, const float* q, const float* k, const float* v, float* z,
                        float* pattern) {
  const int64_t group = s.n_heads / s.n_kv_heads, n_q = s.n_queries, n_k = s.n_keys, hd = s.d_head;
  const int q_stride = static_cast<int>(s.n_heads * hd), kv_stride = static_cast<int>(s.n_kv_heads * hd);
  const bool by_heads = !omp_in_parallel() && omp_get_max_threads() > 1 && s.n_heads > 1;
  SerialBlas serial_blas(by_heads);
#pragma omp parallel for schedule(static) if (by_heads)
  for (int64_t h = 0; h < s.n_heads; ++h) {
    thread_local std::vector<float> scores;
    scores.resize(n_q * n_k);
    const int64_t kvh = h / group;
    float* p = pattern ? pattern + h * n_q * n_k : scores.data();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n_q), static_cast<int>(n_k), static_cast<int>(hd),
                static_cast<float>(s.scale), q + h * hd, q_stride, k + kvh * hd, kv_stride, 0.0f, p, static_cast<int>(n_k));
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && n_q * n_k >= (int64_t{1} << 15))
    for (int64_t i = 0; i < n_q; ++i) softmax_visible(p + i * n_k, n_k, visible_keys(s, s.start_pos + i));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n_q), static_cast<int>(hd), static_cast<int>(n_k),
                1.0f, p, static_cast<int>(n_k), v + kvh * hd, kv_stride, 0.0f, z + h * hd, q_stride);
  }
}

// A few queries (decoding) walk the keys in cache order. Each key row (and then each value row) holds every head's
// slice next to each other, so reading them key after key is one sequential stream that the prefetcher follows,
// where head after head jumps a row stride each key. The cache is read from memory each token (the weights
// streamed since evicted it): this order is the faster one by a wide margin (docs/performance.md). Threads split the
// keys, never the heads: half rows would break each thread's stream at every row (at 4 KiB, the prefetcher's page,
// or sooner).

// Keys are mixed in blocks of this many, each block's sum added to the output in order: the same sums whatever
// the number of threads, and the same as one running sum up to this many keys.
constexpr int64_t kKeyBlock = 512;

// Σ a_e b_e in eight lanes, summed at the end (a reordered sum): one chain of adds would wait 4 cycles an element,
// and an `omp simd` reduction here went through the stack every step.
float lane_dot(const float* a, const float* b, int64_t n) {
  float lanes[8] = {};
  int64_t e = 0;
  for (; e + 8 <= n; e += 8)
    for (int u = 0; u < 8; ++u) lanes[u] += a[e + u] * b[e + u];
  for (; e < n; ++e) lanes[0] += a[e] * b[e];
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

// Query i's scores for keys [first_key, last_key] of every head into `scores` (n_heads rows of n_keys).
void score_keys(const AttentionShape& s, int64_t i, const float* q, const float* k, int64_t first_key, int64_t last_key,
                float* scores) {
  const int64_t group = s.n_heads / s.n_kv_heads, hd = s.d_head;
  const float* qi = q + i * s.n_heads * hd;
  for (int64_t j = first_key; j <= last_key; ++j) {
    const float* kj = k + j * s.n_kv_heads * hd;
    for (int64_t h = 0; h < s.n_heads; ++h) {
      const float* qh = qi + h * hd;
      const float* kh = kj + (h / group) * hd;
      scores[h * s.n_keys + j] = static_cast<float>(lane_dot(qh, kh, hd) * s.scale);
    }
  }
}

// out [n_heads * d_head] = Σ_j p_j v_j over keys [first_key, last_key] of every head, p the probabilities.
void mix_values(const AttentionShape& s, const float* v, const float* p, int64_t first_key, int64_t last_key, float* out) {
  const int64_t group = s.n_heads / s.n_kv_heads, hd = s.d_head;
  const int64_t stride = s.n_kv_heads * hd;
  std::fill(out, out + s.n_heads * hd, 0.0f);
  int64_t j = first_key;
  // Four keys a pass: the output is loaded and stored once per four rows instead of once per row. The adds stay
  // in key order.
  for (; j + 3 <= last_key; j += 4) {
    const float* v0 = v + j * stride;
    for (int64_t h = 0; h < s.n_heads; ++h) {
      const float* w = p + h * s.n_keys + j;
      const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
      const float* a = v0 + (h / group) * hd;
      const float *b = a + stride, *c = b + stride, *d = c + stride;
      float* oh = out + h * hd;
#pragma omp simd
      for (int64_t e = 0; e < hd; ++e) oh[e] = oh[e] + w0 * a[e] + w1 * b[e] + w2 * c[e] + w3 * d[e];
    }
  }
  for (; j <= last_key; ++j) {
    const float* vj = v + j * stride;
    for (int64_t h = 0; h < s.n_heads; ++h) {
      const float w = p[h * s.n_keys + j];
      const float* vh = vj + (h / group) * hd;
      float* oh = out + h * hd;
#pragma omp simd
      for (int64_t e = 0; e < hd; ++e) oh[e] += w * vh[e];
    }
  }
}

// Query i of a few (decoding), run by every thread of the team: scores, softmax, then the values block by block.
// `scores` holds n_heads rows of n_keys; `partial` one output row per key block.
void attend_query(const AttentionShape& s, int64_t i, const float* q, const float* k, const float* v, float* z,
                  float* pattern, float* scores, float* partial, int t, int threads) {
  const int64_t width = s.n_heads * s.d_head;
  const KeyRange keys = visible_keys(s, s.start_pos + i);
  const int64_t n = keys.last - keys.first + 1, blocks = (n + kKeyBlock - 1) / kKeyBlock;
  const auto [first, end] = thread_share(n, threads, t);
  score_keys(s, i, q, k, keys.first + first, keys.first + end - 1, scores);
  job_barrier();
  const auto [first_head, end_head] = thread_share(s.n_heads, threads, t);
  for (int64_t h = first_head; h < end_head; ++h) {
    softmax_visible(scores + h * s.n_keys, s.n_keys, keys);
    if (pattern) std::copy_n(scores + h * s.n_keys, s.n_keys, pattern + (h * s.n_queries + i) * s.n_keys);
  }
  job_barrier();
  float* zi = z + i * width;
  const auto [first_block, end_block] = thread_share(blocks, threads, t);
  for (int64_t b = first_block; b < end_block; ++b) {
    const int64_t from = keys.first + b * kKeyBlock, to = std::min(from + kKeyBlock, keys.last + 1) - 1;
    mix_values(s, v, scores, from, to, blocks == 1 ? zi : partial + b * width);
  }
  if (blocks == 1) return;
  job_barrier();
  const auto [first_out, end_out] = thread_share(width, threads, t);
  for (int64_t e = first_out; e < end_out; ++e) {
    float sum = partial[e];
    for (int64_t b = 1; b < blocks; ++b) sum += partial[b * width + e];
    zi[e] = sum;
  }
}

}  // namespace

void attention(const AttentionShape& s, const float* q, const float* k, const float* v, float* z, float* pattern) {
  // From this many queries on, the BLAS products beat the loop below, which reads each key once per query.
  constexpr int64_t kProductQueries = 16;
  if (s.n_queries >= kProductQueries) {
    attention_products(s, q, k, v, z, pattern);
    return;
  }
  // This thread's buffers, shared with its team below.
  thread_local std::vector<float> score_buffer, partial_buffer;
  score_buffer.resize(s.n_heads * s.n_keys);
  partial_buffer.resize((s.n_keys + kKeyBlock - 1) / kKeyBlock * s.n_heads * s.d_head);
  float* const scores = score_buffer.data();
  float* const partial = partial_buffer.data();
  // Threads pay off from about 2^18 multiply-adds (340 keys of 12 heads of 64), as measured when decoding
  // (docs/performance.md).
  const int64_t work = s.n_heads * s.n_queries * s.n_keys * s.d_head;
  on_threads(work >= (int64_t{1} << 18), [&](int thread, int threads) {
    for (int64_t i = 0; i < s.n_queries; ++i) {
      attend_query(s, i, q, k, v, z, pattern, scores, partial, thread, threads);
      job_barrier();
    }
  });
}

}  // namespace tdyn
