// The analysis of the power-method paper (Li & Altafini, "Analogies between Transformer Layers and Power
// Method"; SPEC §2): spectra of the layer matrices F_t = O_t V_t, alignment of real token states with their
// dominant eigenvectors, iteration of one layer far past the model's depth, and rank-1 steering of the last
// layer. Pure functions from a model (and token samples) to result structs; run.h runs them all and
// report/power_output.h writes them out. This header: the spectra of F_t and the alignment measures.
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
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/layer_matrix.h"
#include "analysis/operator_metrics.h"
#include "linalg/top_eigs.h"

namespace tdyn {

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
// The spectra of every layer's matrix. The layers' eigenproblems are independent: one per thread (serial LAPACK), a
// batch at a time (their workspace in memory); `done` gets each layer's spectrum in layer order as its batch ends.
std::vector<LayerSpectrum> layer_spectra(const std::vector<LayerMatrix>& matrices, const SpectrumOptions& options = {},
                                         const std::function<void(const LayerSpectrum&)>& done = {});

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
// γ's control on the tokens' own distribution: k random directions drawn from one sample's token states X (T × d),
// U = Xᵀ G with G a T × k standard normal matrix, orthonormalised, so that U ~ N(0, XᵀX) column by column; returns
// a(x_i; U) for every token. A residual stream is far from isotropic, so a direction drawn from the tokens
// themselves, which favours their directions of large norm and spread, is the null that v₁,t must beat, not a
// uniform one. Uncentred, as the alignments are: a centred draw never contains the tokens' mean direction. NaN for
// every token when the states span fewer than k dimensions.
std::vector<double> token_covariance_alignments(const Matrix& tokens, Index k, uint64_t seed);
// The seed of that draw for layer t and sample s: the same in the direct loop and in the shared pass.
uint64_t token_covariance_seed(int64_t layer, int64_t sample);

// Token i's state (row i of x [tokens, d]) in float64.
Vector token_state(const Tensor& x, int64_t i);

// The eigendecomposition of a layer matrix (or of I + F), sorted by modulus: dgeev when d is small enough,
// Spectra's top-k otherwise, and dgeev again when Arnoldi does not converge. `every_eigenvalue` says whether
// the result holds all d eigenpairs (dgeev) or only the top-k; `note` is set when the fallback was taken.
struct SortedSpectrum {
  linalg::Eigendecomposition decomposition;
  bool every_eigenvalue = true;
  std::string note;
};
// `name` names the matrix in the note ("F", "I + F").
SortedSpectrum sorted_spectrum(const Matrix& a, const SpectrumOptions& options, const char* name);

}  // namespace tdyn
