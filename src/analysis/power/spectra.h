// The analysis of the power-method paper (Li & Altafini, "Analogies between Transformer Layers and Power
// Method"; SPEC §2): spectra of the layer matrices F_t = O_t V_t, alignment of real token states with their
// dominant eigenvectors, iteration of one layer far past the model's depth, and rank-1 steering of the last
// layer. Pure functions from a model (and token samples) to result structs; tools/tdyn/cmd_power.cpp writes
// them out.
//
// Definitions (x a token state, v_{1,t} the dominant eigenvector of F_t):
//   alignment   a(x; v) = |⟨x, v⟩| / ‖x‖; for a complex dominant pair λ1, λ̄1 the norm of the orthogonal
//               projection of x onto span{Re v1, Im v1} divided by ‖x‖ (the real invariant plane of the pair).
//   γ_t         mean over tokens of a(x_i^{t+1}; v_{1,t})                      (paper: alignment after layer t)
//   ρ_t         fraction of tokens with a(x_i^{t+1}; v_{1,t}) > a(x_i^t; v_{1,t})  (the layer moved it closer)
//   baseline    E a(x; B) for x uniform on the sphere and B a fixed k-dimensional subspace:
//               Γ((k+1)/2) Γ(d/2) / (Γ(k/2) Γ((d+1)/2)), which is ≈ sqrt(2/(π d)) for k = 1.
//   test        one-sided exact binomial test of ρ_t > 1/2: p = P(X ≥ #increases), X ~ Binomial(tokens, 1/2).
//               It counts every pooled token as independent, which they are not: tokens of one passage share
//               its context, and a state seen before (a BOS token, or any shared prefix of a causal model,
//               whose state depends on the prefix alone) enters once per sample. Hence also:
//   ρ_t unique  ρ_t over the tokens whose state is new: repeated states (same prefix in a causal model, same
//               whole sample in an encoder) counted once, at their first occurrence.
//   sample test the sign-flip test over samples: per sample s, ρ_s over its new tokens; under the null a
//               sample is as likely to have ρ_s < 1/2 as > 1/2, so p = P(X ≥ #{ρ_s > 1/2}), X ~
//               Binomial(#{ρ_s ≠ 1/2}, 1/2), the exact distribution of the sign-flip permutation count.
// The same quantities are reported for the dominant eigenvector of I + F_t (same eigenvectors, eigenvalues
// shifted by 1), the matrix a residual layer x + F x applies.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/layer_matrix.h"
#include "analysis/operator_metrics.h"
#include "analysis/power/dynamics.h"
#include "analysis/samples.h"
#include "linalg/top_eigs.h"

namespace tdyn {

// Progress lines for long loops (the CLI prints them to stderr unless --quiet); may be empty.
using ProgressFn = std::function<void(const std::string&)>;

// ---- Spectra -------------------------------------------------------------------------------------------

struct SpectrumOptions {
  Index full_spectrum_max_d = 2048;  // dgeev (every eigenvalue) up to this d; Spectra top-k above it
  Index top_k = 8;                   // eigenpairs from Spectra when d is larger
  // Spectra's subspace dimension, restarts and tolerance. When Arnoldi does not converge with them (it can
  // fail on random layer matrices at d = 4096, whose leading moduli are barely separated) the top_k
  // eigenpairs come from dgeev instead, and LayerSpectrum::notes says so.
  linalg::TopEigenOptions arnoldi;
};

struct LayerSpectrum {
  int64_t layer = 0, value_layer = 0;
  bool full = true;                   // every eigenvalue (dgeev) or only the top_k (Spectra)
  ComplexVector eigenvalues;          // (d or top_k) of F_t, by modulus, largest first
  ComplexMatrix eigenvectors;         // (d × same) matching unit right eigenvectors
  DominantSpectrum f;                 // of F_t
  DominantSpectrum identity_plus_f;   // of I + F_t
  double bias_norm = 0;               // ‖c_t‖
  double frobenius_norm = 0;          // ‖F_t‖_F
  // One line for each matrix (F_t, I + F_t) whose top_k came from the dgeev fallback rather than Arnoldi.
  std::vector<std::string> notes;

  nlohmann::json to_json() const;
};

LayerSpectrum layer_spectrum(const LayerMatrix& m, const SpectrumOptions& options = {});

// Orthonormal basis (d × 1, or d × 2 for a complex pair) of the dominant invariant subspace: v1, or
// span{Re v1, Im v1} orthonormalised.
Matrix dominant_basis(const DominantSpectrum& s);
// Eigenvalue groups of a sorted decomposition: a real eigenvalue, or a conjugate pair (+Im first, adjacent).
struct EigenGroup {
  Index start = 0;
  bool pair = false;
};
std::vector<EigenGroup> eigen_groups(const ComplexVector& sorted_eigenvalues);
// Orthonormal basis of the real invariant subspace of the given groups: v for a real eigenvalue, the plane
// span{Re v, Im v} for a pair (d × 1..2 per group).
Matrix invariant_basis(const ComplexMatrix& eigenvectors, const std::vector<EigenGroup>& groups);

// a(x; B) = ‖Bᵀx‖ / ‖x‖ for an orthonormal basis B (0 for x = 0).
double alignment(const Eigen::Ref<const Vector>& x, const Matrix& basis);

// E a(x; B) for x uniform on the unit sphere of ℝ^d and a fixed k-dimensional subspace B (exact).
double random_alignment_baseline(Index d, Index k);
// γ's control on the tokens' own distribution: k random directions drawn from the covariance of one sample's token
// states X (T × d), U = (X − x̄)ᵀ G with G a T × k standard normal matrix, orthonormalised, so that U ~ N(0, Σ̂)
// column by column; returns a(x_i; U) for every token. A residual stream is far from isotropic, so a direction
// drawn from the tokens' own covariance, which favours their directions of large spread, is the null that v₁,t
// must beat, not a uniform one. NaN for every token when the centred states span fewer than k dimensions.
std::vector<double> token_covariance_alignments(const Matrix& tokens, Index k, uint64_t seed);
// The seed of that draw for layer t and sample s: the same in the direct loop and in the shared pass.
uint64_t token_covariance_seed(int64_t layer, int64_t sample);
// P(X ≥ successes), X ~ Binomial(trials, 1/2) (exact, boost::math).
double binomial_upper_tail(int64_t successes, int64_t trials);

// ---- Token dynamics over real text -----------------------------------------------------------------------

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
  // [t][s] mean over tokens of a(x^{t+1}; v_{1,s}) of F_s (power_layers.h; the diagonal is γ_t); empty when not measured.
  Matrix cross_alignment;
};

// Runs every sample through all layers in the chosen mode and measures γ_t, ρ_t for F_t and I + F_t.
TokenDynamics token_dynamics(const Transformer& model, const std::vector<Sample>& samples,
                             const std::vector<LayerSpectrum>& spectra, const DynamicsOptions& options,
                             const ProgressFn& progress = {});

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

// ---- Shared-weight iteration -------------------------------------------------------------------------------

// The regimes of the paper's shared-weight analysis, classified from the token states after the last step.
enum class Regime {
  Consensus,          // every token on the same ray: ±v_k (v1 when λ1 is real and strictly dominant), or a ray that is
                      //   no eigenvector (a fixed point of the full, nonlinear layer), found from the token spread
  Bipartite,          // every token on ±v_k, both signs present
  Rotation,           // every token in span{Re v1, Im v1} (complex dominant pair): a rotation by ≈ arg λ1 per step
  SlowConvergence,    // in span{v1, v2} but not yet on v1 (small gap |λ1| − |λ2|)
  NotConverged,       // none of the above at the threshold
};
const char* to_string(Regime regime);

struct IterationOptions {
  int64_t layer = 0;
  int64_t steps = 1000;
  double threshold = 0.99;     // a token counts as in a subspace when its alignment with it is ≥ threshold
  int64_t eigenvectors = 8;    // v_k searched for consensus / bipartite states beyond v1
  double perturbation = 1e-3;  // relative size of the random perturbation of the bipartite test state
  int64_t bipartite_steps = 0; // steps of the bipartite test; 0: as many as `steps`
  uint64_t seed = 0;           // of the perturbation
  DynamicsOptions dynamics;
};

// Per-step summary of the token states [steps + 1], step 0 the initial states.
struct IterationCurves {
  std::vector<double> mean_alignment, min_alignment;  // with the dominant subspace of the step matrix
  std::vector<double> mean_alignment_f;               // with v1 of F (differs from the above with residual)
  std::vector<double> span12_energy;                  // mean ‖P x‖²/‖x‖², P onto the invariant span{v1, v2}
  std::vector<double> positive_fraction;              // tokens with ⟨x, Re v1⟩ > 0
  std::vector<double> mean_angle_step;                // complex λ1: mean over tokens of arg(ζ_{k}/ζ_{k-1})
};

struct RegimeEvidence {
  Regime regime = Regime::NotConverged;
  int64_t eigenvector = 0;       // k (0-based, in modulus order) of v_k for Consensus / Bipartite; -1 for a
                                 //   consensus on a ray that is no eigenvector (found from the spread alone)
  double min_alignment = 0;      // min over tokens of the alignment that decided the regime
  double min_cosine_to_mean = 0; // token-to-token spread: min over tokens of cos(x_i, Σ_j x_j/‖x_j‖); 1 = one ray
  int64_t positive = 0, negative = 0;  // sign pattern on v_k (Consensus / Bipartite)
  std::string description;
  nlohmann::json to_json() const;
};

struct BipartiteTest {
  bool ran = false;
  int64_t eigenvector = 0;     // v_k the test state was built on
  double perturbation = 0;
  RegimeEvidence unperturbed, perturbed;  // regimes after the test steps
  int64_t sign_flips_perturbed = 0;       // tokens whose sign on v_k changed
  bool left_unperturbed = false, left_perturbed = false;  // the state is no longer the same bipartite split
  nlohmann::json to_json() const;
};

struct IterationResult {
  int64_t layer = 0;
  int64_t sample_index = 0;       // source index of the sample whose tokens were iterated
  std::string step_matrix;        // "I + F" (with the residual) or "F"; "I + F G", "F G" in attn-only-l2
  DominantSpectrum step;          // of the step matrix
  IterationCurves curves;
  RegimeEvidence regime;
  double measured_angle_per_step = 0;  // complex λ1: mean over the last quarter of the steps
  double expected_angle_per_step = 0;  // arg λ1 of the step matrix
  std::vector<double> alignment_per_token;   // [steps + 1, tokens] with the dominant subspace of the step matrix
  std::vector<double> plane_coordinates;     // [steps + 1, tokens, 2] ζ/‖x‖ (Re, Im) in the eigen-coordinates of
                                             //   span{Re v1, Im v1}: F acts there as multiplication by λ1
  int64_t tokens = 0;
  BipartiteTest bipartite;
  nlohmann::json to_json() const;  // scalars (curves and per-token arrays go to .npy)
};

// Iterates layer `options.layer` on the token states that enter it in the model (the sample run through the
// layers before it in the chosen mode), classifies the regime and runs the bipartite instability test.
IterationResult iterate_layer(const Transformer& model, const Sample& sample, const LayerMatrix& matrix,
                              const IterationOptions& options, const ProgressFn& progress = {});

// Classifies token states X [tokens, d] against a sorted eigendecomposition (eigenvalues by modulus).
RegimeEvidence classify_regime(const Tensor& x, const ComplexVector& eigenvalues, const ComplexMatrix& eigenvectors,
                               double threshold, int64_t eigenvectors_searched);

// ---- Rank-1 steering -----------------------------------------------------------------------------------

// O' = O + c·u wᵀ with w = V^{+ᵀ} u, so that F' = O'V = F + c·u (V⁺V u)ᵀ = F + c·u uᵀ when V [n_heads·d_head,
// d_model] has full column rank. V⁺V is the projection onto the row space of V; with fewer value dimensions
// than d_model (GQA, small heads) F' = F + c·u (P u)ᵀ, whose added term still has u as its eigenvector with
// eigenvalue c·‖P u‖² (`reachable`).
struct RankOneSteering {
  int64_t layer = 0;
  Vector u;             // [d_model] unit target direction
  Vector w;             // [n_heads * d_head] w = V^{+T} u
  double reachable = 0; // ‖P u‖² = uᵀ V⁺V u
};
RankOneSteering rank_one_steering(const Model& model, int64_t layer, const Vector& direction);

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
};

struct SteeringResult {
  RankOneSteering steering;
  double lambda1_modulus = 0;    // |λ1(F_L)| of the unsteered last layer
  int32_t token_closest_to_u = 0;  // argmax of the unembedding applied to u
  std::vector<TokenProbability> unsteered_top_tokens;
  std::vector<SteeringPoint> points;
  int64_t tokens = 0;
  nlohmann::json to_json() const;
};

// Sweeps c over the scales (times |λ1(F_L)|), running the steered model's real forward pass on the samples.
SteeringResult steering_sweep(std::shared_ptr<const Model> model, const Vector& direction,
                              const std::vector<Sample>& samples, const SteeringOptions& options,
                              const ProgressFn& progress = {});

}  // namespace tdyn
