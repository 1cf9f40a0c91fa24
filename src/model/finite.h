// NaN/Inf detection for weights and activations. load_model checks every weight the model reads, and the
// forward-pass steps (model/transformer.h) check each output they produce, so a non-finite value stops the run
// where it first appears, with an error naming it, instead of flowing silently into every metric downstream.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "core/tensor.h"

namespace tdyn {

// A float is NaN or ±Inf exactly when its exponent bits are all ones. Testing the bits rather than calling
// std::isfinite keeps the check working under -ffast-math (which lets the compiler assume no NaN/Inf exist and
// fold isfinite to true), and the loops below vectorise.
inline bool is_non_finite(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return (bits & 0x7F800000u) == 0x7F800000u;
}

// How many of x[0..n) are NaN or ±Inf. Branch-free so that it vectorises: a check costs one read of the data.
int64_t count_non_finite(const float* x, int64_t n);
// Index of the first NaN or ±Inf in x[0..n), or -1.
int64_t first_non_finite(const float* x, int64_t n);
// "nan", "inf", "-inf", or the number for a finite value.
std::string value_name(float v);

// Throws tdyn::Error naming the first NaN/Inf of the activation x [positions, ...] (see check_finite).
[[noreturn]] void report_non_finite(const Tensor& x, int64_t start, int64_t layer, const char* hook, const char* producer);

// Throws tdyn::Error when the activation x [positions, ...] holds a NaN or ±Inf. The message names the hook
// ("blocks.{layer}.{hook}" when layer >= 0, else `hook`), the position (start + row) and unit (index within the
// row) of the first non-finite value, the value, how many there are, and `producer`, the step that made it.
// It costs one pass over x; the message is only built when it throws.
inline void check_finite(const Tensor& x, int64_t start, int64_t layer, const char* hook, const char* producer) {
  if (count_non_finite(x.ptr(), x.size()) != 0) report_non_finite(x, start, layer, hook, producer);
}

}  // namespace tdyn
