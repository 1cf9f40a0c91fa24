// Exact residual-stream Jacobians of every sublayer (SPEC §3 "Per-sample Jacobian"), per sample and as means
// over samples at forward-pass cost.
//
// A layer l of the generic block is two residual steps (model/transformer.h); each is one "sublayer map":
//   attention step  h_mid[p]  = A_l(h_pre[p]  ; other positions fixed)   (pre-norm, attention, post-norm, residual)
//   MLP step        h_post[p] = M_l(h_mid[p]  ; per-layer input fixed)    (+ Gemma 4 per-layer-input branch and
//                                                                         layer_scalar, up to hook_resid_post)
// and its Jacobian J = ∂out[p]/∂in[p] is d × d with rows = outputs (torch.autograd.functional.jacobian layout).
// Only position p's residual vector varies: the keys/values of the other positions are held at their forward
// values, while p's own key and value do change (on Gemma 4 KV-shared layers they come from an earlier layer
// and are constants). For post-norm (BERT/ALBERT), post-sublayer (OLMo 3) and sandwich (Gemma 4) families the
// step is still the map between consecutive residual-stream boundaries (hook_resid_pre → mid → post).
//
// Two independent computations, both in float64 from the float32 weights and the float32 forward-pass state:
//   * jacobian_by_tangents(): the reference. The local map is evaluated once with d tangent directions carried
//     along (batched forward-mode JVPs: every op maps a value and an [n, d] tangent matrix), so J is exact up
//     to round-off. Cost O(d · forward cost of one position).
//   * structure(): the same Jacobian in factored form,
//         J = a I + diag(w_L) λ (I − U Uᵀ) ( b I + Σ_br Out_br M_br In_br ρ (I − V Vᵀ) )
//     with constant weight matrices Out_br [d, r_out], In_br [r_in, d] (pre-norm scale folded in), small
//     per-sample middles M_br (MLP: diagonal, act'(·) of the pre-activations; attention: q/k/v branches built
//     from the softmax pattern of position p), and the norm Jacobians λ(I − UUᵀ) (pre) / ρ(I − VVᵀ) (post):
//     RMSNorm N'(x) = diag(w)(1/r)(I − a aᵀ/n), a = x/r; LayerNorm N'(x) = diag(w)(1/σ)(I − 11ᵀ/n − a aᵀ/n),
//     a = (x − μ)/σ. StructuredMean sums these factors over samples without forming any per-sample d × d
//     product of weights: Σ c M per branch (multiplied by the weights once per layer), and the norms' low-rank
//     corrections (Out (c M In V) Vᵀ and the like, each built through a d × k factor, k ≤ 2) in one d × d sum:
//     O(S · (forward cost + d r k)) + O(one d × r × d GEMM per branch) instead of O(S · d · forward cost), and
//     memory of a few d × d matrices whatever r (= d_mlp) is.
// jacobian() is the factored form made dense for the MLP step (StepStructure::dense: one d × d_mlp × d dgemm,
// a third of what carrying tangents through the three projections costs) and the tangent path for attention.
//
// Sublayer order ("depth") everywhere: k = 2l (attention of layer l), k = 2l + 1 (MLP of layer l).
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "linalg/dense.h"
#include "model/transformer.h"

namespace tdyn {

enum class Sublayer { Attention, Mlp };
const char* to_string(Sublayer s);  // "attn", "mlp"

// The float32 forward-pass state of one sequence that the local maps read.
struct SequenceState {
  int64_t n_pos = 0;
  std::vector<Tensor> resid_pre, resid_mid, resid_post;  // per layer [pos, d_model]
  std::vector<Tensor> keys, values;  // per layer [pos, n_kv_heads * d_head] after norms and RoPE; empty on KV-shared layers
  std::vector<Tensor> per_layer_inputs;  // per layer [pos, d_per_layer] (Gemma 4), or none
  // A pass that runs the model one layer at a time fills only the current layer's entries (and the keys/values
  // of the layer it reads): every vector has n_layers entries, the others empty.
};

// Keys/values storage [n_pos, n_kv_heads * d_head] for the layers that KV-shared layers read (Gemma 4), empty
// tensors elsewhere: what run_layer needs to carry between layers.
KVCache kv_sources(const Transformer& t, int64_t n_pos);

// One layer of the float32 forward pass (JacobianModel::run is these in order): x enters as `layer`'s
// hook_resid_pre and leaves as its hook_resid_post. With `state`, that layer's entries are filled (every vector
// sized n_layers on first use; on a KV-shared layer the source's keys/values are copied from `kv`). kv: from
// kv_sources; embeddings: the layer-0 input (Gemma 4 per-layer inputs, else ignored).
void run_layer(const Transformer& t, int64_t layer, std::span<const int32_t> ids, const Tensor& embeddings, Tensor& x,
               KVCache& kv, SequenceState* state);

// The norm Jacobian of one norm at one input, as a scale and a low-rank projector: N'(x) = diag(w) s (I − U Uᵀ).
struct NormJacobian {
  double scale = 1;
  linalg::Matrix u;  // [d, k], k = 0 (no norm), 1 (RMSNorm: a/√n) or 2 (LayerNorm: 1/√n, a/√n)
};

// One term Out · M · In of the sublayer's inner Jacobian. Out and In point into the JacobianModel's weights.
struct JacobianBranch {
  const linalg::Matrix* out = nullptr;  // [d, r_out]
  const linalg::Matrix* in = nullptr;   // [r_in, d] (pre-norm scale folded in)
  bool diagonal = false;
  linalg::Vector m_diag;   // [r] when diagonal (r_out = r_in = r)
  linalg::Matrix m_dense;  // [r_out, r_in] otherwise
};

// J = s (I + P_ple W_ple) K with K = a I + diag(w_L) L (b I + Σ_br Out M In R), L = λ(I − UUᵀ), R = ρ(I − VVᵀ).
// The per-layer-input factor (Gemma 4) is absent (P_ple empty) for the other families; s = layer_scalar or 1.
struct StepStructure {
  double identity = 1;        // a
  double inner_identity = 0;  // b
  const linalg::Vector* post_weight = nullptr;  // diag(w_L) or null
  NormJacobian post;          // L (identity when no post-norm: scale 1, no columns)
  NormJacobian pre;           // R
  std::vector<JacobianBranch> branches;
  linalg::Matrix ple_left;    // [d, P]: diag(w) λ'(I − U'U'ᵀ) W_proj diag(act'(g) ⊙ input); empty without PLE
  const linalg::Matrix* ple_gate = nullptr;  // [P, d]
  double layer_scalar = 1;

  // X K (the step without the PLE factor and scalar) and X J, for X [k, d], in O(k · forward cost).
  linalg::Matrix left_apply_step(const linalg::Matrix& x) const;
  linalg::Matrix left_apply(const linalg::Matrix& x) const;
  // J itself [d, d] in closed form: Σ Out M In as one dgemm per distinct Out, then the norm projectors as rank-k
  // updates.
  linalg::Matrix dense() const;
};

class JacobianModel {
 public:
  // The float64 copy of a layer's weights (about 2.5 × that layer's float32 size) is made when the layer is first
  // used and kept until release_layer(): a pass that visits the layers in order holds one at a time. Safe to use
  // from several threads; release_layer only while no thread uses that layer.
  explicit JacobianModel(std::shared_ptr<const Transformer> transformer);
  ~JacobianModel();

  const Transformer& transformer() const { return *transformer_; }
  const ModelConfig& config() const { return transformer_->config(); }
  int64_t d_model() const { return config().d_model; }
  int64_t n_sublayers() const { return 2 * config().n_layers; }

  // Runs the float32 forward pass and keeps what the local maps need.
  SequenceState run(std::span<const int32_t> ids, std::span<const int32_t> token_types = {}) const;

  // The residual vector entering the sublayer at `pos` (hook_resid_pre / hook_resid_mid), and the one leaving
  // it in the float32 forward pass (hook_resid_mid / hook_resid_post).
  linalg::Vector input(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos) const;
  linalg::Vector output(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos) const;
  // The local map itself in float64: out[p] as a function of in[p] = x, everything else fixed.
  linalg::Vector step(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos, const linalg::Vector& x) const;

  // Exact J [d, d] at the forward-pass input: MLP from the factored form (structure().dense()), attention by
  // batched JVPs.
  linalg::Matrix jacobian(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos) const;
  // The same J by batched JVPs whatever the sublayer: the independent reference the factored form is tested against.
  linalg::Matrix jacobian_by_tangents(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos) const;
  // The same J in factored form (structured path).
  StepStructure structure(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos) const;

  // Drops the float64 copy of `layer`'s weights (its stored layer's, shared by ALBERT's layers).
  void release_layer(int64_t layer) const;

  struct Weights;  // float64 copies, per stored layer

 private:
  const Weights& weights(int64_t layer) const;  // made on first use

  std::shared_ptr<const Transformer> transformer_;
  mutable std::mutex mutex_;                               // guards weights_
  mutable std::vector<std::unique_ptr<Weights>> weights_;  // per stored layer, or null while not in use
  std::vector<std::vector<double>> inv_freq_;              // per layer
};

// Σ_s J_s / S over structured samples, accumulated without any per-sample d × d matrix (see the header).
class StructuredMean {
 public:
  StructuredMean() = default;
  void add(const StepStructure& s);
  void merge(const StructuredMean& other);  // sums of another accumulator (same sublayer)
  int64_t count() const { return count_; }
  linalg::Matrix mean() const;  // Σ_s J_s / S
  linalg::Matrix sum() const;   // Σ_s J_s ([0 × 0] when empty)

 private:
  struct BranchSums {
    const linalg::Matrix* out = nullptr;
    const linalg::Matrix* in = nullptr;
    bool diagonal = false;
    linalg::Vector m_diag;   // Σ c M (diagonal)
    linalg::Matrix m_dense;  // Σ c M
  };
  void init(const StepStructure& s);
  int64_t count_ = 0;
  double identity_ = 0, inner_identity_ = 0, layer_scalar_ = 1;
  const linalg::Vector* post_weight_ = nullptr;
  const linalg::Matrix* ple_gate_ = nullptr;
  double lambda_sum_ = 0;          // Σ λ               (b I term)
  linalg::Matrix inner_;           // Σ of every low-rank correction of the inner factor (see add())   [d, d]
  std::vector<BranchSums> branches_;
  linalg::Matrix ple_product_sum_; // Σ P_ple (W_ple K) [d, d]
};

}  // namespace tdyn
