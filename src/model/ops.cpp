#include "model/ops.h"

#include <cmath>
#include <limits>

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

float activate(Activation a, float x) {
  switch (a) {
    case Activation::SiLU: return x / (1.0f + std::exp(-x));
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
#pragma omp parallel for if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) x[i] = activate(a, x[i]);
}

void softcap_inplace(float* x, int64_t n, double cap) {
  const float c = static_cast<float>(cap);
  for (int64_t i = 0; i < n; ++i) x[i] = c * std::tanh(x[i] / c);
}

void apply_rope(RopeStyle style, const std::vector<double>& inv_freq, float* x, int64_t rows, int64_t n_heads,
                int64_t d_head, int64_t start_pos) {
  if (style == RopeStyle::None) return;
  const int64_t half = d_head / 2;
  TDYN_CHECK(static_cast<int64_t>(inv_freq.size()) == half);
  std::vector<float> cos_t(half), sin_t(half);
  for (int64_t r = 0; r < rows; ++r) {
    double pos = static_cast<double>(start_pos + r);
    for (int64_t i = 0; i < half; ++i) {
      cos_t[i] = static_cast<float>(std::cos(pos * inv_freq[i]));
      sin_t[i] = static_cast<float>(std::sin(pos * inv_freq[i]));
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (r * n_heads + h) * d_head;
      for (int64_t i = 0; i < half; ++i) {
        // rotate-half pairs (i, i + half); interleaved pairs (2i, 2i + 1).
        float* a = style == RopeStyle::RotateHalf ? v + i : v + 2 * i;
        float* b = style == RopeStyle::RotateHalf ? v + i + half : v + 2 * i + 1;
        float x0 = *a, x1 = *b;
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

void attention(const AttentionShape& s, const float* q, const float* k, const float* v, float* z, float* pattern) {
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
        float max_score = -std::numeric_limits<float>::infinity();
        for (int64_t j = keys.first; j <= keys.last; ++j) {
          const float* kj = k + j * kv_stride + kvh * s.d_head;
          float dot = 0;
          for (int64_t e = 0; e < s.d_head; ++e) dot += qi[e] * kj[e];
          p[j] = static_cast<float>(dot * s.scale);
          max_score = std::max(max_score, p[j]);
        }
        double sum = 0;
        for (int64_t j = keys.first; j <= keys.last; ++j) {
          p[j] = std::exp(p[j] - max_score);
          sum += p[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        float* zi = z + i * q_stride + h * s.d_head;
        std::fill(zi, zi + s.d_head, 0.0f);
        for (int64_t j = keys.first; j <= keys.last; ++j) {
          p[j] *= inv;
          const float* vj = v + j * kv_stride + kvh * s.d_head;
          for (int64_t e = 0; e < s.d_head; ++e) zi[e] += p[j] * vj[e];
        }
        if (pattern) {
          float* row = pattern + (h * s.n_queries + i) * s.n_keys;
          std::fill(row, row + s.n_keys, 0.0f);
          std::copy(p.begin() + keys.first, p.begin() + keys.last + 1, row + keys.first);
        }
      }
    }
  }
}

}  // namespace tdyn
