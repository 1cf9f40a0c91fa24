#include "kernels/stored_matrix.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/dot.h"
#include "kernels/quant_blocks.h"

namespace tdyn {

void convert_to_float(DType dtype, const std::byte* src, int64_t n, float* out) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(out, src, static_cast<size_t>(n) * 4);
      return;
    case DType::F16:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = half_bits_to_float(load_u16(src + 2 * i));
      return;
    case DType::BF16:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(load_u16(src + 2 * i));
      return;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, src + 8 * i, 8);
        out[i] = static_cast<float>(v);
      }
      return;
    default:
      TDYN_CHECK(is_quantized(dtype));
      dequantize_row(dtype, src, out, n);
  }
}

StoredMatrix StoredMatrix::of_floats(const float* data, int64_t rows, int64_t cols, int64_t ld) {
  TDYN_CHECK(ld >= cols);
  return {reinterpret_cast<const std::byte*>(data), DType::F32, rows, cols, ld * 4};
}

StoredMatrix StoredMatrix::row_slice(int64_t first, int64_t n) const {
  TDYN_CHECK(first >= 0 && n >= 0 && first + n <= rows);
  StoredMatrix s = *this;
  s.data = row(first);
  s.rows = n;
  s.packed = nullptr;
  return s;
}

StoredMatrix StoredMatrix::column_slice(int64_t first, int64_t n) const {
  TDYN_CHECK(!is_quantized(dtype) && first >= 0 && n >= 0 && first + n <= cols);
  StoredMatrix s = *this;
  s.data = data + first * static_cast<int64_t>(dtype_size(dtype));
  s.cols = n;
  s.packed = nullptr;
  return s;
}

const float* StoredMatrix::f32() const {
  const bool aligned = reinterpret_cast<uintptr_t>(data) % alignof(float) == 0 && row_bytes % 4 == 0;
  return dtype == DType::F32 && aligned ? reinterpret_cast<const float*>(data) : nullptr;
}

void StoredMatrix::row_floats(int64_t r, int64_t col, int64_t n, float* out) const {
  TDYN_CHECK(r >= 0 && r < rows && col >= 0 && n >= 0 && col + n <= cols);
  const DTypeLayout layout = dtype_layout(dtype);
  const int64_t block = layout.block_elements;
  if (col % block == 0 && n % block == 0) {
    convert_to_float(dtype, row(r) + (col / block) * layout.block_bytes, n, out);
    return;
  }
  // A range that cuts blocks: widen the blocks that cover it, keep the part asked for.
  const int64_t first_block = col / block, last_block = (col + n + block - 1) / block;
  std::vector<float> covered((last_block - first_block) * block);
  convert_to_float(dtype, row(r) + first_block * layout.block_bytes, static_cast<int64_t>(covered.size()), covered.data());
  std::copy_n(covered.begin() + (col - first_block * block), n, out);
}

float StoredMatrix::row_dot(int64_t r, const float* x) const {
  const std::byte* p = row(r);
  switch (dtype) {
    case DType::F32: return dot_f32(p, x, cols);
    case DType::F16: return dot_f16(p, x, cols);
    case DType::BF16: return dot_bf16(p, x, cols);
    case DType::F64: {
      std::vector<float> w(cols);
      convert_to_float(dtype, p, cols, w.data());
      float sum = 0;
      for (int64_t i = 0; i < cols; ++i) sum += w[i] * x[i];
      return sum;
    }
    default:
      TDYN_CHECK(is_quantized(dtype));
      return dot_row(dtype, p, x, cols);
  }
}

float StoredMatrix::at(int64_t r, int64_t c) const {
  float v;
  row_floats(r, c, 1, &v);
  return v;
}

}  // namespace tdyn
