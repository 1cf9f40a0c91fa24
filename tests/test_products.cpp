// The forward pass's arithmetic kernels against plain float64 loops: dot products over stored rows (every length,
// so that the vector body and the tails are both exercised), matrix products in each of their paths, and
// attention computed with BLAS products against the one-query loop.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <omp.h>

#include "core/dtype.h"
#include "kernels/dot.h"
#include "kernels/packed_matrix.h"
#include "kernels/products.h"
#include "kernels/team.h"
#include "model/ops.h"
#include "test_util.h"

namespace tdyn {
namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> gaussian;
  std::vector<float> v(n);
  for (float& x : v) x = gaussian(generator);
  return v;
}

// Values stored as `dtype` (F32, F16 or BF16) and the float32 values they hold.
struct Stored {
  std::vector<std::byte> bytes;
  std::vector<float> values;
};

Stored store(const std::vector<float>& v, DType dtype) {
  Stored s;
  const size_t width = dtype == DType::F32 ? 4 : 2;
  s.bytes.resize(v.size() * width);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::F32) {
      std::memcpy(s.bytes.data() + 4 * i, &v[i], 4);
      s.values.push_back(v[i]);
      continue;
    }
    const uint16_t bits = dtype == DType::F16 ? float_to_half(v[i]) : float_to_bf16(v[i]);
    std::memcpy(s.bytes.data() + 2 * i, &bits, 2);
    s.values.push_back(dtype == DType::F16 ? half_to_float(bits) : bf16_to_float(bits));
  }
  return s;
}

TEST(DotKernels, EqualFloat64DotsAtEveryLength) {
  for (const DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (const int64_t n : {0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 100, 1000, 4099}) {
      const Stored w = store(random_floats(n, 1), dtype);
      const std::vector<float> x = random_floats(n, 2);
      double expected = 0, magnitude = 0;
      for (int64_t i = 0; i < n; ++i) {
        expected += double(w.values[i]) * x[i];
        magnitude += std::abs(double(w.values[i]) * x[i]);
      }
      const float got = dtype == DType::F32 ? dot_f32(w.bytes.data(), x.data(), n)
                        : dtype == DType::F16 ? dot_f16(w.bytes.data(), x.data(), n)
                                              : dot_bf16(w.bytes.data(), x.data(), n);
      // float32 accumulation: a few ulps of the sum of magnitudes
      EXPECT_NEAR(got, expected, 1e-6 * magnitude + 1e-30) << dtype_name(dtype) << " n = " << n;
      for (const DotKernel& kernel : dot_kernels(dtype))
        EXPECT_NEAR(kernel.dot(w.bytes.data(), x.data(), n), expected, 1e-6 * magnitude + 1e-30)
            << dtype_name(dtype) << " " << kernel.name << " n = " << n;
    }
  }
}

// Y = X Wᵀ in float64 from the stored values, W [n_out, n_in].
std::vector<double> reference_product(const std::vector<float>& x, int64_t rows, const std::vector<float>& w,
                                      int64_t n_out, int64_t n_in) {
  std::vector<double> y(rows * n_out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < n_out; ++o)
      for (int64_t i = 0; i < n_in; ++i) y[r * n_out + o] += double(x[r * n_in + i]) * w[o * n_in + i];
  return y;
}

// W [n_out, n_in] (random) stored as `dtype`, and Wᵀ [n_in, n_out] as GPT-2's Conv1D stores it.
struct StoredWeights {
  Stored w, w_t;
  int64_t n_out, n_in;
  DType dtype;
  // W as project() takes it: itself, or with `transposed` its stored transpose.
  StoredMatrix matrix(bool transposed) const {
    const int64_t rows = transposed ? n_in : n_out, cols = transposed ? n_out : n_in;
    return {transposed ? w_t.bytes.data() : w.bytes.data(), dtype, rows, cols, cols * int64_t(dtype_size(dtype))};
  }
};

StoredWeights random_weights(int64_t n_out, int64_t n_in, DType dtype, uint32_t seed) {
  StoredWeights s{store(random_floats(n_out * n_in, seed), dtype), {}, n_out, n_in, dtype};
  std::vector<float> wt(n_in * n_out);
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t i = 0; i < n_in; ++i) wt[i * n_out + o] = s.w.values[o * n_in + i];
  s.w_t = store(wt, dtype);
  return s;
}

TEST(Project, EveryPathEqualsTheFloat64Product) {
  const int64_t n_out = 48, n_in = 72;
  for (const DType dtype : {DType::F32, DType::BF16}) {
    const StoredWeights w = random_weights(n_out, n_in, dtype, 3);
    for (const int64_t rows : {1, 3, 4, 5, 40}) {  // ≤ 4 rows: one dot product per output; more: BLAS
      const std::vector<float> x = random_floats(rows * n_in, 4);
      const std::vector<double> expected = reference_product(x, rows, w.w.values, n_out, n_in);
      for (const bool transposed : {false, true}) {
        const StoredMatrix m = w.matrix(transposed);
        std::vector<float> y(rows * n_out, 1.0f);
        project(x.data(), rows, m, transposed, 0.0f, y.data());
        test::expect_close(y, expected, 1e-5, 1e-5,
                           fmt::format("{} rows = {} transposed = {}", dtype_name(dtype), rows, transposed));
        project(x.data(), rows, m, transposed, 1.0f, y.data());  // beta 1 adds to Y
        std::vector<double> twice = expected;
        for (double& v : twice) v *= 2;
        test::expect_close(y, twice, 1e-5, 1e-5,
                           fmt::format("{} rows = {} transposed = {}, beta 1", dtype_name(dtype), rows, transposed));
      }
    }
  }
}

// Several products of one X in one call (a layer's q, k, v; gate and up) equal the same products made one by
// one, bit for bit, on the decoding path (shared parallel region) and on the prompt path, with beta 0 and 1.
TEST(Project, EachEqualsOneByOne) {
  const int64_t n_in = 72;
  const int64_t outs[] = {48, 16, 33};
  for (const DType dtype : {DType::F32, DType::BF16}) {
    std::vector<StoredWeights> weights;
    for (int t = 0; t < 3; ++t) weights.push_back(random_weights(outs[t], n_in, dtype, 20 + t));
    for (const int64_t rows : {1, 3, 9}) {
      const std::vector<float> x = random_floats(rows * n_in, 30);
      std::vector<std::vector<float>> each(3), alone(3);
      std::vector<Projection> targets;
      std::vector<StoredMatrix> matrices;
      for (int t = 0; t < 3; ++t) matrices.push_back(weights[t].matrix(false));
      for (int t = 0; t < 3; ++t) {
        const float beta = t == 1 ? 1.0f : 0.0f;
        each[t] = alone[t] = random_floats(rows * outs[t], 40 + t);  // beta 1 adds to these
        targets.push_back({matrices[t], false, beta, each[t].data()});
        project(x.data(), rows, matrices[t], false, beta, alone[t].data());
      }
      project_each(x.data(), rows, targets);
      for (int t = 0; t < 3; ++t) EXPECT_EQ(each[t], alone[t]) << dtype_name(dtype) << " rows = " << rows << " target " << t;
    }
  }
}

// A product large enough to be split over the threads (blocks of Y's columns, each on its own thread's BLAS)
// equals the float64 product, as on one thread, for every weight layout, for a prompt's rows and for a decoding
// step's one row, in a region of its own and in a team. (Not to the bit: OpenBLAS picks its kernel, and with it
// the order of the sums, by the shape of each block.)
TEST(Project, SplitOverThreadsEqualsTheFloat64Product) {
  struct Shape {
    int64_t rows, n_out, n_in;
  };
  // 1.9e6 and 1.1e6 multiply-adds; 200 and 1100 columns split unevenly
  for (const Shape shape : {Shape{32, 200, 300}, Shape{1, 1100, 1000}}) {
    const int64_t rows = shape.rows, n_out = shape.n_out, n_in = shape.n_in;
    for (const DType dtype : {DType::F32, DType::BF16}) {
      const StoredWeights w = random_weights(n_out, n_in, dtype, 50);
      const std::vector<float> x = random_floats(rows * n_in, 51);
      const std::vector<double> expected = reference_product(x, rows, w.w.values, n_out, n_in);
      for (const bool transposed : {false, true}) {
        const StoredMatrix m = w.matrix(transposed);
        const int threads_before = omp_get_max_threads();
        std::vector<float> y[3];
        for (const int run : {0, 1, 2}) {
          omp_set_num_threads(run == 0 ? 1 : 2);
          y[run].assign(rows * n_out, 0.0f);
          const auto multiply = [&] { project(x.data(), rows, m, transposed, 0.0f, y[run].data()); };
          if (run == 2)
            with_team(multiply);
          else
            multiply();
        }
        omp_set_num_threads(threads_before);
        const std::string what = fmt::format("{} rows, {} transposed = {}", rows, dtype_name(dtype), transposed);
        // float32 sums of 300-1000 products of N(0, 1) values: a few ulps of their magnitude (17-32)
        test::expect_close(y[0], expected, 1e-5, 1e-4, what + ", one thread");
        test::expect_close(y[1], expected, 1e-5, 1e-4, what + ", two threads");
        test::expect_close(y[2], expected, 1e-5, 1e-4, what + ", a team of two");
      }
    }
  }
}

// Packed products (kernels/packed_matrix.h) for every stored dtype and both layouts, with a ragged last block of
// columns, against the float64 product, with beta 0 and 1; and project() on a matrix that carries a packed copy goes
// through it for many rows only, packing it at the first such product.
TEST(Packed, EqualsTheFloat64ProductForEveryDtypeAndLayout) {
  if (packed_products_kernel().empty()) GTEST_SKIP() << "no packed kernels: built without oneDNN, or not for this CPU";
  const int64_t n_out = 2 * PackedMatrix::kPackedColumns + 44, n_in = 72;
  for (const DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    const StoredWeights w = random_weights(n_out, n_in, dtype, 60);
    for (const bool transposed : {false, true}) {
      const std::shared_ptr<const PackedMatrix> packed = PackedMatrix::of(w.matrix(transposed), transposed);
      ASSERT_TRUE(packed);
      EXPECT_FALSE(packed->is_packed());
      EXPECT_EQ(packed->bytes(), 0);
      for (const int64_t rows : {1, 5, 16, 40}) {
        const std::vector<float> x = random_floats(rows * n_in, 61);
        const std::vector<double> expected = reference_product(x, rows, w.w.values, n_out, n_in);
        const std::string what = fmt::format("{} rows = {} transposed = {}", dtype_name(dtype), rows, transposed);
        std::vector<float> y(rows * n_out, 1.0f);
        packed->multiply(x.data(), rows, 0.0f, y.data());
        test::expect_close(y, expected, 1e-5, 1e-5, what);
        packed->multiply(x.data(), rows, 1.0f, y.data());
        std::vector<double> twice = expected;
        for (double& v : twice) v *= 2;
        test::expect_close(y, twice, 1e-5, 1e-5, what + ", beta 1");
      }
      EXPECT_TRUE(packed->is_packed());
      EXPECT_GE(packed->bytes(), n_out * n_in * 4);
    }
  }
}

TEST(Packed, ProjectUsesTheCopyForManyRowsOnly) {
  if (packed_products_kernel().empty()) GTEST_SKIP() << "no packed kernels: built without oneDNN, or not for this CPU";
  const int64_t n_out = 48, n_in = 72;
  const StoredWeights w = random_weights(n_out, n_in, DType::BF16, 62);
  StoredMatrix m = w.matrix(false);
  const std::shared_ptr<const PackedMatrix> packed = PackedMatrix::of(m, false);
  m.packed = packed.get();
  EXPECT_EQ(m.row_slice(0, 8).packed, nullptr);  // a slice is another matrix
  EXPECT_EQ(m.column_slice(0, 8).packed, nullptr);
  for (const int64_t rows : {kDotProductRows, kDotProductRows + 1}) {
    const std::vector<float> x = random_floats(rows * n_in, 63);
    std::vector<float> y(rows * n_out), direct(rows * n_out);
    project(x.data(), rows, m, false, 0.0f, y.data());
    EXPECT_EQ(packed->is_packed(), rows > kDotProductRows) << rows << " rows";
    if (rows > kDotProductRows) {
      packed->multiply(x.data(), rows, 0.0f, direct.data());
      EXPECT_EQ(y, direct);
    }
  }
}

// Each value of Y is the same sum on one thread, on two, in a team, and whatever the number of rows multiplied
// with it: each block of columns is one single-threaded matmul whatever shares them out.
TEST(Packed, SameBitsOnAnyThreadsAndRows) {
  if (packed_products_kernel().empty()) GTEST_SKIP() << "no packed kernels: built without oneDNN, or not for this CPU";
  const int64_t rows = 64, n_out = 1000, n_in = 600;  // 3.8e7 multiply-adds: split over the threads
  const StoredWeights w = random_weights(n_out, n_in, DType::F32, 64);
  const std::shared_ptr<const PackedMatrix> packed = PackedMatrix::of(w.matrix(false), false);
  const std::vector<float> x = random_floats(rows * n_in, 65);
  const int threads_before = omp_get_max_threads();
  std::vector<float> y[3];
  for (const int run : {0, 1, 2}) {
    omp_set_num_threads(run == 0 ? 1 : 2);
    y[run].assign(rows * n_out, 0.0f);
    const auto multiply = [&] { packed->multiply(x.data(), rows, 0.0f, y[run].data()); };
    if (run == 2)
      with_team(multiply);
    else
      multiply();
  }
  omp_set_num_threads(threads_before);
  EXPECT_EQ(y[1], y[0]) << "two threads";
  EXPECT_EQ(y[2], y[0]) << "a team of two";
  for (const int64_t some : {int64_t{5}, int64_t{16}, int64_t{17}}) {
    std::vector<float> part(some * n_out);
    packed->multiply(x.data(), some, 0.0f, part.data());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), y[0].begin())) << "the first " << some << " rows alone";
  }
}

// A decoding query over a long cache (several blocks of keys, enough work for threads) equals the BLAS products'
// answer, and is the same to the bit on one thread and on two: the sums do not depend on the threads.
TEST(Attention, LongDecodingQuerySameOnAnyThreads) {
  const int64_t n = 1300, n_heads = 8, n_kv_heads = 2, d_head = 64, last = 16;  // 3 blocks of keys; 6.7e5 madds
  const std::vector<float> q = random_floats(n * n_heads * d_head, 11), k = random_floats(n * n_kv_heads * d_head, 12),
                           v = random_floats(n * n_kv_heads * d_head, 13);
  for (const int64_t window : {int64_t{0}, int64_t{700}}) {
    // The last `last` queries at once (products) ...
    const AttentionShape many{last, n, n - last, n_heads, n_kv_heads, d_head, 0.125, true, window};
    std::vector<float> z(last * n_heads * d_head);
    attention(many, q.data() + (n - last) * n_heads * d_head, k.data(), v.data(), z.data(), nullptr);
    // ... and one at a time: on one thread, on two in a region each, and on two kept as a team.
    const int threads_before = omp_get_max_threads();
    std::vector<float> by_threads[3];
    for (int run : {0, 1, 2}) {
      omp_set_num_threads(run == 0 ? 1 : 2);
      std::vector<float>& z_loop = by_threads[run];
      z_loop.resize(z.size());
      const auto queries = [&] {
        for (int64_t i = 0; i < last; ++i) {
          AttentionShape one = many;
          one.n_queries = 1;
          one.start_pos = n - last + i;
          attention(one, q.data() + (n - last + i) * n_heads * d_head, k.data(), v.data(),
                    z_loop.data() + i * n_heads * d_head, nullptr);
        }
      };
      if (run == 2)
        with_team(queries);
      else
        queries();
    }
    omp_set_num_threads(threads_before);
    const std::string what = fmt::format("window = {}", window);
    test::expect_close(by_threads[0], z, 1e-5, 1e-6, "one query at a time against the products, " + what);
    EXPECT_EQ(by_threads[0], by_threads[1]) << what;
    EXPECT_EQ(by_threads[0], by_threads[2]) << what << ", in a team";
  }
}

// Attention over many queries (BLAS products) equals the same queries run one at a time (the loop), pattern
// included: causal, sliding-window and bidirectional, with grouped keys/values.
TEST(Attention, ProductsEqualTheOneQueryLoop) {
  const int64_t n = 40, n_heads = 4, n_kv_heads = 2, d_head = 8;
  const std::vector<float> q = random_floats(n * n_heads * d_head, 5), k = random_floats(n * n_kv_heads * d_head, 6),
                           v = random_floats(n * n_kv_heads * d_head, 7);
  struct Case {
    bool causal;
    int64_t window;
  };
  for (const Case c : {Case{true, 0}, Case{true, 5}, Case{false, 0}}) {
    const AttentionShape all{n, n, 0, n_heads, n_kv_heads, d_head, 0.35, c.causal, c.window};
    std::vector<float> z(n * n_heads * d_head), pattern(n_heads * n * n);
    attention(all, q.data(), k.data(), v.data(), z.data(), pattern.data());
    std::vector<float> z_loop(z.size()), pattern_loop(pattern.size());
    for (int64_t i = 0; i < n; ++i) {
      AttentionShape one = all;
      one.n_queries = 1;
      one.start_pos = i;
      std::vector<float> row_pattern(n_heads * n);
      attention(one, q.data() + i * n_heads * d_head, k.data(), v.data(), z_loop.data() + i * n_heads * d_head,
                row_pattern.data());
      for (int64_t h = 0; h < n_heads; ++h)
        std::copy_n(row_pattern.data() + h * n, n, pattern_loop.data() + (h * n + i) * n);
    }
    const std::string what = fmt::format("causal = {} window = {}", c.causal, c.window);
    test::expect_close(z, z_loop, 1e-5, 1e-6, "z, " + what);
    test::expect_close(pattern, pattern_loop, 1e-5, 1e-7, "pattern, " + what);
    for (int64_t h = 0; h < n_heads; ++h)  // masked entries exactly 0
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const KeyRange keys = visible_keys(all, i);
          if (j < keys.first || j > keys.last) EXPECT_EQ(pattern[(h * n + i) * n + j], 0.0f) << what;
        }
  }
}

// SiLU (its exponential is the forward pass's own, vectorised) against float64 over the whole float range that
// matters, to a couple of ulps.
TEST(Activations, SiluWithinTwoUlpsOfFloat64) {
  double worst = 0, worst_x = 0;
  for (double x = -100; x <= 100; x += 0.001) {
    const float xf = static_cast<float>(x);
    const double expected = double(xf) / (1.0 + std::exp(-double(xf)));
    const float got = activate(Activation::SiLU, xf);
    if (std::abs(expected) < 1e-30) {  // x < -75: both are 0 to within 1e-30
      EXPECT_LT(std::abs(got), 1e-30) << "x = " << xf;
      continue;
    }
    const double error = std::abs(got - expected) / std::abs(expected);
    if (error > worst) worst = error, worst_x = xf;
  }
  EXPECT_LT(worst, 3e-7) << "worst relative error at x = " << worst_x;
  std::vector<float> gate = random_floats(1000, 8), up = random_floats(1000, 9), expected = up;
  for (size_t i = 0; i < gate.size(); ++i) expected[i] *= activate(Activation::SiLU, gate[i]);
  gated_activate(Activation::SiLU, gate.data(), up.data(), static_cast<int64_t>(up.size()));
  EXPECT_EQ(up, expected);
}

// A NaN (from a corrupt weight, say) comes out as NaN, through a conversion that stays defined under UBSan.
TEST(Activations, NonFiniteInputsPropagate) {
  EXPECT_TRUE(std::isnan(activate(Activation::SiLU, std::nanf(""))));
  std::vector<float> x = {std::nanf(""), INFINITY, -INFINITY, 1.0f};
  activate_inplace(Activation::SiLU, x.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(std::isnan(x[0]));
  EXPECT_EQ(x[1], INFINITY);  // +Inf · 1/(1 + e^-88)
  EXPECT_FALSE(std::isfinite(x[2]));  // -Inf / (1 + e^88): stays non-finite, so that it is noticed
  EXPECT_FLOAT_EQ(x[3], 1.0f / (1.0f + std::exp(-1.0f)));
}

TEST(Attention, SoftmaxWithinAFewUlpsOfFloat64) {
  const int64_t n = 300;
  const std::vector<float> scores = random_floats(n, 10);
  // One head, d_head 1, q = 1, k = scores: the pattern is softmax(scale · scores) over all keys.
  const std::vector<float> q(n, 1.0f), v(n, 0.0f);
  const AttentionShape shape{n, n, 0, 1, 1, 1, 3.0, false, 0};
  std::vector<float> z(n), pattern(n * n);
  attention(shape, q.data(), scores.data(), v.data(), z.data(), pattern.data());
  double max_score = -1e300, sum = 0;
  for (float s : scores) max_score = std::max(max_score, 3.0 * s);
  for (float s : scores) sum += std::exp(3.0 * s - max_score);
  std::vector<double> expected(n);
  for (int64_t j = 0; j < n; ++j) expected[j] = std::exp(3.0 * scores[j] - max_score) / sum;
  test::expect_close(std::vector<float>(pattern.begin(), pattern.begin() + n), expected, 2e-6, 1e-12, "softmax row 0");
}

}  // namespace
}  // namespace tdyn

namespace tdyn {
namespace {

// RoPE against its definition in float64: each pair (x_a, x_b) of each head rotated by pos * inv_freq[i], for
// positions inside the table and past it (a 3-position table), in both pair layouts and with partial rotary.
TEST(Rope, TabledAndComputedPositionsRotateAsDefined) {
  const std::vector<double> inv_freq = {1.0, 0.1, 0.01};  // 3 pairs of a 8-dim head: dims 6, 7 pass through
  const int64_t rows = 6, heads = 2, d_head = 8, start = 1;
  std::mt19937 rng(5);
  std::normal_distribution<float> gauss;
  std::vector<float> x(rows * heads * d_head);
  for (float& v : x) v = gauss(rng);
  for (RopeStyle style : {RopeStyle::RotateHalf, RopeStyle::Interleaved}) {
    std::vector<float> y = x;
    apply_rope(RopeTable(style, inv_freq, 3), y.data(), rows, heads, d_head, start);
    double worst = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        const float* in = x.data() + (r * heads + h) * d_head;
        const float* out = y.data() + (r * heads + h) * d_head;
        for (int64_t i = 0; i < 3; ++i) {
          const int64_t a = style == RopeStyle::RotateHalf ? i : 2 * i, b = style == RopeStyle::RotateHalf ? i + 3 : 2 * i + 1;
          const double angle = static_cast<double>(start + r) * inv_freq[i];
          worst = std::max(worst, std::abs(out[a] - (in[a] * std::cos(angle) - in[b] * std::sin(angle))));
          worst = std::max(worst, std::abs(out[b] - (in[a] * std::sin(angle) + in[b] * std::cos(angle))));
        }
        EXPECT_EQ(out[6], in[6]);
        EXPECT_EQ(out[7], in[7]);
      }
    EXPECT_LE(worst, 1e-5) << "style " << static_cast<int>(style);
  }
  std::vector<float> y = x;
  apply_rope(RopeTable(RopeStyle::None, {}, 3), y.data(), rows, heads, d_head, start);
  EXPECT_EQ(y, x);
}

}  // namespace
}  // namespace tdyn
