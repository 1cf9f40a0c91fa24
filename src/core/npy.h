// NumPy .npy arrays (format version 1.0/2.0/3.0, little-endian, C order), the exchange format of every
// array tdyn writes and reads. Layout: magic "\x93NUMPY", major, minor, header length (uint16 for v1,
// uint32 for v2/3), a Python-dict header {'descr': '<f4', 'fortran_order': False, 'shape': (a, b), }
// padded with spaces to a multiple of 64 bytes and ending in '\n', then the raw data.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/files.h"
#include "core/tensor.h"

namespace tdyn {

struct NpyArray {
  std::string descr;  // numpy dtype string, e.g. "<f4", "<i8"
  Shape shape;
  std::vector<char> bytes;

  std::vector<float> as_float() const;    // any numeric dtype, converted
  std::vector<double> as_double() const;
  std::vector<int64_t> as_int64() const;  // integer dtypes only
};

NpyArray read_npy(const fs::path& path);
NpyArray parse_npy(std::string_view file_bytes, const std::string& name_for_errors);

void write_npy(const fs::path& path, const float* data, const Shape& shape);
void write_npy(const fs::path& path, const double* data, const Shape& shape);
void write_npy(const fs::path& path, const int32_t* data, const Shape& shape);
void write_npy(const fs::path& path, const int64_t* data, const Shape& shape);

template <typename T>
void write_npy(const fs::path& path, const TensorT<T>& t) {
  write_npy(path, t.ptr(), t.shape);
}

// Complex arrays are written as numpy complex128 ('<c16').
// A float64 .npy array written in pieces along its first axis, for arrays too large to hold at once (a
// [depth, d, d] stack of Jacobians is 8.6 GB at d = 4096 and 64 sublayers). It goes to a temporary name and
// is renamed into place by finish(), so an interrupted writer leaves no partial array behind.
class NpyStream {
 public:
  NpyStream(const fs::path& path, const Shape& shape);
  NpyStream(const NpyStream&) = delete;
  NpyStream& operator=(const NpyStream&) = delete;
  ~NpyStream();  // without finish(): removes the temporary
  // Appends the next n values in C order; append_matrix a column-major (Eigen) matrix as the next [rows, cols]
  // slice, transposed into C order as numpy reads it.
  void append(const double* data, int64_t n);
  void append_matrix(const double* column_major, int64_t rows, int64_t cols);
  void finish();  // checks that every slice came, flushes and renames

 private:
  fs::path path_, temporary_;
  std::FILE* file_ = nullptr;
  int64_t expected_ = 0, written_ = 0;
};

void write_npy_complex(const fs::path& path, const double* interleaved_re_im, const Shape& shape);

}  // namespace tdyn
