// Tests of the LAPACK / Spectra wrappers (src/linalg): identities (‖AV − VΛ‖, ‖UᵀU − I‖, Q T Q* = J) on random
// matrices, and agreement with numpy on the saved matrices of tests/data/linalg (make_linalg_refs.py):
// eigenvalues as multisets, eigenvectors up to phase.
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <tuple>

#include <gtest/gtest.h>
#include <Eigen/Dense>

#include "random_matrix.h"
#include "core/error.h"
#include "core/npy.h"
#include "linalg/dense.h"
#include "linalg/gemm.h"
#include "linalg/top_eigs.h"
#include "test_util.h"

namespace tdyn::linalg {
namespace {

using RowMajorMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

using test::random_gaussian;

std::vector<double> load_vector(const fs::path& path) {
  const NpyArray array = read_npy(path);
  EXPECT_EQ(array.shape.size(), 1u) << path;
  return array.as_double();
}

fs::path reference_dir() { return test::source_dir() / "tests" / "data" / "linalg"; }

// A C-order float64 .npy of shape (rows, cols).
Matrix load_matrix(const fs::path& path) {
  const NpyArray array = read_npy(path);
  EXPECT_EQ(array.shape.size(), 2u) << path;
  const std::vector<double> values = array.as_double();
  return Eigen::Map<const RowMajorMatrix>(values.data(), array.shape[0], array.shape[1]);
}

// Greedy multiset match: for each expected value, the nearest not-yet-used computed value. Returns the
// permutation (computed index for each expected index) and the largest distance.
std::pair<std::vector<Index>, double> match_multisets(const ComplexVector& computed, const ComplexVector& expected) {
  std::vector<bool> used(computed.size(), false);
  std::vector<Index> match(expected.size(), -1);
  double worst = 0;
  for (Index i = 0; i < expected.size(); ++i) {
    Index best = -1;
    double best_distance = INFINITY;
    for (Index j = 0; j < computed.size(); ++j)
      if (!used[j] && std::abs(computed[j] - expected[i]) < best_distance) {
        best = j;
        best_distance = std::abs(computed[j] - expected[i]);
      }
    used[best] = true;
    match[i] = best;
    worst = std::max(worst, best_distance);
  }
  return {match, worst};
}

void expect_conjugate_pairs_adjacent(const ComplexVector& values) {
  for (Index i = 0; i < values.size(); ++i) {
    if (values[i].imag() == 0) continue;
    ASSERT_GT(values[i].imag(), 0) << "pair at " << i << " should start with +Im";
    ASSERT_LT(i + 1, values.size());
    EXPECT_EQ(values[i + 1], std::conj(values[i])) << "conjugate partner of entry " << i;
    ++i;
  }
}

TEST(LinalgReference, EigenvaluesSingularValuesAndEigenvectorsMatchNumpy) {
  const char* cases[] = {"gaussian8", "gaussian32", "symmetric16", "triangular12", "orthogonal10", "rectangular20x12"};
  for (const char* name : cases) {
    SCOPED_TRACE(name);
    const Matrix a = load_matrix(reference_dir() / (std::string(name) + ".matrix.npy"));
    const double scale = a.norm();

    const std::vector<double> sigma_expected = load_vector(reference_dir() / (std::string(name) + ".singular_values.npy"));
    const Vector sigma = singular_values(a);
    test::expect_close(std::vector<double>(sigma.begin(), sigma.end()), sigma_expected, 1e-12, 1e-13 * scale,
                       "singular values");

    if (a.rows() != a.cols()) continue;
    const Index d = a.rows();
    const Matrix eig_columns = load_matrix(reference_dir() / (std::string(name) + ".eigenvalues.npy"));
    const ComplexVector expected = eig_columns.col(0) + Complex(0, 1) * eig_columns.col(1);
    const Eigendecomposition e = eigen_general(a, true);
    const auto [match, worst] = match_multisets(e.eigenvalues, expected);
    EXPECT_LE(worst, 1e-10 * scale) << "eigenvalues differ from numpy's as multisets";
    expect_conjugate_pairs_adjacent(e.eigenvalues);

    // numpy's vectors, (d, d, 2) in C order: element (row, col, part) at (row·d + col)·2 + part.
    const std::vector<double> raw = read_npy(reference_dir() / (std::string(name) + ".eigenvectors.npy")).as_double();
    for (Index col = 0; col < d; ++col) {
      ComplexVector reference(d);
      for (Index row = 0; row < d; ++row)
        reference[row] = Complex(raw[(row * d + col) * 2], raw[(row * d + col) * 2 + 1]);
      // Both unit-norm: equal up to phase iff |⟨v, w⟩| = 1.
      const double overlap = std::abs(e.eigenvectors.col(match[col]).dot(reference));
      EXPECT_NEAR(overlap, 1.0, 1e-9) << "eigenvector " << col;
    }
  }
}

TEST(LinalgEigen, RightEigenvectorsSatisfyAVEqualsVLambda) {
  const Matrix a = random_gaussian(60, 60, 1);
  const Eigendecomposition e = eigen_general(a, true);
  ASSERT_EQ(e.eigenvalues.size(), 60);
  ASSERT_EQ(e.eigenvectors.rows(), 60);
  const ComplexMatrix residual = a.cast<Complex>() * e.eigenvectors - e.eigenvectors * e.eigenvalues.asDiagonal();
  EXPECT_LE(residual.norm(), 1e-12 * a.norm() * 60);
  for (Index j = 0; j < 60; ++j) EXPECT_NEAR(e.eigenvectors.col(j).norm(), 1.0, 1e-13);

  expect_conjugate_pairs_adjacent(e.eigenvalues);
  Index pairs = 0;
  for (Index j = 0; j + 1 < 60; ++j)
    if (e.eigenvalues[j].imag() > 0) {
      ++pairs;
      EXPECT_EQ((e.eigenvectors.col(j + 1) - e.eigenvectors.col(j).conjugate()).norm(), 0.0);
      ++j;
    }
  EXPECT_GT(pairs, 0) << "a random Gaussian matrix should have complex pairs";

  // Eigenvalues only give the same values.
  EXPECT_EQ((eigen_general(a, false).eigenvalues - e.eigenvalues).cwiseAbs().maxCoeff(), 0.0);
}

TEST(LinalgEigen, SortByModulusKeepsPairsAdjacent) {
  ComplexVector values(6);
  values << Complex(0.5, 0), Complex(1, -2), Complex(-3, 0), Complex(1, 2), Complex(2, 1), Complex(2, -1);
  const std::vector<Index> order = order_by_modulus(values);
  const ComplexVector sorted = values(order);
  // |−3| > |1 ± 2i| = sqrt 5 = |2 ± i| > 0.5; equal moduli ordered by real part, then +Im first.
  const ComplexVector expected = (ComplexVector(6) << Complex(-3, 0), Complex(2, 1), Complex(2, -1), Complex(1, 2),
                                  Complex(1, -2), Complex(0.5, 0)).finished();
  EXPECT_EQ((sorted - expected).norm(), 0.0);

  // A pair conjugate up to round-off (as Arnoldi returns it) comes out +Im first whichever modulus is larger.
  for (const double eps : {1e-15, -1e-15, 1e-12}) {
    ComplexVector pair(3);
    pair << Complex(1, -2) * (1 + eps), Complex(0.1, 0), Complex(1, 2);
    const ComplexVector got = pair(order_by_modulus(pair));
    EXPECT_GT(got[0].imag(), 0) << "eps " << eps;
    EXPECT_LT(got[1].imag(), 0) << "eps " << eps;
  }
  // Two eigenvalues that are not a pair keep the modulus order.
  ComplexVector apart(2);
  apart << Complex(1, -2.1), Complex(1, 2);
  EXPECT_EQ(apart(order_by_modulus(apart))[0], Complex(1, -2.1));

  const Matrix a = random_gaussian(40, 40, 2);
  const Eigendecomposition e = sorted_by_modulus(eigen_general(a, true));
  for (Index i = 1; i < 40; ++i) EXPECT_GE(std::abs(e.eigenvalues[i - 1]), std::abs(e.eigenvalues[i]) * (1 - 1e-9));
  expect_conjugate_pairs_adjacent(e.eigenvalues);
  const ComplexMatrix residual = a.cast<Complex>() * e.eigenvectors - e.eigenvectors * e.eigenvalues.asDiagonal();
  EXPECT_LE(residual.norm(), 1e-11 * a.norm());
}

TEST(LinalgSvd, FactorsAreOrthonormalAndReconstruct) {
  for (auto [rows, cols] : {std::pair<Index, Index>{50, 50}, {40, 25}, {25, 40}}) {
    SCOPED_TRACE(fmt::format("{} x {}", rows, cols));
    const Matrix a = random_gaussian(rows, cols, 3);
    const SingularValueDecomposition s = svd(a, true);
    const Index k = std::min(rows, cols);
    ASSERT_EQ(s.u.rows(), rows);
    ASSERT_EQ(s.u.cols(), k);
    ASSERT_EQ(s.v.rows(), cols);
    ASSERT_EQ(s.v.cols(), k);
    EXPECT_LE((s.u.transpose() * s.u - Matrix::Identity(k, k)).norm(), 1e-13 * k);
    EXPECT_LE((s.v.transpose() * s.v - Matrix::Identity(k, k)).norm(), 1e-13 * k);
    EXPECT_LE((s.u * s.singular_values.asDiagonal() * s.v.transpose() - a).norm(), 1e-13 * a.norm() * k);
    for (Index i = 1; i < k; ++i) EXPECT_GE(s.singular_values[i - 1], s.singular_values[i]);
    EXPECT_LE((singular_values(a) - s.singular_values).norm(), 1e-13 * a.norm());
  }
}

TEST(LinalgSvd, LeadingVectorsMatchTheFullSvd) {
  const Index d = 120;
  const Matrix a = random_gaussian(d, d, 21) / std::sqrt(double(d));
  const SingularValueDecomposition full = svd(a, true);
  for (Index k : {Index{1}, Index{10}, Index{40}, d}) {
    SCOPED_TRACE(fmt::format("k = {}", k));
    const SingularValueDecomposition leading = svd_leading(a, k);
    ASSERT_EQ(leading.singular_values.size(), d);
    ASSERT_EQ(leading.u.rows(), d);
    ASSERT_EQ(leading.u.cols(), k);
    ASSERT_EQ(leading.v.cols(), k);
    EXPECT_LE((leading.singular_values - full.singular_values).norm(), 1e-13 * full.singular_values[0]);
    EXPECT_LE((leading.u.transpose() * leading.u - Matrix::Identity(k, k)).norm(), 1e-12 * k);
    EXPECT_LE((leading.v.transpose() * leading.v - Matrix::Identity(k, k)).norm(), 1e-12 * k);
    // A v_i = σ_i u_i, and each pair is the full SVD's up to a common sign (Gaussian σ are simple).
    EXPECT_LE((a * leading.v - leading.u * full.singular_values.head(k).asDiagonal()).norm(), 1e-12 * k);
    for (Index i = 0; i < k; ++i) {
      const double sign = leading.u.col(i).dot(full.u.col(i)) >= 0 ? 1.0 : -1.0;
      EXPECT_LE((sign * leading.u.col(i) - full.u.col(i)).norm(), 1e-9) << "u " << i;
      EXPECT_LE((sign * leading.v.col(i) - full.v.col(i)).norm(), 1e-9) << "v " << i;
    }
  }
  // Repeated and zero singular values: the identity (every σ = 1) and the zero matrix.
  const SingularValueDecomposition identity = svd_leading(Matrix::Identity(8, 8), 3);
  EXPECT_LE((identity.singular_values - Vector::Ones(8)).norm(), 1e-15);
  EXPECT_LE((identity.u - identity.v).norm(), 1e-13);
  EXPECT_LE((identity.u.transpose() * identity.u - Matrix::Identity(3, 3)).norm(), 1e-13);
  const SingularValueDecomposition zero = svd_leading(Matrix::Zero(6, 6), 2);
  EXPECT_EQ(zero.singular_values.norm(), 0.0);
  EXPECT_THROW(svd_leading(a, 0), Error);
  EXPECT_THROW(svd_leading(a, d + 1), Error);
  EXPECT_THROW(svd_leading(Matrix::Zero(4, 3), 1), Error);
}

TEST(LinalgSvd, ComplexSingularValuesMatchEigen) {
  const ComplexMatrix a = random_gaussian(30, 30, 4).cast<Complex>() + Complex(0, 1) * random_gaussian(30, 30, 5);
  const Vector sigma = singular_values(a);
  const Vector reference = Eigen::BDCSVD<ComplexMatrix>(a).singularValues();  // small: Eigen is fine as a check
  EXPECT_LE((sigma - reference).norm(), 1e-12 * reference[0]);
}

void expect_valid_schur(const Matrix& j, const ComplexSchur& s) {
  const Index d = j.rows();
  ASSERT_EQ(s.q.rows(), d);
  ASSERT_EQ(s.t.rows(), d);
  EXPECT_LE((s.q.adjoint() * s.q - ComplexMatrix::Identity(d, d)).norm(), 1e-13 * d) << "Q not unitary";
  EXPECT_LE((s.q * s.t * s.q.adjoint() - j.cast<Complex>()).norm(), 1e-13 * std::max(1.0, j.norm()) * d)
      << "Q T Q* != J";
  const ComplexMatrix strictly_lower = s.t.triangularView<Eigen::StrictlyLower>();
  EXPECT_EQ(strictly_lower.norm(), 0.0) << "T not upper triangular";
  EXPECT_LE((s.strictly_upper() + ComplexMatrix(s.t.diagonal().asDiagonal()) - s.t).norm(), 0.0);
  // diag(T) = the eigenvalues of J.
  const auto [match, worst] = match_multisets(s.eigenvalues(), eigen_general(j).eigenvalues);
  EXPECT_LE(worst, 1e-10 * std::max(1.0, j.norm()));
}

TEST(LinalgSchur, UnitaryTriangularAndReconstructs) {
  {
    SCOPED_TRACE("random Gaussian 40");
    const Matrix j = random_gaussian(40, 40, 6);
    expect_valid_schur(j, complex_schur(j));
  }
  {
    SCOPED_TRACE("real spectrum");
    Matrix t = random_gaussian(12, 12, 7).triangularView<Eigen::Upper>();
    const Matrix basis = random_gaussian(12, 12, 8);
    expect_valid_schur(basis * t * basis.inverse(), complex_schur(basis * t * basis.inverse()));
  }
  {
    SCOPED_TRACE("2x2 rotation");
    const double theta = 0.7;
    Matrix r(2, 2);
    r << std::cos(theta), -std::sin(theta), std::sin(theta), std::cos(theta);
    const ComplexSchur s = complex_schur(r);
    expect_valid_schur(r, s);
    EXPECT_NEAR(std::abs(s.t(0, 1)), 0.0, 1e-14) << "a rotation is normal: its Schur form is diagonal";
    EXPECT_NEAR(std::abs(s.t(0, 0) - std::polar(1.0, theta)), 0.0, 1e-14) << "λ with Im > 0 first";
  }
  {
    SCOPED_TRACE("1x1");
    const Matrix j = Matrix::Constant(1, 1, -2.5);
    const ComplexSchur s = complex_schur(j);
    EXPECT_EQ(s.t(0, 0), Complex(-2.5, 0));
  }
}

TEST(LinalgSchur, RealSchurFormGivesTheComplexSchurDeparture) {
  const Matrix rotation_block = (Matrix(2, 2) << 0.6, -0.8, 0.8, 0.6).finished();
  Matrix normal = Matrix::Zero(6, 6);  // normal, with complex pairs: N = 0 although T has 2×2 blocks
  normal.topLeftCorner(2, 2) = 2 * rotation_block;
  normal.block(2, 2, 2, 2) = rotation_block.transpose();
  normal(4, 4) = -1, normal(5, 5) = 0.5;
  Eigen::HouseholderQR<Matrix> qr(random_gaussian(6, 6, 22));
  const Matrix q = qr.householderQ() * Matrix::Identity(6, 6);
  for (const auto& [name, j] : {std::pair<const char*, Matrix>{"random Gaussian 50", random_gaussian(50, 50, 23)},
                                {"real spectrum", random_gaussian(12, 12, 24).triangularView<Eigen::Upper>()},
                                {"normal", q * normal * q.transpose()},
                                {"1x1", Matrix::Constant(1, 1, 3.0)}}) {
    SCOPED_TRACE(name);
    const RealSchurForm real = real_schur_form(j);
    const ComplexSchur complex = complex_schur(j);
    EXPECT_NEAR(real.strictly_upper_norm(), complex.strictly_upper().norm(), 1e-12 * std::max(1.0, j.norm()));
    const auto [match, worst] = match_multisets(real.eigenvalues, eigen_general(j).eigenvalues);
    EXPECT_LE(worst, 1e-10 * std::max(1.0, j.norm()));
  }
  EXPECT_LE(real_schur_form(q * normal * q.transpose()).strictly_upper_norm(), 1e-14);
}

// Q B Qᵀ, B block diagonal: a 2 × 2 block [[a, −b], [b, a]] per eigenvalue a + ib of `pairs` (b > 0; it gives
// a ± ib), then the reals on the diagonal; Q a seeded random orthogonal matrix. Each entry then gets relative noise of
// `noise` (0: none), as from round-off in whatever computed the matrix.
Matrix with_spectrum(const std::vector<Complex>& pairs, const std::vector<double>& reals, uint64_t seed, double noise) {
  const Index d = static_cast<Index>(2 * pairs.size() + reals.size());
  Matrix b = Matrix::Zero(d, d);
  for (size_t p = 0; p < pairs.size(); ++p) {
    const Index i = static_cast<Index>(2 * p);
    b(i, i) = b(i + 1, i + 1) = pairs[p].real();
    b(i, i + 1) = -pairs[p].imag();
    b(i + 1, i) = pairs[p].imag();
  }
  for (size_t r = 0; r < reals.size(); ++r) b(2 * pairs.size() + r, 2 * pairs.size() + r) = reals[r];
  const Matrix q = Eigen::HouseholderQR<Matrix>(random_gaussian(d, d, seed)).householderQ();
  Matrix a = q * b * q.transpose();
  std::mt19937_64 generator(seed + 1000);
  std::uniform_real_distribution<double> uniform(-1, 1);
  for (Index j = 0; j < d; ++j)
    for (Index i = 0; i < d; ++i) a(i, j) *= 1 + noise * uniform(generator);
  return a;
}

void expect_order(const ComplexVector& got, const std::vector<Complex>& expected, const std::string& what) {
  ASSERT_GE(got.size(), static_cast<Index>(expected.size())) << what;
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_LE(std::abs(got[i] - expected[i]), 1e-9 * std::abs(expected[i])) << what << ": entry " << i << " is " << got[i];
}

// Equal moduli (four conjugate pairs and two reals on the circle |λ| = 5) come out in one canonical order —
// modulus, then real part, then imaginary part, descending — however round-off perturbs the matrix: dgeev's
// pairs are exact conjugates but their moduli differ in the last bits between pairs, and Arnoldi's halves of a
// pair differ too.
TEST(LinalgEigen, CanonicalOrderOfEqualModuliSurvivesRoundOff) {
  const std::vector<Complex> pairs = {{-3, 4}, {4, 3}, {0, 5}, {3, 4}};
  std::vector<double> reals = {-5, 0.3, 5};
  for (int i = 1; i <= 29; ++i) reals.push_back((i % 2 ? 0.009 : -0.009) * i);  // d = 40, the rest of |λ| < 0.3
  const std::vector<Complex> expected = {{5, 0},  {4, 3},  {4, -3},  {3, 4},  {3, -4}, {0, 5},
                                         {0, -5}, {-3, 4}, {-3, -4}, {-5, 0}, {0.3, 0}};
  for (const uint64_t seed : {1, 2, 3, 4, 5, 6, 7, 8}) {
    for (const double noise : {0.0, 1e-15, 1e-14}) {
      const Matrix a = with_spectrum(pairs, reals, seed, noise);
      const std::string what = fmt::format("seed {}, noise {:g}", seed, noise);
      expect_order(sorted_by_modulus(eigen_general(a)).eigenvalues, expected, "dgeev, " + what);
      const TopEigenpairs top = top_eigenpairs(a, 10);
      expect_order(top.eigenvalues, {expected.begin(), expected.begin() + 10}, "Arnoldi, " + what);
      for (Index j = 0; j < 10; ++j)
        EXPECT_LE((a.cast<Complex>() * top.eigenvectors.col(j) - top.eigenvalues[j] * top.eigenvectors.col(j)).norm(), 1e-8)
            << "the eigenvectors follow their eigenvalues: " << what << ", entry " << j;
    }
  }
  // The values alone, each half of a pair with its own round-off, in every input order: one output.
  ComplexVector values(6);
  values << Complex(3, -4) * (1 + 2e-16), Complex(0, 5) * (1 - 1e-16), Complex(4, 3) * (1 - 3e-16), Complex(3, 4),
      Complex(0, -5) * (1 + 1e-16) + Complex(1e-16, 0), Complex(4, -3) * (1 + 1e-16);
  std::vector<Index> permutation = {0, 1, 2, 3, 4, 5};
  const ComplexVector first = values(order_by_modulus(values));
  do {
    const ComplexVector shuffled = values(permutation);
    EXPECT_EQ(shuffled(order_by_modulus(shuffled)), first);
  } while (std::next_permutation(permutation.begin(), permutation.end()));
  expect_order(first, {{4, 3}, {4, -3}, {3, 4}, {3, -4}, {0, 5}, {0, -5}}, "values");
}

TEST(LinalgTopEigs, SpectraMatchesFullSpectrumOnRandom300) {
  const Index d = 300, k = 6;
  const Matrix a = random_gaussian(d, d, 9) / std::sqrt(double(d));
  const ComplexVector full = sorted_by_modulus(eigen_general(a)).eigenvalues;
  TopEigenOptions options;
  options.subspace_dimension = 40;
  const TopEigenpairs top = top_eigenpairs(a, k, options);
  ASSERT_EQ(top.eigenvalues.size(), k);
  for (Index i = 0; i < k; ++i) {
    EXPECT_NEAR(std::abs(top.eigenvalues[i]), std::abs(full[i]), 1e-9) << "modulus " << i;
    // Each Arnoldi value is one of dgeev's top-k (or the partner of the k-th, if a pair straddles k).
    double nearest = INFINITY;
    for (Index j = 0; j <= std::min(k, d - 1); ++j) nearest = std::min(nearest, std::abs(top.eigenvalues[i] - full[j]));
    EXPECT_LE(nearest, 1e-9) << "eigenvalue " << i;
    const ComplexVector v = top.eigenvectors.col(i);
    EXPECT_NEAR(v.norm(), 1.0, 1e-12);
    EXPECT_LE((a.cast<Complex>() * v - top.eigenvalues[i] * v).norm(), 1e-8) << "residual of pair " << i;
  }

  // The same through the matrix-free interface.
  Index applications = 0;
  const MatrixFreeOperator op(d, [&](const double* x, double* y) {
    ++applications;
    Eigen::Map<Vector>(y, d).noalias() = a * Eigen::Map<const Vector>(x, d);
  });
  const TopEigenpairs matrix_free = top_eigenpairs(op, k, options);
  EXPECT_LE((matrix_free.eigenvalues - top.eigenvalues).norm(), 1e-10);
  EXPECT_EQ(applications, matrix_free.operator_applications);
}

TEST(LinalgTopEigs, NonConvergenceIsEmptyOrAnError) {
  // One restart of the smallest subspace (ncv = k + 2) cannot resolve the top 4 of a random 200 × 200 matrix,
  // whose leading moduli are close together.
  const Matrix a = random_gaussian(200, 200, 25);
  TopEigenOptions starved;
  starved.subspace_dimension = 6;
  starved.max_restarts = 1;
  EXPECT_FALSE(top_eigenpairs_if_converged(a, 4, starved).has_value());
  EXPECT_THROW(top_eigenpairs(a, 4, starved), Error);
  EXPECT_TRUE(top_eigenpairs_if_converged(a, 4).has_value());
  EXPECT_THROW(top_eigenpairs_if_converged(a, 0, starved), Error);  // bad arguments still throw
}

TEST(LinalgErrors, NonFiniteInputNamesTheEntry) {
  Matrix a = random_gaussian(5, 5, 10);
  a(2, 3) = NAN;
  const auto expect_names_entry = [](auto&& call, const char* routine) {
    try {
      call();
      ADD_FAILURE() << routine << ": no error for NaN input";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("(row 2, col 3)"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(routine), std::string::npos) << e.what();
    }
  };
  expect_names_entry([&] { eigen_general(a); }, "dgeev");
  expect_names_entry([&] { svd(a, true); }, "dgesdd");
  expect_names_entry([&] { complex_schur(a); }, "dgees");
  expect_names_entry([&] { top_eigenpairs(a, 2); }, "top_eigenpairs");
  a(2, 3) = INFINITY;
  expect_names_entry([&] { singular_values(a); }, "dgesdd");
  ComplexMatrix c = a.cast<Complex>();
  expect_names_entry([&] { singular_values(c); }, "zgesdd");
}

TEST(LinalgErrors, BadShapesAndArguments) {
  EXPECT_THROW(eigen_general(Matrix::Zero(3, 4)), Error);
  EXPECT_THROW(complex_schur(Matrix::Zero(3, 4)), Error);
  const Matrix a = random_gaussian(10, 10, 11);
  EXPECT_THROW(top_eigenpairs(a, 0), Error);
  EXPECT_THROW(top_eigenpairs(a, 9), Error);  // needs k ≤ d − 2
}

// The BLAS products against Eigen's, including the one-row/one-column shapes that go to dgemv and blocks of
// larger matrices read in place.
TEST(LinalgGemm, MatchesEigenOnEveryShape) {
  for (auto [m, k, n] : {std::tuple{7, 5, 3}, {1, 6, 4}, {6, 4, 1}, {1, 5, 1}, {9, 1, 8}}) {
    const Matrix a = random_gaussian(m, k, 1), b = random_gaussian(k, n, 2), c0 = random_gaussian(m, n, 3);
    Matrix c;
    multiply(a, b, c);
    EXPECT_LE((c - a * b).norm(), 1e-13 * (a.norm() * b.norm())) << m << "x" << k << "x" << n;
    c = c0;
    multiply(a, b, c, 0.5);
    EXPECT_LE((c - (a * b + 0.5 * c0)).norm(), 1e-13 * (a.norm() * b.norm() + c0.norm())) << m << "x" << k << "x" << n;
    // Blocks: a's rows 1.. of a taller matrix, b's columns of a wider one, c a block of a larger one.
    Matrix big_a = random_gaussian(m + 2, k, 4), big_b = random_gaussian(k, n + 3, 5), big_c = random_gaussian(m + 4, n + 1, 6);
    const Matrix expected_c = big_c.block(2, 1, m, n) - 2.0 * big_a.middleRows(1, m) * big_b.middleCols(2, n);
    multiply_add(big_a.middleRows(1, m), big_b.middleCols(2, n), big_c.block(2, 1, m, n), -2.0);
    EXPECT_LE((big_c.block(2, 1, m, n) - expected_c).norm(), 1e-13 * (1 + expected_c.norm())) << m << "x" << k << "x" << n;
  }
  const Matrix a = random_gaussian(6, 4, 7);
  const Vector x = random_gaussian(4, 1, 8).col(0);
  Vector y = Vector::Ones(6);
  multiply_add_vector(a, x, y, 3.0);
  EXPECT_LE((y - (Vector::Ones(6) + 3.0 * a * x)).norm(), 1e-13 * (1 + y.norm()));
}

// The complex products (zgemm, ztrmm) against Eigen's: a b, a b*, and q t q* with t's strictly lower part ignored
// (garbage there must not leak in) — J rebuilt from its complex Schur form.
TEST(LinalgGemm, ComplexProductsMatchEigen) {
  const auto random_complex = [](Index rows, Index cols, uint64_t seed) {
    return ComplexMatrix(random_gaussian(rows, cols, seed).cast<Complex>() + Complex(0, 1) * random_gaussian(rows, cols, seed + 100).cast<Complex>());
  };
  for (auto [m, k, n] : {std::tuple{7, 5, 3}, {1, 6, 4}, {6, 4, 1}, {4, 4, 4}}) {
    const ComplexMatrix a = random_complex(m, k, 1), b = random_complex(k, n, 2), b_adjoint = b.adjoint();
    const double scale = a.norm() * b.norm();
    EXPECT_LE((multiply(a, b) - a * b).norm(), 1e-13 * scale) << m << "x" << k << "x" << n;
    EXPECT_LE((multiply_adjoint(a, b_adjoint) - a * b).norm(), 1e-13 * scale) << m << "x" << k << "x" << n;
  }
  EXPECT_EQ(multiply(ComplexMatrix(3, 0), ComplexMatrix(0, 2)), ComplexMatrix::Zero(3, 2));

  const Matrix j = random_gaussian(9, 9, 4);
  ComplexSchur s = complex_schur(j);
  s.t.triangularView<Eigen::StrictlyLower>().setConstant(Complex(1e3, -1e3));
  EXPECT_LE((unitary_similarity(s.q, s.t) - j.cast<Complex>()).norm(), 1e-12 * j.norm());
}

// multiply_small against a long-double sum, entry by entry: c is a block of a larger matrix filled with NaN (a kernel
// that read c, or wrote outside the block, would show), a and b are blocks read through their strides, and the
// shapes include a particle step's, sizes that are no multiple of a register block, and empty ones.
TEST(LinalgGemm, SmallProductsMatchAnExactSumAndWriteOnlyTheirBlock) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (auto [m, k, n] : {std::tuple{128, 128, 64}, {256, 128, 64}, {7, 5, 3}, {1, 9, 1}, {33, 17, 65}, {5, 0, 4}, {0, 3, 2}}) {
    const Matrix big_a = random_gaussian(m + 3, k + 1, 11), big_b = random_gaussian(k + 2, n, 12);
    const auto a = big_a.block(1, 1, m, k), b = big_b.middleRows(2, k);
    Matrix big_c = Matrix::Constant(m + 5, n + 2, nan);
    multiply_small(m, n, k, a.data(), big_a.rows(), b.data(), big_b.rows(), big_c.data() + 2 + big_c.rows(), big_c.rows());
    std::vector<double> got, expected;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        long double sum = 0;
        for (int64_t l = 0; l < k; ++l) sum += static_cast<long double>(a(i, l)) * b(l, j);
        got.push_back(big_c(2 + i, 1 + j));
        expected.push_back(static_cast<double>(sum));
      }
    test::expect_close(got, expected, 1e-13, 1e-13 * std::sqrt(k), fmt::format("{} x {} x {}", m, k, n));
    int64_t outside = 0;
    for (int64_t j = 0; j < big_c.cols(); ++j)
      for (int64_t i = 0; i < big_c.rows(); ++i)
        outside += (i < 2 || i >= 2 + m || j < 1 || j >= 1 + n) && !std::isnan(big_c(i, j));
    EXPECT_EQ(outside, 0) << m << " x " << k << " x " << n << ": entries written outside c's block";
  }
}

}  // namespace
}  // namespace tdyn::linalg
