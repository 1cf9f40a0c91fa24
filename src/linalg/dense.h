// Dense decompositions of real d × d matrices (d up to a few thousand): thin wrappers that call LAPACK
// through LAPACKE directly, in float64.
//
// Why not Eigen's own solvers: Eigen::EigenSolver / JacobiSVD are more than an order of magnitude slower than
// LAPACK (OpenBLAS) at d ≥ 1024, and EIGEN_USE_LAPACKE would route SVD to the slow dgesvd; bench/bench_linalg.cpp
// measures this (docs/performance.md).
// Eigen is used only for the matrix types.
//
// Every function here checks its input first: a NaN or Inf throws tdyn::Error naming the matrix and the
// (row, col) of the first bad entry, so it never reaches a metric; a LAPACK failure (info != 0) throws
// tdyn::Error naming the routine and info. The functions are plain: they take a matrix and return a result
// struct; nothing is cached.
#pragma once

#include <complex>
#include <string_view>
#include <vector>

#include <Eigen/Core>

namespace tdyn::linalg {

using Matrix = Eigen::MatrixXd;          // column-major, as LAPACK wants it
using ComplexMatrix = Eigen::MatrixXcd;
using Vector = Eigen::VectorXd;
using ComplexVector = Eigen::VectorXcd;
using Complex = std::complex<double>;
using Index = Eigen::Index;

// Throws Error "<what>: non-finite value nan at (row r, col c) of a R × C matrix" on the first NaN/Inf.
void require_finite(const Eigen::Ref<const Matrix>& a, std::string_view what);
void require_finite(const Eigen::Ref<const ComplexMatrix>& a, std::string_view what);

// ---- General real eigendecomposition (dgeev) ----------------------------------------------------------

struct Eigendecomposition {
  // In LAPACK's order unless sorted: a complex-conjugate pair is stored adjacently, the member with positive
  // imaginary part first, and the two are exact conjugates (LAPACK returns them as (wr, ±wi)).
  ComplexVector eigenvalues;  // (d)
  // Right eigenvectors as columns, A v_i = λ_i v_i, each of unit Euclidean norm with its largest component
  // real (LAPACK's normalisation); the vectors of a conjugate pair are conjugates. Empty unless requested.
  ComplexMatrix eigenvectors;  // (d × d) or (0 × 0)
};

// All eigenvalues of a square matrix, and the right eigenvectors when want_vectors.
Eigendecomposition eigen_general(const Eigen::Ref<const Matrix>& a, bool want_vectors = false);

// Permutation that sorts eigenvalues canonically: by modulus, largest first; ties by real part, then imaginary part,
// both descending. Ties are equal up to round-off (within 1e-9 · |λ|), so a conjugate pair (equal modulus and real
// part) stays adjacent with +Im first, and equal moduli keep one order, whichever half the round-off favours.
std::vector<Index> order_by_modulus(const ComplexVector& eigenvalues);

// The same decomposition with eigenvalues (and eigenvectors, if present) in order_by_modulus order.
Eigendecomposition sorted_by_modulus(const Eigendecomposition& decomposition);

// ---- Singular value decomposition (dgesdd) -----------------------------------------------------------

struct SingularValueDecomposition {
  Vector singular_values;  // (min(m, n)), descending
  // A = U diag(σ) Vᵀ (thin). Empty unless requested.
  Matrix u;  // (m × min(m, n)), left singular vectors as columns
  Matrix v;  // (n × min(m, n)), right singular vectors as columns (V, not Vᵀ)
};

SingularValueDecomposition svd(const Eigen::Ref<const Matrix>& a, bool want_vectors = false);

// Singular values only, of a real or a complex matrix (dgesdd / zgesdd), descending.
Vector singular_values(const Eigen::Ref<const Matrix>& a);
Vector singular_values(const Eigen::Ref<const ComplexMatrix>& a);

// Every singular value of a square matrix and the singular vectors of only the k largest, from one bidiagonal
// reduction: dgebrd, then dbdsqr for all σ (dqds, the values dgesdd 'N' gives), dbdsvdx for the k leading
// vector pairs of the bidiagonal, and dormbr to map those k back. This is dgesvdx's route plus the remaining
// values; it avoids dgesdd's d × d back-transformations, most of the cost of a full SVD when k ≪ d. u and v
// are d × k. Throws Error unless 1 ≤ k ≤ d.
SingularValueDecomposition svd_leading(const Eigen::Ref<const Matrix>& a, Index k);

// ---- Complex Schur form -------------------------------------------------------------------------------

// J = Q T Q*, Q unitary, T upper triangular with the eigenvalues on its diagonal; T = Λ + N with Λ = diag(T)
// and N strictly upper triangular (SPEC §3: Henrici departure ‖N‖_F, Schur surgery).
//
// Computed as LAPACK's real Schur form (dgees, J = Z S Zᵀ with 1×1 and 2×2 diagonal blocks) followed by one
// 2×2 unitary rotation per 2×2 block that triangularises it, rather than zgees on the complexified matrix:
// the rotations cost O(d²) in total, while zgees would redo the whole O(d³) reduction in complex arithmetic
// (about 4× the flops of dgees). The eigenvalue order is dgees's (not sorted); a conjugate pair is adjacent
// with +Im first.
struct ComplexSchur {
  ComplexMatrix q;  // (d × d) unitary
  ComplexMatrix t;  // (d × d) upper triangular

  ComplexVector eigenvalues() const { return t.diagonal(); }
  ComplexMatrix strictly_upper() const;  // N = T − diag(T)
};

ComplexSchur complex_schur(const Eigen::Ref<const Matrix>& a);

// ---- Real Schur form without Schur vectors -------------------------------------------------------------

// A = Z T Zᵀ with Z not formed (dgees, jobvs = 'N'): for the eigenvalues together with the departure from
// normality, which needs T but not Z. T is quasi-upper triangular in LAPACK's standard form (1×1 blocks and
// 2×2 blocks with equal diagonal entries carrying a conjugate pair).
struct RealSchurForm {
  Matrix t;                   // (d × d)
  ComplexVector eigenvalues;  // (d), dgees's order: a conjugate pair adjacent, +Im first, exact conjugates

  // ‖N‖_F of the complex Schur form Λ + N that T triangularises to (complex_schur's strictly_upper().norm()),
  // without forming it: triangularising a 2×2 block B = [a b; c e] by a unitary 2×2 rotation changes neither
  // the norm of the rest of T nor ‖B‖_F, so the block contributes ‖B‖_F² − 2|λ|² = (a − e)² + (b + c)²
  // (|λ|² = det B), a sum of squares with no cancellation, unlike ‖A‖_F² − Σ|λ|².
  double strictly_upper_norm() const;
};

RealSchurForm real_schur_form(const Eigen::Ref<const Matrix>& a);

}  // namespace tdyn::linalg
