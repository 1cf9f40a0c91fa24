// Spectra GenEigsSolver behind a small function; see top_eigs.h.
#include "linalg/top_eigs.h"

#include <algorithm>
#include <exception>

#include <Spectra/GenEigsSolver.h>
#include <Spectra/MatOp/DenseGenMatProd.h>

#include "core/error.h"

namespace tdyn::linalg {
namespace {

Index subspace_dimension(Index d, Index k, const TopEigenOptions& options) {
  return options.subspace_dimension > 0 ? options.subspace_dimension : std::min(d, std::max<Index>(2 * k + 1, 20));
}

// Empty when Spectra does not report success.
template <typename Operator>
std::optional<TopEigenpairs> run_arnoldi(Operator& op, Index k, const TopEigenOptions& options) {
  const Index d = op.rows();
  if (op.cols() != d) fail("top_eigenpairs: expected a square operator, got {} × {}", op.rows(), op.cols());
  if (k < 1 || k > d - 2) fail("top_eigenpairs: k = {} must satisfy 1 ≤ k ≤ d − 2 = {} (use eigen_general)", k, d - 2);
  const Index subspace = subspace_dimension(d, k, options);
  if (subspace < k + 2 || subspace > d)
    fail("top_eigenpairs: subspace dimension {} must satisfy k + 2 = {} ≤ ncv ≤ d = {}", subspace, k + 2, d);

  Spectra::GenEigsSolver<Operator> solver(op, k, subspace);
  solver.init();  // Spectra's fixed-seed random start vector: runs are reproducible
  try {
    solver.compute(Spectra::SortRule::LargestMagn, options.max_restarts, options.tolerance,
                   Spectra::SortRule::LargestMagn);
  } catch (const Error&) {
    throw;  // from the operator itself (a matrix-free product): not a convergence problem
  } catch (const std::exception&) {
    // Spectra also signals a numerical breakdown by throwing (e.g. its Arnoldi restart's "from_k is larger
    // than the current subspace dimension"); for the caller that is one more way of not converging.
    return std::nullopt;
  }
  if (solver.info() != Spectra::CompInfo::Successful) return std::nullopt;

  // Spectra orders by modulus alone, so equal moduli (a conjugate pair) come out in whichever order round-off gives.
  const Eigendecomposition sorted = sorted_by_modulus({solver.eigenvalues(), solver.eigenvectors()});
  TopEigenpairs result;
  result.eigenvalues = sorted.eigenvalues;
  result.eigenvectors = sorted.eigenvectors;
  for (Index j = 0; j < result.eigenvectors.cols(); ++j) result.eigenvectors.col(j).normalize();
  result.iterations = solver.num_iterations();
  result.operator_applications = solver.num_operations();
  return result;
}

TopEigenpairs converged_or_fail(std::optional<TopEigenpairs> result, Index d, Index k, const TopEigenOptions& options) {
  if (!result)
    fail("top_eigenpairs: Arnoldi (Spectra GenEigsSolver) did not converge to {} eigenvalues in {} restarts "
         "(ncv = {}, tolerance = {:g})",
         k, options.max_restarts, subspace_dimension(d, k, options), options.tolerance);
  return std::move(*result);
}

}  // namespace

std::optional<TopEigenpairs> top_eigenpairs_if_converged(const Eigen::Ref<const Matrix>& a, Index k,
                                                         const TopEigenOptions& options) {
  require_finite(a, "top_eigenpairs input");
  Spectra::DenseGenMatProd<double> op(a);
  return run_arnoldi(op, k, options);
}

TopEigenpairs top_eigenpairs(const Eigen::Ref<const Matrix>& a, Index k, const TopEigenOptions& options) {
  return converged_or_fail(top_eigenpairs_if_converged(a, k, options), a.rows(), k, options);
}

TopEigenpairs top_eigenpairs(const MatrixFreeOperator& op, Index k, const TopEigenOptions& options) {
  MatrixFreeOperator solver_op = op;  // Spectra's solver holds a non-const reference
  return converged_or_fail(run_arnoldi(solver_op, k, options), op.rows(), k, options);
}

}  // namespace tdyn::linalg
