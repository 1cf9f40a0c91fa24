// Block-quantized GGUF types (kernels/quant_blocks.h): blocks built byte by byte from the documented layouts
// decode bit-exactly to the documented formulas; the encoder stays within each type's error bound; the fused
// dot product equals the dot product of the decoded row; quantized tensors go through the GGUF writer, the
// reader and TensorStore::floats unchanged.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "kernels/quant_blocks.h"
#include "test_util.h"

namespace tdyn {
namespace {

constexpr DType kQuantTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                 DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// ---------------------------------------------------------------------------------------------------------
// (a) Hand-built blocks. Each builder places random quants, scales and mins where the layout comment of
// kernels/quant_blocks.h says they go, and computes each value with that comment's formula.

// fp16 numbers with their exact values written out, so that the expected values do not depend on the
// conversion code: normal and subnormal, both signs, the largest finite.
struct Half {
  uint16_t bits;
  float value;
};
constexpr Half kHalves[] = {{0x3A00, 0.75f},       {0xB500, -0.3125f}, {0x2E66, 0.0999755859375f},
                            {0x1C00, 0.00390625f}, {0x4D40, 21.0f},    {0xC000, -2.0f},
                            {0x0003, 3 * 0x1p-24f}, {0x7BFF, 65504.0f}};

struct HandBuilt {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

int uniform(std::mt19937& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
Half any_half(std::mt19937& rng) { return kHalves[uniform(rng, 0, std::size(kHalves) - 1)]; }

void put_half(std::vector<uint8_t>& b, size_t at, Half h) {
  b[at] = static_cast<uint8_t>(h.bits & 0xff);
  b[at + 1] = static_cast<uint8_t>(h.bits >> 8);
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1: value i's low nibble in qs[i % 16] (lo for i < 16, hi otherwise), its fifth bit
// (5-bit types) in bit i % 8 of qh[i / 8].
HandBuilt legacy_block(DType t, std::mt19937& rng) {
  const bool five = t == DType::Q5_0 || t == DType::Q5_1, with_min = t == DType::Q4_1 || t == DType::Q5_1;
  const size_t qh = with_min ? 4 : 2, qs = qh + (five ? 4 : 0);
  HandBuilt h{std::vector<uint8_t>(qs + 16), {}};
  const Half d = any_half(rng), m = any_half(rng);
  put_half(h.bytes, 0, d);
  if (with_min) put_half(h.bytes, 2, m);
  for (int i = 0; i < 32; ++i) {
    const int q = uniform(rng, 0, five ? 31 : 15);
    h.bytes[qs + i % 16] |= static_cast<uint8_t>((q & 15) << (i < 16 ? 0 : 4));
    if (five) h.bytes[qh + i / 8] |= static_cast<uint8_t>((q >> 4) << (i % 8));
    if (with_min) h.values.push_back(static_cast<float>(q) * d.value + m.value);
    else h.values.push_back(static_cast<float>(q - (five ? 16 : 8)) * d.value);
  }
  return h;
}

HandBuilt q8_0_block(std::mt19937& rng) {
  HandBuilt h{std::vector<uint8_t>(34), {}};
  const Half d = any_half(rng);
  put_half(h.bytes, 0, d);
  for (int i = 0; i < 32; ++i) {
    const int q = uniform(rng, -128, 127);
    h.bytes[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    h.values.push_back(static_cast<float>(q) * d.value);
  }
  return h;
}

// Q4_K / Q5_K: d, dmin, 12 bytes of 6-bit scales and mins, [Q5_K: qh[32]], qs[128].
HandBuilt k4_block(DType t, std::mt19937& rng) {
  const bool five = t == DType::Q5_K;
  const size_t qh = 16, qs = five ? 48 : 16;
  HandBuilt h{std::vector<uint8_t>(qs + 128), {}};
  const Half d = any_half(rng), dmin = any_half(rng);
  put_half(h.bytes, 0, d);
  put_half(h.bytes, 2, dmin);
  int sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = uniform(rng, 0, 63);
    m[s] = uniform(rng, 0, 63);
  }
  sc[5] = m[6] = 63;  // all six bits set at least once in the split (s >= 4) encoding
  uint8_t* scales = h.bytes.data() + 4;
  for (int s = 0; s < 4; ++s) {
    scales[s] |= static_cast<uint8_t>(sc[s]);      // bytes 0-3, bits 0-5: sc_0..3
    scales[s + 4] |= static_cast<uint8_t>(m[s]);   // bytes 4-7, bits 0-5: m_0..3
  }
  for (int s = 4; s < 8; ++s) {
    scales[s + 4] |= static_cast<uint8_t>((sc[s] & 15) | (m[s] & 15) << 4);  // bytes 8-11: low four bits
    scales[s - 4] |= static_cast<uint8_t>((sc[s] >> 4) << 6);                  // bytes 0-3, bits 6-7
    scales[s] |= static_cast<uint8_t>((m[s] >> 4) << 6);                       // bytes 4-7, bits 6-7
  }
  for (int i = 0; i < 256; ++i) {
    const int s = i / 32, q = uniform(rng, 0, five ? 31 : 15);
    h.bytes[qs + 32 * (i / 64) + i % 32] |= static_cast<uint8_t>((q & 15) << (s % 2 == 0 ? 0 : 4));
    if (five) h.bytes[qh + i % 32] |= static_cast<uint8_t>((q >> 4) << s);
    h.values.push_back(d.value * static_cast<float>(sc[s]) * static_cast<float>(q) -
                       dmin.value * static_cast<float>(m[s]));
  }
  return h;
}

// Q6_K: ql[128], qh[64], int8 scales[16], d.
HandBuilt q6_k_block(std::mt19937& rng) {
  HandBuilt h{std::vector<uint8_t>(210), {}};
  const Half d = any_half(rng);
  put_half(h.bytes, 208, d);
  int sc[16];
  for (int s = 0; s < 16; ++s) {
    sc[s] = uniform(rng, -128, 127);
    h.bytes[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(sc[s]));
  }
  for (int i = 0; i < 256; ++i) {
    const int q = uniform(rng, 0, 63), half = i / 128, k = (i % 128) / 32, l = i % 32;
    h.bytes[64 * half + 32 * (k % 2) + l] |= static_cast<uint8_t>((q & 15) << (k < 2 ? 0 : 4));
    h.bytes[128 + 32 * half + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
    h.values.push_back(d.value * static_cast<float>(sc[i / 16]) * static_cast<float>(q - 32));
  }
  return h;
}

HandBuilt hand_built_block(DType t, std::mt19937& rng) {
  switch (t) {
    case DType::Q8_0: return q8_0_block(rng);
    case DType::Q4_K: case DType::Q5_K: return k4_block(t, rng);
    case DType::Q6_K: return q6_k_block(rng);
    default: return legacy_block(t, rng);
  }
}

// Bit patterns, so that -0.0 vs 0.0 would count as a difference.
size_t first_bit_difference(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  return n;
}

TEST(QuantBlocks, HandBuiltBlocksDecodeBitExactly) {
  std::mt19937 rng(2024);
  for (DType t : kQuantTypes) {
    SCOPED_TRACE(dtype_name(t));
    // Several blocks back to back, one byte into the buffer: block fields are unaligned, as in GGUF files.
    std::vector<uint8_t> buffer(1);
    std::vector<float> expected;
    for (int block = 0; block < 12; ++block) {
      HandBuilt h = hand_built_block(t, rng);
      ASSERT_EQ(h.bytes.size(), static_cast<size_t>(dtype_layout(t).block_bytes));
      ASSERT_EQ(h.values.size(), static_cast<size_t>(dtype_layout(t).block_elements));
      buffer.insert(buffer.end(), h.bytes.begin(), h.bytes.end());
      expected.insert(expected.end(), h.values.begin(), h.values.end());
    }
    std::vector<float> got(expected.size());
    dequantize_row(t, reinterpret_cast<const std::byte*>(buffer.data() + 1), got.data(),
                   static_cast<int64_t>(got.size()));
    const size_t i = first_bit_difference(got.data(), expected.data(), got.size());
    EXPECT_EQ(i, got.size()) << "value " << i << " (block " << i / dtype_layout(t).block_elements << "): got "
                             << got[i] << ", expected " << expected[i];
  }
}

// ---------------------------------------------------------------------------------------------------------
// (b) Encoder round trips, against the bounds stated in kernels/quant_blocks.h.

// Rows whose blocks differ in scale and offset: N(0, 1) values times 10^k, some shifted away from zero, some
// all of one sign, so that the mins and both signs of the scales are exercised.
std::vector<float> test_row(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t group = i / 32;
    const float scale = std::pow(10.0f, static_cast<float>(group % 5) - 2);  // 0.01 .. 100
    const float shift = group % 3 == 0 ? 0.0f : group % 3 == 1 ? 3 * scale : -5 * scale;
    x[i] = normal(rng) * scale + shift;
  }
  return x;
}

float max_abs(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// The largest error the encoder may make on each value of x (n values, whole blocks), as the header states.
std::vector<double> error_bounds(DType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t block = dtype_layout(t).block_elements;
  constexpr double kSlack = 1.002;  // fp16 rounding of the scales and float rounding of the arithmetic
  std::vector<double> bound(n);
  for (int64_t b = 0; b < n; b += block) {
    const float* xb = x.data() + b;
    const float amax = max_abs(xb, static_cast<int>(block));
    switch (t) {
      case DType::Q4_0: case DType::Q5_0: {
        const double zero = t == DType::Q4_0 ? 8 : 16;
        const float max = *std::max_element(xb, xb + block, [](float a, float c) { return std::fabs(a) < std::fabs(c); });
        const double step = amax / zero;
        for (int64_t i = 0; i < block; ++i) {
          // Only the far end of the other sign can fall off the grid (q = 2 * zero would be needed).
          const bool may_clamp = xb[i] * max < 0 && std::fabs(xb[i]) > (zero - 1) / zero * amax;
          bound[b + i] = (may_clamp ? step : step / 2) * kSlack;
        }
        break;
      }
      case DType::Q4_1: case DType::Q5_1: {
        const auto [lo, hi] = std::minmax_element(xb, xb + block);
        const double levels = t == DType::Q4_1 ? 15 : 31;
        // m is min rounded down to fp16: up to 2^-10 |min| below it.
        const double step = (*hi - *lo + std::fabs(*lo) * 0x1p-10) / levels;
        std::fill(bound.begin() + b, bound.begin() + b + block, step / 2 * kSlack);
        break;
      }
      case DType::Q8_0:
        std::fill(bound.begin() + b, bound.begin() + b + block, amax / 254.0 * kSlack);
        break;
      case DType::Q4_K: case DType::Q5_K: {
        const double levels = t == DType::Q4_K ? 15 : 31;
        // range_s: the sub-block's values and 0. The header's bound d sc_s / 2 < (hi_s - min(lo_s, 0) + dmin) /
        // (2 levels) + d / 2 with dmin <= widest / 63 and d <= (widest + dmin) / (63 levels).
        double range[8], widest = 0;
        for (int s = 0; s < 8; ++s) {
          const auto [lo, hi] = std::minmax_element(xb + 32 * s, xb + 32 * (s + 1));
          range[s] = std::max(*hi, 0.0f) - std::min(*lo, 0.0f);
          widest = std::max(widest, range[s]);
        }
        for (int64_t i = 0; i < block; ++i)
          bound[b + i] = range[i / 32] / (2 * levels) + 1.05 * widest / (63 * levels);
        break;
      }
      case DType::Q6_K: {
        // d sc_s / 2 < max|x_s| / 62 + d / 2, d <= max|x| / (31 * 127).
        for (int64_t i = 0; i < block; ++i)
          bound[b + i] = max_abs(xb + 16 * (i / 16), 16) / 62.0 + 1.05 * amax / (2 * 31 * 127);
        break;
      }
      default: ADD_FAILURE() << dtype_name(t);
    }
  }
  return bound;
}

std::vector<float> round_trip(DType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<std::byte> blocks(tensor_bytes(t, n));
  quantize_row(t, x.data(), blocks.data(), n);
  std::vector<float> y(n);
  dequantize_row(t, blocks.data(), y.data(), n);
  return y;
}

TEST(QuantBlocks, RoundTripWithinEachTypesBound) {
  const int64_t n = 8 * 256;
  const std::vector<float> x = test_row(n, 7);
  for (DType t : kQuantTypes) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<float> y = round_trip(t, x);
    const std::vector<double> bound = error_bounds(t, x);
    size_t worst = 0;
    double worst_ratio = 0, rms = 0, rms_x = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double err = std::fabs(static_cast<double>(y[i]) - x[i]), ratio = err / bound[i];
      if (!(ratio <= worst_ratio)) {  // NaN counts as worst
        worst = i;
        worst_ratio = ratio;
      }
      rms += err * err;
      rms_x += static_cast<double>(x[i]) * x[i];
    }
    EXPECT_LE(worst_ratio, 1.0) << "worst value " << worst << ": " << x[worst] << " decoded as " << y[worst]
                                << ", error " << std::fabs(y[worst] - x[worst]) << " > bound " << bound[worst];
    // Not vacuous: the encoder uses its levels (relative RMS error well below that of a 1-bit code).
    EXPECT_LT(std::sqrt(rms / rms_x), 0.1);
  }
}

TEST(QuantBlocks, ZerosAndRepresentableConstantsAreExact) {
  for (DType t : kQuantTypes) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<float> zeros(512, 0.0f);
    EXPECT_EQ(round_trip(t, zeros), zeros);
  }
  // A constant is exact where its scale or min is an fp16 number: c = -8 d (Q4_0), -16 d (Q5_0), 127 d
  // (Q8_0), c = m (Q4_1, Q5_1). The K-quants keep 6-bit multiples of fp16 scales and hit a constant only by
  // accident.
  const std::pair<DType, float> constants[] = {{DType::Q4_0, 0.75f},  {DType::Q4_0, -3.0f}, {DType::Q5_0, 0.75f},
                                               {DType::Q5_0, -40.0f}, {DType::Q8_0, 63.5f}, {DType::Q8_0, -0.0625f * 127},
                                               {DType::Q4_1, -2.5f},  {DType::Q4_1, 0.1f},  {DType::Q5_1, 1000.0f}};
  for (const auto& [t, c] : constants) {
    std::vector<float> x(64, c);
    if (t == DType::Q4_1) x.assign(64, half_to_float(float_to_half(c)));  // 0.1 as the nearest fp16
    EXPECT_EQ(round_trip(t, x), x) << dtype_name(t) << " constant " << x[0];
  }
}

// ---------------------------------------------------------------------------------------------------------
// (c) The fused dot product.

TEST(QuantBlocks, DotRowEqualsDotOfDequantizedRow) {
  for (DType t : kQuantTypes) {
    SCOPED_TRACE(dtype_name(t));
    for (int64_t n : {int64_t{256}, int64_t{4096}}) {
      const std::vector<float> w = test_row(n, 11), x = test_row(n, 12);
      std::vector<std::byte> blocks(tensor_bytes(t, n));
      quantize_row(t, w.data(), blocks.data(), n);
      std::vector<float> decoded(n);
      dequantize_row(t, blocks.data(), decoded.data(), n);
      double expected = 0, magnitude = 0;
      for (int64_t i = 0; i < n; ++i) {
        expected += static_cast<double>(decoded[i]) * x[i];
        magnitude += std::fabs(static_cast<double>(decoded[i]) * x[i]);
      }
      const double got = dot_row(t, blocks.data(), x.data(), n);
      // Float accumulation: a few hundred roundings of at most 2^-24 of the running sum of |w_i x_i|.
      auto c = test::compare(&got, &expected, 1, 0.0, 1e-5 * magnitude);
      EXPECT_TRUE(c.ok) << c.describe(fmt::format("dot_row n={}", n));
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// (d) GGUF: every quantized type through the writer, the reader and the tensor store.

TEST(QuantGguf, TypeTableMatchesGgmlNames) {
  for (const GgmlTensorType& t : kGgmlTensorTypes) {
    EXPECT_STREQ(ggml_type_name(t.id), dtype_name(t.dtype));
    EXPECT_EQ(ggml_type_dtype(t.id), t.dtype);
    EXPECT_EQ(ggml_type_id(t.dtype), t.id);
  }
  for (DType t : kQuantTypes) EXPECT_TRUE(ggml_type_id(t).has_value()) << dtype_name(t);
  EXPECT_FALSE(ggml_type_dtype(10).has_value());  // Q2_K: not read
  EXPECT_FALSE(ggml_type_id(DType::I32).has_value());
}

TEST(QuantGguf, EveryQuantizedTypeRoundTripsThroughTheFile) {
  std::vector<GgufTensor> tensors;
  std::vector<std::vector<float>> originals;
  for (DType t : kQuantTypes) {
    const bool k_quant = dtype_layout(t).block_elements == 256;
    const Shape shapes[] = {{3, 256}, k_quant ? Shape{2, 1, 512} : Shape{2, 2, 64}, {0, 256}};
    for (size_t k = 0; k < std::size(shapes); ++k) {
      originals.push_back(test_row(numel(shapes[k]), static_cast<uint32_t>(tensors.size())));
      tensors.push_back(gguf_quantized_tensor(fmt::format("{}.{}", dtype_name(t), k), shapes[k], t,
                                              originals.back().data()));
    }
  }
  const fs::path file = test::scratch_dir("quant_gguf") / "quant.gguf";
  write_gguf(file, {{"general.architecture", GgufValue::string("llama")}}, tensors);
  TensorStore store;
  read_gguf(file, store);
  ASSERT_EQ(store.size(), tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    const GgufTensor& want = tensors[k];
    SCOPED_TRACE(want.name);
    const TensorInfo& got = store.get(want.name);
    const int64_t n = numel(want.shape);
    EXPECT_EQ(got.dtype, want.dtype);
    EXPECT_EQ(got.shape, want.shape);
    EXPECT_EQ(got.nbytes, tensor_bytes(want.dtype, n));
    ASSERT_EQ(want.bytes.size(), got.nbytes);
    EXPECT_EQ(std::memcmp(got.data, want.bytes.data(), got.nbytes), 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got.data) % kGgufDefaultAlignment, 0u);

    // The store decodes exactly what dequantize_row decodes; doubles are the same floats widened.
    std::vector<float> decoded(n);
    if (n > 0) dequantize_row(want.dtype, got.data, decoded.data(), n);
    const FloatBuffer floats = store.floats(want.name);
    ASSERT_EQ(floats.size(), static_cast<size_t>(n));
    EXPECT_EQ(first_bit_difference(floats.data(), decoded.data(), n), static_cast<size_t>(n));
    const std::vector<double> doubles = store.doubles(want.name);
    EXPECT_TRUE(std::equal(doubles.begin(), doubles.end(), decoded.begin()));
    // ... and is close to the values written.
    const std::vector<double> bound = error_bounds(want.dtype, originals[k]);
    for (int64_t i = 0; i < n; ++i) {
      if (std::fabs(decoded[i] - originals[k][i]) > bound[i]) {
        ADD_FAILURE() << "value " << i << ": " << originals[k][i] << " read back as " << decoded[i];
        break;
      }
    }
  }
}

TEST(QuantGguf, WriterRefusesRowsOfPartialBlocks) {
  const std::vector<float> x(3 * 48, 1.0f);
  try {
    gguf_quantized_tensor("blk.0.ffn_up.weight", {3, 48}, DType::Q8_0, x.data());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'blk.0.ffn_up.weight' of shape [3, 48] as Q8_0: its rows of 48 values are "
                                         "not a whole number of 32-value blocks"),
              std::string::npos)
        << e.what();
  }
  try {
    gguf_bytes({}, {{"w", DType::Q4_K, {2, 128}, std::string(144, '\0')}});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w' of shape [2, 128] as Q4_K"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tdyn
