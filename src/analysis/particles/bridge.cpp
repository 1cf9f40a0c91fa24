#include "analysis/particles/bridge.h"

#include <cmath>
#include <string>

#include "analysis/layer_matrix.h"
#include "core/error.h"
#include "model/ops.h"

namespace tdyn {
namespace {

// What the simulation leaves out of this layer, for the record: only the features the model has.
nlohmann::json left_out(const Model& model, int64_t layer, bool whole_layer) {
  const ModelConfig& c = model.config;
  const LayerConfig lc = c.layer(layer);
  const LayerWeights& w = model.weights.layers.at(layer);
  nlohmann::json out = nlohmann::json::array();
  if (whole_layer) out.push_back("one softmax per head: the simulation applies one softmax to the heads' summed scores");
  if (lc.rope.style != RopeStyle::None) out.push_back("RoPE");
  if (c.learned_positions) out.push_back("position embeddings (the initial tokens are token embeddings only)");
  if (c.qk_norm != QKNorm::None) out.push_back("QK-norm");
  if (c.v_norm) out.push_back("value norm");
  if (c.causal) out.push_back("the causal mask (every token attends to every token)");
  if (lc.sliding_window > 0) out.push_back("the sliding window");
  if (w.q.b || w.k.b || w.v.b || w.o.b) out.push_back("attention biases");
  if (w.attn_norm.w && c.norm == NormKind::LayerNorm) out.push_back("LayerNorm's mean subtraction and bias");
  if (has_post_norm(c.norm_placement)) out.push_back("the post-attention norm");
  out.push_back("the norm's epsilon");
  out.push_back("the MLP");
  out.push_back("the residual stream's own norm growth (the tokens stay on the unit sphere)");
  return out;
}

}  // namespace

particles::AttentionHead model_attention_head(const Model& model, const ModelHeadOptions& options, nlohmann::json* record) {
  const ModelConfig& c = model.config;
  const int64_t l = options.layer, h = options.head;
  if (l < 0 || l >= c.n_layers) fail("layer {} is out of range: the model has {} layers (0..{})", l, c.n_layers, c.n_layers - 1);
  if (h < -1 || h >= c.n_heads) fail("head {} is out of range: layer {} has {} heads (0..{})", h, l, c.n_heads, c.n_heads - 1);
  const LayerConfig lc = c.layer(l);
  const LayerWeights& w = model.weights.layers.at(l);
  if (!w.q) fail("layer {} has no query projection of its own", l);
  if (!w.k)
    fail("layer {} has no key projection of its own: it reads the keys and values of layer {} (KV sharing); pick another layer", l,
         lc.kv_source);
  const int64_t d = c.d_model, dh = lc.d_head, group = c.n_heads / c.n_kv_heads;
  TDYN_CHECK(w.q.out == c.n_heads * dh && w.q.in == d && w.k.out == c.n_kv_heads * dh && w.k.in == d);
  const double beta = lc.attn_scale;
  const std::vector<double> gain = unit_token_gain(model, l);

  // Every query head stacked, each beside the key block of its KV head; a single head is one block of these.
  const int64_t width = c.n_heads * dh;
  particles::Matrix q(width, d), k(width, d), v(width, d);
  const linalg::Matrix values = expanded_value_matrix(model, l);  // [n_heads * d_head, d]
  const linalg::Matrix wq = dense_matrix(w.q), wk = dense_matrix(w.k);
  for (int64_t head = 0; head < c.n_heads; ++head)
    for (int64_t r = 0; r < dh; ++r) {
      const int64_t row = head * dh + r, kv_row = (head / group) * dh + r;
      for (int64_t i = 0; i < d; ++i) {
        q(row, i) = beta * wq(row, i) * gain[i];
        k(row, i) = wk(kv_row, i) * gain[i];
        v(row, i) = values(row, i) * gain[i];
      }
    }
  const particles::Matrix o = output_matrix(model, l);  // [d, n_heads * d_head]

  particles::AttentionHead head;
  if (h < 0) {
    head.query = std::move(q), head.key = std::move(k), head.value = std::move(v), head.output = o;
  } else {
    head.query = q.middleRows(h * dh, dh), head.key = k.middleRows(h * dh, dh), head.value = v.middleRows(h * dh, dh);
    head.output = o.middleCols(h * dh, dh);
  }
  head.validate();

  if (record) {
    nlohmann::json& r = *record;
    r["layer"] = l;
    r["head"] = h < 0 ? nlohmann::json("all") : nlohmann::json(h);
    if (h >= 0) r["kv_head"] = h / group;
    r["n_heads"] = c.n_heads;
    r["n_kv_heads"] = c.n_kv_heads;
    r["d_head"] = dh;
    r["beta"] = beta;
    r["norm_gain"] = w.attn_norm.w ? "sqrt(d_model) times the pre-attention norm weight, folded into Q, K and V"
                                   : "sqrt(d_model), folded into Q, K and V (the layer has no pre-attention norm)";
    if (h < 0) {
      r["matrices"] = "Q: every query head stacked (beta folded in); K: each query head's KV-head key block, stacked alike; "
                      "V: the expanded value projection; O: the output projection";
      r["scores"] = "<Q x_i, K x_j> = sum over heads of the heads' scores, one softmax over the sum (an idealisation: "
                    "the model applies one softmax per head)";
      r["value_map"] = "W = O V = F_t diag(sqrt(d_model) g), F_t the layer matrix of seed 000";
    } else {
      r["matrices"] = "Q = beta W_q[h] G, K = W_k[kv_head] G, V = W_v[kv_head] G, O = W_o[:, h], G = diag(sqrt(d_model) g)";
      r["scores"] = "<Q x_i, K x_j>: the head's own scores";
      r["value_map"] = "W = O V: the head's contribution to the layer matrix, times diag(sqrt(d_model) g)";
    }
    r["left_out"] = left_out(model, l, h < 0);
  }
  return head;
}

particles::Matrix model_initial_tokens(const Model& model, const std::vector<int32_t>& ids, const ModelHeadOptions& options,
                                       nlohmann::json* record) {
  const ModelConfig& c = model.config;
  const ModelWeights& w = model.weights;
  if (ids.empty()) fail("no token ids to start the particles from");
  if (options.tokens < 1) fail("the number of tokens must be at least 1, got {}", options.tokens);
  const int64_t n = std::min<int64_t>(options.tokens, ids.size()), d = c.d_model, e = c.embed_dim();
  // ALBERT's factorised embeddings (d_embed < d_model) reach the residual stream through the embedding LayerNorm
  // and embedding_hidden_mapping_in, as in Transformer::embed (config.cpp admits no other narrow embedding).
  const bool mapped = e != d;
  TDYN_CHECK(w.embed && (!mapped || w.embed_map));
  std::vector<float> row(e), mapped_row(d);
  particles::Matrix x0(n, d);
  for (int64_t t = 0; t < n; ++t) {
    if (ids[t] < 0 || ids[t] >= c.d_vocab) fail("token id {} at position {} is outside the vocabulary [0, {})", ids[t], t, c.d_vocab);
    w.embed.row_floats(ids[t], 0, e, row.data());
    if (mapped) {
      if (c.embed_norm) apply_norm(c.norm, row.data(), 1, e, w.embed_norm, c.norm_eps, row.data());
      w.embed_map.apply(row.data(), 1, mapped_row.data());
    }
    const float* token = mapped ? mapped_row.data() : row.data();
    for (int64_t i = 0; i < d; ++i) x0(t, i) = token[i];
    const double norm = x0.row(t).norm();
    if (!(norm > 0)) fail("token {} (id {}) has a zero embedding: it has no direction on the sphere", t, ids[t]);
    x0.row(t) /= norm;
  }
  if (record) {
    nlohmann::json& r = *record;
    r["tokens"] = n;
    r["token_ids"] = std::vector<int32_t>(ids.begin(), ids.begin() + n);
    r["initial_tokens"] = mapped ? "token-embedding rows through the embedding LayerNorm and embedding_hidden_mapping_in "
                                   "(positions and token types left out), scaled to unit length"
                                 : "unit-length token-embedding rows of the first tokens";
  }
  return x0;
}

ModelParticles model_particles(const Model& model, const std::vector<int32_t>& ids, const ModelHeadOptions& options) {
  ModelParticles out;
  out.experiment.system.head = model_attention_head(model, options, &out.record);
  out.experiment.system.project_to_sphere = true;  // the folded gain assumes unit tokens
  out.experiment.x0 = model_initial_tokens(model, ids, options, &out.record);
  return out;
}

}  // namespace tdyn
