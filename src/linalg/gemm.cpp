#include "linalg/gemm.h"

#include <cblas.h>

#include "core/error.h"

namespace tdyn::linalg {

void multiply(const Matrix& a, const Matrix& b, Matrix& c, double beta) {
  TDYN_CHECK(a.cols() == b.rows());
  if (beta == 0) c.resize(a.rows(), b.cols());
  TDYN_CHECK(c.rows() == a.rows() && c.cols() == b.cols());
  if (c.size() == 0) return;
  if (a.cols() == 0) {
    c *= beta;
    return;
  }
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(a.rows()), static_cast<int>(b.cols()),
              static_cast<int>(a.cols()), 1.0, a.data(), static_cast<int>(a.rows()), b.data(), static_cast<int>(b.rows()), beta,
              c.data(), static_cast<int>(c.rows()));
}

void multiply_add(const Eigen::Ref<const Matrix>& a, const Eigen::Ref<const Matrix>& b, Eigen::Ref<Matrix> c, double alpha) {
  TDYN_CHECK(a.cols() == b.rows() && c.rows() == a.rows() && c.cols() == b.cols());
  if (c.size() == 0 || a.cols() == 0) return;
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(a.rows()), static_cast<int>(b.cols()),
              static_cast<int>(a.cols()), alpha, a.data(), static_cast<int>(a.outerStride()), b.data(),
              static_cast<int>(b.outerStride()), 1.0, c.data(), static_cast<int>(c.outerStride()));
}

void multiply_add_vector(const Eigen::Ref<const Matrix>& a, const Eigen::Ref<const Vector>& x, Eigen::Ref<Vector> y,
                         double alpha) {
  TDYN_CHECK(a.cols() == x.size() && a.rows() == y.size());
  if (y.size() == 0 || x.size() == 0) return;
  cblas_dgemv(CblasColMajor, CblasNoTrans, static_cast<int>(a.rows()), static_cast<int>(a.cols()), alpha, a.data(),
              static_cast<int>(a.outerStride()), x.data(), 1, 1.0, y.data(), 1);
}

SerialBlas::SerialBlas(bool active) {
  if (!active) return;
  saved_ = openblas_get_num_threads();
  openblas_set_num_threads(1);
}

void SerialBlas::restore() {
  if (saved_ > 0) openblas_set_num_threads(saved_);
  saved_ = 0;
}

}  // namespace tdyn::linalg
