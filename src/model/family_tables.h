// Building blocks of the family tables (model/families/): tensor shapes as functions of the config, presence
// conditions, and the specs of weights, biases, vectors, Linear and LayerNorm pairs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/families.h"

namespace tdyn::family_tables {

using C = const ModelConfig&;
using ShapeFn = std::function<Shape(C, int64_t)>;
using PresentFn = std::function<bool(C, int64_t)>;

// Shapes as functions of the config and the (stored) layer index, in nn.Linear [out, in] layout.
inline Shape embed_shape(C c, int64_t) { return {c.d_vocab, c.embed_dim()}; }
inline Shape pos_shape(C c, int64_t) { return {c.n_ctx, c.embed_dim()}; }
inline Shape token_type_shape(C c, int64_t) { return {c.n_token_types, c.embed_dim()}; }
inline Shape embed_vec(C c, int64_t) { return {c.embed_dim()}; }
inline Shape vocab_vec(C c, int64_t) { return {c.d_vocab}; }
inline Shape model_vec(C c, int64_t) { return {c.d_model}; }
inline Shape q_shape(C c, int64_t l) { return {c.n_heads * c.layer(l).d_head, c.d_model}; }
inline Shape kv_shape(C c, int64_t l) { return {c.n_kv_heads * c.layer(l).d_head, c.d_model}; }
inline Shape o_shape(C c, int64_t l) { return {c.d_model, c.n_heads * c.layer(l).d_head}; }
inline Shape up_shape(C c, int64_t l) { return {c.layer(l).d_mlp, c.d_model}; }
inline Shape down_shape(C c, int64_t l) { return {c.d_model, c.layer(l).d_mlp}; }
inline Shape q_vec(C c, int64_t l) { return {c.n_heads * c.layer(l).d_head}; }
inline Shape kv_vec(C c, int64_t l) { return {c.n_kv_heads * c.layer(l).d_head}; }
inline Shape mlp_vec(C c, int64_t l) { return {c.layer(l).d_mlp}; }
inline Shape head_vec(C c, int64_t l) { return {c.layer(l).d_head}; }
inline bool untied(C c, int64_t) { return !c.tied_embeddings; }
inline bool tied(C c, int64_t) { return c.tied_embeddings; }
inline bool qkv_bias(C c, int64_t) { return c.attn_qkv_bias; }
inline bool o_bias(C c, int64_t) { return c.attn_o_bias; }
inline bool mlp_bias(C c, int64_t) { return c.mlp_bias; }
inline bool own_kv(C c, int64_t l) { return c.layer(l).kv_source == l; }
inline bool shared_kv(C c, int64_t l) { return c.layer(l).kv_source != l; }
inline bool has_ple(C c, int64_t) { return c.d_per_layer_input > 0; }

inline TensorSpec weight(Role r, std::string name, ShapeFn shape, Layout layout = Layout::OutIn, PresentFn present = nullptr) {
  return {r, Part::Weight, std::move(name), std::move(shape), layout, std::move(present)};
}
inline TensorSpec bias(Role r, std::string name, ShapeFn shape, PresentFn present = nullptr) {
  return {r, Part::Bias, std::move(name), std::move(shape), Layout::Vector, std::move(present)};
}
inline TensorSpec vec(Role r, std::string name, ShapeFn shape, PresentFn present = nullptr) {
  return {r, Part::Weight, std::move(name), std::move(shape), Layout::Vector, std::move(present)};
}
// Accepted if present, never used.
inline TensorSpec ignored(std::string name, PresentFn present = nullptr) {
  bool per_layer = name.find("{l}") != std::string::npos;
  return {per_layer ? Role::IgnoredPerLayer : Role::Ignored, Part::Weight, std::move(name), nullptr, Layout::Vector,
          std::move(present)};
}
// A Linear with its bias: "<name>.weight" / "<name>.bias".
inline void linear(std::vector<TensorSpec>& t, Role r, const std::string& name, ShapeFn w, ShapeFn b, PresentFn with_bias,
            Layout layout = Layout::OutIn) {
  t.push_back(weight(r, name + ".weight", std::move(w), layout));
  t.push_back(bias(r, name + ".bias", std::move(b), std::move(with_bias)));
}
// A LayerNorm "<name>.weight" / "<name>.bias".
inline void layer_norm(std::vector<TensorSpec>& t, Role r, const std::string& name, ShapeFn shape) {
  t.push_back(vec(r, name + ".weight", shape));
  t.push_back(bias(r, name + ".bias", shape));
}

}  // namespace tdyn::family_tables
