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

}  // namespace tdyn::linalg
