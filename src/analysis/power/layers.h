// The power-method paper's claims across layers, tested over the layers themselves (SPEC §2; docs/power.md):
//   * alignment is local: the tokens leaving layer t align with that layer's dominant eigenvector v₁,t more than
//     with the eigenvectors v₁,s of the other layers (the paper: alignment "does not build toward one global
//     eigenvector" in models with per-layer weights);
//   * γ_t follows the spectral gap: the paper attributes weak alignment to small gaps.
// Both tests permute the layer labels, the only exchangeable units there are: every permutation of L layers when
// L ≤ kExactLayers, else a seeded Monte Carlo sample of them.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "linalg/dense.h"

namespace tdyn {

inline constexpr int64_t kExactLayers = 8;             // 8! = 40320 permutations, enumerated
inline constexpr int64_t kLayerPermutations = 100000;  // Monte Carlo permutations above that
inline constexpr int64_t kMinTestedLayers = 4;         // with 3 layers the smallest exact p is 1/6

// One-sided permutation p-value over layer labels: P(S(π) ≥ S(identity)) for π uniform over the permutations of
// n layers, exact (every permutation, the identity included) for n ≤ kExactLayers, else (1 + #{S(π) ≥ S(id)}) /
// (1 + kLayerPermutations) with std::mt19937_64(seed). A permuted S within 1e-12 of the observed one counts as
// "as large".
double layer_permutation_p_value(int64_t n, const std::function<double(const std::vector<int64_t>&)>& statistic, uint64_t seed = 0);

// A[t][s] = mean over tokens of a(x_i^{t+1}; v₁,s): row t the tokens leaving layer t, column s the dominant
// subspace of F_s. The diagonal is γ_t.
struct CrossLayerAlignment {
  linalg::Matrix mean;
  double diagonal = std::numeric_limits<double>::quiet_NaN();      // mean of A[t][t]
  double off_diagonal = std::numeric_limits<double>::quiet_NaN();  // mean of A[t][s], s ≠ t
  // P(Σ_t A[t][π(t)] ≥ Σ_t A[t][t]) over permutations π of the columns (layer_permutation_p_value). Σ_t A[t][π(t)]
  // takes one entry from every row and every column, so a layer whose v₁ every token aligns with (a column
  // effect) or a depth whose tokens align with everything (a row effect) adds the same to every permutation:
  // only alignment with the own layer's v₁ beyond those effects makes p small. NaN with fewer than
  // kMinTestedLayers layers.
  double p_value = std::numeric_limits<double>::quiet_NaN();
  nlohmann::json to_json() const;
  // Throws Error naming a key that is absent or of the wrong type.
  static CrossLayerAlignment from_json(const nlohmann::json& j);
};
CrossLayerAlignment cross_layer_alignment(const linalg::Matrix& mean, uint64_t seed = 0);

// Spearman ρ over layers of γ_t with the relative spectral gap 1 − |λ₂|/|λ₁| of F_t, and its one-sided
// permutation p-value for ρ > 0 (layer_permutation_p_value). NaN p with fewer than kMinTestedLayers layers; NaN ρ
// when either is constant.
struct GammaGapTest {
  int64_t layers = 0;
  double rho = std::numeric_limits<double>::quiet_NaN();
  double p_value = std::numeric_limits<double>::quiet_NaN();
  nlohmann::json to_json() const;
  static GammaGapTest from_json(const nlohmann::json& j);  // throws Error naming a key absent or of the wrong type
};
GammaGapTest gamma_gap_test(const std::vector<double>& gamma, const std::vector<double>& relative_gap, uint64_t seed = 0);

}  // namespace tdyn
