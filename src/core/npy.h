// NumPy .npy arrays (format version 1.0/2.0/3.0, little-endian, C order), the exchange format of every
// array tdyn writes and reads. Layout: magic "\x93NUMPY", major, minor, header length (uint16 for v1,
// uint32 for v2/3), a Python-dict header {'descr': '<f4', 'fortran_order': False, 'shape': (a, b), }
// padded with spaces to a multiple of 64 bytes and ending in '\n', then the raw data.
#pragma once

#include <cstdint>
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
void write_npy_complex(const fs::path& path, const double* interleaved_re_im, const Shape& shape);

}  // namespace tdyn
