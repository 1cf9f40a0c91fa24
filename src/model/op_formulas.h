// The formulas of the forward pass's elementwise steps, over the number type: the forward pass (model/ops.cpp)
// runs them on float, and the Jacobians' float64 reference (analysis/jacobian/jacobian_model.cpp) on double, so
// that an activation, a norm or a rotation is written once for both. Each derivative sits beside its value.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "model/config.h"

namespace tdyn {

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

// e^x as each type's step takes it: float through exp_vectorizable, double through the library.
inline float exp_of(float x) { return exp_vectorizable(x); }
inline double exp_of(double x) { return std::exp(x); }

template <class T>
T silu(T x) {
  return x / (T(1) + exp_of(-x));
}

// What a norm of a row of n takes from it: the mean it subtracts (LayerNorm; 0 for RMSNorm) and the reciprocal of
// its scale, 1/sqrt(var + eps) or 1/sqrt(mean x² + eps), both accumulated in double whatever T. The row's norm is
// then w ⊙ (x − mean) · inverse_scale (+ b).
struct NormStatistics {
  double mean = 0, inverse_scale = 1;
};

template <class T>
NormStatistics norm_statistics(NormKind kind, const T* x, int64_t n, double eps) {
  double mean = 0;
  if (kind == NormKind::LayerNorm) {
    for (int64_t i = 0; i < n; ++i) mean += x[i];
    mean /= static_cast<double>(n);
  }
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) squares += (x[i] - mean) * (x[i] - mean);
  return {mean, 1.0 / std::sqrt(squares / static_cast<double>(n) + eps)};
}

// The MLP's activation act(x) and its derivative act'(x).
template <class T>
T activation(Activation a, T x) {
  constexpr T kSqrt2OverPi = T(0.7978845608028654), kCubic = T(0.044715);
  switch (a) {
    case Activation::SiLU: return silu(x);
    case Activation::GeluErf: return T(0.5) * x * (T(1) + std::erf(x * T(M_SQRT1_2)));
    case Activation::GeluTanh: return T(0.5) * x * (T(1) + std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x)));
    case Activation::ReLU: return x > 0 ? x : T(0);
  }
  return x;
}

template <class T>
T activation_derivative(Activation a, T x) {
  constexpr T kSqrt2OverPi = T(0.7978845608028654), kCubic = T(0.044715);
  switch (a) {
    case Activation::SiLU: {
      const T s = T(1) / (T(1) + exp_of(-x));
      return s * (T(1) + x * (T(1) - s));
    }
    case Activation::GeluErf: return T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2))) + x * exp_of(T(-0.5) * x * x) / std::sqrt(T(2 * M_PI));
    case Activation::GeluTanh: {
      const T th = std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x));
      return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * kSqrt2OverPi * (T(1) + T(3) * kCubic * x * x);
    }
    case Activation::ReLU: return x > 0 ? T(1) : T(0);
  }
  return T(1);
}

// The dimensions of RoPE's rotating pair i in a head whose first 2 · half dimensions rotate: (i, i + half) for
// rotate-half, (2i, 2i + 1) interleaved.
inline std::pair<int64_t, int64_t> rope_pair(RopeStyle style, int64_t i, int64_t half) {
  return style == RopeStyle::RotateHalf ? std::pair{i, i + half} : std::pair{2 * i, 2 * i + 1};
}

// (x0, x1) rotated by the angle whose cosine and sine are c and s (V: a number, or a row of tangents; it is copied).
template <class V, class S>
void rotate(V& x0, V& x1, S c, S s) {
  const V a = x0, b = x1;
  x0 = a * c - b * s;
  x1 = a * s + b * c;
}

}  // namespace tdyn
