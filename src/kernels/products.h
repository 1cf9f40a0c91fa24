// Products and gathers over stored matrices (kernels/stored_matrix.h), whatever their dtype:
//   * for a few rows of X (a decoding step), one fused dot product per output (StoredMatrix::row_dot, AVX2 when
//     the CPU has it), split over threads by output rows: each weight byte is read once, straight from the
//     mapping, which is what bounds a decoding step; float32 matrices stored transposed (GPT-2 Conv1D) go to
//     BLAS sgemv instead. (sgemm would first copy the whole matrix into its packed layout for those few rows.)
//   * packed weights (kernels/packed_matrix.h), for many rows, go to oneDNN's matmul;
//   * float32 weights, for many rows, go to BLAS sgemm in place;
//   * other dtypes, for many rows (a prompt, an analysis sample), are widened one panel of rows at a time into
//     a small per-thread float32 buffer that sgemm then multiplies: the cost of widening is shared by every row
//     of X, and no float32 copy of the whole matrix ever exists.
// Large products are split over the threads (kernels/team.h: a decoding step's team, or a parallel region of their
// own; inside another region the calling thread does it all): dot products by output rows, as above, BLAS products
// by blocks of output columns, each thread running BLAS single-threaded on its block.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/stored_matrix.h"

namespace tdyn {

// At most this many rows of X (a decoding step) take the dot-product path: beyond it one widened panel serves
// enough rows that sgemm's speed wins over reading the stored bytes directly.
constexpr int64_t kDotProductRows = 4;

// Products of many rows of X with at least this many multiply-adds are split over the threads (packed or not).
constexpr int64_t kSplitWork = int64_t{1} << 20;

// Y[rows, n_out] = X[rows, n_in] Wᵀ + beta Y, W the nn.Linear matrix [n_out, n_in]: `w` itself, or with
// `transposed` w stores Wᵀ [n_in, n_out] (GPT-2 Conv1D). beta is 0 or 1; with beta 0, Y need not be initialised.
// Y must not alias X.
void project(const float* x, int64_t rows, const StoredMatrix& w, bool transposed, float beta, float* y);

// One of several products of the same X: Y = X Wᵀ + beta Y, as project() takes them.
struct Projection {
  const StoredMatrix& w;
  bool transposed = false;
  float beta = 0.0f;
  float* y = nullptr;
};

// project() for each target. When every one of them is a decoding step's dot products, all their outputs share one
// parallel region (a layer's q, k and v; gate and up): fewer hand-offs to the threads per token, and the threads'
// shares stay even however the matrices' sizes differ.
void project_each(const float* x, int64_t rows, std::span<const Projection> targets);

// out[i, :] = table[ids[i], col : col + n] as float32, for every i (embedding lookups: only these rows are read).
void gather_rows(const StoredMatrix& table, std::span<const int32_t> ids, int64_t col, int64_t n, float* out);

}  // namespace tdyn
