// The shared-weight iteration of the power-method paper: one layer applied far past the model's depth to a
// sample's token states, the regime the states reach (consensus, bipartite, rotation, slow convergence) and the
// instability test of a bipartite state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/power/dynamics.h"
#include "analysis/power/spectra.h"
#include "analysis/samples.h"
#include "core/progress.h"

namespace tdyn {

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
  static RegimeEvidence from_json(const nlohmann::json& j);  // throws Error naming a key absent or of the wrong type
};

struct BipartiteTest {
  bool ran = false;
  int64_t eigenvector = 0;     // v_k the test state was built on
  double perturbation = 0;
  RegimeEvidence unperturbed, perturbed;  // regimes after the test steps
  int64_t sign_flips_perturbed = 0;       // tokens whose sign on v_k changed
  bool left_unperturbed = false, left_perturbed = false;  // the state is no longer the same bipartite split
  nlohmann::json to_json() const;
  static BipartiteTest from_json(const nlohmann::json& j);  // throws Error naming a key absent or of the wrong type
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
                              const IterationOptions& options, ProgressSink& progress = silent_progress());

// Classifies token states X [tokens, d] against a sorted eigendecomposition (eigenvalues by modulus).
RegimeEvidence classify_regime(const Tensor& x, const ComplexVector& eigenvalues, const ComplexMatrix& eigenvectors,
                               double threshold, int64_t eigenvectors_searched);

}  // namespace tdyn
