// The k eigenvalues of largest modulus (and their right eigenvectors) of a large nonsymmetric real matrix, by
// Spectra's implicitly restarted Arnoldi method (GenEigsSolver), for when the full dgeev spectrum is not needed.
// The matrix may be dense, or known only through its action x ↦ A x (a Jacobian available through
// Jacobian-vector products): anything with rows(), cols() and perform_op(x, y), Spectra's operator interface.
#pragma once

#include <functional>
#include <optional>

#include "linalg/dense.h"

namespace tdyn::linalg {

// A d × d operator given only by y = A x. apply must write d values to y and must not keep the pointers.
class MatrixFreeOperator {
 public:
  using Scalar = double;
  MatrixFreeOperator(Index dimension, std::function<void(const double* x, double* y)> apply)
      : dimension_(dimension), apply_(std::move(apply)) {}
  Index rows() const { return dimension_; }
  Index cols() const { return dimension_; }
  void perform_op(const double* x, double* y) const { apply_(x, y); }

 private:
  Index dimension_;
  std::function<void(const double*, double*)> apply_;
};

struct TopEigenOptions {
  // Krylov subspace dimension; 0 means min(d, max(2k + 1, 20)). Spectra needs k + 2 ≤ ncv ≤ d.
  Index subspace_dimension = 0;
  Index max_restarts = 1000;
  double tolerance = 1e-10;  // Spectra's relative residual tolerance on each Ritz value
};

struct TopEigenpairs {
  // Sorted by modulus, largest first, ties as order_by_modulus breaks them. When the k-th and (k+1)-th
  // eigenvalues form a conjugate pair only one of them is returned (Arnoldi does not enlarge k to complete the pair).
  ComplexVector eigenvalues;   // (k)
  ComplexMatrix eigenvectors;  // (d × k), unit-norm columns, A v = λ v
  Index iterations = 0;        // Arnoldi restarts used
  Index operator_applications = 0;
};

// k dominant eigenpairs; throws Error when 1 ≤ k ≤ d − 2 does not hold, when the input has a NaN/Inf (dense
// form) or when Arnoldi does not converge within max_restarts.
TopEigenpairs top_eigenpairs(const Eigen::Ref<const Matrix>& a, Index k, const TopEigenOptions& options = {});
TopEigenpairs top_eigenpairs(const MatrixFreeOperator& op, Index k, const TopEigenOptions& options = {});

// The same, but when Arnoldi does not converge (Spectra reports anything but success) the result is empty
// instead of an Error, so that a caller holding the dense matrix can fall back to dgeev. Bad arguments and
// NaN/Inf input still throw.
std::optional<TopEigenpairs> top_eigenpairs_if_converged(const Eigen::Ref<const Matrix>& a, Index k,
                                                         const TopEigenOptions& options = {});

}  // namespace tdyn::linalg
