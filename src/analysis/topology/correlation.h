// Streaming Pearson correlation of d units over many rows (SPEC §3 "Topology": per layer boundary, the
// Pearson correlation of the d residual units over all tokens of all samples).
//
// The activations never have to be stored: rows (tokens) are folded into running sums in float64, and the
// d × d cross-products of a batch are added with one BLAS rank-k update (dsyrk), which runs at GEMM speed
// instead of the memory-bound speed of one rank-1 update per row. Accumulators over disjoint rows merge
// exactly (a multi-process reduction adds them), and their raw sums round-trip through a flat float64
// buffer (checkpoint / resume).
//
// Numerics. r_ij needs the centred cross-products M_ij = Σ (x_i − x̄_i)(x_j − x̄_j). The one-pass textbook form
// Σ x_i x_j − n x̄_i x̄_j cancels catastrophically when a unit's mean is large compared with its spread
// (residual streams have such units: a mean of 100 with a standard deviation of 1e-3 loses all 16 digits).
// We therefore accumulate around a per-unit shift c taken from the first batch (its mean):
//     S_i = Σ (x_i − c_i),   S_ij = Σ (x_i − c_i)(x_j − c_j),   M_ij = S_ij − S_i S_j / n,
// which is exact algebra for any c, and the correction S_i S_j / n is small when c is close to the mean, so
// the relative error is of order ε (1 + (x̄ − c)²/σ²) instead of ε x̄²/σ².
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tdyn::topology {

// A dense correlation matrix and which units have no correlation at all.
struct CorrelationMatrix {
  int64_t n_units = 0;
  std::vector<double> values;           // r (n_units × n_units), row-major, symmetric, diagonal 1
  std::vector<int64_t> constant_units;  // zero-variance units: their whole row and column (diagonal too) is NaN

  double at(int64_t i, int64_t j) const { return values[i * n_units + j]; }
};

class CorrelationAccumulator {
 public:
  explicit CorrelationAccumulator(int64_t n_units);

  // Adds a batch of rows: `rows` is (n_rows × n_units), row-major (one token per row); its size must be a
  // multiple of n_units. Batches may have any size; an empty batch is a no-op. Throws Error on a size that
  // does not fit or on non-finite values.
  void add_rows(std::span<const double> rows);
  void add_rows(std::span<const float> rows);

  // Folds in another accumulator over different rows of the same units (any shifts): afterwards this
  // accumulator is the one that would have seen both sets of rows. Throws Error when n_units differ.
  void merge(const CorrelationAccumulator& other);

  int64_t n_units() const { return n_units_; }
  int64_t n_rows() const { return n_rows_; }

  std::vector<double> means() const;      // x̄ (n_units)
  std::vector<double> variances() const;  // M_ii / (n − 1) (n_units), sample variance

  // r_ij = M_ij / sqrt(M_ii M_jj), clamped to [−1, 1]. A unit whose spread is below rounding noise of its
  // magnitude (sqrt(M_ii / n) ≤ 64 ε · max|x̄_i|, |c_i|, in particular an exactly constant unit) is listed in
  // constant_units and gets NaN: it must not turn into edges. Throws Error with fewer than 2 rows.
  CorrelationMatrix correlation() const;

  // Flat float64 buffer of the raw sums, the format of checkpoints and of a reduction:
  //   [0] format version (1), [1] n_units, [2] n_rows,
  //   [3, 3 + d)            shift c,
  //   [3 + d, 3 + 2d)       S (sums of x − c),
  //   [3 + 2d, ...)         S_ij for i ≤ j, row by row (upper triangle packed, d (d + 1) / 2 values).
  // Counts up to 2^53 are exact in float64.
  std::vector<double> to_buffer() const;
  // Inverse of to_buffer; throws Error on a wrong version, size or count.
  static CorrelationAccumulator from_buffer(std::span<const double> buffer);

 private:
  template <typename Scalar>
  void add_rows_impl(std::span<const Scalar> rows);

  int64_t n_units_;
  int64_t n_rows_ = 0;
  std::vector<double> shift_;       // c (n_units), fixed by the first non-empty batch
  std::vector<double> sum_;         // S (n_units)
  std::vector<double> cross_;       // S_ij (n_units × n_units), row-major; only the upper triangle (j ≥ i) is kept
  std::vector<double> centred_;     // scratch: one chunk of rows minus the shift
};

}  // namespace tdyn::topology
