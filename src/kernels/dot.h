// Dot products of one stored weight row with a float32 vector, accumulated in float32: the kernel of a decoding
// step, where every weight byte is read once and the speed is the memory's. An AVX2 + FMA version (four
// independent accumulators, so that the adds do not wait on each other; for bfloat16 an AVX-512 one before it) is
// chosen at run time when the CPU has it; otherwise a portable loop the compiler vectorises as far as the build's
// target allows. The sums' order, and so their last bits, depends on which one runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"

namespace tdyn {

float dot_f32(const std::byte* w, const float* x, int64_t n);   // w: n float32
float dot_bf16(const std::byte* w, const float* x, int64_t n);  // w: n bfloat16
float dot_f16(const std::byte* w, const float* x, int64_t n);   // w: n IEEE float16

// Every kernel of one dtype's dot product that this CPU can run, the portable loop first (so that tests reach the
// ones the dispatch above passes over).
struct DotKernel {
  const char* name;
  float (*dot)(const std::byte* w, const float* x, int64_t n);
};
std::vector<DotKernel> dot_kernels(DType dtype);

// The 16 bits at p (any alignment).
inline uint16_t load_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// One stored value widened to float32, branch-free so that loops over them vectorise.
inline float bf16_bits_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

// The 15 exponent+mantissa bits moved into float32's position and scaled by 2^112 (= 2^(127 − 15)) land exactly
// on the value for normal and subnormal halves alike; exponent 31 (Inf/NaN) keeps its mantissa under an all-ones
// exponent.
inline float half_bits_to_float(uint16_t h) {
  const uint32_t magnitude = h & 0x7fffu, shifted = magnitude << 13;
  float scaled;
  std::memcpy(&scaled, &shifted, 4);
  scaled *= 0x1p112f;
  uint32_t bits;
  std::memcpy(&bits, &scaled, 4);
  bits |= magnitude >= 0x7c00u ? 0x7f800000u : 0u;
  bits |= static_cast<uint32_t>(h & 0x8000u) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace tdyn
