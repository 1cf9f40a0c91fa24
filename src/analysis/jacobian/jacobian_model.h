// Exact residual-stream Jacobians of every sublayer (SPEC §3 "Per-sample Jacobian"), per sample and as means
// over samples at forward-pass cost.
//
// A layer l of the generic block is two residual steps (model/transformer.h); each is one "sublayer map":
//   attention step  h_mid[p]  = A_l(h_pre[p]  ; other positions fixed)   (pre-norm, attention, post-norm, residual)
//   MLP step        h_post[p] = M_l(h_mid[p]  ; per-layer input fixed)    (+ Gemma 4 per-layer-input branch and
//                                                                         the layer scalar, up to hook_resid_post)
// and its Jacobian J = ∂out[p]/∂in[p] is d × d with rows = outputs (torch.autograd.functional.jacobian layout).
// A parallel-residual block (GPT-NeoX) has both sublayers reading h_pre: its attention step is the map above
// (h_mid = h_pre + attn(N1(h_pre))) and its MLP step is x ↦ x + mlp(N2(x)) at x = h_pre, so the two Jacobians
// are I + J_attn and I + J_mlp at the same input and the block's is their sum minus I (not their product):
// ∂h_post/∂h_pre = J_2l + J_2l+1 − I. Chains over depth compose them so (DepthChain, means.h).
// Only position p's residual vector varies: the keys/values of the other positions are held at their forward
// values, while p's own key and value do change (on Gemma 4 KV-shared layers they come from an earlier layer
// and are constants). For post-norm (BERT/ALBERT), post-sublayer (OLMo 3) and sandwich (Gemma 4) families the
// step is still the map between consecutive residual-stream boundaries (hook_resid_pre → mid → post).
//
// Two independent computations, both in float64 from the float32 weights and the float32 forward-pass state:
//   * jacobian_by_tangents(): the reference. The local map is evaluated once with d tangent directions carried
//     along (batched forward-mode JVPs: every op maps a value and an [n, d] tangent matrix), so J is exact up
//     to round-off. Cost O(d · forward cost of one position).
//   * structure(): the same Jacobian in closed, factored form,
//         J = a I + diag(w_L) λ (I − U Uᵀ) ( b I + Out (Σ_br M_br In_br) ρ (I − V Vᵀ) )
//     with constant weight matrices Out [d, r_out] (W_down or W_o), In_br [r_in, d] (projection × pre-norm
//     scale), small per-sample middles M_br (MLP: diagonal, act'(g) ⊙ u and act(g) for a gated MLP, act'(·) for a
//     plain one; attention: one d_head block per head for each of q, k, v, from the softmax pattern of position
//     p, GQA heads sharing their kv head's columns), and the norm Jacobians λ(I − UUᵀ) (post) / ρ(I − VVᵀ)
//     (pre): RMSNorm N'(x) = diag(w)(1/r)(I − a aᵀ/n), a = x/r; LayerNorm N'(x) = diag(w)(1/σ)(I − 11ᵀ/n −
//     a aᵀ/n), a = (x − μ)/σ. a = 1, b = 0, except post-residual (BERT) where a = 0, b = 1.
//     jacobian() is this form made dense (StepStructure::dense): one d × r × d dgemm, where carrying d tangents
//     costs one such product per projection (three for the MLP, four for attention).
// StructuredMean sums these factors over samples without forming any per-sample d × d product of weights:
// Σ c M per branch (multiplied by the weights once, in sum()), and the norms' low-rank corrections (through
// d × k factors, k ≤ 2) gathered over a batch of samples and added to one d × d sum by dgemm. The pre-norm
// side needs In V, which the forward values give without a pass over In (see in_times_v in jacobian_model.cpp); the
// post-norm side needs Uᵀ Out and then In, taken by dgemm for the whole batch. Per sample that leaves the
// float64 step at position p, whose input projections (one pass over each weight matrix, as the forward pass makes
// for one token) project_inputs() makes for many positions in one product, and memory of a few d × d matrices
// whatever r (= d_mlp) is.
//
// Sublayer order ("depth") everywhere: k = 2l (attention of layer l), k = 2l + 1 (MLP of layer l).
//
// Ablated parts (model/ablation.h ZeroedParts: heads of attn.hook_z, hook_attn_out, mlp.hook_post, hook_mlp_out set
// to 0) are constants: the forward pass runs with them zeroed, and both computations drop their derivatives (a
// zeroed head's middle blocks are 0, a zeroed MLP's middles are 0), so the Jacobians are those of the ablated model.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "linalg/dense.h"
#include "model/ablation.h"
#include "model/sequence_state.h"
#include "model/transformer.h"

namespace tdyn {

const char* to_string(Sublayer s);  // "attn", "mlp"

// The norm Jacobian of one norm at one input, as a scale and a low-rank projector: N'(x) = diag(w) s (I − U Uᵀ).
struct NormJacobian {
  double scale = 1;
  linalg::Matrix u;  // [d, k], k = 0 (no norm), 1 (RMSNorm: a/√n) or 2 (LayerNorm: 1/√n, a/√n)
};

// The middle factor M [r_out, r_in] of a branch Out M In: diagonal (MLP), or one dense block per row group of
// block_rows rows (attention: per head h, rows h·d_head .. + d_head − 1 and columns block_col[h] .. +
// blocks[h].cols() − 1: its d_head × d_head block, or whole rows under a QK-norm over the full projection).
struct BranchMiddle {
  bool diagonal = false;
  int64_t cols = 0;                    // r_in
  linalg::Vector diag;                 // [r] when diagonal
  int64_t block_rows = 0;
  std::vector<linalg::Matrix> blocks;  // [block_rows, width] otherwise
  std::vector<int64_t> block_col;      // first column of each block

  int64_t rows() const { return diagonal ? diag.size() : block_rows * static_cast<int64_t>(blocks.size()); }
  linalg::Matrix times(const linalg::Matrix& x) const;            // M X, X [r_in, k]
  linalg::Matrix transpose_times(const linalg::Matrix& y) const;  // Mᵀ Y, Y [r_out, k]
  void add_times(const linalg::Matrix& in, linalg::Matrix& out) const;  // out [r_out, n] += M In, In [r_in, n]
  void add(double c, const BranchMiddle& other);  // this += c other; an empty this takes other's layout
  int64_t bytes() const;
};

// One term M In of the sublayer's inner Jacobian (In points into the JacobianModel's weights).
struct JacobianBranch {
  const linalg::Matrix* in = nullptr;  // [r_in, d] (pre-norm scale folded in)
  BranchMiddle m;
  linalg::Matrix in_v;                 // In V [r_in, kR] (V: the pre-norm's projector columns)
};

// J = s (I + P_ple W_ple) K with K = a I + diag(w_L) L (b I + Out Σ_br M In R), L = λ(I − UUᵀ), R = ρ(I − VVᵀ).
// The per-layer-input factor (Gemma 4) is absent (P_ple empty) for the other families; s is the layer's output
// scale (Transformer::layer_output_scale: Gemma 4's layer scalar, else 1).
struct StepStructure {
  double identity = 1;        // a
  double inner_identity = 0;  // b
  const linalg::Vector* post_weight = nullptr;  // diag(w_L) or null
  NormJacobian post;          // L (identity when no post-norm: scale 1, no columns)
  NormJacobian pre;           // R
  const linalg::Matrix* out = nullptr;  // [d, r_out], shared by every branch
  std::vector<JacobianBranch> branches;
  linalg::Matrix ple_left;    // [d, P]: diag(w) λ'(I − U'U'ᵀ) W_proj diag(act'(g) ⊙ input); empty without PLE
  const linalg::Matrix* ple_gate = nullptr;  // [P, d]
  double output_scale = 1;

  // X K (the step without the PLE factor and scalar), for X [k, d], in O(k · forward cost).
  linalg::Matrix left_apply_step(const linalg::Matrix& x) const;
  // J itself [d, d]: Out (Σ M In) by one dgemm, then the norm projectors as rank-k updates.
  linalg::Matrix dense() const;
  int64_t bytes() const;  // what a copy holds (the weights it points to not counted)
};

// The raw projections of a step's input after its pre-norm at one position (q, k, v of an attention step, k and v
// only where the layer computes its own keys; gate and up of an MLP step, gate only when gated). The structured
// form reads them (and nothing else of the weights) per position: made for many positions in one product per
// projection, they cost one pass over the float64 weights for all, instead of one each.
struct StepProjections {
  linalg::Vector q, k, v, gate, up;
};

struct StatePosition {
  const SequenceState* state = nullptr;
  int64_t pos = 0;
};

class JacobianModel {
 public:
  // The float64 copy of a layer's weights (about 2.5 × that layer's float32 size) is made when the layer is first
  // used and kept until release_layer(): a pass that visits the layers in order holds one at a time. Safe to use
  // from several threads; release_layer only while no thread uses that layer. `zeroed`: the model's ablated parts.
  explicit JacobianModel(std::shared_ptr<const Transformer> transformer, ZeroedParts zeroed = {});
  ~JacobianModel();

  const Transformer& transformer() const { return *transformer_; }
  const ModelConfig& config() const { return transformer_->config(); }
  int64_t d_model() const { return config().d_model; }
  int64_t n_sublayers() const { return 2 * config().n_layers; }
  const ZeroedParts& zeroed() const { return zeroed_; }

  // Runs the float32 forward pass (with the zeroed parts) and keeps what the local maps need.
  SequenceState run(std::span<const int32_t> ids, std::span<const int32_t> token_types = {}) const;

  // The residual vector entering the sublayer at `pos` (hook_resid_pre / hook_resid_mid), and the one leaving
  // it in the float32 forward pass (hook_resid_mid / hook_resid_post). A parallel block's MLP step enters at
  // hook_resid_pre and leaves at hook_resid_pre + hook_mlp_out (from the stored boundaries, to float32 rounding).
  linalg::Vector input(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos) const;
  linalg::Vector output(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos) const;
  // The local map itself in float64: out[p] as a function of in[p] = x, everything else fixed.
  linalg::Vector step(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos, const linalg::Vector& x) const;

  // Exact J [d, d] at the forward-pass input, in closed form (structure().dense()).
  linalg::Matrix jacobian(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos) const;
  // ∂hook_resid_post/∂hook_resid_pre of one layer at one position from its two sublayer Jacobians: J_mlp J_attn, or
  // J_attn + J_mlp − I where both sublayers read the layer's input (a parallel-residual block).
  linalg::Matrix block_jacobian(const linalg::Matrix& attn, const linalg::Matrix& mlp) const;
  // The same J by batched JVPs whatever the sublayer: the independent reference the factored form is tested against.
  linalg::Matrix jacobian_by_tangents(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos) const;
  // The same J in factored form (structured path). `projected`, when given, holds the step's input projections at
  // this position from project_inputs() (else each is one pass over its float64 weights).
  StepStructure structure(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos,
                          const StepProjections* projected = nullptr) const;
  // The input projections of the step at each (sequence, position) pair, one product per projection for all of them.
  std::vector<StepProjections> project_inputs(std::span<const StatePosition> at, int64_t layer, Sublayer which) const;

  // Makes the float64 copy of `layer`'s weights now, with every core (called outside a parallel region; the
  // other members make it on first use, on the calling thread alone).
  void prepare_layer(int64_t layer) const;
  // Drops the float64 copy of `layer`'s weights (its stored layer's, shared by ALBERT's layers). With
  // keep_buffers, the next layer's copy is written into its buffers; without, they are freed too.
  void release_layer(int64_t layer, bool keep_buffers) const;

  struct Weights;  // float64 copies, per stored layer

 private:
  const Weights& weights(int64_t layer) const;  // made on first use

  std::shared_ptr<const Transformer> transformer_;
  ZeroedParts zeroed_;
  mutable std::mutex mutex_;                               // guards weights_
  mutable std::vector<std::unique_ptr<Weights>> weights_;  // per stored layer, or null while not in use
  mutable std::unique_ptr<Weights> spare_;                 // a released layer's, whose buffers the next one reuses
  std::vector<std::vector<double>> inv_freq_;              // per layer
};

// Σ_s J_s / S over structured samples, accumulated without any per-sample d × d matrix (see the header).
// Samples wait in a batch (bounded by count and by a quarter of a d × d matrix of memory) so that their low-rank
// terms reach the d × d sum through a few dgemms instead of per-sample passes over the weights.
class StructuredMean {
 public:
  StructuredMean() = default;
  void add(const StepStructure& s) { add(StepStructure(s)); }
  void add(StepStructure&& s);
  void merge(const StructuredMean& other);  // sums of another accumulator (same sublayer)
  int64_t count() const { return count_; }
  linalg::Matrix mean() const;  // Σ_s J_s / S
  linalg::Matrix sum() const;   // Σ_s J_s ([0 × 0] when empty)

 private:
  void init(const StepStructure& s);
  bool batch_full() const;
  void flush();  // folds the waiting samples into the sums
  int64_t count_ = 0;
  double identity_ = 0, inner_identity_ = 0, output_scale_ = 1;
  const linalg::Vector* post_weight_ = nullptr;
  const linalg::Matrix* out_ = nullptr;
  const linalg::Matrix* ple_gate_ = nullptr;
  double lambda_sum_ = 0;           // Σ λ               (b I term)
  linalg::Matrix inner_;            // Σ of every low-rank correction of the inner factor (see flush())   [d, d]
  std::vector<const linalg::Matrix*> ins_;  // per branch: In
  std::vector<BranchMiddle> m_sums_;        // per branch: Σ c M
  linalg::Matrix ple_product_sum_;  // Σ P_ple (W_ple K) [d, d]
  std::vector<StepStructure> waiting_;
  int64_t waiting_bytes_ = 0;
};

}  // namespace tdyn
