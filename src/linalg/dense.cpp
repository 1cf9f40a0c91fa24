// LAPACKE wrappers: see dense.h. Each routine is called through its *_work variant in column-major layout, with
// an explicit workspace query (lwork = -1) followed by one allocation of the optimal size.
#include "linalg/dense.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>
#include <tuple>

// LAPACK's complex scalars as std::complex, the layout of Eigen's complex scalars (lapack.h's documented override).
#include <complex>
#define lapack_complex_float std::complex<float>
#define lapack_complex_double std::complex<double>
#include <lapacke.h>

#include "core/error.h"

namespace tdyn::linalg {
namespace {

// LAPACK's convention: info < 0 names a bad argument, info > 0 a routine-specific failure (see each caller).
void check_info(const char* routine, lapack_int info, std::string_view meaning_when_positive) {
  if (info < 0) fail("LAPACK {} failed: info = {} (argument {} had an illegal value)", routine, info, -info);
  if (info > 0) fail("LAPACK {} failed: info = {} ({})", routine, info, meaning_when_positive);
}

lapack_int as_lapack_int(Index n, const char* routine) {
  if (n > std::numeric_limits<lapack_int>::max()) fail("LAPACK {}: dimension {} exceeds the LAPACK integer range", routine, n);
  return static_cast<lapack_int>(n);
}

// The optimal lwork that a workspace query wrote into work[0] (LAPACK returns it as a floating-point value).
lapack_int queried_size(double optimal) { return std::max<lapack_int>(1, static_cast<lapack_int>(std::ceil(optimal))); }
lapack_int queried_size(Complex optimal) { return queried_size(optimal.real()); }

void require_square(const Eigen::Ref<const Matrix>& a, const char* routine) {
  if (a.rows() != a.cols()) fail("{}: expected a square matrix, got {} × {}", routine, a.rows(), a.cols());
}

}  // namespace

void require_finite(const Eigen::Ref<const Matrix>& a, std::string_view what) {
  for (Index col = 0; col < a.cols(); ++col)
    for (Index row = 0; row < a.rows(); ++row)
      if (!std::isfinite(a(row, col)))
        fail("{}: non-finite value {} at (row {}, col {}) of a {} × {} matrix", what, a(row, col), row, col, a.rows(),
             a.cols());
}

void require_finite(const Eigen::Ref<const ComplexMatrix>& a, std::string_view what) {
  for (Index col = 0; col < a.cols(); ++col)
    for (Index row = 0; row < a.rows(); ++row) {
      const Complex z = a(row, col);
      if (!std::isfinite(z.real()) || !std::isfinite(z.imag()))
        fail("{}: non-finite value ({}, {}) at (row {}, col {}) of a {} × {} matrix", what, z.real(), z.imag(), row, col,
             a.rows(), a.cols());
    }
}

// ---- dgeev --------------------------------------------------------------------------------------------

Eigendecomposition eigen_general(const Eigen::Ref<const Matrix>& a, bool want_vectors) {
  require_square(a, "dgeev");
  require_finite(a, "dgeev input");
  const lapack_int n = as_lapack_int(a.rows(), "dgeev");
  const char jobvr = want_vectors ? 'V' : 'N';

  Matrix work_matrix = a;  // dgeev overwrites its input
  Vector wr(n), wi(n);
  Matrix vr(want_vectors ? n : 1, want_vectors ? n : 1);
  double vl_unused = 0;
  double optimal = 0;
  lapack_int info = LAPACKE_dgeev_work(LAPACK_COL_MAJOR, 'N', jobvr, n, work_matrix.data(), std::max(1, n), wr.data(),
                                       wi.data(), &vl_unused, 1, vr.data(), vr.rows(), &optimal, -1);
  check_info("dgeev (workspace query)", info, "");
  std::vector<double> work(queried_size(optimal));
  info = LAPACKE_dgeev_work(LAPACK_COL_MAJOR, 'N', jobvr, n, work_matrix.data(), std::max(1, n), wr.data(), wi.data(),
                            &vl_unused, 1, vr.data(), vr.rows(), work.data(), static_cast<lapack_int>(work.size()));
  check_info("dgeev", info, "the QR algorithm failed to compute all the eigenvalues");

  Eigendecomposition result;
  result.eigenvalues.resize(n);
  for (lapack_int i = 0; i < n; ++i) result.eigenvalues[i] = Complex(wr[i], wi[i]);
  if (!want_vectors) return result;

  // LAPACK stores a conjugate pair's vector v = VR(:, j) + i·VR(:, j+1) in two real columns; the partner is v̄.
  result.eigenvectors.resize(n, n);
  for (lapack_int j = 0; j < n; ++j) {
    if (wi[j] == 0) {
      result.eigenvectors.col(j) = vr.col(j).cast<Complex>();
    } else {
      TDYN_CHECK(j + 1 < n && wi[j] > 0 && wi[j + 1] == -wi[j]);
      for (lapack_int row = 0; row < n; ++row) {
        result.eigenvectors(row, j) = Complex(vr(row, j), vr(row, j + 1));
        result.eigenvectors(row, j + 1) = Complex(vr(row, j), -vr(row, j + 1));
      }
      ++j;
    }
  }
  return result;
}

namespace {

// Two moduli, or two real parts, closer than this times the modulus are a tie: round-off (dgeev's or Arnoldi's,
// ~1e-15 relative) lies far inside it, so it cannot decide the order of a conjugate pair or of equal moduli.
constexpr double kTieTolerance = 1e-9;

using OrderIterator = std::vector<Index>::iterator;

// Sorts [first, last) by key, largest first, and returns where each run of tied keys begins (neighbours within
// kTieTolerance · |λ|), then last. Runs chain: round-off-sized steps never separate what they join.
std::vector<OrderIterator> sort_into_tied_runs(const ComplexVector& eigenvalues, OrderIterator first, OrderIterator last,
                                               double (*key)(const Complex&)) {
  std::stable_sort(first, last, [&](Index i, Index j) { return key(eigenvalues[i]) > key(eigenvalues[j]); });
  std::vector<OrderIterator> starts = {first};
  for (OrderIterator it = first; it != last && std::next(it) != last; ++it) {
    const Complex a = eigenvalues[*it], b = eigenvalues[*std::next(it)];
    if (key(a) - key(b) > kTieTolerance * std::abs(a)) starts.push_back(std::next(it));
  }
  starts.push_back(last);
  return starts;
}

double modulus_of(const Complex& z) { return std::abs(z); }
double real_of(const Complex& z) { return z.real(); }
double imag_of(const Complex& z) { return z.imag(); }

}  // namespace

std::vector<Index> order_by_modulus(const ComplexVector& eigenvalues) {
  std::vector<Index> order(eigenvalues.size());
  std::iota(order.begin(), order.end(), Index{0});
  // Modulus, then real part within tied moduli, then imaginary part within tied real parts: a conjugate pair
  // whose halves differ in the last bits (as an iterative solver returns it) still comes out +Im first.
  const std::vector<OrderIterator> by_modulus = sort_into_tied_runs(eigenvalues, order.begin(), order.end(), modulus_of);
  for (size_t m = 0; m + 1 < by_modulus.size(); ++m) {
    const std::vector<OrderIterator> by_real = sort_into_tied_runs(eigenvalues, by_modulus[m], by_modulus[m + 1], real_of);
    for (size_t r = 0; r + 1 < by_real.size(); ++r) sort_into_tied_runs(eigenvalues, by_real[r], by_real[r + 1], imag_of);
  }
  return order;
}

Eigendecomposition sorted_by_modulus(const Eigendecomposition& decomposition) {
  const std::vector<Index> order = order_by_modulus(decomposition.eigenvalues);
  Eigendecomposition sorted;
  sorted.eigenvalues = decomposition.eigenvalues(order);
  if (decomposition.eigenvectors.size() > 0) sorted.eigenvectors = decomposition.eigenvectors(Eigen::all, order);
  return sorted;
}

// ---- dgesdd / zgesdd ----------------------------------------------------------------------------------

SingularValueDecomposition svd(const Eigen::Ref<const Matrix>& a, bool want_vectors) {
  require_finite(a, "dgesdd input");
  const lapack_int m = as_lapack_int(a.rows(), "dgesdd"), n = as_lapack_int(a.cols(), "dgesdd");
  const lapack_int min_mn = std::min(m, n);
  const char jobz = want_vectors ? 'S' : 'N';

  Matrix work_matrix = a;  // dgesdd overwrites its input
  SingularValueDecomposition result;
  result.singular_values.resize(min_mn);
  Matrix u(want_vectors ? m : 1, want_vectors ? min_mn : 1);
  Matrix vt(want_vectors ? min_mn : 1, want_vectors ? n : 1);
  std::vector<lapack_int> iwork(8 * static_cast<size_t>(std::max<lapack_int>(1, min_mn)));
  double optimal = 0;
  lapack_int info = LAPACKE_dgesdd_work(LAPACK_COL_MAJOR, jobz, m, n, work_matrix.data(), std::max(1, m),
                                        result.singular_values.data(), u.data(), std::max<lapack_int>(1, u.rows()),
                                        vt.data(), std::max<lapack_int>(1, vt.rows()), &optimal, -1, iwork.data());
  check_info("dgesdd (workspace query)", info, "");
  std::vector<double> work(queried_size(optimal));
  info = LAPACKE_dgesdd_work(LAPACK_COL_MAJOR, jobz, m, n, work_matrix.data(), std::max(1, m),
                             result.singular_values.data(), u.data(), std::max<lapack_int>(1, u.rows()), vt.data(),
                             std::max<lapack_int>(1, vt.rows()), work.data(), static_cast<lapack_int>(work.size()),
                             iwork.data());
  check_info("dgesdd", info, "the divide-and-conquer bidiagonal SVD (dbdsdc) did not converge");
  if (want_vectors) {
    result.u = std::move(u);
    result.v = vt.transpose();
  }
  return result;
}

Vector singular_values(const Eigen::Ref<const Matrix>& a) { return svd(a, false).singular_values; }

Vector singular_values(const Eigen::Ref<const ComplexMatrix>& a) {
  require_finite(a, "zgesdd input");
  const lapack_int m = as_lapack_int(a.rows(), "zgesdd"), n = as_lapack_int(a.cols(), "zgesdd");
  const lapack_int min_mn = std::min(m, n);
  ComplexMatrix work_matrix = a;
  Vector sigma(min_mn);
  Complex u_unused, vt_unused, optimal;
  // LRWORK for JOBZ = 'N' is 7·min(m, n) since LAPACK 3.7 (5·min(m, n) before); take the larger.
  std::vector<double> rwork(7 * static_cast<size_t>(std::max<lapack_int>(1, min_mn)));
  std::vector<lapack_int> iwork(8 * static_cast<size_t>(std::max<lapack_int>(1, min_mn)));
  lapack_int info = LAPACKE_zgesdd_work(LAPACK_COL_MAJOR, 'N', m, n, work_matrix.data(), std::max(1, m), sigma.data(),
                                        &u_unused, 1, &vt_unused, 1, &optimal, -1, rwork.data(), iwork.data());
  check_info("zgesdd (workspace query)", info, "");
  std::vector<Complex> work(queried_size(optimal));
  info = LAPACKE_zgesdd_work(LAPACK_COL_MAJOR, 'N', m, n, work_matrix.data(), std::max(1, m), sigma.data(), &u_unused,
                             1, &vt_unused, 1, work.data(), static_cast<lapack_int>(work.size()), rwork.data(),
                             iwork.data());
  check_info("zgesdd", info, "the divide-and-conquer bidiagonal SVD (dbdsdc) did not converge");
  return sigma;
}

SingularValueDecomposition svd_leading(const Eigen::Ref<const Matrix>& a, Index k) {
  require_square(a, "svd_leading");
  require_finite(a, "svd_leading input");
  const lapack_int n = as_lapack_int(a.rows(), "dgebrd");
  if (k < 1 || k > n) fail("svd_leading: k = {} must satisfy 1 ≤ k ≤ d = {}", k, n);
  const lapack_int wanted = static_cast<lapack_int>(k);

  // A = Q B Pᵀ with B upper bidiagonal (diagonal, superdiagonal); Q and P stay as reflectors in reduced/tau.
  Matrix reduced = a;
  Vector diagonal(n), superdiagonal(std::max(1, n - 1)), tau_q(n), tau_p(n);
  double optimal = 0;
  lapack_int info = LAPACKE_dgebrd_work(LAPACK_COL_MAJOR, n, n, reduced.data(), std::max(1, n), diagonal.data(),
                                        superdiagonal.data(), tau_q.data(), tau_p.data(), &optimal, -1);
  check_info("dgebrd (workspace query)", info, "");
  std::vector<double> work(queried_size(optimal));
  info = LAPACKE_dgebrd_work(LAPACK_COL_MAJOR, n, n, reduced.data(), std::max(1, n), diagonal.data(),
                             superdiagonal.data(), tau_q.data(), tau_p.data(), work.data(),
                             static_cast<lapack_int>(work.size()));
  check_info("dgebrd", info, "");

  // Every singular value: dbdsqr without vectors runs dqds, O(d²), to high relative accuracy, descending.
  SingularValueDecomposition result;
  result.singular_values = diagonal;
  Vector superdiagonal_copy = superdiagonal;
  double unused = 0;
  std::vector<double> bdsqr_work(4 * static_cast<size_t>(n));
  info = LAPACKE_dbdsqr_work(LAPACK_COL_MAJOR, 'U', n, 0, 0, 0, result.singular_values.data(), superdiagonal_copy.data(),
                             &unused, 1, &unused, 1, &unused, 1, bdsqr_work.data());
  check_info("dbdsqr", info, "the bidiagonal QR iteration did not converge");

  // The k leading vector pairs of B: eigenvectors of its Golub–Kahan tridiagonal, U_B in rows 0..d−1 of Z and
  // V_B in rows d..2d−1. Z must be 2d × (d + 1) whatever k, as dgesvdx allocates it: when B splits into blocks
  // dbdsvdx selects by value range within each block and clears and fills up to d + 1 columns (an 8 × 8
  // identity overran a 2d × (k + 1) Z). At d = 4096 that is 256 MiB, the size of dgesdd's U and Vᵀ together.
  Matrix z(2 * static_cast<Index>(n), static_cast<Index>(n) + 1);
  Vector leading(2 * static_cast<Index>(n));  // dstebz, inside, may write up to 2d values (the 6 × 6 zero did)
  lapack_int found = 0;
  std::vector<double> bdsvdx_work(14 * static_cast<size_t>(n));
  std::vector<lapack_int> bdsvdx_iwork(12 * static_cast<size_t>(n));
  info = LAPACKE_dbdsvdx_work(LAPACK_COL_MAJOR, 'U', 'V', 'I', n, diagonal.data(), superdiagonal.data(), 0.0, 0.0, 1,
                              wanted, &found, leading.data(), z.data(), static_cast<lapack_int>(z.rows()),
                              bdsvdx_work.data(), bdsvdx_iwork.data());
  check_info("dbdsvdx", info, "some singular vectors failed to converge in inverse iteration");
  if (found != wanted) fail("LAPACK dbdsvdx returned {} singular triplets, {} requested", found, wanted);

  // U = Q U_B and V = P V_B.
  result.u = z.topLeftCorner(n, k);
  result.v = z.block(n, 0, n, k);
  for (auto [vect, tau, c] : {std::tuple{'Q', &tau_q, &result.u}, std::tuple{'P', &tau_p, &result.v}}) {
    info = LAPACKE_dormbr_work(LAPACK_COL_MAJOR, vect, 'L', 'N', n, wanted, n, reduced.data(), std::max(1, n),
                               tau->data(), c->data(), std::max(1, n), &optimal, -1);
    check_info("dormbr (workspace query)", info, "");
    work.resize(std::max(work.size(), static_cast<size_t>(queried_size(optimal))));
    info = LAPACKE_dormbr_work(LAPACK_COL_MAJOR, vect, 'L', 'N', n, wanted, n, reduced.data(), std::max(1, n),
                               tau->data(), c->data(), std::max(1, n), work.data(), static_cast<lapack_int>(work.size()));
    check_info("dormbr", info, "");
  }
  return result;
}

// ---- Complex Schur form via dgees ---------------------------------------------------------------------

ComplexMatrix ComplexSchur::strictly_upper() const {
  ComplexMatrix n = t.triangularView<Eigen::StrictlyUpper>();
  return n;
}

ComplexSchur complex_schur(const Eigen::Ref<const Matrix>& a) {
  require_square(a, "dgees");
  require_finite(a, "dgees input");
  const lapack_int n = as_lapack_int(a.rows(), "dgees");

  Matrix s = a;  // overwritten by the real Schur form S
  Matrix z(std::max(1, n), std::max(1, n));
  Vector wr(n), wi(n);
  lapack_int sdim = 0;
  double optimal = 0;
  lapack_int info = LAPACKE_dgees_work(LAPACK_COL_MAJOR, 'V', 'N', nullptr, n, s.data(), std::max(1, n), &sdim,
                                       wr.data(), wi.data(), z.data(), z.rows(), &optimal, -1, nullptr);
  check_info("dgees (workspace query)", info, "");
  std::vector<double> work(queried_size(optimal));
  info = LAPACKE_dgees_work(LAPACK_COL_MAJOR, 'V', 'N', nullptr, n, s.data(), std::max(1, n), &sdim, wr.data(),
                            wi.data(), z.data(), z.rows(), work.data(), static_cast<lapack_int>(work.size()), nullptr);
  check_info("dgees", info, "the QR algorithm failed to compute all the eigenvalues");

  ComplexSchur schur;
  schur.t = s.cast<Complex>();
  schur.q = z.topLeftCorner(n, n).cast<Complex>();

  // Each 2×2 block B = S(k:k+1, k:k+1) (LAPACK marks it by wi[k] > 0) carries the pair λ, λ̄. With x an
  // eigenvector of B for λ and G = [x̂, x̂⊥] unitary, Gᴴ B G is upper triangular with λ first; applying G to
  // rows/columns k, k+1 of T and to columns k, k+1 of Q keeps J = Q T Q* and leaves the rest of T triangular.
  for (lapack_int k = 0; k + 1 < n; ++k) {
    if (wi[k] <= 0) continue;
    const Complex lambda(wr[k], wi[k]);
    const Complex b11 = schur.t(k, k), b12 = schur.t(k, k + 1), b21 = schur.t(k + 1, k), b22 = schur.t(k + 1, k + 1);
    // Either row of (B − λI) x = 0 gives x; take the better-conditioned one.
    Eigen::Vector2cd x_from_row1(b12, lambda - b11), x_from_row2(lambda - b22, b21);
    Eigen::Vector2cd x = x_from_row1.norm() >= x_from_row2.norm() ? x_from_row1 : x_from_row2;
    TDYN_CHECK(x.norm() > 0);
    x.normalize();
    Eigen::Matrix2cd rotation;
    rotation << x[0], -std::conj(x[1]), x[1], std::conj(x[0]);

    const Index trailing = n - k;
    schur.t.block(k, k, 2, trailing) = rotation.adjoint() * schur.t.block(k, k, 2, trailing);
    schur.t.block(0, k, k + 2, 2) = schur.t.block(0, k, k + 2, 2) * rotation;
    schur.q.middleCols(k, 2) = schur.q.middleCols(k, 2) * rotation;
    schur.t(k + 1, k) = 0;  // round-off of the exact zero
    ++k;
  }
  return schur;
}

// ---- Real Schur form via dgees without vectors -----------------------------------------------------------

RealSchurForm real_schur_form(const Eigen::Ref<const Matrix>& a) {
  require_square(a, "dgees");
  require_finite(a, "dgees input");
  const lapack_int n = as_lapack_int(a.rows(), "dgees");

  RealSchurForm schur;
  schur.t = a;  // overwritten by T
  Vector wr(n), wi(n);
  lapack_int sdim = 0;
  double vs_unused = 0, optimal = 0;
  lapack_int info = LAPACKE_dgees_work(LAPACK_COL_MAJOR, 'N', 'N', nullptr, n, schur.t.data(), std::max(1, n), &sdim,
                                       wr.data(), wi.data(), &vs_unused, 1, &optimal, -1, nullptr);
  check_info("dgees (workspace query)", info, "");
  std::vector<double> work(queried_size(optimal));
  info = LAPACKE_dgees_work(LAPACK_COL_MAJOR, 'N', 'N', nullptr, n, schur.t.data(), std::max(1, n), &sdim, wr.data(),
                            wi.data(), &vs_unused, 1, work.data(), static_cast<lapack_int>(work.size()), nullptr);
  check_info("dgees", info, "the QR algorithm failed to compute all the eigenvalues");
  schur.eigenvalues.resize(n);
  for (lapack_int i = 0; i < n; ++i) schur.eigenvalues[i] = Complex(wr[i], wi[i]);
  return schur;
}

double RealSchurForm::strictly_upper_norm() const {
  const Index n = t.rows();
  double squared = 0;
  for (Index col = 1; col < n; ++col) {
    // Column col closes a 2×2 block when the entry below the diagonal to its left is nonzero. That block's
    // (col − 1, col) entry is not part of N: the block contributes (a − e)² + (b + c)² (see dense.h). Adding b²
    // and subtracting it again would cost the accuracy this form exists for when J is nearly normal.
    const bool closes_block = t(col, col - 1) != 0;
    squared += t.col(col).head(closes_block ? col - 1 : col).squaredNorm();
    if (closes_block) {
      const double a = t(col - 1, col - 1), b = t(col - 1, col), c = t(col, col - 1), e = t(col, col);
      squared += (a - e) * (a - e) + (b + c) * (b + c);
    }
  }
  return std::sqrt(squared);
}

}  // namespace tdyn::linalg
