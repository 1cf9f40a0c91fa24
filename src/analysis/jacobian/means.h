// The spectral half of SPEC §3: mean Jacobians J̄_k over samples and positions, cumulative products
// C_k = J̄_k ⋯ J̄_1 (or the mean of per-sample products), operator metrics of both, and the Schur-surgery sweep
// with its random control. Pure functions from a model and samples to result structs; run.h runs them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "analysis/jacobian/jacobian_model.h"
#include "analysis/operator_metrics.h"
#include "analysis/samples.h"
#include "analysis/stream_points.h"
#include "core/progress.h"
#include "kernels/serial_blas.h"
#include "linalg/gemm.h"

namespace tdyn {

struct MeanJacobianOptions {
  PositionSpec positions;
  bool structured = true;         // structured mean (forward-pass cost); false: sum of plain per-sample Jacobians
  bool mean_of_products = false;  // also the mean over samples of J_k ⋯ J_1 (needs per-sample Jacobians)
  // Called (serialised) with every per-sample, per-position Jacobian [d, d] (plain path) when set.
  std::function<void(int64_t sample, int64_t pos, int64_t layer, Sublayer which, const linalg::Matrix& j)> per_sample;
};

struct MeanJacobians {
  std::vector<linalg::Matrix> mean;              // [2L] J̄_k, k = 2l (attention), 2l + 1 (MLP)
  std::vector<linalg::Matrix> mean_of_products;  // [2L] mean of J_k ⋯ J_1 over (sample, position), if asked
  int64_t n_samples = 0;  // samples with at least one position
  int64_t n_pairs = 0;    // (sample, position) pairs averaged
};

// Progress: one step of the loop `label` per sample.
MeanJacobians mean_jacobians(const JacobianModel& model, const std::vector<Sample>& samples,
                             const MeanJacobianOptions& options, ProgressSink& progress = silent_progress(),
                             const std::string& label = "samples");

// Name of sublayer k: "blocks.{l}.jac_attn" / "blocks.{l}.jac_mlp" (the fixtures' keys).
std::string sublayer_name(int64_t k);

// The Jacobian of the residual stream after sublayer k with respect to the layer-0 input, from the sublayer
// Jacobians in depth order: C_k = J_k C_{k−1} — except after the MLP step of a block whose MLP reads the layer's
// input as its attention does (Transformer::mlp_reads_layer_input: a parallel block), whose two steps read the same
// input: C_2l+1 = (J_2l + J_2l+1 − I) C_2l−1 = C_2l + (J_2l+1 − I) C_2l−1 (jacobian_model.h). C_2l is then
// ∂hook_resid_mid/∂x_0 and C_2l+1 ∂hook_resid_post/∂x_0 for every family.
inline linalg::Matrix chain_product(const linalg::Matrix& a, const linalg::Matrix& b) { return linalg::multiply(a, b); }
inline linalg::ComplexMatrix chain_product(const linalg::ComplexMatrix& a, const linalg::ComplexMatrix& b) { return linalg::multiply(a, b); }

template <typename MatrixType>
class DepthChain {
 public:
  explicit DepthChain(bool mlp_reads_layer_input) : mlp_reads_layer_input_(mlp_reads_layer_input) {}
  // Takes J_k of the next depth k; returns C_k.
  const MatrixType& add(const MatrixType& j) {
    const bool attention = k_ % 2 == 0;
    if (attention && mlp_reads_layer_input_) layer_input_ = current_;  // C_2l−1 (empty: the identity)
    if (!attention && mlp_reads_layer_input_) {
      MatrixType delta = j;  // J_2l+1 − I
      delta.diagonal().array() -= 1.0;
      if (layer_input_.size() == 0) current_ += delta;
      else current_ += chain_product(delta, layer_input_);
    } else {
      current_ = k_ == 0 ? j : chain_product(j, current_);
    }
    ++k_;
    return current_;
  }
  const MatrixType& product() const { return current_; }  // C_k of the last depth added

 private:
  bool mlp_reads_layer_input_;
  int64_t k_ = 0;
  MatrixType current_, layer_input_;
};

// ---- Schur surgery (SPEC §3) ----------------------------------------------------------------------------

struct SurgeryOptions {
  std::vector<double> alphas = {0, 0.25, 0.5, 0.75, 1};
  uint64_t seed = 0;  // control: sublayer k uses seed + k
  // Draws of the random-N control at α = 1, the surgery verdict's null (the first is `control` itself): their
  // full-depth effective ranks are the distribution the model's is judged against. Each further draw costs one more
  // complex d × d product per depth.
  int64_t control_draws = 5;
  // The effective ranks at the full depth only, the verdict's numbers: each depth then costs the complex Schur form
  // and the products, without the two complex SVDs per α that rank every depth. The other depths' ranks are NaN.
  bool full_depth_only = false;
};

struct SurgeryPoint {
  double alpha = 0;
  // Effective ranks of the cumulative products of J_α (and of the control) at every depth k (NaN but the last with
  // SurgeryOptions::full_depth_only).
  std::vector<EffectiveRanks> surgery, control;
  // dep(J_α,k)/dep(J̄_k) per sublayer (identity form on the complex J_α); equals |α| up to round-off.
  std::vector<double> departure_ratio;
  double max_imaginary_fraction = 0;  // max over k of ‖Im J_α,k‖_F/‖J_α,k‖_F
  // At α = 1 only: the full-depth effective ranks of SurgeryOptions::control_draws independent random-N controls,
  // the first being control.back().
  std::vector<EffectiveRanks> control_draws;

  // The full-depth summary of results.models[i].surgery[·]: alpha, full_depth_surgery and full_depth_control (the
  // four effective ranks of the last depth), full_depth_control_draws (at α = 1), max_abs_departure_ratio_minus_alpha,
  // max_imaginary_fraction.
  nlohmann::json to_json() const;
};

// The sweep over depths one J̄_k at a time, in order: memory holds one running product per task, whatever the depth.
//
// Its tasks, one per thread, each a running product: each α ≠ 0's control (random N), each further control draw at
// α = 1, each α's surgery (J_α; at α = 1 the mean itself, in real arithmetic); the longest first, so that the threads
// end together. At α = 0 the control is the surgery (both drop N). Processes that share them (`share`: MPI ranks,
// each given every J̄_k and its Schur form) run only their own; rank 0's points_from_shares then assembles the points
// from every share's numbers.
class SurgerySweep {
 public:
  // mlp_reads_layer_input: chain the depths as DepthChain does for such blocks.
  explicit SurgerySweep(const SurgeryOptions& options, bool mlp_reads_layer_input = false, TaskShare share = {});
  void add(const linalg::Matrix& mean);  // J̄_k of the next depth k
  void add(const linalg::Matrix& mean, const linalg::ComplexSchur& schur);  // with its complex Schur form
  std::vector<SurgeryPoint> points() const;  // per α, with the control draws' effective ranks at the last depth (all tasks)

  // What this share's tasks found, as numbers; and from every share's (shares[i] of index i) the points.
  std::vector<double> share_numbers() const;
  std::vector<SurgeryPoint> points_from_shares(const std::vector<std::vector<double>>& shares) const;

 private:
  enum class Product { Control, Draw, Surgery };
  struct Task {
    Product product;
    size_t index;  // the α's (Control, Surgery) or the further draw's (Draw)
  };
  // What a task's product gave: its effective ranks per depth (with full_depth_only, NaN but the last), and a
  // surgery's departure ratio per depth and largest imaginary fraction.
  struct Found {
    std::vector<EffectiveRanks> ranks;
    std::vector<double> departure_ratio;
    double max_imaginary_fraction = 0;
  };
  // `departure`: ‖N‖_F of J̄_k's Schur form, `seed` the depth's.
  void step(size_t task, const linalg::Matrix& mean, const linalg::ComplexSchur& schur, double departure, uint64_t seed);
  bool real(size_t task) const;                      // the unit α's surgery: the means' own product
  std::vector<Found> finished() const;               // this share's tasks' findings, ranked at the full depth
  std::vector<SurgeryPoint> assemble(const std::vector<Found>& found) const;

  TaskShare share_;
  SurgeryOptions options_;
  int64_t depth_ = 0;
  int64_t unit_alpha_ = -1;  // the index of α = 1, whose control has further draws
  std::vector<Task> tasks_;
  std::vector<int64_t> surgery_task_, control_task_;  // per α (control: −1 at α = 0)
  std::vector<Found> found_;                          // per task
  std::vector<DepthChain<linalg::ComplexMatrix>> products_;  // per task (the real one's unused)
  DepthChain<linalg::Matrix> real_product_;
};

// Progress: one step of the loop "surgery" per depth.
std::vector<SurgeryPoint> schur_surgery_sweep(const std::vector<linalg::Matrix>& means, const SurgeryOptions& options,
                                              ProgressSink& progress = silent_progress(), bool mlp_reads_layer_input = false);

// Henrici departure in the identity form sqrt(‖A‖_F² − Σ|λ_i|²) of a complex matrix with known eigenvalues.
double henrici_departure(const linalg::ComplexMatrix& a, const linalg::ComplexVector& eigenvalues);

}  // namespace tdyn
