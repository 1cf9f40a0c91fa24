#include "kernels/dot.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cstring>

namespace tdyn {
namespace {

inline float load_f32(const std::byte* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

template <typename Load>
float portable_dot(const std::byte* w, const float* x, int64_t n, int64_t stride, Load load) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += load(w + stride * i) * x[i];
  return sum;
}

// F16C is read from CPUID directly: not every compiler's __builtin_cpu_supports knows its name.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

bool cpu_has_avx2() {  // with FMA and F16C, which every AVX2 CPU has but the target names separately
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  return has;
}

inline float load_bf16(const std::byte* p) { return bf16_bits_to_float(load_u16(p)); }
inline float load_f16(const std::byte* p) { return half_bits_to_float(load_u16(p)); }

// 8 stored values from p, widened to floats.
__attribute__((target("avx2"), always_inline)) inline __m256 widen8_f32(const std::byte* p) {
  return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
}
__attribute__((target("avx2"), always_inline)) inline __m256 widen8_bf16(const std::byte* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
__attribute__((target("avx2,f16c"), always_inline)) inline __m256 widen8_f16(const std::byte* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Σ w_i x_i, 32 values a step in four independent accumulators; `Stride` bytes per stored value.
template <int Stride, __m256 (*Widen8)(const std::byte*), float (*Load)(const std::byte*)>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline float avx2_dot(const std::byte* w, const float* x,
                                                                              int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(Widen8(w + Stride * i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(Widen8(w + Stride * (i + 8)), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(Widen8(w + Stride * (i + 16)), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(Widen8(w + Stride * (i + 24)), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(Widen8(w + Stride * i), _mm256_loadu_ps(x + i), a0);
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 h = _mm_add_ps(q, _mm_movehl_ps(q, q));
  float sum = _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
  for (; i < n; ++i) sum += Load(w + Stride * i) * x[i];
  return sum;
}

__attribute__((target("avx2,fma,f16c"))) float avx2_dot_f32(const std::byte* w, const float* x, int64_t n) {
  return avx2_dot<4, widen8_f32, load_f32>(w, x, n);
}
__attribute__((target("avx2,fma,f16c"))) float avx2_dot_bf16(const std::byte* w, const float* x, int64_t n) {
  return avx2_dot<2, widen8_bf16, load_bf16>(w, x, n);
}
__attribute__((target("avx2,fma,f16c"))) float avx2_dot_f16(const std::byte* w, const float* x, int64_t n) {
  return avx2_dot<2, widen8_f16, load_f16>(w, x, n);
}

bool cpu_has_avx512bw() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
}

// GCC 12 reports the AVX-512 intrinsics' deliberate use of an undefined register (_mm512_undefined_*) as a read
// of an uninitialised value once they are inlined here: a false positive of that compiler, silenced for these two.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// bfloat16 rows 16 values an instruction. Decoding widens billions of values a second per core: the AVX2 loop
// spends three instructions per eight values on it, this one as many per sixteen (docs/performance.md).
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m512 widen16_bf16(const std::byte* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

__attribute__((target("avx512f,avx512bw"))) float avx512_dot_bf16(const std::byte* w, const float* x, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(widen16_bf16(w + 2 * i), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(widen16_bf16(w + 2 * (i + 16)), _mm512_loadu_ps(x + i + 16), a1);
  }
  float sum = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  for (; i < n; ++i) sum += load_bf16(w + 2 * i) * x[i];
  return sum;
}

#pragma GCC diagnostic pop

float portable_dot_f32(const std::byte* w, const float* x, int64_t n) { return portable_dot(w, x, n, 4, load_f32); }
float portable_dot_bf16(const std::byte* w, const float* x, int64_t n) { return portable_dot(w, x, n, 2, load_bf16); }
float portable_dot_f16(const std::byte* w, const float* x, int64_t n) { return portable_dot(w, x, n, 2, load_f16); }

}  // namespace

std::vector<DotKernel> dot_kernels(DType dtype) {
  std::vector<DotKernel> kernels;
  switch (dtype) {
    case DType::F32:
      kernels.push_back({"portable", portable_dot_f32});
      if (cpu_has_avx2()) kernels.push_back({"avx2", avx2_dot_f32});
      break;
    case DType::BF16:
      kernels.push_back({"portable", portable_dot_bf16});
      if (cpu_has_avx2()) kernels.push_back({"avx2", avx2_dot_bf16});
      if (cpu_has_avx512bw()) kernels.push_back({"avx512", avx512_dot_bf16});
      break;
    case DType::F16:
      kernels.push_back({"portable", portable_dot_f16});
      if (cpu_has_avx2()) kernels.push_back({"avx2", avx2_dot_f16});
      break;
    default:
      break;
  }
  return kernels;
}

float dot_f32(const std::byte* w, const float* x, int64_t n) {
  if (cpu_has_avx2()) return avx2_dot_f32(w, x, n);
  return portable_dot_f32(w, x, n);
}

float dot_bf16(const std::byte* w, const float* x, int64_t n) {
  if (cpu_has_avx512bw()) return avx512_dot_bf16(w, x, n);
  if (cpu_has_avx2()) return avx2_dot_bf16(w, x, n);
  return portable_dot_bf16(w, x, n);
}

float dot_f16(const std::byte* w, const float* x, int64_t n) {
  if (cpu_has_avx2()) return avx2_dot_f16(w, x, n);
  return portable_dot_f16(w, x, n);
}

}  // namespace tdyn
