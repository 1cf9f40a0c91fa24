#include "analysis/power/spectra.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include <map>
#include <set>

#include <boost/math/distributions/binomial.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tdyn {
namespace {

Vector row_vector(const Tensor& x, int64_t row) {
  return Eigen::Map<const Eigen::VectorXf>(x.row(row), x.dim(1)).cast<double>();
}

// Orthonormal basis of the column span of `columns` (d × k, full column rank).
Matrix orthonormalize(const Matrix& columns) {
  Eigen::HouseholderQR<Matrix> qr(columns);
  return qr.householderQ() * Matrix::Identity(columns.rows(), columns.cols());
}

// The eigendecomposition of a layer matrix (or of I + F), sorted by modulus: dgeev when d is small enough,
// Spectra's top-k otherwise, and dgeev again when Arnoldi does not converge. `every_eigenvalue` says whether
// the result holds all d eigenpairs (dgeev) or only the top-k; `note` is set when the fallback was taken.
struct SortedSpectrum {
  linalg::Eigendecomposition decomposition;
  bool every_eigenvalue = true;
  std::string note;
};

SortedSpectrum sorted_spectrum(const Matrix& a, const SpectrumOptions& options, const char* name) {
  const Index d = a.rows();
  if (d <= options.full_spectrum_max_d || d < options.top_k + 3)
    return {linalg::sorted_by_modulus(linalg::eigen_general(a, true)), true, ""};
  const Index k = std::min(options.top_k, d - 2);
  if (std::optional<linalg::TopEigenpairs> top = linalg::top_eigenpairs_if_converged(a, k, options.arnoldi))
    return {linalg::sorted_by_modulus({top->eigenvalues, top->eigenvectors}), false, ""};
  const Index restarts = options.arnoldi.max_restarts;
  return {linalg::sorted_by_modulus(linalg::eigen_general(a, true)), true,
          fmt::format("{}: Arnoldi (Spectra) did not converge to the top {} eigenpairs in {} restarts (tolerance "
                      "{:g}); they come from the full dgeev spectrum instead",
                      name, k, restarts, options.arnoldi.tolerance)};
}

// The top_k leading eigenpairs of a sorted decomposition: a fallback's dgeev result cut to what Arnoldi would
// have returned, so every layer has the same number of eigenpairs (and a d × d complex eigenvector matrix per
// layer, 256 MiB at d = 4096, is not kept).
linalg::Eigendecomposition leading(const linalg::Eigendecomposition& sorted, Index k) {
  return {sorted.eigenvalues.head(k), sorted.eigenvectors.leftCols(k)};
}

double quantile_of_sorted(const std::vector<double>& sorted, double level) {
  if (sorted.empty()) return 0;
  const double position = level * (sorted.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (position - below) * (sorted[above] - sorted[below]);
}

// `sample` and `repeated` as in TokenAlignments (both empty when unknown: every token new, one sample each).
AlignmentStats alignment_stats(const std::vector<double>& before, const std::vector<double>& after, double baseline,
                               const std::vector<int64_t>& sample, const std::vector<char>& repeated) {
  TDYN_CHECK(before.size() == after.size());
  TDYN_CHECK(sample.size() == repeated.size() && (sample.empty() || sample.size() == after.size()));
  AlignmentStats s;
  s.tokens = static_cast<int64_t>(after.size());
  s.baseline = baseline;
  if (s.tokens == 0) return s;
  for (size_t i = 0; i < after.size(); ++i) {
    s.gamma += after[i];
    s.gamma_before += before[i];
    s.increases += after[i] > before[i];
  }
  s.gamma /= s.tokens;
  s.gamma_before /= s.tokens;
  s.rho = static_cast<double>(s.increases) / s.tokens;
  s.p_value = binomial_upper_tail(s.increases, s.tokens);

  // New states only, and the sign of ρ_s − 1/2 per sample.
  std::map<int64_t, std::pair<int64_t, int64_t>> per_sample;  // sample → (new tokens, increases among them)
  int64_t unique_increases = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    if (!repeated.empty() && repeated[i]) continue;
    auto& [n, up] = per_sample[sample.empty() ? static_cast<int64_t>(i) : sample[i]];
    ++n, ++s.unique_tokens;
    const bool increase = after[i] > before[i];
    up += increase, unique_increases += increase;
  }
  s.rho_unique = s.unique_tokens ? static_cast<double>(unique_increases) / s.unique_tokens : 0;
  for (const auto& [index, counts] : per_sample) {
    s.samples_above += 2 * counts.second > counts.first;
    s.samples_below += 2 * counts.second < counts.first;
  }
  s.p_value_samples = binomial_upper_tail(s.samples_above, s.samples_above + s.samples_below);

  std::vector<double> sorted = after;
  std::sort(sorted.begin(), sorted.end());
  for (double level : kQuantileLevels) s.quantiles.push_back(quantile_of_sorted(sorted, level));
  s.histogram.assign(kHistogramBins, 0);
  for (double a : after) ++s.histogram[std::clamp(static_cast<int>(a * kHistogramBins), 0, kHistogramBins - 1)];
  return s;
}

// Keeps progress lines to about one every 5 % of a loop.
void report_progress(const ProgressFn& progress, int64_t done, int64_t total, const std::string& what) {
  if (!progress || total <= 0) return;
  const int64_t every = std::max<int64_t>(1, total / 20);
  if (done % every == 0 || done == total) progress(fmt::format("{}: {}/{}", what, done, total));
}

// The eigen-coordinate ζ = α − iβ of x's projection α Re v + β Im v onto the plane of a complex eigenvector v:
// F acts on it as multiplication by λ (F Re(ζ v) = Re(ζ λ v)).
struct PlaneCoordinates {
  Matrix pseudo_inverse;  // (2 × d) of [Re v, Im v]
  explicit PlaneCoordinates(const DominantSpectrum& s) {
    Matrix p(s.eigenvector_real.size(), 2);
    p.col(0) = s.eigenvector_real;
    p.col(1) = s.eigenvector_imag;
    pseudo_inverse = (p.transpose() * p).inverse() * p.transpose();
  }
  Complex operator()(const Vector& x) const {
    Eigen::Vector2d ab = pseudo_inverse * x;
    return {ab[0], -ab[1]};
  }
};

// Sign of ⟨x_i, v⟩ per token.
std::vector<int> sign_pattern(const Tensor& x, const Vector& v) {
  std::vector<int> signs(x.dim(0));
  for (int64_t i = 0; i < x.dim(0); ++i) signs[i] = row_vector(x, i).dot(v) >= 0 ? 1 : -1;
  return signs;
}

}  // namespace

// ---- Spectra -------------------------------------------------------------------------------------------------

nlohmann::json LayerSpectrum::to_json() const {
  return {{"layer", layer},
          {"value_layer", value_layer},
          {"full_spectrum", full},
          {"F", f.to_json()},
          {"I_plus_F", identity_plus_f.to_json()},
          {"bias_norm", bias_norm},
          {"frobenius_norm", frobenius_norm},
          {"notes", notes}};
}

LayerSpectrum layer_spectrum(const LayerMatrix& m, const SpectrumOptions& options) {
  LayerSpectrum s;
  s.layer = m.layer;
  s.value_layer = m.value_layer;
  s.bias_norm = m.bias.norm();
  s.frobenius_norm = m.f.norm();
  const SortedSpectrum f = sorted_spectrum(m.f, options, "F");
  s.f = dominant_spectrum(f.decomposition);
  if (f.every_eigenvalue) {
    // I + F has the same eigenvectors and eigenvalues 1 + λ.
    linalg::Eigendecomposition shifted = f.decomposition;
    shifted.eigenvalues.array() += 1.0;
    s.identity_plus_f = dominant_spectrum(shifted);
  } else {
    const Matrix identity_plus_f = m.f + Matrix::Identity(m.f.rows(), m.f.cols());
    const SortedSpectrum shifted = sorted_spectrum(identity_plus_f, options, "I + F");
    s.identity_plus_f = dominant_spectrum(shifted.decomposition);
    if (!shifted.note.empty()) s.notes.push_back(shifted.note);
  }
  if (f.note.empty()) {
    s.full = f.every_eigenvalue;
    s.eigenvalues = f.decomposition.eigenvalues;
    s.eigenvectors = f.decomposition.eigenvectors;
  } else {
    s.full = false;
    s.notes.insert(s.notes.begin(), f.note);
    const linalg::Eigendecomposition top = leading(f.decomposition, std::min(options.top_k, m.f.rows() - 2));
    s.eigenvalues = top.eigenvalues;
    s.eigenvectors = top.eigenvectors;
  }
  return s;
}

Matrix dominant_basis(const DominantSpectrum& s) {
  if (!s.complex_pair) return s.eigenvector_real.normalized();
  Matrix plane(s.eigenvector_real.size(), 2);
  plane.col(0) = s.eigenvector_real;
  plane.col(1) = s.eigenvector_imag;
  return orthonormalize(plane);
}

std::vector<EigenGroup> eigen_groups(const ComplexVector& eigenvalues) {
  std::vector<EigenGroup> groups;
  for (Index i = 0; i < eigenvalues.size(); ++i) {
    const bool pair = eigenvalues[i].imag() != 0 && i + 1 < eigenvalues.size() &&
                      eigenvalues[i + 1] == std::conj(eigenvalues[i]);
    groups.push_back({i, pair});
    if (pair) ++i;
  }
  return groups;
}

Matrix invariant_basis(const ComplexMatrix& eigenvectors, const std::vector<EigenGroup>& groups) {
  std::vector<Vector> columns;
  for (const EigenGroup& g : groups) {
    columns.push_back(eigenvectors.col(g.start).real());
    if (g.pair || eigenvectors.col(g.start).imag().norm() > 0) columns.push_back(eigenvectors.col(g.start).imag());
  }
  Matrix m(eigenvectors.rows(), static_cast<Index>(columns.size()));
  for (size_t j = 0; j < columns.size(); ++j) m.col(j) = columns[j];
  return orthonormalize(m);
}

double alignment(const Eigen::Ref<const Vector>& x, const Matrix& basis) {
  const double norm = x.norm();
  return norm > 0 ? (basis.transpose() * x).norm() / norm : 0.0;
}

std::vector<double> token_covariance_alignments(const Matrix& tokens, Index k, uint64_t seed) {
  TDYN_CHECK(k >= 1 && k <= tokens.cols());
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  Matrix g(tokens.rows(), k);
  for (Index j = 0; j < k; ++j)
    for (Index i = 0; i < tokens.rows(); ++i) g(i, j) = normal(rng);  // column by column: k = 1 and 2 share the first
  const Matrix centred = tokens.rowwise() - tokens.colwise().mean();
  const Matrix u = centred.transpose() * g;
  const Eigen::ColPivHouseholderQR<Matrix> qr(u);
  std::vector<double> out(tokens.rows(), std::numeric_limits<double>::quiet_NaN());
  // Rank by the QR's own threshold, relative to the largest column: directions of round-off size are no directions.
  if (tokens.rows() == 0 || qr.rank() < k) return out;
  const Matrix basis = qr.householderQ() * Matrix::Identity(tokens.cols(), k);
  for (Index i = 0; i < tokens.rows(); ++i) out[i] = alignment(tokens.row(i).transpose(), basis);
  return out;
}

uint64_t token_covariance_seed(int64_t layer, int64_t sample) {
  // splitmix64 of (layer, sample): neighbouring layers and samples get unrelated streams.
  uint64_t z = (static_cast<uint64_t>(layer) << 40) ^ static_cast<uint64_t>(sample) ^ 0x6a09e667f3bcc909ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double random_alignment_baseline(Index d, Index k) {
  TDYN_CHECK(d >= 1 && k >= 1 && k <= d);
  const double dd = static_cast<double>(d), kk = static_cast<double>(k);
  return std::exp(std::lgamma((kk + 1) / 2) + std::lgamma(dd / 2) - std::lgamma(kk / 2) - std::lgamma((dd + 1) / 2));
}

double binomial_upper_tail(int64_t successes, int64_t trials) {
  if (successes <= 0) return 1.0;
  if (successes > trials) return 0.0;
  boost::math::binomial_distribution<double> binomial(static_cast<double>(trials), 0.5);
  return boost::math::cdf(boost::math::complement(binomial, static_cast<double>(successes - 1)));
}

// ---- Token dynamics --------------------------------------------------------------------------------------------

nlohmann::json AlignmentStats::to_json() const {
  nlohmann::json q = nlohmann::json::object();
  for (size_t i = 0; i < quantiles.size(); ++i) q[fmt::format("{:g}", kQuantileLevels[i])] = quantiles[i];
  return {{"tokens", tokens},   {"gamma", gamma},         {"gamma_before", gamma_before},
          {"baseline", baseline},
          {"gamma_covariance", std::isnan(gamma_covariance) ? nlohmann::json(nullptr) : nlohmann::json(gamma_covariance)},
          {"rho", rho},           {"increases", increases},
          {"p_value", p_value}, {"quantiles", q},         {"histogram", histogram},
          {"unique_tokens", unique_tokens}, {"rho_unique", rho_unique}, {"samples_above", samples_above},
          {"samples_below", samples_below}, {"p_value_samples", p_value_samples}};
}

TokenDynamics token_dynamics(const Transformer& model, const std::vector<Sample>& samples,
                             const std::vector<LayerSpectrum>& spectra, const DynamicsOptions& options,
                             const ProgressFn& progress) {
  const int64_t n_layers = model.config().n_layers;
  TDYN_CHECK(static_cast<int64_t>(spectra.size()) == n_layers);
  std::vector<Matrix> basis_f, basis_if;  // dominant subspaces of F_t and I + F_t
  for (const auto& s : spectra) {
    basis_f.push_back(dominant_basis(s.f));
    basis_if.push_back(dominant_basis(s.identity_plus_f));
  }
  TokenAlignments a;
  a.samples = static_cast<int64_t>(samples.size());
  for (auto* v : {&a.before_f, &a.after_f, &a.before_if, &a.after_if, &a.norm_before, &a.norm_after, &a.after_covariance})
    v->assign(n_layers, {});
  a.cross_alignment = Matrix::Zero(n_layers, n_layers);  // sums, divided by the token count below
  for (size_t si = 0; si < samples.size(); ++si) {
    TokenState state = initial_state(model, samples[si].ids, options);
    const int64_t n = state.x.dim(0);
    for (int64_t t = 0; t < n_layers; ++t) {
      for (int64_t i = 0; i < n; ++i) {
        const Vector x = row_vector(state.x, i);
        a.before_f[t].push_back(alignment(x, basis_f[t]));
        a.before_if[t].push_back(alignment(x, basis_if[t]));
        a.norm_before[t].push_back(x.norm());
      }
      apply_layer(model, t, state, options);
      Matrix after(n, state.x.dim(1));
      for (int64_t i = 0; i < n; ++i) {
        const Vector x = row_vector(state.x, i);
        after.row(i) = x.transpose();
        a.after_f[t].push_back(alignment(x, basis_f[t]));
        a.after_if[t].push_back(alignment(x, basis_if[t]));
        a.norm_after[t].push_back(x.norm());
        for (int64_t s = 0; s < n_layers; ++s) a.cross_alignment(t, s) += alignment(x, basis_f[s]);
      }
      const std::vector<double> covariance = token_covariance_alignments(after, basis_f[t].cols(), token_covariance_seed(t, si));
      a.after_covariance[t].insert(a.after_covariance[t].end(), covariance.begin(), covariance.end());
    }
    report_progress(progress, static_cast<int64_t>(si) + 1, a.samples, "token dynamics, samples");
  }
  if (n_layers > 0 && !a.after_f[0].empty()) a.cross_alignment /= static_cast<double>(a.after_f[0].size());
  mark_repeated_states(samples, model.config().causal, &a);
  return summarize_token_dynamics(std::move(a), spectra, model.config().d_model, options);
}

void mark_repeated_states(const std::vector<Sample>& samples, bool causal, TokenAlignments* a) {
  a->sample_of_token.clear();
  a->repeated.clear();
  // A trie of the prefixes seen so far: (node, token id) → child node; node 0 is the empty prefix.
  std::map<std::pair<int64_t, int32_t>, int64_t> children;
  std::set<std::vector<int32_t>> sequences;
  for (size_t si = 0; si < samples.size(); ++si) {
    const auto& ids = samples[si].ids;
    const bool seen_sequence = !causal && !sequences.insert(ids).second;
    int64_t node = 0;
    for (int32_t id : ids) {
      bool seen = seen_sequence;
      if (causal) {
        auto [it, inserted] = children.try_emplace({node, id}, static_cast<int64_t>(children.size()) + 1);
        seen = !inserted;
        node = it->second;
      }
      a->sample_of_token.push_back(static_cast<int64_t>(si));
      a->repeated.push_back(seen);
    }
  }
}

TokenDynamics summarize_token_dynamics(TokenAlignments a, const std::vector<LayerSpectrum>& spectra, int64_t d,
                                       const DynamicsOptions& options) {
  const int64_t n_layers = static_cast<int64_t>(spectra.size());
  TDYN_CHECK(static_cast<int64_t>(a.before_f.size()) == n_layers);
  TokenDynamics out;
  out.options = options;
  out.samples = a.samples;
  out.tokens = n_layers > 0 ? static_cast<int64_t>(a.before_f[0].size()) : 0;
  for (int64_t t = 0; t < n_layers; ++t) {
    const auto& s = spectra[t];
    LayerDynamics l;
    l.layer = t;
    l.f = alignment_stats(a.before_f[t], a.after_f[t], random_alignment_baseline(d, dominant_basis(s.f).cols()), a.sample_of_token,
                          a.repeated);
    if (!a.after_covariance.empty()) {
      double sum = 0;
      int64_t counted = 0;
      for (double v : a.after_covariance[t])
        if (!std::isnan(v)) sum += v, ++counted;
      l.f.gamma_covariance = counted ? sum / counted : std::numeric_limits<double>::quiet_NaN();
    }
    l.identity_plus_f = alignment_stats(a.before_if[t], a.after_if[t], random_alignment_baseline(d, dominant_basis(s.identity_plus_f).cols()),
                                        a.sample_of_token, a.repeated);
    double before = 0, after = 0;  // summed in token order
    for (double v : a.norm_before[t]) before += v;
    for (double v : a.norm_after[t]) after += v;
    l.mean_norm_before = out.tokens ? before / out.tokens : 0;
    l.mean_norm_after = out.tokens ? after / out.tokens : 0;
    out.layers.push_back(std::move(l));
  }
  out.before = std::move(a.before_f);
  out.after = std::move(a.after_f);
  out.cross_alignment = std::move(a.cross_alignment);
  return out;
}

// ---- Shared-weight iteration -----------------------------------------------------------------------------------

const char* to_string(Regime regime) {
  switch (regime) {
    case Regime::Consensus: return "consensus";
    case Regime::Bipartite: return "bipartite";
    case Regime::Rotation: return "rotation";
    case Regime::SlowConvergence: return "slow-convergence";
    case Regime::NotConverged: return "not-converged";
  }
  return "?";
}

nlohmann::json RegimeEvidence::to_json() const {
  return {{"regime", to_string(regime)}, {"eigenvector", eigenvector}, {"min_alignment", min_alignment},
          {"min_cosine_to_mean", min_cosine_to_mean}, {"positive", positive}, {"negative", negative},
          {"description", description}};
}

RegimeEvidence classify_regime(const Tensor& x, const ComplexVector& eigenvalues, const ComplexMatrix& eigenvectors,
                               double threshold, int64_t eigenvectors_searched) {
  const int64_t n = x.dim(0);
  std::vector<EigenGroup> groups = eigen_groups(eigenvalues);
  if (static_cast<int64_t>(groups.size()) > eigenvectors_searched) groups.resize(std::max<int64_t>(eigenvectors_searched, 2));
  auto min_alignment = [&](const Matrix& basis) {
    double lowest = 1;
    for (int64_t i = 0; i < n; ++i) lowest = std::min(lowest, alignment(row_vector(x, i), basis));
    return lowest;
  };
  RegimeEvidence e;
  // Token-to-token spread, whatever the eigenvectors: the smallest cosine between a token and the tokens' mean
  // direction. The full layer (norms, MLP, biases) can hold every token at one fixed point that is no eigenvector
  // of the linear step matrix; that is consensus too.
  Vector mean_direction = Vector::Zero(x.dim(1));
  for (int64_t i = 0; i < n; ++i) {
    const Vector xi = row_vector(x, i);
    if (xi.norm() > 0) mean_direction += xi / xi.norm();
  }
  e.min_cosine_to_mean = mean_direction.norm() > 0 ? 1.0 : 0.0;
  for (int64_t i = 0; i < n && mean_direction.norm() > 0; ++i) {
    const Vector xi = row_vector(x, i);
    e.min_cosine_to_mean =
        std::min(e.min_cosine_to_mean, xi.norm() > 0 ? xi.dot(mean_direction) / (xi.norm() * mean_direction.norm()) : 0.0);
  }
  // A single eigenvector v_k (or the dominant plane) holding every token.
  for (size_t g = 0; g < groups.size(); ++g) {
    const Matrix basis = invariant_basis(eigenvectors, {groups[g]});
    const double lowest = min_alignment(basis);
    if (g == 0) e.min_alignment = lowest;
    if (lowest < threshold) continue;
    e.eigenvector = groups[g].start;
    e.min_alignment = lowest;
    const Complex lambda = eigenvalues[groups[g].start];
    if (groups[g].pair) {
      if (g != 0) continue;  // a non-dominant plane: not one of the paper's regimes
      e.regime = Regime::Rotation;
      e.description = fmt::format("every token in span{{Re v1, Im v1}} (min alignment {:.6f}); lambda1 = {:.6g}{:+.6g}i, "
                                  "arg = {:.6g} rad per step", lowest, lambda.real(), lambda.imag(), std::arg(lambda));
      return e;
    }
    for (int s : sign_pattern(x, eigenvectors.col(groups[g].start).real())) (s > 0 ? e.positive : e.negative) += 1;
    e.regime = (e.positive == 0 || e.negative == 0) ? Regime::Consensus : Regime::Bipartite;
    e.description = fmt::format("every token on ±v{} (min alignment {:.6f}; {} on +v, {} on −v); lambda = {:.6g}",
                                groups[g].start + 1, lowest, e.positive, e.negative, lambda.real());
    return e;
  }
  if (e.min_cosine_to_mean >= threshold) {
    e.regime = Regime::Consensus;
    e.eigenvector = -1;
    e.positive = n;
    e.description = fmt::format("every token on one ray (min cosine with the tokens' mean direction {:.6f}) that is no "
                                "eigenvector of the step matrix (min alignment with its dominant subspace {:.6f}): a "
                                "consensus fixed point of the layer away from the eigenvectors",
                                e.min_cosine_to_mean, e.min_alignment);
    return e;
  }
  if (groups.size() >= 2) {
    const double lowest = min_alignment(invariant_basis(eigenvectors, {groups[0], groups[1]}));
    if (lowest >= threshold) {
      e.regime = Regime::SlowConvergence;
      const double ratio = std::abs(eigenvalues[groups[1].start]) / std::abs(eigenvalues[0]);
      e.description = fmt::format("every token in span{{v1, v2}} (min alignment {:.6f}) but not on v1 (min {:.6f}); "
                                  "|lambda2|/|lambda1| = {:.6f}", lowest, e.min_alignment, ratio);
      return e;
    }
  }
  e.regime = Regime::NotConverged;
  e.description = fmt::format("no eigenvector among the top {} (nor span{{v1, v2}}) holds every token at alignment ≥ {} "
                              "(min alignment with the dominant subspace {:.6f})", groups.size(), threshold, e.min_alignment);
  return e;
}

nlohmann::json BipartiteTest::to_json() const {
  if (!ran) return {{"ran", false}};
  return {{"ran", true},
          {"eigenvector", eigenvector},
          {"perturbation", perturbation},
          {"unperturbed", unperturbed.to_json()},
          {"perturbed", perturbed.to_json()},
          {"sign_flips_perturbed", sign_flips_perturbed},
          {"left_unperturbed", left_unperturbed},
          {"left_perturbed", left_perturbed}};
}

nlohmann::json IterationResult::to_json() const {
  return {{"layer", layer},
          {"sample_index", sample_index},
          {"tokens", tokens},
          {"steps", static_cast<int64_t>(curves.mean_alignment.size()) - 1},
          {"step_matrix", step_matrix},
          {"step_matrix_spectrum", step.to_json()},
          {"regime", regime.to_json()},
          {"measured_angle_per_step", step.complex_pair ? nlohmann::json(measured_angle_per_step) : nlohmann::json(nullptr)},
          {"expected_angle_per_step", expected_angle_per_step},
          {"final_mean_alignment", curves.mean_alignment.back()},
          {"final_min_alignment", curves.min_alignment.back()},
          {"final_span12_energy", curves.span12_energy.back()},
          {"final_positive_fraction", curves.positive_fraction.back()},
          {"bipartite_test", bipartite.to_json()}};
}

IterationResult iterate_layer(const Transformer& model, const Sample& sample, const LayerMatrix& matrix,
                              const IterationOptions& options, const ProgressFn& progress) {
  const int64_t layer = options.layer, d = model.config().d_model;
  if (layer != matrix.layer) fail("iterate_layer: the layer matrix is of layer {}, not {}", matrix.layer, layer);
  if (options.steps < 1) fail("the iteration needs at least one step, got {}", options.steps);
  const DynamicsOptions& dyn = options.dynamics;

  // The step matrix: a residual step x + F x linearises to I + F, a plain one to F. In attn-only-l2 the attention
  // reads G x (power_dynamics.h), so F G takes F's place.
  IterationResult r;
  r.layer = layer;
  r.sample_index = sample.source_index;
  const bool gain = dyn.mode == DynamicsMode::AttnOnlyL2;
  Matrix linear = matrix.f;
  if (gain) {
    const std::vector<double> g = unit_token_gain(model.model(), layer);
    linear = linear * Eigen::Map<const Vector>(g.data(), d).asDiagonal();
  }
  const std::string f_name = gain ? "F G" : "F";
  r.step_matrix = dyn.residual ? "I + " + f_name : f_name;
  const Matrix step_matrix = dyn.residual ? Matrix(linear + Matrix::Identity(d, d)) : linear;
  SpectrumOptions spectrum_options;
  spectrum_options.top_k = std::max<Index>(spectrum_options.top_k, options.eigenvectors + 2);
  const linalg::Eigendecomposition decomposition =
      sorted_spectrum(step_matrix, spectrum_options, r.step_matrix.c_str()).decomposition;
  r.step = dominant_spectrum(decomposition);
  r.expected_angle_per_step = std::arg(r.step.lambda1);
  const Matrix basis1 = dominant_basis(r.step);
  const Matrix basis_f = dyn.residual || gain ? dominant_basis(layer_spectrum(matrix, spectrum_options).f) : basis1;
  const std::vector<EigenGroup> groups = eigen_groups(decomposition.eigenvalues);
  const Matrix basis12 = invariant_basis(decomposition.eigenvectors,
                                         {groups.begin(), groups.begin() + std::min<size_t>(2, groups.size())});
  std::optional<PlaneCoordinates> plane;
  if (r.step.complex_pair) plane.emplace(r.step);

  // The states entering the layer in the model (in the chosen mode).
  TokenState state = initial_state(model, sample.ids, dyn);
  for (int64_t l = 0; l < layer; ++l) apply_layer(model, l, state, dyn);
  const int64_t n = state.x.dim(0);
  r.tokens = n;

  std::vector<Complex> previous(n);
  auto record = [&](int64_t step) {
    double sum = 0, lowest = 1, sum_f = 0, energy = 0, positive = 0, angle_sum = 0;
    int64_t angles = 0;
    for (int64_t i = 0; i < n; ++i) {
      const Vector x = row_vector(state.x, i);
      const double a = alignment(x, basis1);
      sum += a;
      lowest = std::min(lowest, a);
      sum_f += alignment(x, basis_f);
      const double a12 = alignment(x, basis12);
      energy += a12 * a12;
      positive += x.dot(r.step.eigenvector_real) > 0;
      r.alignment_per_token.push_back(a);
      Complex zeta = plane ? (*plane)(x) : Complex(x.dot(r.step.eigenvector_real), 0);
      const double norm = x.norm();
      r.plane_coordinates.push_back(norm > 0 ? zeta.real() / norm : 0);
      r.plane_coordinates.push_back(norm > 0 ? zeta.imag() / norm : 0);
      if (plane && step > 0 && std::abs(zeta) > 0 && std::abs(previous[i]) > 0) {
        angle_sum += std::arg(zeta / previous[i]);
        ++angles;
      }
      previous[i] = zeta;
    }
    IterationCurves& c = r.curves;
    c.mean_alignment.push_back(sum / n);
    c.min_alignment.push_back(lowest);
    c.mean_alignment_f.push_back(sum_f / n);
    c.span12_energy.push_back(energy / n);
    c.positive_fraction.push_back(positive / n);
    c.mean_angle_step.push_back(angles ? angle_sum / angles : 0);
  };
  record(0);
  for (int64_t k = 1; k <= options.steps; ++k) {
    apply_layer(model, layer, state, dyn, /*refresh_shared_kv=*/true);
    record(k);
    report_progress(progress, k, options.steps, fmt::format("iterating layer {}, steps", layer));
  }
  const auto& angles = r.curves.mean_angle_step;
  const int64_t tail = std::max<int64_t>(1, options.steps / 4);
  r.measured_angle_per_step = std::accumulate(angles.end() - tail, angles.end(), 0.0) / tail;
  r.regime = classify_regime(state.x, decomposition.eigenvalues, decomposition.eigenvectors, options.threshold,
                             options.eigenvectors);

  // Bipartite instability: put the tokens on ±v_k (alternating signs, norms kept), optionally perturb, iterate.
  std::optional<Index> k;
  if (r.regime.regime == Regime::Bipartite) k = r.regime.eigenvector;
  for (size_t g = 0; !k && g < groups.size() && static_cast<int64_t>(g) < options.eigenvectors; ++g)
    if (!groups[g].pair) k = groups[g].start;
  if (k) {
    BipartiteTest& b = r.bipartite;
    b.ran = true;
    b.eigenvector = *k;
    b.perturbation = options.perturbation;
    const Vector v = decomposition.eigenvectors.col(*k).real().normalized();
    std::vector<int> split(n);
    for (int64_t i = 0; i < n; ++i) split[i] = i % 2 == 0 ? 1 : -1;
    const int64_t test_steps = options.bipartite_steps > 0 ? options.bipartite_steps : options.steps;
    std::mt19937_64 rng(options.seed);
    std::normal_distribution<double> gaussian;
    for (double size : {0.0, options.perturbation}) {
      TokenState test = state;
      for (int64_t i = 0; i < n; ++i) {
        const double norm = row_vector(state.x, i).norm();
        Vector noise(d);
        for (Index j = 0; j < d; ++j) noise[j] = gaussian(rng);
        const Vector x = split[i] * norm * v + size * norm * noise.normalized();
        for (Index j = 0; j < d; ++j) test.x.row(i)[j] = static_cast<float>(x[j]);
      }
      for (int64_t s = 0; s < test_steps; ++s) apply_layer(model, layer, test, dyn, true);
      RegimeEvidence e = classify_regime(test.x, decomposition.eigenvalues, decomposition.eigenvectors,
                                         options.threshold, options.eigenvectors);
      // The same split up to a global sign (a negative eigenvalue flips every token each step).
      const std::vector<int> signs = sign_pattern(test.x, v);
      int64_t same = 0;
      for (int64_t i = 0; i < n; ++i) same += signs[i] == split[i];
      const int64_t flips = std::min(same, n - same);
      const bool left = !(e.regime == Regime::Bipartite && e.eigenvector == *k && flips == 0);
      if (size == 0) {
        b.unperturbed = e;
        b.left_unperturbed = left;
      } else {
        b.perturbed = e;
        b.left_perturbed = left;
        b.sign_flips_perturbed = flips;
      }
    }
  }
  return r;
}

// ---- Steering -------------------------------------------------------------------------------------------------

RankOneSteering rank_one_steering(const Model& model, int64_t layer, const Vector& direction) {
  const int64_t d = model.config.d_model;
  if (direction.size() != d) fail("the steering direction has {} entries but d_model is {}", direction.size(), d);
  if (!(direction.norm() > 0) || !direction.allFinite()) fail("the steering direction must be finite and non-zero");
  RankOneSteering s;
  s.layer = layer;
  s.u = direction.normalized();
  // V = U Σ Wᵀ (thin): V⁺ᵀ u = U Σ⁻¹ Wᵀ u and V⁺V u = W Wᵀ u over the singular values above round-off.
  const Matrix v = expanded_value_matrix(model, layer);  // [n_heads * d_head, d_model]
  const linalg::SingularValueDecomposition svd = linalg::svd(v, true);
  const double cutoff = std::max(v.rows(), v.cols()) * std::numeric_limits<double>::epsilon() *
                        (svd.singular_values.size() ? svd.singular_values[0] : 0.0);
  s.w = Vector::Zero(v.rows());
  for (Index i = 0; i < svd.singular_values.size(); ++i) {
    if (svd.singular_values[i] <= cutoff) break;
    const double coefficient = svd.v.col(i).dot(s.u);
    s.w += svd.u.col(i) * (coefficient / svd.singular_values[i]);
    s.reachable += coefficient * coefficient;
  }
  if (s.reachable < 1e-12)
    fail("the steering direction is orthogonal to the row space of layer {}'s value projection: no rank-1 change of "
         "O can make it an eigenvector", layer);
  return s;
}

namespace {

struct SteeredModel {
  std::shared_ptr<const Model> base;  // owns the storage the views point into
  Model model;
};

}  // namespace

std::shared_ptr<const Model> steered_model(std::shared_ptr<const Model> base, const RankOneSteering& s, double c) {
  auto holder = std::make_shared<SteeredModel>();
  holder->base = base;
  Model& m = holder->model;
  m.path = base->path;
  m.config = base->config;
  m.store = base->store;
  m.weights = base->weights;
  const Linear& o = base->weights.layers.at(s.layer).o;  // [d_model, n_heads * d_head]
  TDYN_CHECK(s.u.size() == o.out && s.w.size() == o.in);
  // O' = O + c u wᵀ as float32 in the base's layout ([out, in], or GPT-2 Conv1D [in, out]): for a float32 O the
  // same GEMM runs, so c = 0 reproduces the base model bit for bit.
  const Eigen::MatrixXf steered = (o.dense() + c * s.u * s.w.transpose()).cast<float>();  // column-major [out, in]
  // Column-major [out, in] is row-major [in, out]: the Conv1D layout as it is, the nn.Linear one once transposed.
  const Eigen::MatrixXf stored = o.in_out ? steered : Eigen::MatrixXf(steered.transpose());
  auto storage = std::make_shared<std::vector<float>>(stored.data(), stored.data() + stored.size());
  m.weights.owners.push_back(storage);
  m.weights.layers[s.layer].o.w = o.in_out ? StoredMatrix::of_floats(storage->data(), o.in, o.out, o.out)
                                           : StoredMatrix::of_floats(storage->data(), o.out, o.in, o.in);
  return std::shared_ptr<const Model>(holder, &holder->model);
}

Vector random_direction(Index d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> gaussian;
  Vector u(d);
  for (Index i = 0; i < d; ++i) u[i] = gaussian(rng);
  return u.normalized();
}

Vector token_direction(const Model& model, int32_t token) {
  const ModelConfig& c = model.config;
  if (token < 0 || token >= c.d_vocab) fail("token {} is outside the vocabulary [0, {})", token, c.d_vocab);
  const int64_t e = c.embed_dim();
  std::vector<float> row(e);
  model.weights.embed.row_floats(token, 0, e, row.data());
  if (model.weights.embed_map) {  // ALBERT: embedding_size -> d_model
    std::vector<float> mapped(c.d_model);
    model.weights.embed_map.apply(row.data(), 1, mapped.data());
    row = std::move(mapped);
  }
  Vector u = Eigen::Map<const Eigen::VectorXf>(row.data(), static_cast<Index>(row.size())).cast<double>();
  if (!(u.norm() > 0)) fail("token {}'s embedding is zero: it defines no direction", token);
  return u.normalized();
}

nlohmann::json SteeringPoint::to_json() const {
  nlohmann::json top = nlohmann::json::array();
  for (const auto& t : top_tokens) top.push_back({{"token", t.token}, {"probability", t.probability}});
  return {{"scale", scale},
          {"c", c},
          {"spectrum", spectrum.to_json()},
          {"eigenvector_alignment_with_u", eigenvector_alignment},
          {"final_layer_mean_alignment", mean_alignment},
          {"final_layer_min_alignment", min_alignment},
          {"mean_kl_unsteered_to_steered", mean_kl},
          {"max_kl_unsteered_to_steered", max_kl},
          {"mean_probability_of_token_closest_to_u", probability_of_argmax_u},
          {"top_tokens", top}};
}

nlohmann::json SteeringResult::to_json() const {
  nlohmann::json out = {{"layer", steering.layer},
                        {"reachable_fraction", steering.reachable},
                        {"lambda1_modulus", lambda1_modulus},
                        {"token_closest_to_u", token_closest_to_u},
                        {"tokens", tokens},
                        {"points", nlohmann::json::array()}};
  nlohmann::json top = nlohmann::json::array();
  for (const auto& t : unsteered_top_tokens) top.push_back({{"token", t.token}, {"probability", t.probability}});
  out["unsteered_top_tokens"] = top;
  for (const auto& p : points) out["points"].push_back(p.to_json());
  return out;
}

namespace {

// log softmax of one row of logits, in float64.
std::vector<double> log_softmax(const float* logits, int64_t n) {
  std::vector<double> out(logits, logits + n);
  const double top = *std::max_element(out.begin(), out.end());
  double sum = 0;
  for (double v : out) sum += std::exp(v - top);
  const double log_sum = top + std::log(sum);
  for (double& v : out) v -= log_sum;
  return out;
}

std::vector<TokenProbability> top_tokens(const std::vector<double>& probabilities, int64_t k) {
  std::vector<int32_t> order(probabilities.size());
  std::iota(order.begin(), order.end(), 0);
  k = std::min<int64_t>(k, static_cast<int64_t>(order.size()));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return probabilities[a] > probabilities[b]; });
  std::vector<TokenProbability> out;
  for (int64_t i = 0; i < k; ++i) out.push_back({order[i], probabilities[order[i]]});
  return out;
}

}  // namespace

SteeringResult steering_sweep(std::shared_ptr<const Model> model, const Vector& direction,
                              const std::vector<Sample>& samples, const SteeringOptions& options,
                              const ProgressFn& progress) {
  const ModelConfig& c = model->config;
  const int64_t last = c.n_layers - 1, vocab = c.d_vocab;
  SteeringResult result;
  result.steering = rank_one_steering(*model, last, direction);
  const Vector& u = result.steering.u;
  result.lambda1_modulus = std::abs(layer_spectrum(layer_matrix(*model, last)).f.lambda1);

  const Transformer base(model);
  {  // the token the unembedding maps u to (through the final norm / MLM head, as the stream would be)
    Tensor x({1, c.d_model});
    for (int64_t j = 0; j < c.d_model; ++j) x.data[j] = static_cast<float>(u[j]);
    Tensor logits = base.unembed(x);
    result.token_closest_to_u = static_cast<int32_t>(std::max_element(logits.data.begin(), logits.data.end()) - logits.data.begin());
  }

  std::vector<Transformer> steered;
  for (double scale : options.scales) {
    SteeringPoint p;
    p.scale = scale;
    p.c = scale * result.lambda1_modulus;
    auto m = steered_model(model, result.steering, p.c);
    const LayerSpectrum spectrum = layer_spectrum(layer_matrix(*m, last));
    p.spectrum = spectrum.f;
    p.eigenvector_alignment = alignment(u, dominant_basis(spectrum.f));
    p.min_alignment = 1;
    result.points.push_back(std::move(p));
    steered.emplace_back(m);
  }

  const std::string final_hook = fmt::format("blocks.{}.hook_resid_post", last);
  std::vector<std::vector<double>> mean_probability(options.scales.size(), std::vector<double>(vocab, 0.0));
  std::vector<double> unsteered_probability(vocab, 0.0);
  int64_t positions = 0;
  for (size_t si = 0; si < samples.size(); ++si) {
    const auto& ids = samples[si].ids;
    const int64_t n = static_cast<int64_t>(ids.size());
    const Tensor base_logits = base.forward(ids);
    std::vector<std::vector<double>> base_log(n);
    for (int64_t i = 0; i < n; ++i) {
      base_log[i] = log_softmax(base_logits.row(i), vocab);
      for (int64_t v = 0; v < vocab; ++v) unsteered_probability[v] += std::exp(base_log[i][v]);
    }
    for (size_t pi = 0; pi < steered.size(); ++pi) {
      SteeringPoint& p = result.points[pi];
      ActivationCache cache(final_hook);
      const Tensor logits = steered[pi].forward(ids, &cache);
      const Tensor& final_states = cache.at(final_hook);
      const Matrix basis = u;
      for (int64_t i = 0; i < n; ++i) {
        const double a = alignment(row_vector(final_states, i), basis);
        p.mean_alignment += a;
        p.min_alignment = std::min(p.min_alignment, a);
        const std::vector<double> log_q = log_softmax(logits.row(i), vocab);
        double kl = 0;
        for (int64_t v = 0; v < vocab; ++v) {
          const double pv = std::exp(base_log[i][v]);
          if (pv > 0) kl += pv * (base_log[i][v] - log_q[v]);
          mean_probability[pi][v] += std::exp(log_q[v]);
        }
        p.mean_kl += kl;
        p.max_kl = std::max(p.max_kl, kl);
        p.probability_of_argmax_u += std::exp(log_q[result.token_closest_to_u]);
      }
    }
    positions += n;
    report_progress(progress, static_cast<int64_t>(si) + 1, static_cast<int64_t>(samples.size()), "steering, samples");
  }
  result.tokens = positions;
  for (size_t pi = 0; pi < result.points.size(); ++pi) {
    SteeringPoint& p = result.points[pi];
    if (positions == 0) continue;
    p.mean_alignment /= positions;
    p.mean_kl /= positions;
    p.probability_of_argmax_u /= positions;
    for (double& v : mean_probability[pi]) v /= positions;
    p.top_tokens = top_tokens(mean_probability[pi], options.top_k);
  }
  if (positions > 0) {
    for (double& v : unsteered_probability) v /= positions;
    result.unsteered_top_tokens = top_tokens(unsteered_probability, options.top_k);
  }
  return result;
}

}  // namespace tdyn
