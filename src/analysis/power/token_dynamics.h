// Token dynamics of the power-method paper over real text (definitions in spectra.h): every sample run through
// all layers in one of the modes of dynamics.h, and per layer γ_t, ρ_t, their tests and the per-token
// alignments with the dominant subspaces of F_t and I + F_t.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/power/dynamics.h"
#include "analysis/power/spectra.h"
#include "analysis/samples.h"
#include "core/progress.h"

namespace tdyn {

// P(X ≥ successes), X ~ Binomial(trials, 1/2) (exact, boost::math).
double binomial_upper_tail(int64_t successes, int64_t trials);

struct AlignmentStats {
  int64_t tokens = 0;
  double gamma = 0;          // mean a(x^{t+1}; v1)
  double gamma_before = 0;   // mean a(x^t; v1)
  double baseline = 0;       // random-direction E a, exact for this subspace dimension
  double gamma_covariance = std::numeric_limits<double>::quiet_NaN();  // mean a(x^{t+1}; U), U from the tokens (F only)
  double rho = 0;            // fraction of increases
  int64_t increases = 0;
  double p_value = 1;        // one-sided binomial test of ρ > 1/2
  // Repeated states dropped, and the test at the level of samples (see the definitions above).
  int64_t unique_tokens = 0;
  double rho_unique = 0;
  int64_t samples_above = 0, samples_below = 0;  // samples with ρ_s > 1/2, < 1/2
  double p_value_samples = 1;
  std::vector<double> quantiles;   // of a(x^{t+1}; v1) at kQuantileLevels
  std::vector<int64_t> histogram;  // kHistogramBins equal bins over [0, 1]
  nlohmann::json to_json() const;
  // Throws Error naming a key that is absent or of the wrong type.
  static AlignmentStats from_json(const nlohmann::json& j);
};

inline const std::vector<double> kQuantileLevels = {0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0};
inline constexpr int kHistogramBins = 20;

struct LayerDynamics {
  int64_t layer = 0;
  AlignmentStats f;                // with v_{1,t} of F_t
  AlignmentStats identity_plus_f;  // with v_{1,t} of I + F_t
  double mean_norm_before = 0, mean_norm_after = 0;  // mean ‖x^t‖, ‖x^{t+1}‖
};

struct TokenDynamics {
  DynamicsOptions options;
  int64_t samples = 0, tokens = 0;
  std::vector<LayerDynamics> layers;
  // Per-token alignments with v_{1,t} of F_t, all samples' tokens concatenated: [n_layers][tokens].
  std::vector<std::vector<double>> before, after;
  // [t][s] mean over tokens of a(x^{t+1}; v_{1,s}) of F_s (layers.h; the diagonal is γ_t); empty when not measured.
  Matrix cross_alignment;
  // What a bootstrap over samples needs besides `before` and `after`: each token's sample, whether its state
  // repeats an earlier sample's, and a(x^{t+1}; U) of γ's covariance control ([layer][token], NaN where not drawn;
  // empty when not measured).
  std::vector<int64_t> sample_of_token;
  std::vector<char> repeated;
  std::vector<std::vector<double>> after_covariance;
};

// Runs every sample through all layers in the chosen mode and measures γ_t, ρ_t for F_t and I + F_t.
TokenDynamics token_dynamics(const Transformer& model, const std::vector<Sample>& samples,
                             const std::vector<LayerSpectrum>& spectra, const DynamicsOptions& options,
                             ProgressSink& progress = silent_progress());

// The per-token measurements behind TokenDynamics, in token order (all samples concatenated): alignments
// a(x^t; ·) before and a(x^{t+1}; ·) after layer t with the dominant subspaces of F_t and I + F_t, and ‖x‖.
struct TokenAlignments {
  int64_t samples = 0;
  std::vector<std::vector<double>> before_f, after_f, before_if, after_if;  // [layer][token]
  std::vector<std::vector<double>> norm_before, norm_after;                // [layer][token]
  std::vector<std::vector<double>> after_covariance;  // [layer][token] a(x^{t+1}; U), token_covariance_alignments with F's k
  Matrix cross_alignment;  // [t][s] mean over tokens of a(x^{t+1}; v_{1,s}), F_s's dominant subspace (empty: not measured)
  std::vector<int64_t> sample_of_token;  // [token] index of its sample
  std::vector<char> repeated;            // [token] its state was seen in an earlier sample
};
// sample_of_token and repeated for the samples' tokens in order. A causal model's state at position p depends on
// ids[0..p] alone, so it repeats when an earlier sample has the same prefix; an encoder's only when an earlier
// sample is the same sequence.
void mark_repeated_states(const std::vector<Sample>& samples, bool causal, TokenAlignments* alignments);
// γ_t, ρ_t, their tests and mean norms from the per-token measurements (what token_dynamics does after the loop).
TokenDynamics summarize_token_dynamics(TokenAlignments alignments, const std::vector<LayerSpectrum>& spectra, int64_t d_model,
                                       const DynamicsOptions& options);

}  // namespace tdyn
