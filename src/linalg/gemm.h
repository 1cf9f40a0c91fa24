// Float64 matrix products through BLAS (dgemm). Eigen's own GEMM kernel, compiled for the baseline x86-64
// instruction set, runs at a fraction of OpenBLAS's speed on the d × d_mlp × d products of the Jacobian analyses
// (docs/performance.md); these are the few products that size.
#pragma once

#include <cstdint>

#include "kernels/serial_blas.h"
#include "linalg/dense.h"

namespace tdyn::linalg {

// c = a b + beta c (c is resized to a.rows() × b.cols() when beta = 0).
void multiply(const Matrix& a, const Matrix& b, Matrix& c, double beta = 0);
// c += alpha a b on blocks (rows or columns of larger matrices): BLAS reads them in place through their outer
// stride, where a Matrix argument would need a copy of each.
void multiply_add(const Eigen::Ref<const Matrix>& a, const Eigen::Ref<const Matrix>& b, Eigen::Ref<Matrix> c, double alpha = 1);
// y += alpha a x (dgemv: a dgemm with one column would first copy all of a into its panel layout).
void multiply_add_vector(const Eigen::Ref<const Matrix>& a, const Eigen::Ref<const Vector>& x, Eigen::Ref<Vector> y,
                         double alpha = 1);
// c [rows × cols] = a b on column-major storage with leading dimensions, c written without being read, for
// products that stay in the caches and recur at one shape (a particle step's): a kernel libxsmm generated for that
// exact shape where the build has libxsmm and the CPU gets a kernel, else dgemm. OpenBLAS packs both operands on
// every call, which at this size costs as much as the arithmetic (see multiply_small's measurements in gemm.cpp).
void multiply_small(int64_t rows, int64_t cols, int64_t depth, const double* a, int64_t lda, const double* b,
                    int64_t ldb, double* c, int64_t ldc);
// What multiply_small runs on this build and CPU: "libxsmm" or "dgemm".
const char* small_product_kernels();
inline Matrix multiply(const Matrix& a, const Matrix& b) {
  Matrix c;
  multiply(a, b, c);
  return c;
}

// Complex products through BLAS (zgemm, ztrmm), for the same reason: Eigen's complex kernel is built for the baseline
// instruction set (docs/performance.md).
ComplexMatrix multiply(const ComplexMatrix& a, const ComplexMatrix& b);
ComplexMatrix multiply_adjoint(const ComplexMatrix& a, const ComplexMatrix& b);  // a b*
// q t q* for an upper-triangular t (its strictly lower part is not read): J from its complex Schur form.
ComplexMatrix unitary_similarity(const ComplexMatrix& q, const ComplexMatrix& upper_triangular);


}  // namespace tdyn::linalg
