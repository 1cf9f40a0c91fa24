// Operator metrics, dominant spectrum, Schur surgery and cumulative products; definitions in operator_metrics.h.
#include "analysis/operator_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <omp.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_number.h"
#include "linalg/gemm.h"

namespace tdyn {
namespace {

nlohmann::json complex_json(Complex z) { return nlohmann::json::array({z.real(), z.imag()}); }

Complex complex_at(const nlohmann::json& j, const char* key) {
  const nlohmann::json& z = list_at(j, key);
  if (z.size() != 2 || !z[0].is_number() || !z[1].is_number()) fail("results.json: '{}' is {}, not [real, imaginary]", key, z.dump());
  return {z[0].get<double>(), z[1].get<double>()};
}

// Phase that makes the largest-modulus entry of v real and positive (so results do not depend on LAPACK's sign).
Complex normalising_phase(const ComplexVector& v) {
  Index largest = 0;
  v.cwiseAbs().maxCoeff(&largest);
  const Complex entry = v[largest];
  return std::abs(entry) > 0 ? std::conj(entry) / std::abs(entry) : Complex(1, 0);
}

// Every singular value, and the leading k singular vector pairs (none for k = 0). A partial SVD when k is a
// small part of d: for k = 100 it costs about what the values alone cost, where a full dgesdd with vectors costs
// up to several times as much (bench/bench_operator_metrics.cpp, docs/performance.md). dbdsvdx finds vectors by
// bisection and inverse iteration, made for a few of them; when most of the spectrum is wanted, dgesdd's
// divide and conquer is the routine built for it.
linalg::SingularValueDecomposition singular_values_and_leading_vectors(const Eigen::Ref<const Matrix>& j, Index k,
                                                                       const OperatorMetricsOptions& options) {
  if (k == 0) return {linalg::singular_values(j), {}, {}};
  if (static_cast<double>(k) <= options.partial_svd_max_fraction * static_cast<double>(j.rows()))
    return linalg::svd_leading(j, k);
  return linalg::svd(j, true);
}

}  // namespace

// ---- Effective ranks ------------------------------------------------------------------------------------

EffectiveRanks effective_ranks(const Vector& singular_values, double energy_fraction) {
  EffectiveRanks ranks;
  ranks.energy_fraction = energy_fraction;
  if (singular_values.size() == 0) return ranks;
  if ((singular_values.array() < 0).any()) fail("effective_ranks: singular values must be non-negative");
  Vector sigma = singular_values;
  std::sort(sigma.data(), sigma.data() + sigma.size(), std::greater<>());
  const double sigma1 = sigma[0];
  if (!(sigma1 > 0)) return ranks;  // the zero matrix: rank 0 by every definition

  // Scaling by σ_1 keeps σ⁴ far from overflow for long cumulative products; every rank is scale-invariant.
  const Vector scaled = sigma / sigma1;
  const double total = scaled.sum();
  double entropy = 0;
  for (double s : scaled) {
    const double p = s / total;
    if (p > 0) entropy -= p * std::log(p);
  }
  ranks.roy_vetterli = std::exp(entropy);

  const Vector energy = scaled.array().square();
  const double total_energy = energy.sum();
  ranks.participation_ratio = total_energy * total_energy / energy.squaredNorm();
  ranks.stable_rank = total_energy;  // ‖J‖_F²/σ_1² with σ_1 = 1 after scaling

  const double threshold = energy_fraction * total_energy * (1 - 1e-12);
  double cumulative = 0;
  ranks.energy_rank = energy.size();
  for (Index i = 0; i < energy.size(); ++i) {
    cumulative += energy[i];
    if (cumulative >= threshold) {
      ranks.energy_rank = i + 1;
      break;
    }
  }
  return ranks;
}

// ---- Operator metrics -----------------------------------------------------------------------------------

namespace {

// The metrics of j from its eigenvalues and the Frobenius norm of its Schur form's strictly upper part, ‖N‖_F; with
// no eigenvalues (OperatorMetricsOptions::eigenvalues false) those that need them are NaN.
OperatorMetrics metrics_from_schur(const Eigen::Ref<const Matrix>& j, const ComplexVector& eigenvalues, double strictly_upper_norm,
                                   const OperatorMetricsOptions& options) {
  const Index d = j.rows();
  OperatorMetrics m;
  m.d = d;
  m.eigenvalues = eigenvalues(linalg::order_by_modulus(eigenvalues));
  Index alignment_k = 0;
  for (Index k_requested : options.alignment_ks) {
    if (k_requested < 1) fail("operator_metrics: self-alignment k must be ≥ 1, got {}", k_requested);
    alignment_k = std::max(alignment_k, std::min(k_requested, d));
  }
  const linalg::SingularValueDecomposition svd = singular_values_and_leading_vectors(j, alignment_k, options);
  m.singular_values = svd.singular_values;

  const double frobenius_squared = j.squaredNorm();
  m.frobenius_norm = std::sqrt(frobenius_squared);
  const auto normalised = [&](double x) { return m.frobenius_norm > 0 ? x / m.frobenius_norm : 0.0; };

  const double sigma_min = m.singular_values[d - 1];
  const double round_off = static_cast<double>(d) * std::numeric_limits<double>::epsilon() * m.singular_values[0];
  m.condition_number = sigma_min > round_off ? m.singular_values[0] / sigma_min : std::numeric_limits<double>::infinity();

  const bool spectrum = eigenvalues.size() == d;
  m.departure.schur = strictly_upper_norm;
  m.departure.identity = spectrum ? std::sqrt(std::max(0.0, frobenius_squared - eigenvalues.squaredNorm())) : NAN;
  m.departure.schur_normalized = normalised(m.departure.schur);
  m.departure.identity_normalized = normalised(m.departure.identity);

  for (Index k_requested : options.alignment_ks) {
    const Index k = std::min(k_requested, d);
    const double value = (svd.u.leftCols(k).transpose() * svd.v.leftCols(k)).squaredNorm() / static_cast<double>(k);
    m.self_alignment.push_back({k_requested, k, value});
  }

  Index expanding = 0, complex_count = 0;
  for (const Complex& lambda : eigenvalues) {
    if (std::abs(lambda) > 1 + options.complex_tolerance * m.singular_values[0]) ++expanding;
    if (std::abs(lambda.imag()) > options.complex_tolerance * m.singular_values[0]) ++complex_count;
  }
  m.expanding_fraction = spectrum ? static_cast<double>(expanding) / static_cast<double>(d) : NAN;
  m.complex_fraction = spectrum ? static_cast<double>(complex_count) / static_cast<double>(d) : NAN;
  m.complex_tolerance = options.complex_tolerance;

  m.symmetry_index = normalised((j - j.transpose()).norm());
  m.effective_rank = effective_ranks(m.singular_values);
  return m;
}

void check_operator(const Eigen::Ref<const Matrix>& j) {
  if (j.rows() != j.cols()) fail("operator_metrics: expected a square matrix, got {} × {}", j.rows(), j.cols());
  linalg::require_finite(j, "operator_metrics input");
}

}  // namespace

OperatorMetrics operator_metrics(const Eigen::Ref<const Matrix>& j, const OperatorMetricsOptions& options) {
  check_operator(j);
  if (j.rows() == 0) return {};
  // Values only where vectors are not needed: no metric uses Schur vectors, and singular vectors are needed
  // only for the leading max k (self-alignment).
  if (!options.eigenvalues) return metrics_from_schur(j, {}, NAN, options);
  const linalg::RealSchurForm schur = linalg::real_schur_form(j);
  return metrics_from_schur(j, schur.eigenvalues, schur.strictly_upper_norm(), options);
}

OperatorMetrics operator_metrics(const Eigen::Ref<const Matrix>& j, const OperatorMetricsOptions& options,
                                 const linalg::ComplexSchur& schur) {
  check_operator(j);
  if (j.rows() == 0) return {};
  return metrics_from_schur(j, schur.eigenvalues(), schur.strictly_upper().norm(), options);
}

nlohmann::json EffectiveRanks::to_json() const {
  return {{"roy_vetterli", roy_vetterli},
          {"participation_ratio", participation_ratio},
          {"participation_ratio_convention", "(sum sigma^2)^2 / sum sigma^4"},
          {"stable_rank", stable_rank},
          {"energy_rank", energy_rank},
          {"energy_fraction", energy_fraction}};
}

EffectiveRanks EffectiveRanks::from_json(const nlohmann::json& j) {
  EffectiveRanks e;
  e.roy_vetterli = number_at(j, "roy_vetterli");
  e.participation_ratio = number_at(j, "participation_ratio");
  e.stable_rank = number_at(j, "stable_rank");
  e.energy_rank = integer_at(j, "energy_rank");
  e.energy_fraction = number_at(j, "energy_fraction");
  return e;
}

nlohmann::json OperatorMetrics::to_json(bool include_spectra) const {
  nlohmann::json alignment = nlohmann::json::array();
  for (const SubspaceAlignment& a : self_alignment)
    alignment.push_back({{"k_requested", a.k_requested}, {"k", a.k}, {"value", a.value}});
  nlohmann::json out = {
      {"d", d},
      {"frobenius_norm", frobenius_norm},
      {"spectral_norm", singular_values.size() > 0 ? singular_values[0] : 0.0},
      {"smallest_singular_value", singular_values.size() > 0 ? singular_values[d - 1] : 0.0},
      {"spectral_radius", eigenvalues.size() > 0 ? std::abs(eigenvalues[0]) : d > 0 ? NAN : 0.0},
      {"condition_number", finite_or_null(condition_number)},
      {"henrici_departure",
       {{"schur", departure.schur},
        {"identity", departure.identity},
        {"schur_normalized", departure.schur_normalized},
        {"identity_normalized", departure.identity_normalized}}},
      {"self_alignment", alignment},
      {"expanding_fraction", expanding_fraction},
      {"complex_fraction", complex_fraction},
      {"complex_tolerance", complex_tolerance},
      {"symmetry_index", symmetry_index},
      {"effective_rank", effective_rank.to_json()},
  };
  if (include_spectra) {
    nlohmann::json values = nlohmann::json::array();
    for (const Complex& lambda : eigenvalues) values.push_back(complex_json(lambda));
    out["eigenvalues"] = values;
    out["singular_values"] = std::vector<double>(singular_values.data(), singular_values.data() + singular_values.size());
  }
  return out;
}

OperatorMetrics OperatorMetrics::from_json(const nlohmann::json& j) {
  OperatorMetrics m;
  m.d = integer_at(j, "d");
  m.frobenius_norm = number_at(j, "frobenius_norm");
  const double condition = number_at(j, "condition_number");
  m.condition_number = std::isnan(condition) ? std::numeric_limits<double>::infinity() : condition;  // null: +∞
  const nlohmann::json& dep = object_at(j, "henrici_departure");
  m.departure = {number_at(dep, "schur"), number_at(dep, "identity"), number_at(dep, "schur_normalized"),
                 number_at(dep, "identity_normalized")};
  for (const nlohmann::json& a : list_at(j, "self_alignment"))
    m.self_alignment.push_back({integer_at(a, "k_requested"), integer_at(a, "k"), number_at(a, "value")});
  m.expanding_fraction = number_at(j, "expanding_fraction");
  m.complex_fraction = number_at(j, "complex_fraction");
  m.complex_tolerance = number_at(j, "complex_tolerance");
  m.symmetry_index = number_at(j, "symmetry_index");
  m.effective_rank = EffectiveRanks::from_json(object_at(j, "effective_rank"));
  if (j.contains("eigenvalues")) {
    m.eigenvalues.resize(static_cast<Index>(j["eigenvalues"].size()));
    for (Index i = 0; i < m.eigenvalues.size(); ++i) m.eigenvalues[i] = {j["eigenvalues"][i].at(0).get<double>(), j["eigenvalues"][i].at(1).get<double>()};
  }
  if (j.contains("singular_values")) {
    const std::vector<double> sigma = j["singular_values"].get<std::vector<double>>();
    m.singular_values = Eigen::Map<const Vector>(sigma.data(), static_cast<Index>(sigma.size()));
  }
  return m;
}

double NumberReader::next() {
  if (at_ >= numbers_->size()) fail("{}: {} numbers end before the last field", what_, numbers_->size());
  return (*numbers_)[at_++];
}

EffectiveRanks NumberReader::ranks() {
  EffectiveRanks e;
  e.roy_vetterli = next(), e.participation_ratio = next(), e.stable_rank = next();
  e.energy_rank = index(), e.energy_fraction = next();
  return e;
}

void NumberReader::finish() const {
  if (at_ != numbers_->size()) fail("{}: {} numbers left after the last field", what_, numbers_->size() - at_);
}

void append_numbers(std::vector<double>& out, const EffectiveRanks& e) {
  out.insert(out.end(), {e.roy_vetterli, e.participation_ratio, e.stable_rank, static_cast<double>(e.energy_rank), e.energy_fraction});
}

// The fields in declaration order; a length before each list.
void OperatorMetrics::append_numbers(std::vector<double>& out) const {
  out.insert(out.end(), {static_cast<double>(d), static_cast<double>(eigenvalues.size())});
  for (const Complex& lambda : eigenvalues) out.insert(out.end(), {lambda.real(), lambda.imag()});
  out.push_back(static_cast<double>(singular_values.size()));
  out.insert(out.end(), singular_values.data(), singular_values.data() + singular_values.size());
  out.insert(out.end(), {frobenius_norm, condition_number, departure.schur, departure.identity, departure.schur_normalized,
                         departure.identity_normalized, static_cast<double>(self_alignment.size())});
  for (const SubspaceAlignment& a : self_alignment)
    out.insert(out.end(), {static_cast<double>(a.k_requested), static_cast<double>(a.k), a.value});
  out.insert(out.end(), {expanding_fraction, complex_fraction, complex_tolerance, symmetry_index});
  tdyn::append_numbers(out, effective_rank);
}

OperatorMetrics OperatorMetrics::read_numbers(NumberReader& in) {
  OperatorMetrics m;
  m.d = in.index();
  m.eigenvalues.resize(in.index());
  for (Complex& lambda : m.eigenvalues) {
    const double re = in.next();
    lambda = {re, in.next()};
  }
  m.singular_values.resize(in.index());
  for (double& sigma : m.singular_values) sigma = in.next();
  m.frobenius_norm = in.next(), m.condition_number = in.next();
  m.departure.schur = in.next(), m.departure.identity = in.next();
  m.departure.schur_normalized = in.next(), m.departure.identity_normalized = in.next();
  m.self_alignment.resize(static_cast<size_t>(in.index()));
  for (SubspaceAlignment& a : m.self_alignment) a.k_requested = in.index(), a.k = in.index(), a.value = in.next();
  m.expanding_fraction = in.next(), m.complex_fraction = in.next(), m.complex_tolerance = in.next(), m.symmetry_index = in.next();
  m.effective_rank = in.ranks();
  return m;
}

// ---- Dominant spectrum ----------------------------------------------------------------------------------

DominantSpectrum dominant_spectrum(const Eigen::Ref<const Matrix>& f) {
  return dominant_spectrum(linalg::eigen_general(f, true));
}

DominantSpectrum dominant_spectrum(const linalg::Eigendecomposition& decomposition) {
  const Index d = decomposition.eigenvalues.size();
  if (d == 0) fail("dominant_spectrum: empty matrix");
  if (decomposition.eigenvectors.cols() != d)
    fail("dominant_spectrum: the decomposition has no eigenvectors (call eigen_general with want_vectors)");
  const linalg::Eigendecomposition sorted = linalg::sorted_by_modulus(decomposition);

  DominantSpectrum s;
  s.lambda1 = sorted.eigenvalues[0];
  // dgeev returns a real eigenvalue with Im exactly 0, and a pair as exact conjugates with +Im first, which
  // order_by_modulus keeps adjacent: the partner is entry 1.
  s.complex_pair = s.lambda1.imag() != 0;
  const Index next = s.complex_pair ? 2 : 1;
  const double modulus1 = std::abs(s.lambda1);
  if (next < d) {
    s.lambda2 = sorted.eigenvalues[next];
    const double modulus2 = std::abs(*s.lambda2);
    s.modulus_ratio = modulus1 > 0 ? modulus2 / modulus1 : 1.0;
    s.gap = modulus1 - modulus2;
  } else {
    s.gap = modulus1;
  }

  ComplexVector v1 = sorted.eigenvectors.col(0);
  v1 *= normalising_phase(v1);
  v1.normalize();
  s.eigenvector_real = v1.real();
  if (s.complex_pair) s.eigenvector_imag = v1.imag();
  return s;
}

nlohmann::json DominantSpectrum::to_json() const {
  return {
      {"lambda1", complex_json(lambda1)},
      {"lambda1_modulus", std::abs(lambda1)},
      {"lambda1_argument", std::arg(lambda1)},
      {"complex_pair", complex_pair},
      {"lambda2", lambda2 ? complex_json(*lambda2) : nlohmann::json(nullptr)},
      {"lambda2_excludes_conjugate_partner", true},
      {"modulus_ratio", modulus_ratio},
      {"gap", gap},
  };
}

DominantSpectrum DominantSpectrum::from_json(const nlohmann::json& j) {
  DominantSpectrum s;
  s.lambda1 = complex_at(j, "lambda1"), s.complex_pair = boolean_at(j, "complex_pair");
  if (!value_at(j, "lambda2").is_null()) s.lambda2 = complex_at(j, "lambda2");
  s.modulus_ratio = number_at(j, "modulus_ratio"), s.gap = number_at(j, "gap");
  return s;
}

int64_t operators_in_flight(int64_t d, double matrices_each, int64_t n) {
  constexpr double kBytesInFlight = 4.0 * (1 << 30);
  const double bytes_each = matrices_each * sizeof(double) * static_cast<double>(d) * static_cast<double>(d);
  const auto by_memory = static_cast<int64_t>(kBytesInFlight / std::max(bytes_each, 1.0));
  return std::clamp<int64_t>(std::min<int64_t>(omp_get_max_threads(), by_memory), 1, std::max<int64_t>(n, 1));
}

// ---- Schur surgery --------------------------------------------------------------------------------------

ComplexMatrix schur_surgery(const linalg::ComplexSchur& schur, double alpha) {
  if (alpha == 0) return linalg::multiply_adjoint(schur.q * schur.t.diagonal().asDiagonal(), schur.q);  // QΛQ*: one product
  ComplexMatrix t = schur.strictly_upper() * alpha;
  t.diagonal() = schur.t.diagonal();
  return linalg::unitary_similarity(schur.q, t);
}

ComplexMatrix random_strictly_upper(Index d, double frobenius_norm, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> gaussian(0.0, 1.0);
  ComplexMatrix n = ComplexMatrix::Zero(d, d);
  for (Index col = 0; col < d; ++col)  // fixed fill order: column by column, rows above the diagonal
    for (Index row = 0; row < col; ++row) {
      const double re = gaussian(generator), im = gaussian(generator);
      n(row, col) = Complex(re, im) / std::sqrt(2.0);
    }
  const double norm = n.norm();
  if (norm > 0) n *= frobenius_norm / norm;
  return n;
}

ComplexMatrix schur_surgery_control(const linalg::ComplexSchur& schur, double alpha, std::uint64_t seed) {
  const Index d = schur.t.rows();
  ComplexMatrix t = random_strictly_upper(d, schur.strictly_upper().norm(), seed) * alpha;
  t.diagonal() = schur.t.diagonal();
  return linalg::unitary_similarity(schur.q, t);
}

double imaginary_fraction(const ComplexMatrix& a) {
  const double norm = a.norm();
  return norm > 0 ? a.imag().norm() / norm : 0.0;
}

// ---- Cumulative products --------------------------------------------------------------------------------

namespace {

template <typename MatrixType>
std::vector<MatrixType> cumulative_products_impl(const std::vector<MatrixType>& layers) {
  std::vector<MatrixType> products;
  products.reserve(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    if (l == 0) {
      products.push_back(layers[0]);
      continue;
    }
    const MatrixType& previous = products.back();
    if (layers[l].cols() != previous.rows())
      fail("cumulative_products: layer {} is {} × {} but the product of the layers before it is {} × {}", l,
           layers[l].rows(), layers[l].cols(), previous.rows(), previous.cols());
    products.push_back(linalg::multiply(layers[l], previous));
  }
  return products;
}

}  // namespace

std::vector<Matrix> cumulative_products(const std::vector<Matrix>& layers) { return cumulative_products_impl(layers); }
std::vector<ComplexMatrix> cumulative_products(const std::vector<ComplexMatrix>& layers) {
  return cumulative_products_impl(layers);
}

}  // namespace tdyn
