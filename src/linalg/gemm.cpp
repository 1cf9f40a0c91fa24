#include "linalg/gemm.h"

#include <cblas.h>
#ifdef TDYN_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

#include <algorithm>
#include <limits>

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

#ifdef TDYN_HAVE_LIBXSMM
// libxsmm's kernel for c = a b (column-major, c not read) at this shape: generated at the first request, looked up
// in libxsmm's registry afterwards (thread-safe); null where libxsmm has none for this CPU.
libxsmm_dmmfunction small_kernel(int64_t rows, int64_t cols, int64_t depth, int64_t lda, int64_t ldb, int64_t ldc) {
  const auto blasint = [](int64_t v) { return static_cast<libxsmm_blasint>(v); };
  const libxsmm_blasint la = blasint(lda), lb = blasint(ldb), lc = blasint(ldc);
  const double alpha = 1, beta = 0;
  const int flags = LIBXSMM_GEMM_FLAG_NONE, prefetch = LIBXSMM_PREFETCH_NONE;
  return libxsmm_dmmdispatch(blasint(rows), blasint(cols), blasint(depth), &la, &lb, &lc, &alpha, &beta, &flags, &prefetch);
}
#endif

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

namespace {

int blas_int(Index n) {
  TDYN_CHECK(n <= std::numeric_limits<int>::max());
  return static_cast<int>(n);
}

// c = a op(b), op = identity or adjoint.
ComplexMatrix complex_gemm(const ComplexMatrix& a, const ComplexMatrix& b, bool adjoint_b) {
  const Index inner = adjoint_b ? b.cols() : b.rows(), cols = adjoint_b ? b.rows() : b.cols();
  TDYN_CHECK(a.cols() == inner);
  ComplexMatrix c = ComplexMatrix::Zero(a.rows(), cols);
  if (c.size() == 0 || inner == 0) return c;
  const Complex one(1, 0), zero(0, 0);
  cblas_zgemm(CblasColMajor, CblasNoTrans, adjoint_b ? CblasConjTrans : CblasNoTrans, blas_int(a.rows()), blas_int(cols),
              blas_int(inner), &one, a.data(), blas_int(a.rows()), b.data(), blas_int(b.rows()), &zero, c.data(),
              blas_int(c.rows()));
  return c;
}

}  // namespace

ComplexMatrix multiply(const ComplexMatrix& a, const ComplexMatrix& b) { return complex_gemm(a, b, false); }

ComplexMatrix multiply_adjoint(const ComplexMatrix& a, const ComplexMatrix& b) { return complex_gemm(a, b, true); }

ComplexMatrix unitary_similarity(const ComplexMatrix& q, const ComplexMatrix& upper_triangular) {
  TDYN_CHECK(q.cols() == upper_triangular.rows() && upper_triangular.rows() == upper_triangular.cols());
  ComplexMatrix qt = q;  // ztrmm overwrites it with q t: half a general product's work
  if (qt.size() > 0) {
    const Complex one(1, 0);
    cblas_ztrmm(CblasColMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, blas_int(qt.rows()), blas_int(qt.cols()),
                &one, upper_triangular.data(), blas_int(upper_triangular.rows()), qt.data(), blas_int(qt.rows()));
  }
  return multiply_adjoint(qt, q);
}

// libxsmm for the small products of a particle step (n = d = 128 and about): faster there than OpenBLAS, most of
// all through a transposed operand, with the same values to the last bit (docs/performance.md).
void multiply_small(int64_t rows, int64_t cols, int64_t depth, const double* a, int64_t lda, const double* b,
                    int64_t ldb, double* c, int64_t ldc) {
  constexpr int64_t most = std::numeric_limits<int>::max();
  TDYN_CHECK(rows <= most && cols <= most && depth <= most && lda <= most && ldb <= most && ldc <= most);
  if (rows == 0 || cols == 0) return;
  if (depth == 0) {
    for (int64_t j = 0; j < cols; ++j) std::fill_n(c + j * ldc, rows, 0.0);
    return;
  }
#ifdef TDYN_HAVE_LIBXSMM
  if (const libxsmm_dmmfunction kernel = small_kernel(rows, cols, depth, lda, ldb, ldc)) {
    kernel(a, b, c);
    return;
  }
#endif
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(cols),
              static_cast<int>(depth), 1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), 0.0, c, static_cast<int>(ldc));
}

const char* small_product_kernels() {
#ifdef TDYN_HAVE_LIBXSMM
  if (small_kernel(8, 8, 8, 8, 8, 8)) return "libxsmm";
#endif
  return "dgemm";
}

void multiply_add_vector(const Eigen::Ref<const Matrix>& a, const Eigen::Ref<const Vector>& x, Eigen::Ref<Vector> y,
                         double alpha) {
  TDYN_CHECK(a.cols() == x.size() && a.rows() == y.size());
  if (y.size() == 0 || x.size() == 0) return;
  cblas_dgemv(CblasColMajor, CblasNoTrans, static_cast<int>(a.rows()), static_cast<int>(a.cols()), alpha, a.data(),
              static_cast<int>(a.outerStride()), x.data(), 1, 1.0, y.data(), 1);
}

}  // namespace tdyn::linalg
