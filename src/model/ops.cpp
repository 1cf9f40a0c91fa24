#include "model/ops.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"

namespace tdyn {

void rms_norm(const float* x, int64_t rows, int64_t d, const Norm& w, double eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* o = out + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    float inv = static_cast<float>(1.0 / std::sqrt(ss / d + eps));
    for (int64_t i = 0; i < d; ++i) o[i] = (w.w ? w.w[i] : 1.0f) * (xr[i] * inv);
  }
}

void layer_norm(const float* x, int64_t rows, int64_t d, const Norm& w, double eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* o = out + r * d;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += xr[i];
    mean /= d;
    for (int64_t i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    double inv = 1.0 / std::sqrt(var / d + eps);
    for (int64_t i = 0; i < d; ++i) {
      double y = (xr[i] - mean) * inv;
      o[i] = static_cast<float>(y * (w.w ? w.w[i] : 1.0f) + (w.b ? w.b[i] : 0.0f));
    }
  }
}

void apply_norm(NormKind kind, const float* x, int64_t rows, int64_t d, const Norm& w, double eps, float* out) {
  if (kind == NormKind::RMSNorm) rms_norm(x, rows, d, w, eps, out);
  else layer_norm(x, rows, d, w, eps, out);
}

namespace {

// e^x in float32 within about 1 ulp, without branches or calls so that loops over it vectorise (glibc's expf is
// a call per element): x = n ln 2 + r with |r| ≤ ln 2 / 2, e^r from the Cephes minimax polynomial, 2^n put
// straight into the exponent bits. Inputs are clamped to [-87, 88] so that 2^n stays a normal float: below,
// e^x (< 1.7e-38) comes out as e^-87 instead of a subnormal; above, as e^88 (1.7e38) instead of up to 3.4e38 or
// Inf. Neither changes a softmax (its arguments are ≤ 0) or a SiLU by more than 1e-36.
inline float exp_vectorizable(float x) {
  // The two clamps differ only for NaN: x keeps it (so NaN comes out), x_not_nan is -87 then (so that the
  // integer conversion below stays defined).
  const float x_not_nan = std::min(88.0f, std::max(-87.0f, x));
  x = std::min(std::max(x, -87.0f), 88.0f);
  // n = round(x / ln 2) by the 1.5 · 2^23 trick: std::floor/nearbyint are library calls below SSE4.1.
  constexpr float kRound = 12582912.0f;
  const float n = (x_not_nan * 1.44269504088896341f + kRound) - kRound;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e_r = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return e_r * scale;
}

inline float silu(float x) { return x / (1.0f + exp_vectorizable(-x)); }

}  // namespace

float activate(Activation a, float x) {
  switch (a) {
    case Activation::SiLU: return silu(x);
    case Activation::GeluErf: return 0.5f * x * (1.0f + std::erf(x * static_cast<float>(M_SQRT1_2)));
    case Activation::GeluTanh: {
      const float c = 0.7978845608028654f;  // sqrt(2/pi)
      return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
    }
    case Activation::ReLU: return x > 0 ? x : 0.0f;
  }
  return x;
}

void activate_inplace(Activation a, float* x, int64_t n) {
  if (a == Activation::SiLU) {  // the common case, as one vectorised loop
#pragma omp parallel for simd if (n > (1 << 15))
    for (int64_t i = 0; i < n; ++i) x[i] = silu(x[i]);
    return;
  }
#pragma omp parallel for if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) x[i] = activate(a, x[i]);
}

void gated_activate(Activation a, const float* gate, float* up, int64_t n) {
  if (a == Activation::SiLU) {
#pragma omp parallel for simd if (n > (1 << 15))
    for (int64_t i = 0; i < n; ++i) up[i] *= silu(gate[i]);
    return;
  }
#pragma omp parallel for if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) up[i] *= activate(a, gate[i]);
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
  const bool rotate_half = rope.style() == RopeStyle::RotateHalf;
  std::vector<float> scratch;  // the angles of positions past the table
  if (start_pos + rows > rope.tabled_positions()) scratch.resize(2 * half);
  for (int64_t r = 0; r < rows; ++r) {
    const auto [cos_t, sin_t] = rope.at(start_pos + r, scratch.data());
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (r * n_heads + h) * d_head;
      for (int64_t i = 0; i < half; ++i) {
        // rotate-half pairs (i, i + half); interleaved pairs (2i, 2i + 1).
        float* a = rotate_half ? v + i : v + 2 * i;
        float* b = rotate_half ? v + i + half : v + 2 * i + 1;
        const float x0 = *a, x1 = *b;
        *a = x0 * cos_t[i] - x1 * sin_t[i];
        *b = x0 * sin_t[i] + x1 * cos_t[i];
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

// Many queries (a prompt): per head, scores = scale Q Kᵀ and z = P V as two BLAS products, the softmax between
// them over rows split across threads.
void attention_products(const AttentionShape& s, const float* q, const float* k, const float* v, float* z,
                        float* pattern) {
  const int64_t group = s.n_heads / s.n_kv_heads, n_q = s.n_queries, n_k = s.n_keys, hd = s.d_head;
  const int q_stride = static_cast<int>(s.n_heads * hd), kv_stride = static_cast<int>(s.n_kv_heads * hd);
  thread_local std::vector<float> scores;
  scores.resize(n_q * n_k);
  for (int64_t h = 0; h < s.n_heads; ++h) {
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

}  // namespace

void attention(const AttentionShape& s, const float* q, const float* k, const float* v, float* z, float* pattern) {
  // From this many queries on, the BLAS products beat the loop below, which reads each key once per query.
  constexpr int64_t kProductQueries = 16;
  if (s.n_queries >= kProductQueries) {
    attention_products(s, q, k, v, z, pattern);
    return;
  }
  const int64_t group = s.n_heads / s.n_kv_heads;
  const int64_t q_stride = s.n_heads * s.d_head, kv_stride = s.n_kv_heads * s.d_head;
  // Threads only pay off above ~10^5 multiply-adds; below that, waking them costs more than the work.
  const int64_t work = s.n_heads * s.n_queries * s.n_keys * s.d_head;
#pragma omp parallel if (work > 100000)
  {
    std::vector<float> p(s.n_keys);
#pragma omp for collapse(2) schedule(static)
    for (int64_t h = 0; h < s.n_heads; ++h) {
      for (int64_t i = 0; i < s.n_queries; ++i) {
        const int64_t kvh = h / group;
        const float* qi = q + i * q_stride + h * s.d_head;
        const KeyRange keys = visible_keys(s, s.start_pos + i);
        for (int64_t j = keys.first; j <= keys.last; ++j) {
          const float* kj = k + j * kv_stride + kvh * s.d_head;
          // In vector lanes (a reordered sum): one add chain per key would wait 4 cycles an element.
          float dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int64_t e = 0; e < s.d_head; ++e) dot += qi[e] * kj[e];
          p[j] = static_cast<float>(dot * s.scale);
        }
        softmax_visible(p.data(), s.n_keys, keys);
        float* zi = z + i * q_stride + h * s.d_head;
        std::fill(zi, zi + s.d_head, 0.0f);
        for (int64_t j = keys.first; j <= keys.last; ++j) {
          const float* vj = v + j * kv_stride + kvh * s.d_head;
          for (int64_t e = 0; e < s.d_head; ++e) zi[e] += p[j] * vj[e];
        }
        if (pattern) std::copy(p.begin(), p.end(), pattern + (h * s.n_queries + i) * s.n_keys);
      }
    }
  }
}

}  // namespace tdyn
