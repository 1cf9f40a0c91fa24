// Metrics of a real d × d operator — a mean Jacobian J̄_l, a cumulative product C_l (SPEC §3 "Metrics"), or a
// layer matrix F_t (SPEC §2 "Spectrum") — plus the Schur surgery of SPEC §3 and cumulative products. Pure
// linear algebra on float64 matrices; nothing here knows about models.
//
// Definitions (σ_1 ≥ … ≥ σ_d the singular values, λ_i the eigenvalues, J = Q(Λ + N)Q* the complex Schur form):
//   condition number       σ_1/σ_d, only where σ_d is above round-off: +∞ (null in JSON) when σ_d ≤ d ε σ_1, the
//                          accuracy of a computed σ_d (backward stable SVD), so that a deep product C_k whose
//                          small singular values are round-off is reported as numerically singular, not as 1e17
//                          or 1e19 depending on the noise
//   Henrici departure      dep(J) = ‖N‖_F (Schur form) = sqrt(‖J‖_F² − Σ|λ_i|²) (identity form); both are
//                          reported because the identity form loses accuracy to cancellation when J is nearly
//                          normal, and their agreement is a check on the decomposition. Normalised: dep/‖J‖_F.
//   self-alignment         ‖U_kᵀ V_k‖_F²/k for the top-k left (U) and right (V) singular vectors: 1 when the
//                          input and output directions coincide (symmetric PSD J), near k/d for unrelated ones.
//   expanding fraction     #{|λ_i| > 1 + τ σ_1}/d: a residual step's Jacobian has eigenvalues that are exactly 1
//                          (directions its sublayer leaves alone), which round-off puts on either side of 1.
//   complex fraction       #{|Im λ_i| > τ σ_1}/d, τ = complex_tolerance (default 1e-8 ≈ sqrt(machine ε): a
//                          defective real double eigenvalue perturbed by round-off splits by O(sqrt(ε) ‖J‖)).
//                          Relative to ‖J‖₂ = σ_1, not to |λ_i|: the eigenvalues of a deep C_k near 0 are
//                          round-off of size ε‖J‖ with arbitrary phase, and relative to their own modulus they
//                          would count as complex pairs
//   symmetry index         ‖J − Jᵀ‖_F/‖J‖_F (0 symmetric, 2 antisymmetric)
//   effective ranks        (p_i = σ_i/Σσ)
//     Roy–Vetterli         exp(−Σ p_i log p_i)                (Roy & Vetterli 2007)
//     participation ratio  (Σσ_i²)²/Σσ_i⁴  — the participation ratio of the eigenvalues σ_i² of JᵀJ (the
//                          convention of neural-population dimensionality), not (Σσ)²/Σσ²
//     stable rank          ‖J‖_F²/σ_1²
//     energy rank          smallest k with Σ_{i≤k} σ_i² ≥ 0.9 Σσ_i²
//   All ranks equal d for an orthogonal J and 1 for a rank-1 J; for the zero matrix they are 0.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "linalg/dense.h"

namespace tdyn {

using linalg::Complex;
using linalg::ComplexMatrix;
using linalg::ComplexVector;
using linalg::Index;
using linalg::Matrix;
using linalg::Vector;

// ---- Effective ranks of a singular-value spectrum ----------------------------------------------------

struct EffectiveRanks {
  double roy_vetterli = 0;
  double participation_ratio = 0;  // (Σσ²)²/Σσ⁴
  double stable_rank = 0;          // Σσ²/σ_1²
  Index energy_rank = 0;           // smallest k with Σ_{i≤k} σ_i² ≥ energy_fraction · Σσ²
  double energy_fraction = 0.9;

  // results.json's "effective_rank", and back; from_json throws Error naming a key that is absent.
  nlohmann::json to_json() const;
  static EffectiveRanks from_json(const nlohmann::json& j);
};

// From singular values in any order (they are sorted here); negative values are an error. The energy
// threshold allows a relative slack of 1e-12 so that an exact tie (e.g. 9 of 10 equal σ) is not lost to
// round-off in the sums.
EffectiveRanks effective_ranks(const Vector& singular_values, double energy_fraction = 0.9);

// ---- Flat lists of numbers: what MPI ranks send each other ------------------------------------------------

// Reads a list of numbers in the order it was written. Reading past its end, or finish() with numbers left over,
// is an Error naming `what`.
class NumberReader {
 public:
  NumberReader(const std::vector<double>& numbers, const char* what) : numbers_(&numbers), what_(what) {}
  double next();
  Index index() { return static_cast<Index>(next()); }  // a count or an index (exact as a double below 2^53)
  EffectiveRanks ranks();
  size_t position() const { return at_; }
  void finish() const;

 private:
  const std::vector<double>* numbers_;
  const char* what_;
  size_t at_ = 0;
};

void append_numbers(std::vector<double>& out, const EffectiveRanks& e);  // NumberReader::ranks reads them back

// ---- Metrics of many operators at once ---------------------------------------------------------------------

// How many d × d operators (of `n`) to hold and decompose at once, one per thread (kernels/serial_blas.h's
// parallel_tasks), when each holds `matrices_each` d × d float64 matrices with its decomposition's workspace: the
// thread count, capped so that they hold at most 4 GiB (at d = 4096, 128 MiB a matrix: 5 operators of 6 matrices).
int64_t operators_in_flight(int64_t d, double matrices_each, int64_t n);

// ---- All metrics of one operator ----------------------------------------------------------------------

struct OperatorMetricsOptions {
  std::vector<Index> alignment_ks = {1, 10, 100};  // each capped at d; the cap is recorded
  double complex_tolerance = 1e-8;  // τ of the complex and expanding fractions
  // Self-alignment's singular vectors come from a partial SVD (linalg::svd_leading) when the largest k is at
  // most this fraction of d, from a full SVD with vectors otherwise. 0 forces the full SVD, 1 the partial one.
  double partial_svd_max_fraction = 0.25;
  // False: no Schur form, for an operator whose singular values alone are read. `eigenvalues` stays empty and the
  // metrics that need them (spectral radius, Henrici departure, expanding and complex fractions) are NaN (null in
  // results.json).
  bool eigenvalues = true;
};

struct HenriciDeparture {
  double schur = 0;     // ‖N‖_F
  double identity = 0;  // sqrt(max(0, ‖J‖_F² − Σ|λ_i|²))
  double schur_normalized = 0;     // ‖N‖_F/‖J‖_F (0 for J = 0)
  double identity_normalized = 0;
};

struct SubspaceAlignment {
  Index k_requested = 0;
  Index k = 0;  // min(k_requested, d): the value actually used
  double value = 0;
};

struct OperatorMetrics {
  Index d = 0;
  ComplexVector eigenvalues;  // (d), by modulus, largest first (linalg::order_by_modulus)
  Vector singular_values;     // (d), descending
  double frobenius_norm = 0;
  double condition_number = 0;  // σ_1/σ_d, +∞ when σ_d is round-off (≤ d ε σ_1)
  HenriciDeparture departure;
  std::vector<SubspaceAlignment> self_alignment;
  double expanding_fraction = 0;
  double complex_fraction = 0;
  double complex_tolerance = 0;
  double symmetry_index = 0;
  EffectiveRanks effective_rank;

  // Scalars for results.json; the spectra (eigenvalues as [re, im] pairs, singular values) only when asked,
  // since at d = 4096 they belong in .npy files.
  nlohmann::json to_json(bool include_spectra = false) const;
  // What to_json wrote, back (the reader of results.json: the report's verdicts). The spectra only where they were
  // written, else empty. Throws Error naming a key that is absent or not a number (null is NaN, as written).
  static OperatorMetrics from_json(const nlohmann::json& j);
  // Every field appended to a flat list of numbers, and read back exactly (to send the metrics between MPI ranks).
  void append_numbers(std::vector<double>& out) const;
  static OperatorMetrics read_numbers(NumberReader& in);
};

// Throws Error for a non-square matrix or one with NaN/Inf (naming the entry). Cost: one real Schur form
// without Schur vectors (dgees; none without options.eigenvalues), and the singular values with only the leading
// max-k singular vector pairs (see partial_svd_max_fraction).
OperatorMetrics operator_metrics(const Eigen::Ref<const Matrix>& j, const OperatorMetricsOptions& options = {});
// The same from j's complex Schur form already computed (the surgery's): no further Schur decomposition.
OperatorMetrics operator_metrics(const Eigen::Ref<const Matrix>& j, const OperatorMetricsOptions& options,
                                 const linalg::ComplexSchur& schur);

// ---- Spectral summary for the power-method analysis (SPEC §2 "Spectrum") -----------------------------

struct DominantSpectrum {
  Complex lambda1;             // largest modulus; for a complex pair, the member with Im > 0
  bool complex_pair = false;   // λ1 has nonzero imaginary part (LAPACK returns real eigenvalues with Im = 0)
  // The next eigenvalue by modulus that is not λ1's conjugate partner (a pair has one modulus, so "λ2 = λ̄1"
  // would report a meaningless ratio of 1). Absent when there is none (d = 1, or d = 2 with a pair).
  std::optional<Complex> lambda2;
  double modulus_ratio = 0;  // |λ2|/|λ1|; 0 without λ2; 1 when λ1 = 0 (nothing dominates)
  double gap = 0;            // |λ1| − |λ2|; |λ1| without λ2
  // Real λ1: the unit eigenvector, sign fixed so its largest-magnitude entry is positive; eigenvector_imag
  // is empty. Complex pair: v1 = eigenvector_real + i·eigenvector_imag with ‖v1‖ = 1 and phase fixed so its
  // largest-modulus entry is real and positive; span{Re v1, Im v1} is the invariant plane of the pair.
  Vector eigenvector_real;
  Vector eigenvector_imag;

  nlohmann::json to_json() const;  // λ1, λ2, flags, ratio, gap (not the vectors)
  // Reads that back (the vectors empty); throws Error naming a key that is absent or of the wrong type.
  static DominantSpectrum from_json(const nlohmann::json& j);
};

DominantSpectrum dominant_spectrum(const Eigen::Ref<const Matrix>& f);  // dgeev with right vectors
// From an existing decomposition (any order) that has eigenvectors.
DominantSpectrum dominant_spectrum(const linalg::Eigendecomposition& decomposition);

// ---- Schur surgery (SPEC §3) --------------------------------------------------------------------------

// J_α = Q(Λ + αN)Q*. Its Schur form is Λ + αN, so dep(J_α) = |α|·dep(J) exactly, and J_1 = J.
//
// J_α is complex in general: for α ≠ 1, QΛQ* is real only if every complex eigenvector v of J has vᵀv = 0,
// which fails for non-normal J with complex eigenvalues (for a random Gaussian 6 × 6, ‖Im J_0‖_F/‖J_0‖_F ≈ 0.3).
// For a real spectrum (Q real) or a normal J it is real up to round-off. So the complex matrix is returned, and
// downstream metrics that need only singular values (effective rank of products) use it as is;
// imaginary_fraction() measures how far from real a result is.
ComplexMatrix schur_surgery(const linalg::ComplexSchur& schur, double alpha);

// The control: Q(Λ + α N')Q* with N' strictly upper triangular, entries (g + i h)/√2 with g, h standard
// Gaussian from std::mt19937_64(seed), scaled so that ‖N'‖_F = ‖N‖_F.
ComplexMatrix random_strictly_upper(Index d, double frobenius_norm, std::uint64_t seed);
ComplexMatrix schur_surgery_control(const linalg::ComplexSchur& schur, double alpha, std::uint64_t seed);

// ‖Im A‖_F/‖A‖_F (0 for A = 0).
double imaginary_fraction(const ComplexMatrix& a);

// ---- Cumulative products (SPEC §3: C_l = J̄_l ⋯ J̄_1) ----------------------------------------------------

// Returns C_1 … C_L with C_1 = J_1 and C_l = J_l C_{l−1} (float64). Throws Error on non-chaining shapes.
std::vector<Matrix> cumulative_products(const std::vector<Matrix>& layers);
std::vector<ComplexMatrix> cumulative_products(const std::vector<ComplexMatrix>& layers);

}  // namespace tdyn
