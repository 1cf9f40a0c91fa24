#include "core/dtype.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace tdyn {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_1: return "Q4_1";
    case DType::Q5_0: return "Q5_0";
    case DType::Q5_1: return "Q5_1";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_K: return "Q4_K";
    case DType::Q5_K: return "Q5_K";
    case DType::Q6_K: return "Q6_K";
  }
  return "?";
}

DTypeLayout dtype_layout(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return {1, 8};
    case DType::F32: case DType::I32: return {1, 4};
    case DType::F16: case DType::BF16: case DType::I16: return {1, 2};
    case DType::I8: case DType::U8: case DType::BOOL: return {1, 1};
    // 32-value blocks: an fp16 scale (and min), 4 or 5 or 8 bits per value.
    case DType::Q4_0: return {32, 2 + 16};
    case DType::Q4_1: return {32, 2 + 2 + 16};
    case DType::Q5_0: return {32, 2 + 4 + 16};
    case DType::Q5_1: return {32, 2 + 2 + 4 + 16};
    case DType::Q8_0: return {32, 2 + 32};
    // 256-value super-blocks of 16 or 8 sub-blocks with quantized scales.
    case DType::Q4_K: return {256, 2 + 2 + 12 + 128};
    case DType::Q5_K: return {256, 2 + 2 + 12 + 32 + 128};
    case DType::Q6_K: return {256, 128 + 64 + 16 + 2};
  }
  return {};
}

bool is_quantized(DType t) { return dtype_layout(t).block_elements > 1; }

bool is_float(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64 || is_quantized(t);
}

size_t dtype_size(DType t) {
  TDYN_CHECK(!is_quantized(t));
  return static_cast<size_t>(dtype_layout(t).block_bytes);
}

uint64_t tensor_bytes(DType t, int64_t n) {
  const DTypeLayout l = dtype_layout(t);
  TDYN_CHECK(n >= 0 && n % l.block_elements == 0);
  return static_cast<uint64_t>(n / l.block_elements) * static_cast<uint64_t>(l.block_bytes);
}

float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) { mant <<= 1; --exp; }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  const float a = std::fabs(f);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);  // past 65504 + half a step: Inf
  if (a < 0x1p-14f) {  // subnormal range: multiples of 2^-24, ties to even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 0x1p24f)));
  }
  uint32_t m = bits & 0x7fffffffu;
  m += 0xfffu + ((m >> 13) & 1u);  // round the 13 dropped mantissa bits to nearest even
  return static_cast<uint16_t>(sign | (((m >> 23) - 127 + 15) << 10) | ((m >> 13) & 0x3ffu));
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // stays a (quiet) NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace tdyn
