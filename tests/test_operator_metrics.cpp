// Tests of the operator metrics (SPEC §3), the dominant spectrum (SPEC §2) and Schur surgery: closed forms on
// matrices whose answers are known by hand, identities on random ones.
#include <cmath>
#include <numbers>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <Eigen/Dense>

#include "random_matrix.h"
#include "analysis/operator_metrics.h"
#include "core/error.h"
#include "test_util.h"

namespace tdyn {
namespace {

using test::random_gaussian;

Matrix random_orthogonal(Index d, uint64_t seed) {
  Eigen::HouseholderQR<Matrix> qr(random_gaussian(d, d, seed));
  return qr.householderQ() * Matrix::Identity(d, d);
}

Matrix rotation(double theta) {
  Matrix r(2, 2);
  r << std::cos(theta), -std::sin(theta), std::sin(theta), std::cos(theta);
  return r;
}

// Henrici departure measured independently of the code under test: Eigen's complex Schur form (small d only).
double reference_departure(const ComplexMatrix& a) {
  const Eigen::ComplexSchur<ComplexMatrix> schur(a);
  const ComplexMatrix strictly_upper = schur.matrixT().triangularView<Eigen::StrictlyUpper>();
  return strictly_upper.norm();
}

TEST(OperatorMetricsRanks, IdentityHasFullRankEverywhere) {
  const Index d = 10;
  const OperatorMetrics m = operator_metrics(Matrix::Identity(d, d));
  // σ_i = 1: p_i = 1/d, so exp(entropy) = d; (Σ1)²/Σ1 = d; ‖I‖_F²/1 = d; Σ_{i≤k} 1 ≥ 0.9 d first at k = 9.
  EXPECT_NEAR(m.effective_rank.roy_vetterli, 10.0, 1e-12);
  EXPECT_NEAR(m.effective_rank.participation_ratio, 10.0, 1e-12);
  EXPECT_NEAR(m.effective_rank.stable_rank, 10.0, 1e-12);
  EXPECT_EQ(m.effective_rank.energy_rank, 9);
  EXPECT_NEAR(m.condition_number, 1.0, 1e-14);
  EXPECT_EQ(m.departure.schur, 0.0);
  EXPECT_NEAR(m.departure.identity, 0.0, 1e-7);
  EXPECT_EQ(m.symmetry_index, 0.0);
  EXPECT_EQ(m.expanding_fraction, 0.0);  // |λ| = 1 is not expanding
  EXPECT_EQ(m.complex_fraction, 0.0);
  ASSERT_EQ(m.self_alignment.size(), 3u);
  EXPECT_EQ(m.self_alignment[2].k_requested, 100);
  EXPECT_EQ(m.self_alignment[2].k, 10);  // capped at d
  for (const SubspaceAlignment& a : m.self_alignment) EXPECT_NEAR(a.value, 1.0, 1e-12);
}

TEST(OperatorMetricsRanks, RankOneIsOneEverywhere) {
  const Vector u = random_gaussian(12, 1, 1), v = random_gaussian(12, 1, 2);
  const OperatorMetrics m = operator_metrics(u * v.transpose());
  EXPECT_NEAR(m.effective_rank.roy_vetterli, 1.0, 1e-10);  // the σ_i ≈ 1e-16 tail adds −p log p ≈ 4e-15 each
  EXPECT_NEAR(m.effective_rank.participation_ratio, 1.0, 1e-12);
  EXPECT_NEAR(m.effective_rank.stable_rank, 1.0, 1e-12);
  EXPECT_EQ(m.effective_rank.energy_rank, 1);
  EXPECT_GT(m.condition_number, 1e12);
}

TEST(OperatorMetricsRanks, DiagonalClosedForms) {
  // σ = (3, 2, 1) hidden behind orthogonal changes of basis and a sign: J = P diag(3, −2, 1) Qᵀ.
  Vector diagonal(3);
  diagonal << 3, -2, 1;
  const Matrix j = random_orthogonal(3, 3) * diagonal.asDiagonal() * random_orthogonal(3, 4).transpose();
  const OperatorMetrics m = operator_metrics(j);
  const double p[] = {0.5, 1.0 / 3, 1.0 / 6};  // σ/Σσ
  double entropy = 0;
  for (double pi : p) entropy -= pi * std::log(pi);
  EXPECT_NEAR(m.effective_rank.roy_vetterli, std::exp(entropy), 1e-13);
  EXPECT_NEAR(m.effective_rank.participation_ratio, 196.0 / 98.0, 1e-13);  // (9+4+1)²/(81+16+1)
  EXPECT_NEAR(m.effective_rank.stable_rank, 14.0 / 9.0, 1e-13);
  EXPECT_EQ(m.effective_rank.energy_rank, 2);  // 9/14 < 0.9 ≤ 13/14
  EXPECT_NEAR(m.condition_number, 3.0, 1e-13);

  // The ranks from singular values alone, and the zero spectrum.
  const EffectiveRanks direct = effective_ranks((Vector(4) << 1, 4, 0, 2).finished());
  EXPECT_NEAR(direct.stable_rank, 21.0 / 16.0, 1e-14);
  EXPECT_EQ(direct.energy_rank, 2);  // 16/21 < 0.9 ≤ 20/21
  const EffectiveRanks zero = effective_ranks(Vector::Zero(5));
  EXPECT_EQ(zero.roy_vetterli, 0.0);
  EXPECT_EQ(zero.energy_rank, 0);
  EXPECT_THROW(effective_ranks((Vector(2) << 1, -1).finished()), Error);
}

TEST(OperatorMetricsHenrici, ZeroForNormalMatrices) {
  const Index d = 30;
  const Matrix b = random_gaussian(d, d, 5);
  const Matrix symmetric = b + b.transpose();
  const Matrix orthogonal = random_orthogonal(d, 6);
  // Normal with complex spectrum: a block-diagonal of scaled rotations in an orthonormal basis.
  Matrix blocks = Matrix::Zero(d, d);
  for (Index i = 0; i < d; i += 2) blocks.block(i, i, 2, 2) = (0.5 + 0.1 * i) * rotation(0.3 * i + 0.2);
  const Matrix normal = orthogonal * blocks * orthogonal.transpose();
  for (const auto& [name, j] : {std::pair<const char*, Matrix>{"symmetric", symmetric}, {"orthogonal", orthogonal},
                                {"normal rotations", normal}}) {
    SCOPED_TRACE(name);
    const OperatorMetrics m = operator_metrics(j);
    EXPECT_LE(m.departure.schur_normalized, 1e-13);
    // The identity form cancels ‖J‖_F² − Σ|λ|² and is only good to about sqrt(ε)·‖J‖_F.
    EXPECT_LE(m.departure.identity_normalized, 1e-6);
  }
  EXPECT_NEAR(operator_metrics(symmetric).symmetry_index, 0.0, 1e-15);
  EXPECT_NEAR(operator_metrics(b - b.transpose()).symmetry_index, 2.0, 1e-14);  // ‖2A‖/‖A‖
}

TEST(OperatorMetricsHenrici, SchurAndIdentityFormsAgreeOnNonNormalMatrices) {
  // Known value: an upper triangular matrix is its own Schur form, so dep = ‖strict upper part‖_F.
  Matrix triangular = random_gaussian(15, 15, 7).triangularView<Eigen::Upper>();
  const Matrix strict = triangular.triangularView<Eigen::StrictlyUpper>();
  const OperatorMetrics t = operator_metrics(triangular);
  EXPECT_NEAR(t.departure.schur, strict.norm(), 1e-12 * strict.norm());
  EXPECT_NEAR(t.departure.identity, strict.norm(), 1e-10 * strict.norm());

  // Mildly non-normal ("normal-ish"): normal + small perturbation; and strongly non-normal random matrices.
  const Matrix orthogonal = random_orthogonal(25, 8);
  const Matrix normalish = orthogonal + 0.05 * random_gaussian(25, 25, 9);
  const Matrix basis = random_gaussian(15, 15, 11);
  const Matrix similar_to_triangular = basis * triangular * basis.inverse();  // real spectrum, very non-normal
  for (const auto& [name, j] : {std::pair<const char*, Matrix>{"normal-ish", normalish},
                                {"gaussian", random_gaussian(40, 40, 10)},
                                {"similar to triangular", similar_to_triangular}}) {
    SCOPED_TRACE(name);
    const OperatorMetrics m = operator_metrics(j);
    EXPECT_GT(m.departure.schur, 0.0);
    EXPECT_NEAR(m.departure.identity, m.departure.schur, 1e-9 * m.frobenius_norm);
    EXPECT_NEAR(m.departure.schur, reference_departure(j.cast<Complex>()), 1e-10 * m.frobenius_norm);
    EXPECT_NEAR(m.departure.schur_normalized, m.departure.schur / m.frobenius_norm, 1e-15);
  }
}

TEST(OperatorMetricsAlignment, SymmetricPsdAndScaledRotation) {
  const Matrix b = random_gaussian(20, 20, 12);
  const OperatorMetrics psd = operator_metrics(b * b.transpose());
  for (const SubspaceAlignment& a : psd.self_alignment) EXPECT_NEAR(a.value, 1.0, 1e-12) << "k = " << a.k;

  // J = R(θ) diag(2, 1): U = R(θ), V = I, so u_1ᵀ v_1 = cos θ and the k = 1 alignment is cos²θ; k = 2 gives
  // ‖R(θ)‖_F²/2 = 1. Embedded with a smaller diagonal block so that d > 2.
  const double theta = 0.9;
  Matrix j = Matrix::Zero(5, 5);
  j.topLeftCorner(2, 2) = rotation(theta) * Vector(Eigen::Vector2d(2, 1)).asDiagonal();
  j.bottomRightCorner(3, 3) = Vector(Eigen::Vector3d(0.5, 0.4, 0.3)).asDiagonal();
  OperatorMetricsOptions options;
  options.alignment_ks = {1, 2};
  const OperatorMetrics m = operator_metrics(j, options);
  EXPECT_NEAR(m.self_alignment[0].value, std::pow(std::cos(theta), 2), 1e-13);
  EXPECT_NEAR(m.self_alignment[1].value, 1.0, 1e-13);
}

TEST(OperatorMetricsFractions, ExpandingAndComplexModes) {
  Matrix j = Matrix::Zero(6, 6);
  j.topLeftCorner(2, 2) = 1.5 * rotation(0.4);  // expanding complex pair
  j(2, 2) = 2;                                  // expanding
  j(3, 3) = -(1 + 1e-12);  // on the unit circle to round-off (a residual step's neutral direction): not expanding
  j(4, 4) = 0.5;
  j(5, 5) = -3;  // expanding
  const Matrix basis = random_gaussian(6, 6, 13);
  const OperatorMetrics m = operator_metrics(basis * j * basis.inverse());
  EXPECT_NEAR(m.expanding_fraction, 4.0 / 6.0, 1e-15);
  EXPECT_NEAR(m.complex_fraction, 2.0 / 6.0, 1e-15);
  EXPECT_EQ(m.complex_tolerance, 1e-8);
  EXPECT_NEAR(std::abs(m.eigenvalues[0]), 3.0, 1e-12);  // sorted by modulus
}

// A deep cumulative product is numerically of low rank: its small eigenvalues are round-off of size ε‖C‖ with
// arbitrary phase. They are not complex pairs, and σ_d at round-off gives no condition number; a real rotation
// inside the same matrix is still a complex pair.
TEST(OperatorMetricsFractions, RoundOffEigenvaluesAreNotComplex) {
  const Index d = 24;
  const Matrix a = random_gaussian(d, 3, 31);
  Matrix c = a * a.transpose();  // symmetric PSD of rank 3: real spectrum, 21 eigenvalues 0
  const Matrix basis = random_gaussian(d, d, 32);
  c = basis * c * basis.inverse();  // similar: the same spectrum, now computed through a non-normal matrix
  const OperatorMetrics m = operator_metrics(c);
  // The point of the test: relative to its own modulus, some round-off eigenvalue looks complex.
  Index complex_relative_to_modulus = 0;
  for (const Complex& lambda : m.eigenvalues) complex_relative_to_modulus += std::abs(lambda.imag()) > 1e-8 * std::abs(lambda);
  ASSERT_GT(complex_relative_to_modulus, 0) << "the round-off eigenvalues came out real; the test shows nothing";
  EXPECT_EQ(m.complex_fraction, 0.0);
  EXPECT_TRUE(std::isinf(m.condition_number)) << m.condition_number;

  // A rotation by 0.4 rad of modulus 2, two real modes and 20 zeros, in the same basis: one complex pair, counted.
  Matrix with_pair = Matrix::Zero(d, d);
  with_pair.topLeftCorner(2, 2) = 2 * rotation(0.4);
  with_pair(2, 2) = 1, with_pair(3, 3) = 0.5;
  const OperatorMetrics p = operator_metrics(basis * with_pair * basis.inverse());
  EXPECT_NEAR(p.complex_fraction, 2.0 / static_cast<double>(d), 1e-15);
  // Well conditioned: the condition number is reported.
  const OperatorMetrics q = operator_metrics(Matrix::Identity(d, d) + 0.1 * random_gaussian(d, d, 33) / std::sqrt(double(d)));
  EXPECT_TRUE(std::isfinite(q.condition_number));
  EXPECT_NEAR(q.condition_number, q.singular_values[0] / q.singular_values[d - 1], 1e-12 * q.condition_number);
}

// The partial SVD (leading vectors only) against the full SVD with vectors, on matrices where vectors are
// well defined and where they are not (repeated or zero singular values): every metric agrees.
TEST(OperatorMetricsAlignment, PartialSvdAgreesWithFullSvd) {
  OperatorMetricsOptions partial, full;
  partial.partial_svd_max_fraction = 1;
  full.partial_svd_max_fraction = 0;
  partial.alignment_ks = full.alignment_ks = {1, 10, 100};
  const Matrix b = random_gaussian(150, 150, 26) / std::sqrt(150.0);
  for (const auto& [name, j] : {std::pair<const char*, Matrix>{"gaussian 150", b},
                                {"psd", b * b.transpose()},
                                {"normal-ish", random_orthogonal(30, 27) + 0.05 * random_gaussian(30, 30, 30)},
                                {"identity", Matrix::Identity(12, 12)},
                                {"rank one", random_gaussian(20, 1, 28) * random_gaussian(1, 20, 29)},
                                {"zero", Matrix::Zero(5, 5)}}) {
    SCOPED_TRACE(name);
    const OperatorMetrics p = operator_metrics(j, partial), f = operator_metrics(j, full);
    const double scale = std::max(1.0, f.singular_values[0]);
    EXPECT_LE((p.singular_values - f.singular_values).norm(), 1e-13 * scale);
    if (f.condition_number < 1e8) EXPECT_NEAR(p.condition_number, f.condition_number, 1e-9 * f.condition_number);
    else EXPECT_GT(p.condition_number, 1e8);  // σ_d at round-off level: its relative value is noise
    EXPECT_NEAR(p.effective_rank.roy_vetterli, f.effective_rank.roy_vetterli, 1e-10);
    EXPECT_EQ(p.effective_rank.energy_rank, f.effective_rank.energy_rank);
    ASSERT_EQ(p.self_alignment.size(), f.self_alignment.size());
    for (size_t i = 0; i < p.self_alignment.size(); ++i) {
      EXPECT_EQ(p.self_alignment[i].k, f.self_alignment[i].k);
      // Only the subspace of the leading k matters, and for "rank one" beyond k = 1 and "zero" any basis of the
      // null space is valid, so there the value is not unique.
      if (std::string(name) == "rank one" && p.self_alignment[i].k > 1) continue;
      if (std::string(name) == "zero") continue;
      EXPECT_NEAR(p.self_alignment[i].value, f.self_alignment[i].value, 1e-9) << "k = " << p.self_alignment[i].k;
    }
  }
}

TEST(OperatorMetricsJson, HasEveryMetricAndNullForInfinity) {
  const OperatorMetrics m = operator_metrics(Matrix::Zero(4, 4));
  const nlohmann::json j = m.to_json(true);
  EXPECT_TRUE(j["condition_number"].is_null());  // σ_d = 0
  EXPECT_EQ(j["effective_rank"]["energy_rank"], 0);
  EXPECT_EQ(j["eigenvalues"].size(), 4u);
  const nlohmann::json k = operator_metrics(random_gaussian(8, 8, 14)).to_json();
  for (const char* key : {"d", "frobenius_norm", "condition_number", "henrici_departure", "self_alignment",
                          "expanding_fraction", "complex_fraction", "complex_tolerance", "symmetry_index",
                          "effective_rank"})
    EXPECT_TRUE(k.contains(key)) << key;
  EXPECT_FALSE(k.contains("eigenvalues"));
  EXPECT_EQ(k["self_alignment"][2]["k"], 8);
}

// What MPI ranks send each other: every field back exactly, an infinite condition number included (the JSON of
// both sides compared, spectra and all); a list cut short or too long is an error.
TEST(OperatorMetricsNumbers, EveryFieldComesBackExactly) {
  auto read = [](const std::vector<double>& numbers) {
    NumberReader in(numbers, "metrics");
    const OperatorMetrics m = OperatorMetrics::read_numbers(in);
    in.finish();
    return m;
  };
  for (const Matrix& j : {Matrix(Matrix::Zero(4, 4)), random_gaussian(12, 12, 15)}) {
    const OperatorMetrics m = operator_metrics(j);
    std::vector<double> numbers;
    m.append_numbers(numbers);
    const OperatorMetrics back = read(numbers);
    EXPECT_EQ(back.to_json(true).dump(), m.to_json(true).dump());
    std::vector<double> again;
    back.append_numbers(again);
    EXPECT_EQ(again, numbers);
    EXPECT_THROW(read({numbers.begin(), numbers.end() - 1}), Error);
    std::vector<double> longer = numbers;
    longer.push_back(0);
    EXPECT_THROW(read(longer), Error);
  }
}

TEST(OperatorMetricsErrors, NonFiniteOrNonSquareInput) {
  Matrix j = Matrix::Identity(4, 4);
  j(1, 2) = NAN;
  try {
    operator_metrics(j);
    ADD_FAILURE() << "no error for NaN input";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(row 1, col 2)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(operator_metrics(Matrix::Zero(3, 2)), Error);
  EXPECT_THROW(dominant_spectrum(j), Error);
}

TEST(OperatorMetricsDominant, RealDominantEigenvalue) {
  Vector diagonal(4);
  diagonal << 1, 3, -2, 0.5;
  const Matrix q = random_orthogonal(4, 15);
  const DominantSpectrum s = dominant_spectrum(q * diagonal.asDiagonal() * q.transpose());
  EXPECT_FALSE(s.complex_pair);
  EXPECT_NEAR(s.lambda1.real(), 3.0, 1e-13);
  EXPECT_EQ(s.lambda1.imag(), 0.0);
  ASSERT_TRUE(s.lambda2.has_value());
  EXPECT_NEAR(s.lambda2->real(), -2.0, 1e-13);
  EXPECT_NEAR(s.modulus_ratio, 2.0 / 3.0, 1e-13);
  EXPECT_NEAR(s.gap, 1.0, 1e-13);
  EXPECT_EQ(s.eigenvector_imag.size(), 0);
  // v1 = ±q.col(1), sign fixed so the largest entry is positive.
  EXPECT_NEAR(std::abs(s.eigenvector_real.dot(q.col(1))), 1.0, 1e-13);
  Index largest = 0;
  s.eigenvector_real.cwiseAbs().maxCoeff(&largest);
  EXPECT_GT(s.eigenvector_real[largest], 0);
}

TEST(OperatorMetricsDominant, ComplexPairSkipsItsPartner) {
  const double theta = 0.6;
  Matrix blocks = Matrix::Zero(5, 5);
  blocks.topLeftCorner(2, 2) = 2 * rotation(theta);  // λ = 2 e^{±iθ}
  blocks(2, 2) = -1.5;
  blocks(3, 3) = 1;
  blocks(4, 4) = 0.1;
  const Matrix basis = random_gaussian(5, 5, 16);  // non-orthogonal: a non-normal F
  const Matrix f = basis * blocks * basis.inverse();
  const DominantSpectrum s = dominant_spectrum(f);
  EXPECT_TRUE(s.complex_pair);
  EXPECT_NEAR(std::abs(s.lambda1 - std::polar(2.0, theta)), 0.0, 1e-12);
  ASSERT_TRUE(s.lambda2.has_value());
  EXPECT_NEAR(std::abs(*s.lambda2 - Complex(-1.5, 0)), 0.0, 1e-12);
  EXPECT_NEAR(s.modulus_ratio, 0.75, 1e-12);
  EXPECT_NEAR(s.gap, 0.5, 1e-12);
  const ComplexVector v = s.eigenvector_real.cast<Complex>() + Complex(0, 1) * s.eigenvector_imag.cast<Complex>();
  EXPECT_NEAR(v.norm(), 1.0, 1e-13);
  EXPECT_LE((f.cast<Complex>() * v - s.lambda1 * v).norm(), 1e-12 * f.norm());
  // span{Re v1, Im v1} is invariant under F.
  Matrix plane(5, 2);
  plane << s.eigenvector_real, s.eigenvector_imag;
  const Matrix image = f * plane;
  const Matrix projected = plane * plane.colPivHouseholderQr().solve(image);
  EXPECT_LE((image - projected).norm(), 1e-12 * image.norm());

  // d = 2 with a pair: there is no λ2.
  const DominantSpectrum pair_only = dominant_spectrum(0.9 * rotation(1.0));
  EXPECT_TRUE(pair_only.complex_pair);
  EXPECT_FALSE(pair_only.lambda2.has_value());
  EXPECT_NEAR(pair_only.gap, 0.9, 1e-14);
  EXPECT_NEAR(std::arg(pair_only.lambda1), 1.0, 1e-14);
}

TEST(OperatorMetricsSurgery, DepartureScalesWithAlpha) {
  const Matrix j = random_gaussian(40, 40, 17) / std::sqrt(40.0);
  const linalg::ComplexSchur schur = linalg::complex_schur(j);
  const double departure = schur.strictly_upper().norm();
  ASSERT_GT(departure, 0.1);

  for (double alpha : {0.0, 0.25, 0.5, 1.0, -0.7, 1.5}) {
    SCOPED_TRACE(fmt::format("alpha = {}", alpha));
    const ComplexMatrix j_alpha = schur_surgery(schur, alpha);
    // dep(J_α) = |α| dep(J), measured through an independent Schur form of J_α.
    EXPECT_NEAR(reference_departure(j_alpha), std::abs(alpha) * departure, 1e-10 * departure);
    // ... and through the identity form, with the eigenvalues unchanged by the surgery.
    const double identity = std::sqrt(std::max(0.0, j_alpha.squaredNorm() - schur.eigenvalues().squaredNorm()));
    EXPECT_NEAR(identity, std::abs(alpha) * departure, 1e-7 * departure);
  }
  // α = 1 gives back J (real up to round-off); α = 0 is normal but, for a non-normal J with complex pairs,
  // not real: the imaginary part is measured, not assumed away.
  const ComplexMatrix j_one = schur_surgery(schur, 1.0);
  EXPECT_LE((j_one - j.cast<Complex>()).norm(), 1e-13 * j.norm() * 40);
  EXPECT_LE(imaginary_fraction(j_one), 1e-14);
  const ComplexMatrix j_zero = schur_surgery(schur, 0.0);
  EXPECT_LE((j_zero * j_zero.adjoint() - j_zero.adjoint() * j_zero).norm(), 1e-12 * j.squaredNorm());
  EXPECT_GT(imaginary_fraction(j_zero), 1e-3);

  // A real spectrum keeps Q real, so every J_α is real.
  const Matrix basis = random_orthogonal(10, 18);
  const Matrix triangular = random_gaussian(10, 10, 19).triangularView<Eigen::Upper>();
  const linalg::ComplexSchur real_schur = linalg::complex_schur(basis * triangular * basis.transpose());
  EXPECT_LE(imaginary_fraction(schur_surgery(real_schur, 0.3)), 1e-14);
}

TEST(OperatorMetricsSurgery, RandomControlHasTheSameNormAndSpectrum) {
  const Matrix j = random_gaussian(30, 30, 20);
  const linalg::ComplexSchur schur = linalg::complex_schur(j);
  const double departure = schur.strictly_upper().norm();

  const ComplexMatrix n_random = random_strictly_upper(30, departure, 7);
  EXPECT_NEAR(n_random.norm(), departure, 1e-12 * departure);
  const ComplexMatrix lower_and_diagonal = n_random.triangularView<Eigen::Lower>();
  EXPECT_EQ(lower_and_diagonal.norm(), 0.0);
  EXPECT_EQ((random_strictly_upper(30, departure, 7) - n_random).norm(), 0.0) << "seeded: reproducible";
  EXPECT_GT((random_strictly_upper(30, departure, 8) - n_random).norm(), 0.0);

  for (double alpha : {0.0, 0.5, 1.0}) {
    const ComplexMatrix control = schur_surgery_control(schur, alpha, 7);
    EXPECT_NEAR(reference_departure(control), alpha * departure, 1e-10 * departure);
    const Eigen::ComplexEigenSolver<ComplexMatrix> eigen(control, false);
    double worst = 0;  // the control keeps the spectrum of J
    for (const Complex& lambda : schur.eigenvalues())
      worst = std::max(worst, (eigen.eigenvalues().array() - lambda).abs().minCoeff());
    EXPECT_LE(worst, 1e-8 * j.norm());
  }
}

TEST(OperatorMetricsProducts, CumulativeProductsChainLeftToRight) {
  const std::vector<Matrix> layers = {random_gaussian(4, 4, 21), random_gaussian(4, 4, 22), random_gaussian(4, 4, 23)};
  const std::vector<Matrix> c = cumulative_products(layers);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ((c[0] - layers[0]).norm(), 0.0);
  EXPECT_LE((c[2] - layers[2] * layers[1] * layers[0]).norm(), 1e-13 * c[2].norm());
  EXPECT_THROW(cumulative_products(std::vector<Matrix>{Matrix::Zero(3, 3), Matrix::Zero(3, 4)}), Error);

  const std::vector<ComplexMatrix> complex_layers = {layers[0].cast<Complex>(), Complex(0, 1) * layers[1]};
  const std::vector<ComplexMatrix> cc = cumulative_products(complex_layers);
  EXPECT_LE((cc[1] - complex_layers[1] * complex_layers[0]).norm(), 1e-13 * cc[1].norm());
  EXPECT_TRUE(cumulative_products(std::vector<Matrix>{}).empty());
}

// from_json reads back every field to_json wrote, through results.json's text: spectra where written, +∞ and NaN
// where written as null; a missing key is an error that names it.
TEST(OperatorMetricsJson, ReadsBackWhatItWrote) {
  const auto same = [](const OperatorMetrics& a, const OperatorMetrics& b) {
    std::vector<double> x, y;
    a.append_numbers(x), b.append_numbers(y);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]))) << i << ": " << x[i] << " vs " << y[i];
  };
  const auto through_text = [](const nlohmann::json& j) { return OperatorMetrics::from_json(nlohmann::json::parse(j.dump())); };
  const OperatorMetrics random = operator_metrics(random_gaussian(12, 12, 41));
  same(random, through_text(random.to_json(true)));
  const OperatorMetrics without_spectra = through_text(random.to_json());
  EXPECT_EQ(without_spectra.eigenvalues.size(), 0);
  EXPECT_EQ(without_spectra.symmetry_index, random.symmetry_index);
  EXPECT_EQ(without_spectra.effective_rank.energy_rank, random.effective_rank.energy_rank);
  // Rank one: condition number +∞ (null); without eigenvalues: the spectral fractions NaN (null).
  const Vector u = random_gaussian(6, 1, 3), v = random_gaussian(6, 1, 4);
  OperatorMetricsOptions no_eigenvalues;
  no_eigenvalues.eigenvalues = false;
  const OperatorMetrics singular = operator_metrics(u * v.transpose(), no_eigenvalues);
  ASSERT_TRUE(std::isinf(singular.condition_number));
  ASSERT_TRUE(std::isnan(singular.expanding_fraction));
  same(singular, through_text(singular.to_json(true)));
  nlohmann::json damaged = random.to_json();
  damaged["effective_rank"].erase("stable_rank");
  test::expect_error_contains([&] { OperatorMetrics::from_json(damaged); }, "lacks 'stable_rank'");
  damaged = random.to_json();
  damaged["symmetry_index"] = "0.5";
  test::expect_error_contains([&] { OperatorMetrics::from_json(damaged); }, "'symmetry_index' is string, not a number");
}

}  // namespace
}  // namespace tdyn
