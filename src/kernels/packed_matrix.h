// A projection's weights repacked once, as float32, into the blocked layout that oneDNN's matmul kernels read
// (kernels/products.h uses it for products of more than a few rows of X: a prompt, an analysis sample).
//
// sgemm packs its operand into such a layout itself, on every call: at T = 256 OpenBLAS ran at 80-90 % of the FMA
// peak on a d = 768 layer's shapes, 31-58 % at T = 16, where the packed matmul ran at 94-100 % (docs/performance.md).
// The matrix is packed in blocks of kPackedColumns output columns, each multiplied on one thread with oneDNN's own
// threading off, into a dense buffer of its own (oneDNN's fast kernels write only dense outputs): so a value of Y is
// the same sum whatever the number of threads or of rows, and the blocks spread over tdyn's threads as sgemm's
// column blocks do.
//
// Optional: without oneDNN in the build, or on a CPU its packed kernels do not cover, of() returns null and the
// products stay on sgemm.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/stored_matrix.h"

namespace tdyn {

class PackedMatrix {
 public:
  // Output columns per packed block: a few blocks of the kernels' own width (64 on AVX-512), and enough blocks in a
  // d = 768 layer's products to share them evenly between threads.
  static constexpr int64_t kPackedColumns = 128;

  // W as products.h's project() takes it: `w` is [n_out, n_in], or with `transposed` [n_in, n_out], of any dtype
  // (the values are widened exactly to float32), kept where it is until the first multiply() packs it. Null when
  // this build or CPU has no packed kernels (packed_products_kernel() is empty).
  static std::shared_ptr<const PackedMatrix> of(const StoredMatrix& w, bool transposed);

  // Y[rows, n_out] = X[rows, n_in] Wᵀ + beta Y (beta 0 or 1; with 0, Y need not be initialised). Y must not alias X.
  // Spread over the threads (kernels/team.h) when the product is large enough. The first call packs the matrix
  // (once, whichever thread gets there first; the others wait): a model packs only what prompts multiply, and
  // decoding alone packs nothing.
  void multiply(const float* x, int64_t rows, float beta, float* y) const;

  int64_t n_out() const { return n_out_; }
  int64_t n_in() const { return n_in_; }
  bool transposed() const { return transposed_; }
  bool is_packed() const { return packed_.load(std::memory_order_acquire); }
  int64_t bytes() const;  // the packed copy's size in memory; 0 until packed

  struct Block;  // one block of columns in oneDNN's layout (packed_matrix.cpp)
  PackedMatrix(const StoredMatrix& w, bool transposed);
  ~PackedMatrix();
  PackedMatrix(const PackedMatrix&) = delete;
  PackedMatrix& operator=(const PackedMatrix&) = delete;

 private:
  void pack() const;

  StoredMatrix w_;  // as stored, until packed
  int64_t n_out_, n_in_;
  bool transposed_;
  mutable std::once_flag packed_once_;
  mutable std::vector<std::unique_ptr<Block>> blocks_;  // written once, by pack()
  mutable std::atomic<bool> packed_{false};
};

// What runs packed products on this build and CPU, e.g. "oneDNN 2.6.3, brg:avx512_core"; empty when none does.
std::string packed_products_kernel();

}  // namespace tdyn
