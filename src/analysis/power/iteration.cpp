#include "analysis/power/iteration.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>
#include <Eigen/LU>

#include "core/error.h"
#include "core/json_number.h"

namespace tdyn {
namespace {

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
  for (int64_t i = 0; i < x.dim(0); ++i) signs[i] = token_state(x, i).dot(v) >= 0 ? 1 : -1;
  return signs;
}

}  // namespace

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

RegimeEvidence RegimeEvidence::from_json(const nlohmann::json& j) {
  RegimeEvidence e;
  const std::string name = string_at(j, "regime");
  const Regime regimes[] = {Regime::Consensus, Regime::Bipartite, Regime::Rotation, Regime::SlowConvergence, Regime::NotConverged};
  const auto* found = std::find_if(std::begin(regimes), std::end(regimes), [&](Regime r) { return name == to_string(r); });
  if (found == std::end(regimes)) fail("results.json: 'regime' is '{}', no regime tdyn knows", name);
  e.regime = *found;
  e.eigenvector = integer_at(j, "eigenvector"), e.min_alignment = number_at(j, "min_alignment");
  e.min_cosine_to_mean = number_at(j, "min_cosine_to_mean");
  e.positive = integer_at(j, "positive"), e.negative = integer_at(j, "negative"), e.description = string_at(j, "description");
  return e;
}

RegimeEvidence classify_regime(const Tensor& x, const ComplexVector& eigenvalues, const ComplexMatrix& eigenvectors,
                               double threshold, int64_t eigenvectors_searched) {
  const int64_t n = x.dim(0);
  std::vector<EigenGroup> groups = eigen_groups(eigenvalues);
  if (static_cast<int64_t>(groups.size()) > eigenvectors_searched) groups.resize(std::max<int64_t>(eigenvectors_searched, 2));
  auto min_alignment = [&](const Matrix& basis) {
    double lowest = 1;
    for (int64_t i = 0; i < n; ++i) lowest = std::min(lowest, alignment(token_state(x, i), basis));
    return lowest;
  };
  RegimeEvidence e;
  // Token-to-token spread, whatever the eigenvectors: the smallest cosine between a token and the tokens' mean
  // direction. The full layer (norms, MLP, biases) can hold every token at one fixed point that is no eigenvector
  // of the linear step matrix; that is consensus too.
  Vector mean_direction = Vector::Zero(x.dim(1));
  for (int64_t i = 0; i < n; ++i) {
    const Vector xi = token_state(x, i);
    if (xi.norm() > 0) mean_direction += xi / xi.norm();
  }
  e.min_cosine_to_mean = mean_direction.norm() > 0 ? 1.0 : 0.0;
  for (int64_t i = 0; i < n && mean_direction.norm() > 0; ++i) {
    const Vector xi = token_state(x, i);
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

BipartiteTest BipartiteTest::from_json(const nlohmann::json& j) {
  BipartiteTest t;
  t.ran = boolean_at(j, "ran");
  if (!t.ran) return t;
  t.eigenvector = integer_at(j, "eigenvector"), t.perturbation = number_at(j, "perturbation");
  t.unperturbed = RegimeEvidence::from_json(object_at(j, "unperturbed")), t.perturbed = RegimeEvidence::from_json(object_at(j, "perturbed"));
  t.sign_flips_perturbed = integer_at(j, "sign_flips_perturbed");
  t.left_unperturbed = boolean_at(j, "left_unperturbed"), t.left_perturbed = boolean_at(j, "left_perturbed");
  return t;
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

namespace {

// The layer's step matrix, its spectrum, and the subspaces the curves measure alignment with.
struct StepSpectrum {
  linalg::Eigendecomposition decomposition;
  std::vector<EigenGroup> groups;
  Matrix dominant;     // of the step matrix
  Matrix dominant_f;   // of F itself
  Matrix top_two;      // the invariant subspace of the step matrix's two leading eigen-groups
  std::optional<PlaneCoordinates> plane;  // the dominant pair's plane, when it is complex
};

// The step matrix: a residual step x + F x linearises to I + F, a plain one to F. In attn-only-l2 the attention reads
// G x (dynamics.h), so F G takes F's place. Sets r's step_matrix, step and expected_angle_per_step.
StepSpectrum step_spectrum(const Transformer& model, const LayerMatrix& matrix, const IterationOptions& options, IterationResult& r) {
  const DynamicsOptions& dyn = options.dynamics;
  const int64_t d = model.config().d_model;
  const bool gain = dyn.mode == DynamicsMode::AttnOnlyL2;
  Matrix linear = matrix.f;
  if (gain) {
    const std::vector<double> g = unit_token_gain(model.model(), matrix.layer);
    linear = linear * Eigen::Map<const Vector>(g.data(), d).asDiagonal();
  }
  const std::string f_name = gain ? "F G" : "F";
  r.step_matrix = dyn.residual ? "I + " + f_name : f_name;
  const Matrix step_matrix = dyn.residual ? Matrix(linear + Matrix::Identity(d, d)) : linear;
  SpectrumOptions spectrum_options;
  spectrum_options.top_k = std::max<Index>(spectrum_options.top_k, options.eigenvectors + 2);
  StepSpectrum s;
  s.decomposition = sorted_spectrum(step_matrix, spectrum_options, r.step_matrix.c_str()).decomposition;
  r.step = dominant_spectrum(s.decomposition);
  r.expected_angle_per_step = std::arg(r.step.lambda1);
  s.dominant = dominant_basis(r.step);
  s.dominant_f = dyn.residual || gain ? dominant_basis(layer_spectrum(matrix, spectrum_options).f) : s.dominant;
  s.groups = eigen_groups(s.decomposition.eigenvalues);
  s.top_two = invariant_basis(s.decomposition.eigenvectors, {s.groups.begin(), s.groups.begin() + std::min<size_t>(2, s.groups.size())});
  if (r.step.complex_pair) s.plane.emplace(r.step);
  return s;
}

// The curves' values at each step, and each token's alignment and plane coordinates, added to an IterationResult.
class CurveRecorder {
 public:
  CurveRecorder(const StepSpectrum& spectrum, int64_t tokens) : s_(spectrum), previous_(tokens) {}

  void operator()(const Tensor& states, int64_t step, IterationResult& r) {
    const int64_t n = states.dim(0);
    double sum = 0, lowest = 1, sum_f = 0, energy = 0, positive = 0, angle_sum = 0;
    int64_t angles = 0;
    for (int64_t i = 0; i < n; ++i) {
      const Vector x = token_state(states, i);
      const double a = alignment(x, s_.dominant);
      sum += a;
      lowest = std::min(lowest, a);
      sum_f += alignment(x, s_.dominant_f);
      const double a12 = alignment(x, s_.top_two);
      energy += a12 * a12;
      positive += x.dot(r.step.eigenvector_real) > 0;
      r.alignment_per_token.push_back(a);
      Complex zeta = s_.plane ? (*s_.plane)(x) : Complex(x.dot(r.step.eigenvector_real), 0);
      const double norm = x.norm();
      r.plane_coordinates.push_back(norm > 0 ? zeta.real() / norm : 0);
      r.plane_coordinates.push_back(norm > 0 ? zeta.imag() / norm : 0);
      if (s_.plane && step > 0 && std::abs(zeta) > 0 && std::abs(previous_[i]) > 0) {
        angle_sum += std::arg(zeta / previous_[i]);
        ++angles;
      }
      previous_[i] = zeta;
    }
    IterationCurves& c = r.curves;
    c.mean_alignment.push_back(sum / n);
    c.min_alignment.push_back(lowest);
    c.mean_alignment_f.push_back(sum_f / n);
    c.span12_energy.push_back(energy / n);
    c.positive_fraction.push_back(positive / n);
    c.mean_angle_step.push_back(angles ? angle_sum / angles : 0);
  }

 private:
  const StepSpectrum& s_;
  std::vector<Complex> previous_;  // each token's ζ at the step before
};

// Bipartite instability: the tokens put on ±v_k (alternating signs, norms kept), optionally perturbed, and iterated;
// v_k the bipartite regime's eigenvector, else the first real one searched. Fills r.bipartite when there is one.
void bipartite_test(const Transformer& model, const TokenState& state, const StepSpectrum& s, const IterationOptions& options,
                    IterationResult& r) {
  std::optional<Index> k;
  if (r.regime.regime == Regime::Bipartite) k = r.regime.eigenvector;
  for (size_t g = 0; !k && g < s.groups.size() && static_cast<int64_t>(g) < options.eigenvectors; ++g)
    if (!s.groups[g].pair) k = s.groups[g].start;
  if (!k) return;
  const int64_t n = state.x.dim(0), d = state.x.dim(1);
  BipartiteTest& b = r.bipartite;
  b.ran = true;
  b.eigenvector = *k;
  b.perturbation = options.perturbation;
  const Vector v = s.decomposition.eigenvectors.col(*k).real().normalized();
  std::vector<int> split(n);
  for (int64_t i = 0; i < n; ++i) split[i] = i % 2 == 0 ? 1 : -1;
  const int64_t test_steps = options.bipartite_steps > 0 ? options.bipartite_steps : options.steps;
  std::mt19937_64 rng(options.seed);
  std::normal_distribution<double> gaussian;
  for (double size : {0.0, options.perturbation}) {
    TokenState test = state;
    for (int64_t i = 0; i < n; ++i) {
      const double norm = token_state(state.x, i).norm();
      Vector noise(d);
      for (Index j = 0; j < d; ++j) noise[j] = gaussian(rng);
      const Vector x = split[i] * norm * v + size * norm * noise.normalized();
      for (Index j = 0; j < d; ++j) test.x.row(i)[j] = static_cast<float>(x[j]);
    }
    for (int64_t step = 0; step < test_steps; ++step) apply_layer(model, options.layer, test, options.dynamics, true);
    RegimeEvidence e = classify_regime(test.x, s.decomposition.eigenvalues, s.decomposition.eigenvectors, options.threshold,
                                       options.eigenvectors);
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

}  // namespace

IterationResult iterate_layer(const Transformer& model, const Sample& sample, const LayerMatrix& matrix,
                              const IterationOptions& options, ProgressSink& progress) {
  const int64_t layer = options.layer;
  if (layer != matrix.layer) fail("iterate_layer: the layer matrix is of layer {}, not {}", matrix.layer, layer);
  if (options.steps < 1) fail("the iteration needs at least one step, got {}", options.steps);
  IterationResult r;
  r.layer = layer;
  r.sample_index = sample.source_index;
  const StepSpectrum spectrum = step_spectrum(model, matrix, options, r);

  // The states entering the layer in the model (in the chosen mode).
  TokenState state = initial_state(model, sample.ids, options.dynamics);
  for (int64_t l = 0; l < layer; ++l) apply_layer(model, l, state, options.dynamics);
  r.tokens = state.x.dim(0);

  CurveRecorder record(spectrum, r.tokens);
  record(state.x, 0, r);
  ProgressLoop loop(progress, fmt::format("iterating layer {}", layer), options.steps, "steps");
  for (int64_t k = 1; k <= options.steps; ++k) {
    apply_layer(model, layer, state, options.dynamics, /*refresh_shared_kv=*/true);
    record(state.x, k, r);
    loop.advance();
  }
  const auto& angles = r.curves.mean_angle_step;
  const int64_t tail = std::max<int64_t>(1, options.steps / 4);
  r.measured_angle_per_step = std::accumulate(angles.end() - tail, angles.end(), 0.0) / tail;
  r.regime = classify_regime(state.x, spectrum.decomposition.eigenvalues, spectrum.decomposition.eigenvectors, options.threshold,
                             options.eigenvectors);
  bipartite_test(model, state, spectrum, options, r);
  return r;
}

}  // namespace tdyn
