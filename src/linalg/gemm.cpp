#include "linalg/gemm.h"

#include <cblas.h>

#include "core/error.h"

namespace tdyn::linalg {

namespace {

// c = alpha a b + beta c on column-major storage with leading dimensions (c uninitialised when beta = 0). One
// column or one row goes to dgemv: dgemm would first copy all of the other operand into its panel layout, a pass
// as long as the product itself.
void gemm(int rows, int cols, int depth, double alpha, const double* a, int lda, const double* b, int ldb, double beta,
          double* c, int ldc) {
  if (cols == 1 || rows == 1) {
    const int n = cols == 1 ? rows : cols, inc = cols == 1 ? 1 : ldc;
    if (beta == 0)  // what dgemv leaves of an uninitialised c with beta = 0 differs between BLAS versions
      for (int i = 0; i < n; ++i) c[static_cast<int64_t>(i) * inc] = 0;
    if (cols == 1) cblas_dgemv(CblasColMajor, CblasNoTrans, rows, depth, alpha, a, lda, b, 1, beta, c, 1);
    else cblas_dgemv(CblasColMajor, CblasTrans, depth, cols, alpha, b, ldb, a, lda, beta, c, ldc);  // cᵀ = α bᵀ aᵀ + β cᵀ
    return;
  }
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, rows, cols, depth, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

void multiply(const Matrix& a, const Matrix& b, Matrix& c, double beta) {
  TDYN_CHECK(a.cols() == b.rows());
  if (beta == 0) c.resize(a.rows(), b.cols());
  TDYN_CHECK(c.rows() == a.rows() && c.cols() == b.cols());
  if (c.size() == 0) return;
  if (a.cols() == 0) {
    c *= beta;
    return;
  }
  gemm(static_cast<int>(a.rows()), static_cast<int>(b.cols()), static_cast<int>(a.cols()), 1.0, a.data(),
       static_cast<int>(a.rows()), b.data(), static_cast<int>(b.rows()), beta, c.data(), static_cast<int>(c.rows()));
}

void multiply_add(const Eigen::Ref<const Matrix>& a, const Eigen::Ref<const Matrix>& b, Eigen::Ref<Matrix> c, double alpha) {
  TDYN_CHECK(a.cols() == b.rows() && c.rows() == a.rows() && c.cols() == b.cols());
  if (c.size() == 0 || a.cols() == 0) return;
  gemm(static_cast<int>(a.rows()), static_cast<int>(b.cols()), static_cast<int>(a.cols()), alpha, a.data(),
       static_cast<int>(a.outerStride()), b.data(), static_cast<int>(b.outerStride()), 1.0, c.data(),
       static_cast<int>(c.outerStride()));
}

void multiply_add_vector(const Eigen::Ref<const Matrix>& a, const Eigen::Ref<const Vector>& x, Eigen::Ref<Vector> y,
                         double alpha) {
  TDYN_CHECK(a.cols() == x.size() && a.rows() == y.size());
  if (y.size() == 0 || x.size() == 0) return;
  cblas_dgemv(CblasColMajor, CblasNoTrans, static_cast<int>(a.rows()), static_cast<int>(a.cols()), alpha, a.data(),
              static_cast<int>(a.outerStride()), x.data(), 1, 1.0, y.data(), 1);
}

}  // namespace tdyn::linalg
