#include "kernels/quant_blocks.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.h"

namespace tdyn {
namespace {

// fp16 fields are read and written byte by byte: blocks are unaligned, and the bytes are little-endian
// whatever the host.
float load_half(const uint8_t* p) { return half_to_float(static_cast<uint16_t>(p[0] | p[1] << 8)); }
void store_half(uint8_t* p, uint16_t h) {
  p[0] = static_cast<uint8_t>(h & 0xff);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// The fp16 next to `h` towards +Inf (up) or -Inf (down); h is finite.
uint16_t half_step(uint16_t h, bool up) {
  const bool negative = h & 0x8000u;
  if ((h & 0x7fffu) == 0) return up ? 0x0001 : 0x8001;  // ±0: the smallest subnormal of that direction
  return static_cast<uint16_t>(negative == up ? h - 1 : h + 1);
}

// The smallest fp16 >= v and the largest fp16 <= v. An encoder that rounds its scales this way (and its
// integer scales up) gets a grid that reaches every value of the block, so nothing is clamped.
uint16_t half_at_least(float v) {
  uint16_t h = float_to_half(v);
  return half_to_float(h) < v ? half_step(h, true) : h;
}
uint16_t half_at_most(float v) {
  uint16_t h = float_to_half(v);
  return half_to_float(h) > v ? half_step(h, false) : h;
}

// v rounded to the nearest integer in [lo, hi] (NaN, which the encoders are not promised, to lo rather
// than to an undefined conversion).
int round_clamp(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  return static_cast<int>(std::nearbyint(std::min(v, static_cast<float>(hi))));
}

// ceil(v) in [0, hi]: an integer scale that is at least v whenever v <= hi.
int ceil_clamp(float v, int hi) { return round_clamp(std::ceil(v), 0, hi); }

// --- Legacy 32-value blocks. Nibble j of qs holds value j (lo) and value j + 16 (hi). --------------------

// The value of largest magnitude, with its sign (the first one on ties).
float signed_absmax(const float* x, int n) {
  float best = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
  return best;
}

// The 32 quants of a legacy block: value i's low four bits are qs[i % 16] lo (i < 16) or hi (i >= 16), its
// fifth bit (5-bit types) bit i of qh read as a little-endian uint32. Unpacked first, converted after, so
// that both loops vectorize.
template <int kBits>
void unpack_legacy(const uint8_t* qh, const uint8_t* qs, int32_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 15;
    q[j + 16] = qs[j] >> 4;
  }
  if constexpr (kBits == 5) {
    // Masks from a table rather than 1 << i: a shift by the loop index does not vectorize without AVX2.
    static constexpr auto kBit = [] {
      std::array<uint32_t, 32> bits{};
      for (int i = 0; i < 32; ++i) bits[i] = uint32_t{1} << i;
      return bits;
    }();
    const uint32_t high = qh[0] | qh[1] << 8 | qh[2] << 16 | static_cast<uint32_t>(qh[3]) << 24;
    for (int i = 0; i < 32; ++i) q[i] |= (high & kBit[i]) != 0 ? 16 : 0;
  }
}

template <int kBits>
void pack_legacy(const int* q, uint8_t* qh, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 15) | (q[j + 16] & 15) << 4);
  if constexpr (kBits == 5) {
    std::fill(qh, qh + 4, uint8_t{0});
    for (int i = 0; i < 32; ++i) qh[i / 8] |= static_cast<uint8_t>((q[i] >> 4) << (i % 8));
  }
}

// Q4_0 / Q5_0 (kWithMin false): value = (q - zero) * d, q in [0, 2 zero); d puts the value of largest
// magnitude on q = 0. Q4_1 / Q5_1 (kWithMin true): value = q * d + m, q in [0, 2^bits).
template <int kBits, bool kWithMin>
struct LegacyBlock {
  static constexpr int kValues = 32, kMaxQ = (1 << kBits) - 1, kZero = kWithMin ? 0 : 1 << (kBits - 1);
  static constexpr int kQh = kWithMin ? 4 : 2, kQs = kQh + (kBits == 5 ? 4 : 0);  // byte offsets
  static constexpr int kBytes = kQs + 16;

  static void decode(const uint8_t* b, float* y) {
    const float d = load_half(b), m = kWithMin ? load_half(b + 2) : 0.0f;
    int32_t q[kValues];
    unpack_legacy<kBits>(b + kQh, b + kQs, q);
    for (int i = 0; i < kValues; ++i) {
      if constexpr (kWithMin) y[i] = static_cast<float>(q[i]) * d + m;
      else y[i] = static_cast<float>(q[i] - kZero) * d;
    }
  }

  static void encode(const float* x, uint8_t* b) {
    uint16_t dh, mh = 0;
    float m = 0;
    if constexpr (kWithMin) {
      const auto [lo, hi] = std::minmax_element(x, x + kValues);
      mh = half_at_most(*lo);
      m = half_to_float(mh);
      dh = half_at_least((*hi - m) / kMaxQ);
    } else {
      const float max = signed_absmax(x, kValues);
      const uint16_t magnitude = half_at_least(std::fabs(max) / kZero);
      dh = max > 0 ? static_cast<uint16_t>(magnitude | 0x8000u) : magnitude;  // d = max / -zero
    }
    const float d = half_to_float(dh);
    int q[kValues];
    for (int i = 0; i < kValues; ++i) q[i] = d != 0 ? round_clamp((x[i] - m) / d + kZero, 0, kMaxQ) : kZero;
    store_half(b, dh);
    if constexpr (kWithMin) store_half(b + 2, mh);
    pack_legacy<kBits>(q, b + kQh, b + kQs);
  }
};

// Q8_0: value = q * d, q an int8 in [-127, 127].
struct BlockQ8_0 {
  static constexpr int kValues = 32, kBytes = 2 + 32;

  static void decode(const uint8_t* b, float* y) {
    const float d = load_half(b);
    for (int i = 0; i < kValues; ++i) y[i] = static_cast<float>(static_cast<int8_t>(b[2 + i])) * d;
  }

  static void encode(const float* x, uint8_t* b) {
    const uint16_t dh = half_at_least(std::fabs(signed_absmax(x, kValues)) / 127);
    const float d = half_to_float(dh);
    store_half(b, dh);
    for (int i = 0; i < kValues; ++i) {
      const int q = d > 0 ? round_clamp(x[i] / d, -127, 127) : 0;
      b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  }
};

// --- K-quants: 256-value super-blocks. -----------------------------------------------------------------

constexpr int kSuperBlock = 256;

// Q4_K / Q5_K: eight 32-value sub-blocks, value = (d * sc_s) * q - dmin * m_s with 6-bit sc_s, m_s.
template <int kBits>
struct ScaleMinBlock {
  static constexpr int kValues = kSuperBlock, kSub = 32, kSubBlocks = 8, kMaxQ = (1 << kBits) - 1;
  static constexpr int kScaleBytes = 12, kHighBytes = kBits == 5 ? 32 : 0;
  static constexpr int kBytes = 4 + kScaleBytes + kHighBytes + kValues / 2;
  static constexpr int kMaxScale = 63;  // 6 bits

  // The packing of the eight (sc, m) pairs into 12 bytes documented in the header.
  static void unpack_scales(const uint8_t* p, int* sc, int* m) {
    for (int s = 0; s < 4; ++s) {
      sc[s] = p[s] & 63;
      m[s] = p[s + 4] & 63;
      sc[s + 4] = (p[s + 8] & 15) | (p[s] >> 6) << 4;
      m[s + 4] = (p[s + 8] >> 4) | (p[s + 4] >> 6) << 4;
    }
  }
  static void pack_scales(const int* sc, const int* m, uint8_t* p) {
    for (int s = 0; s < 4; ++s) {
      p[s] = static_cast<uint8_t>(sc[s] | (sc[s + 4] >> 4) << 6);
      p[s + 4] = static_cast<uint8_t>(m[s] | (m[s + 4] >> 4) << 6);
      p[s + 8] = static_cast<uint8_t>((sc[s + 4] & 15) | (m[s + 4] & 15) << 4);
    }
  }

  static void decode(const uint8_t* b, float* y) {
    const float d = load_half(b), dmin = load_half(b + 2);
    int sc[kSubBlocks], m[kSubBlocks];
    unpack_scales(b + 4, sc, m);
    const uint8_t* qh = b + 4 + kScaleBytes;
    const uint8_t* qs = qh + kHighBytes;
    for (int s = 0; s < kSubBlocks; ++s) {
      const float scale = d * static_cast<float>(sc[s]), offset = dmin * static_cast<float>(m[s]);
      const uint8_t* q = qs + kSub * (s / 2);  // sub-blocks 2c and 2c + 1 share 32 bytes: lo and hi nibbles
      const int shift = 4 * (s % 2);
      float* out = y + kSub * s;
      for (int l = 0; l < kSub; ++l) {
        int v = (q[l] >> shift) & 15;
        if constexpr (kBits == 5) v |= ((qh[l] >> s) & 1) << 4;
        out[l] = scale * static_cast<float>(v) - offset;
      }
    }
  }

  static void encode(const float* x, uint8_t* b) {
    // Each sub-block's grid must reach [min(lo, 0), hi]; the min only shifts down (m >= 0, dmin >= 0).
    float offset[kSubBlocks], hi[kSubBlocks];
    float max_offset = 0;
    for (int s = 0; s < kSubBlocks; ++s) {
      const auto [lo_it, hi_it] = std::minmax_element(x + kSub * s, x + kSub * (s + 1));
      offset[s] = -std::min(*lo_it, 0.0f);
      hi[s] = *hi_it;
      max_offset = std::max(max_offset, offset[s]);
    }
    const uint16_t dmin_h = half_at_least(max_offset / kMaxScale);
    const float dmin = half_to_float(dmin_h);
    int sc[kSubBlocks], m[kSubBlocks];
    float span[kSubBlocks];  // what the grid must reach above -dmin * m_s
    float max_span = 0;
    for (int s = 0; s < kSubBlocks; ++s) {
      m[s] = dmin > 0 ? ceil_clamp(offset[s] / dmin, kMaxScale) : 0;
      span[s] = std::max(hi[s] + dmin * static_cast<float>(m[s]), 0.0f);
      max_span = std::max(max_span, span[s]);
    }
    const uint16_t d_h = half_at_least(max_span / (kMaxQ * kMaxScale));
    const float d = half_to_float(d_h);
    for (int s = 0; s < kSubBlocks; ++s) sc[s] = d > 0 ? ceil_clamp(span[s] / (kMaxQ * d), kMaxScale) : 0;

    store_half(b, d_h);
    store_half(b + 2, dmin_h);
    pack_scales(sc, m, b + 4);
    uint8_t* qh = b + 4 + kScaleBytes;
    uint8_t* qs = qh + kHighBytes;
    std::fill(qh, qs + kValues / 2, uint8_t{0});
    for (int s = 0; s < kSubBlocks; ++s) {
      const float scale = d * static_cast<float>(sc[s]), shift_up = dmin * static_cast<float>(m[s]);
      for (int l = 0; l < kSub; ++l) {
        const int q = scale > 0 ? round_clamp((x[kSub * s + l] + shift_up) / scale, 0, kMaxQ) : 0;
        qs[kSub * (s / 2) + l] |= static_cast<uint8_t>((q & 15) << (4 * (s % 2)));
        if constexpr (kBits == 5) qh[l] |= static_cast<uint8_t>((q >> 4) << s);
      }
    }
  }
};

// Q6_K: sixteen 16-value sub-blocks, value = (d * scales[i / 16]) * q, q in [-32, 31], int8 scales.
struct BlockQ6_K {
  static constexpr int kValues = kSuperBlock, kSub = 16, kSubBlocks = 16;
  static constexpr int kBytes = 128 + 64 + 16 + 2;
  static constexpr int kMaxQ = 31, kMaxScale = 127;

  // Value i = 128 h + 32 k + l takes its low 4 bits from ql[64 h + 32 (k % 2) + l] (lo nibble for k < 2) and
  // its high 2 bits from bits 2k, 2k + 1 of qh[32 h + l].
  static void decode(const uint8_t* b, float* y) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
    const float d = load_half(b + 208);
    int32_t q[kValues];
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; ++k) {
        const uint8_t* low = ql + 64 * h + 32 * (k % 2);
        const int low_shift = k < 2 ? 0 : 4;
        for (int l = 0; l < 32; ++l)
          q[128 * h + 32 * k + l] = (((low[l] >> low_shift) & 15) | ((qh[32 * h + l] >> (2 * k)) & 3) << 4) - 32;
      }
    }
    for (int s = 0; s < kSubBlocks; ++s) {
      const float scale = d * static_cast<float>(scales[s]);
      for (int t = 0; t < kSub; ++t) y[kSub * s + t] = scale * static_cast<float>(q[kSub * s + t]);
    }
  }

  static void encode(const float* x, uint8_t* b) {
    float need[kSubBlocks];  // the step that reaches the sub-block's largest magnitude with |q| <= 31
    float max_need = 0;
    for (int s = 0; s < kSubBlocks; ++s) {
      need[s] = std::fabs(signed_absmax(x + kSub * s, kSub)) / kMaxQ;
      max_need = std::max(max_need, need[s]);
    }
    const uint16_t d_h = half_at_least(max_need / kMaxScale);
    const float d = half_to_float(d_h);
    uint8_t* ql = b;
    uint8_t* qh = b + 128;
    std::fill(b, b + kBytes, uint8_t{0});
    for (int s = 0; s < kSubBlocks; ++s) {
      const int sc = d > 0 ? ceil_clamp(need[s] / d, kMaxScale) : 0;
      b[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(sc));
      const float scale = d * static_cast<float>(sc);
      for (int t = 0; t < kSub; ++t) {
        const int i = kSub * s + t;
        const int q = (scale > 0 ? round_clamp(x[i] / scale, -32, kMaxQ) : 0) + 32;
        const int h = i / 128, k = (i % 128) / 32, l = i % 32;
        ql[64 * h + 32 * (k % 2) + l] |= static_cast<uint8_t>((q & 15) << (k < 2 ? 0 : 4));
        qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
      }
    }
    store_half(b + 208, d_h);
  }
};

// Calls f(Block{}) with the block codec of quantized dtype t.
template <typename F>
void with_block(DType t, int64_t n, F&& f) {
  auto run = [&](auto block) {
    using Block = decltype(block);
    const DTypeLayout layout = dtype_layout(t);
    TDYN_CHECK(layout.block_elements == Block::kValues && layout.block_bytes == Block::kBytes);
    TDYN_CHECK(n >= 0 && n % Block::kValues == 0);
    f(block);
  };
  switch (t) {
    case DType::Q4_0: return run(LegacyBlock<4, false>{});
    case DType::Q5_0: return run(LegacyBlock<5, false>{});
    case DType::Q4_1: return run(LegacyBlock<4, true>{});
    case DType::Q5_1: return run(LegacyBlock<5, true>{});
    case DType::Q8_0: return run(BlockQ8_0{});
    case DType::Q4_K: return run(ScaleMinBlock<4>{});
    case DType::Q5_K: return run(ScaleMinBlock<5>{});
    case DType::Q6_K: return run(BlockQ6_K{});
    default: break;
  }
  const bool has_block_codec = false;  // t is a plain dtype, or a quantized one added without a codec here
  TDYN_CHECK(has_block_codec);
}

const uint8_t* bytes_of(const std::byte* p) { return reinterpret_cast<const uint8_t*>(p); }

}  // namespace

void dequantize_row(DType t, const std::byte* blocks, float* out, int64_t n) {
  with_block(t, n, [&](auto block) {
    using Block = decltype(block);
    const uint8_t* b = bytes_of(blocks);
    for (int64_t i = 0; i < n; i += Block::kValues, b += Block::kBytes) Block::decode(b, out + i);
  });
}

void quantize_row(DType t, const float* in, std::byte* blocks, int64_t n) {
  with_block(t, n, [&](auto block) {
    using Block = decltype(block);
    uint8_t* b = reinterpret_cast<uint8_t*>(blocks);
    for (int64_t i = 0; i < n; i += Block::kValues, b += Block::kBytes) Block::encode(in + i, b);
  });
}

float dot_row(DType t, const std::byte* blocks, const float* x, int64_t n) {
  float total = 0;
  with_block(t, n, [&](auto block) {
    using Block = decltype(block);
    const uint8_t* b = bytes_of(blocks);
    float w[Block::kValues];  // one block decoded: small enough to stay in L1 next to x
    for (int64_t i = 0; i < n; i += Block::kValues, b += Block::kBytes) {
      Block::decode(b, w);
      const float* xi = x + i;
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < Block::kValues; ++j) sum += w[j] * xi[j];
      total += sum;
    }
  });
  return total;
}

}  // namespace tdyn
