// A matrix as the checkpoint stores it, used in place: rows × cols values of one dtype (float32, float16,
// bfloat16 or a GGUF block-quantized type), row r starting `row_bytes` after row r − 1, usually inside a
// memory-mapped file. Nothing here widens a whole matrix: values are converted a row (or a panel of rows) at a
// time into the caller's float32 buffer, or consumed directly by a dot product.
//
// This and kernels/products.h are the one interface between the model and the arithmetic on stored weights:
// a GPU backend would implement these few functions and leave the model and the analyses alone.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tdyn {

class PackedMatrix;

struct StoredMatrix {
  const std::byte* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  int64_t row_bytes = 0;  // stride between rows (more than cols' bytes for a column slice)
  // The same matrix packed for products of many rows (kernels/packed_matrix.h), owned by whoever owns the model's
  // weights; null when it is not packed. A matrix bound in place of this one, or a slice of it, has none.
  const PackedMatrix* packed = nullptr;

  // A dense float32 matrix [rows, cols] with leading dimension `ld` (≥ cols), not copied.
  static StoredMatrix of_floats(const float* data, int64_t rows, int64_t cols, int64_t ld);

  explicit operator bool() const { return data != nullptr; }
  const std::byte* row(int64_t r) const { return data + r * row_bytes; }
  // Rows [first, first + n) / columns [first, first + n) as a matrix of their own, in place. Column slices need
  // a plain dtype (a block of a quantized row cannot be cut).
  StoredMatrix row_slice(int64_t first, int64_t n) const;
  StoredMatrix column_slice(int64_t first, int64_t n) const;
  // The F32 data as a float pointer when rows can be read in place (F32 and 4-byte aligned), else null.
  const float* f32() const;

  // Values [col, col + n) of row r as float32 (exact: every stored dtype widens exactly to float32).
  void row_floats(int64_t r, int64_t col, int64_t n, float* out) const;
  // Σ_i W[r, i] · x[i] over the whole row r, accumulated in float32 without widening the row.
  float row_dot(int64_t r, const float* x) const;
  // One element, W[r, c] (slow: for spot checks and small matrices).
  float at(int64_t r, int64_t c) const;
};

// n values of `dtype` at `src` (a whole number of blocks for quantized types) widened to float32.
void convert_to_float(DType dtype, const std::byte* src, int64_t n, float* out);

}  // namespace tdyn
