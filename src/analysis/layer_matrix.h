// Layer matrices of the power-method paper (Li & Altafini, "Analogies between Transformer Layers and Power Method"):
//
//   F_t = O_t V_t = Σ_h O_t^(h) V_t^(h)      (d_model × d_model, column vectors: y = F x)
//   c_t = O_t b_V + b_O                      (the constant offset the biases add; left out of F_t)
//
// V_t is the value projection with the heads stacked along its output rows, O_t the output projection with
// the heads along its input columns (nn.Linear layout, whatever the storage: GPT-2 Conv1D slices are read
// through Linear::at). With grouped-query attention query head h reads KV head h / (n_heads / n_kv_heads),
// so V_t is "expanded": its block h is the value block of that KV head. Special cases:
//   - Gemma 4 KV-shared layers: W_O of the layer with W_V (and b_V) of the source layer whose values it reads.
//   - ALBERT: every layer reuses the shared layer's weights, so F_t is the same matrix for every t.
//   - Gemma 4 v_norm (RMS normalisation of each value head) is non-linear and is not part of F_t.
// With the attention pattern uniform over the keys, the attention output is exactly F x̄ + c (x̄ the mean
// value input), which is how the fixture references were checked.
//
// Of a model with ablated parts (model/ablation.h ZeroedParts) the matrices are the ablated model's: a head whose z
// is set to zero drops out of the sum (its block of V_t is zero, and so is its share of c_t), and an attention output
// set to zero makes F_t and c_t zero. MLP parts do not enter F_t.
#pragma once

#include <cstdint>
#include <vector>

#include "linalg/dense.h"
#include "model/ablation.h"
#include "model/loader.h"

namespace tdyn {

struct LayerMatrix {
  int64_t layer = 0;
  int64_t value_layer = 0;  // the layer whose W_V was used (== layer except for Gemma 4 KV sharing)
  linalg::Matrix f;         // [d_model, d_model]  F_t = O_t V_t
  linalg::Vector bias;      // [d_model]           c_t = O_t b_V + b_O (zeros when the layer has no biases)
};

// A projection's matrix W in the nn.Linear convention [out, in], widened to float64, whatever its storage.
linalg::Matrix dense_matrix(const Linear& linear);
// The same into `into`, whose buffer is reused when it has the size already.
void dense_matrix(const Linear& linear, linalg::Matrix& into);

// The expanded value projection V_t [n_heads * d_head, d_model] in float64 (block h = KV head h / group; zero for a
// head `zeroed` sets to zero).
linalg::Matrix expanded_value_matrix(const Model& model, int64_t layer, const ZeroedParts& zeroed = {});
// The output projection O_t [d_model, n_heads * d_head] in float64.
linalg::Matrix output_matrix(const Model& model, int64_t layer);

// F_t and c_t of one layer (0 <= layer < n_layers), of the model with `zeroed`'s parts set to zero; throws Error
// for an out-of-range layer.
LayerMatrix layer_matrix(const Model& model, int64_t layer, const ZeroedParts& zeroed = {});
// Every layer, in order.
std::vector<LayerMatrix> layer_matrices(const Model& model, const ZeroedParts& zeroed = {});

// G = diag(sqrt(d_model) g) [d_model]: what the layer's pre-attention norm does to a unit token x̂ (RMSNorm and
// LayerNorm give g ⊙ sqrt(d) x̂ up to epsilon, mean and bias; g = 1 when the layer has no pre-attention norm, as
// in post-LN BERT, whose attention reads LayerNorm outputs of norm ~sqrt(d) too). The idealisations that keep
// tokens on the unit sphere (the particle bridge, power's attn-only-l2) feed G x̂ to the attention: with x̂
// itself the scores are ~1/d of the model's and the attention is near uniform.
std::vector<double> unit_token_gain(const Model& model, int64_t layer);

}  // namespace tdyn
