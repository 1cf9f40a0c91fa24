// Rank-1 steering of the last layer (the power-method paper): O' = O + c·u wᵀ makes u the dominant eigenvector
// of F' for large c; the sweep over c measures the steered model's spectrum, token alignment and outputs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/power/spectra.h"
#include "analysis/samples.h"
#include "core/progress.h"
#include "model/ablation.h"
#include "model/transformer.h"

namespace tdyn {

// O' = O + c·u wᵀ with w = V^{+ᵀ} u, so that F' = O'V = F + c·u (V⁺V u)ᵀ = F + c·u uᵀ when V [n_heads·d_head,
// d_model] has full column rank. V⁺V is the projection onto the row space of V; with fewer value dimensions
// than d_model (GQA, small heads) F' = F + c·u (P u)ᵀ, whose added term still has u as its eigenvector with
// eigenvalue c·‖P u‖² (`reachable`). In a model with ablated heads (`zeroed`) V is the ablated one (a zeroed
// head's block is 0), so w steers through the heads that still write.
struct RankOneSteering {
  int64_t layer = 0;
  Vector u;             // [d_model] unit target direction
  Vector w;             // [n_heads * d_head] w = V^{+T} u
  double reachable = 0; // ‖P u‖² = uᵀ V⁺V u
};
RankOneSteering rank_one_steering(const Model& model, int64_t layer, const Vector& direction, const ZeroedParts& zeroed = {});

// A model identical to `base` except that layer `steering.layer`'s output matrix is O + c·u wᵀ (float32, owned
// by the returned model; every other weight is the base's, which the returned pointer keeps alive).
std::shared_ptr<const Model> steered_model(std::shared_ptr<const Model> base, const RankOneSteering& steering, double c);

// Unit direction helpers: a seeded Gaussian direction, or a token's embedding row mapped into the residual
// stream (through ALBERT's mapping_in when the embedding is factorised).
Vector random_direction(Index d, uint64_t seed);
Vector token_direction(const Model& model, int32_t token);

struct SteeringOptions {
  std::vector<double> scales = {0, 1, 10, 100, 1e3, 1e4, 1e5};  // c / |λ1(F_L)|
  int64_t top_k = 10;                                                     // tokens of the output distribution
  // The control of the steering verdict: at the largest scale, this many rank-1 perturbations of the same
  // Frobenius norm ‖c u wᵀ‖ along random directions orthogonal to u (seeded by control_seed and the draw). If
  // the tokens align with u as much under them, a perturbation that large does it, not its direction. The seeds
  // are control_seed + j, apart from those of a random u (power --steer-seed); one whose direction is u itself is
  // passed over.
  int64_t control_draws = 5;
  uint64_t control_seed = uint64_t{1} << 40;
};

struct TokenProbability {
  int32_t token = 0;
  double probability = 0;
};

struct SteeringPoint {
  double scale = 0;            // c / |λ1|
  double c = 0;
  DominantSpectrum spectrum;   // of F' (computed from the steered model's own weights)
  double eigenvector_alignment = 0;  // a(u; dominant subspace of F')
  double mean_alignment = 0, min_alignment = 0;  // final-layer a(x_i^L; u) over all tokens of all samples
  double mean_kl = 0, max_kl = 0;                // KL(p_unsteered ‖ p_steered) over positions
  std::vector<TokenProbability> top_tokens;      // top-k of the output distribution averaged over positions
  double probability_of_argmax_u = 0;            // mean probability of the token whose unembedding best matches u
  nlohmann::json to_json() const;
  static SteeringPoint from_json(const nlohmann::json& j);  // throws Error naming a key absent or of the wrong type
};

// One control draw: the last layer steered along a random direction u' ⊥ u with the perturbation's norm.
struct SteeringControl {
  uint64_t seed = 0;
  double c = 0;                      // c' = c ‖w‖/‖w'‖, so that ‖c' u' w'ᵀ‖_F = ‖c u wᵀ‖_F
  double mean_alignment_with_u = 0;  // final-layer a(x_i^L; u), as SteeringPoint::mean_alignment
  double mean_alignment_with_own = 0;  // a(x_i^L; u'): the control's own steering
  double probability_of_argmax_u = 0;
  nlohmann::json to_json() const;
  static SteeringControl from_json(const nlohmann::json& j);  // throws Error naming a key absent or of the wrong type
};

struct SteeringResult {
  RankOneSteering steering;
  double lambda1_modulus = 0;    // |λ1(F_L)| of the unsteered last layer
  int32_t token_closest_to_u = 0;  // argmax of the unembedding applied to u
  std::vector<TokenProbability> unsteered_top_tokens;
  std::vector<SteeringPoint> points;
  std::vector<SteeringControl> controls;  // at the largest scale
  int64_t tokens = 0;
  nlohmann::json to_json() const;
};

// Sweeps c over the scales (times |λ1(F_L)|), running the steered model's real forward pass on the samples: of the
// model with `zeroed`'s parts set to zero, when there are any.
SteeringResult steering_sweep(std::shared_ptr<const Model> model, const Vector& direction,
                              const std::vector<Sample>& samples, const SteeringOptions& options,
                              ProgressSink& progress = silent_progress(), const ZeroedParts& zeroed = {});

}  // namespace tdyn
