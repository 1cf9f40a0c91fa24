// Token dynamics of the power-method paper: the residual stream of one sequence moved layer by layer, in one of the modes
// SPEC §2 names. Layer t maps the token states x^t [pos, d_model] to x^{t+1}:
//
//   full          the real model: attention sublayer then MLP sublayer, each with the family's norms
//                 (pre-norm x + f(N(x)), post-LN N(x + f(x)), post-sublayer x + N(f(x)), sandwich
//                 x + N2(f(N1(x)))), Gemma 4's per-layer-input branch and layer scalar included; a
//                 parallel-residual block (GPT-NeoX) x + attn(N1(x)) + mlp(N2(x)).
//   attn-only     the attention sublayer alone, with the family's norms (the FFN removed).
//   attn-only-l2  the paper's idealisation, the same for every family: every norm replaced by one L2
//                 normalisation x ↦ x/‖x‖ after the update,  x^{t+1}_i = (x_i + A_t(G x)_i) / ‖x_i + A_t(G x)_i‖,
//                 with A_t the attention sublayer (Q, K, V, O, biases, RoPE, QK-norm as the model has them)
//                 applied to G x, G = diag(sqrt(d_model) g) the pre-attention norm's output for a unit token
//                 (unit_token_gain, as the particle bridge folds it in; without it the scores are ~1/d of the
//                 model's and the attention near uniform); the initial states are the L2-normalised embeddings.
//                 This is the normalised power step x ← F G x/‖F G x‖ when the attention pattern averages
//                 consensus tokens.
//
// Without the residual the "x +" term of every sublayer is dropped (f(N(x)), N(f(x)), N2(f(N1(x))), and
// A_t(x)/‖A_t(x)‖ in attn-only-l2); Gemma 4's per-layer-input branch, itself residual, is then left out. A
// parallel block without its residual is attn(N1(x)) + mlp(N2(x)) (the layer's input term dropped).
//
// In every mode the layers may be those of an ablated model (model/ablation.h): the parts `zeroed` names are set to
// zero wherever the mode runs them (in attn-only-l2 hook_attn_out is A_t(G x) itself).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "model/ablation.h"
#include "model/transformer.h"

namespace tdyn {

enum class DynamicsMode { Full, AttnOnly, AttnOnlyL2 };
const char* to_string(DynamicsMode mode);                // "full", "attn-only", "attn-only-l2"
DynamicsMode parse_dynamics_mode(std::string_view text);  // throws Error listing the modes
// What the attention sublayer reads in this mode, in words (results.json states it beside the mode).
const char* attention_input(DynamicsMode mode);

struct DynamicsOptions {
  DynamicsMode mode = DynamicsMode::Full;
  bool residual = true;  // x + Attn(x) (the model) vs Attn(x)
  ZeroedParts zeroed;    // parts of the model set to zero (run_power resolves PowerOptions::ablations into it)
};

// The tokens of one sequence between layers, with what the layers need beside them.
struct TokenState {
  Tensor x;          // [pos, d_model] the residual stream
  std::vector<Tensor> per_layer;  // per layer [pos, d_per_layer]: Gemma 4 per-layer inputs; empty otherwise
  KVCache kv;        // keys/values of the layers that Gemma 4 KV-shared layers read (as forward() keeps them)
};

// The states entering layer 0: the embeddings (L2-normalised in attn-only-l2).
TokenState initial_state(const Transformer& model, std::span<const int32_t> ids, const DynamicsOptions& options);

// x ← layer_t(x) in the chosen mode. `refresh_shared_kv`: for a layer that reads another layer's keys/values
// (Gemma 4 KV sharing), recompute them first from the current states with the source layer's projections —
// needed when the layer is iterated on its own (the source layer never runs then).
void apply_layer(const Transformer& model, int64_t layer, TokenState& state, const DynamicsOptions& options,
                 bool refresh_shared_kv = false);

// Each row of x [rows, d] divided by its Euclidean norm (rows of norm 0 are left as they are).
void normalize_rows(Tensor& x);

}  // namespace tdyn
