// The real-model bridge of the clustering paper (004): the attention of one layer of a checkpoint as the
// particle system of analysis/particles/dynamics.h (Geshkovski, Letrouit, Polyanskiy, Rigollet 2023),
//     ẋ_i = Σ_j P_ij O V x_j,   P_ij = softmax_j ⟨Q x_i, K x_j⟩,
// with the tokens on the unit sphere.
//
// What is folded into the matrices (d = d_model, W_q, W_k, W_v, W_o in the nn.Linear layout y = W x):
//   - the pre-attention norm: for a unit token x̂ the head reads RMSNorm/LayerNorm output g ⊙ sqrt(d) x̂, so
//     the diagonal gain G = diag(sqrt(d) g) multiplies Q, K and V from the right (G = sqrt(d) I when the layer
//     has no pre-attention norm, e.g. post-LN BERT). Without it the scores are d times too small and P stays
//     near uniform. The particles therefore live on the unit sphere (project_to_sphere).
//   - β, the layer's attention scale (1/sqrt(d_head) unless the family says otherwise), multiplies Q.
//   - grouped-query attention: query head h reads KV head h / (n_heads / n_kv_heads).
//
// One head h (options.head >= 0):
//   Q = β W_q[h] G,  K = W_k[kv(h)] G  (d_head × d),  V = W_v[kv(h)] G  (d_head × d),  O = W_o[:, h]  (d × d_head).
// The whole layer (options.head = -1), treated as one head of width n_heads·d_head:
//   Q = β [W_q[0]; …; W_q[H−1]] G,  K = [W_k[kv(0)]; …; W_k[kv(H−1)]] G,  V = (expanded W_v) G,  O = W_o,
// so ⟨Q x, K y⟩ = Σ_h ⟨Q_h x, K_h y⟩ (the sum of the heads' scores) and the tokens move by
// W = O V = F_t G, F_t the layer matrix of the power-method paper (000; analysis/layer_matrix.h). One softmax
// over the summed scores is an idealisation: the model applies one softmax per head and sums the heads' outputs.
//
// Left out, as in the paper's model (the record lists the ones the model has): RoPE, QK-norm, Gemma's value
// norm, the causal mask and sliding windows, attention biases, LayerNorm's mean subtraction and bias, post-norms,
// the MLP, and the residual stream's own norm growth.
//
// Initial tokens: the unit-length token-embedding rows of the first n ids (whatever the layer: the particles
// start from the embeddings, not from the layer's input); ALBERT's factorised embeddings (narrower than
// d_model) go through the embedding LayerNorm and embedding_hidden_mapping_in first, as in the model.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/particles/presets.h"
#include "model/loader.h"

namespace tdyn {

struct ModelHeadOptions {
  int64_t layer = 0;
  int64_t head = -1;    // -1: the whole layer as one head
  int64_t tokens = 32;  // n: the first n ids (fewer when the sample is shorter)
};

struct ModelParticles {
  particles::Experiment experiment;  // system (sphere on, no FFN) and x0 (n × d_model)
  nlohmann::json record;             // what was taken from the model and what was left out (results.json)
};

// The head (or the whole layer) as Q, K, V, O; throws Error for a layer or head out of range and for a layer
// without its own query/key projection (Gemma 4 KV-shared layers). `record` receives the description.
particles::AttentionHead model_attention_head(const Model& model, const ModelHeadOptions& options, nlohmann::json* record);

// The unit-length embedding rows of the first min(options.tokens, ids.size()) ids (n × d_model); throws Error
// for no ids, an id outside the vocabulary or a zero embedding row. `record` receives how they were made.
particles::Matrix model_initial_tokens(const Model& model, const std::vector<int32_t>& ids, const ModelHeadOptions& options,
                                       nlohmann::json* record);

// Both together: the particle system on the sphere with the model's head and initial tokens.
ModelParticles model_particles(const Model& model, const std::vector<int32_t>& ids, const ModelHeadOptions& options);

}  // namespace tdyn
