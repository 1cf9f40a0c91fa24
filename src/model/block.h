// The wiring of a layer, written once over how the stream is represented. Two representations run it: the
// forward pass (model/transformer.cpp) on float32 rows [n, d_model] with hooks, and the Jacobians' float64
// reference (analysis/jacobian/jacobian_model.cpp) on one position's vector carrying its tangents. Where the norms
// sit around a sublayer, what a residual step adds, Gemma 4's per-layer-input branch and the layer scalar are
// written here, and what attention makes of its projections before the scores (QK-norm, v-norm, RoPE); the products,
// the attention over the keys, the MLP, and what is captured, edited or traced on the way, are each representation's.
//
// A layer step `S` of one representation offers:
//   using Value;                                       the stream, or a sublayer's output
//   const ModelConfig& config() const;
//   const auto& weights() const;                       the layer's weights (LayerWeights, or the float64 copy with the
//                                                      same member names)
//   void norm(const Value& in, Value& out, NormSite);  out = the layer's norm at the site applied to in (out may be in)
//   void norm_heads(Value& x, int64_t heads, NormSite); the norm at the site on each of `heads` equal slices of a row
//   void rope(Value& x, int64_t heads);                RoPE of each head of x at its position
//   void added(Value& f, Sublayer);                    what a residual step adds (the writable hook_attn_out /
//                                                      hook_mlp_out, which may change it)
//   void add(Value& x, const Value& y);                x += y
//   Value linear(const Projection& p, const Value& x); p's weights times x, plus its bias
//   void gate_by_per_layer_input(Value& g);            g = act(g) ⊙ the layer's per-layer input (Gemma 4)
//   void capture(const Value& x, const char* hook);    a read-only block hook
//   void capture_heads(const Value& x, int64_t heads, const char* hook);   the same, shaped [pos, heads, d_head]
//   double output_scale() const;                       the layer scalar (Gemma 4), else 1
//   void scale(Value& x, double s);                    x *= s
#pragma once

#include <type_traits>
#include <utility>

#include "model/config.h"
#include "model/transformer.h"

namespace tdyn::block {

// The norms of a layer, by where they sit: around the sublayers, on the per-layer-input branch, and on attention's
// queries, keys (the QK-norm) and values (Gemma 4's v-norm, which has no scale).
enum class NormSite { AttnPre, AttnPost, MlpPre, MlpPost, PerLayerInputPost, Query, Key, Value };

inline NormSite pre_norm(Sublayer which) { return which == Sublayer::Attention ? NormSite::AttnPre : NormSite::MlpPre; }
inline NormSite post_norm(Sublayer which) { return which == Sublayer::Attention ? NormSite::AttnPost : NormSite::MlpPost; }

// The family's norm around the sublayers; the per-layer-input branch and attention's q/k/v norms are RMSNorms in every
// family that has them.
inline NormKind norm_kind(const ModelConfig& c, NormSite site) {
  switch (site) {
    case NormSite::PerLayerInputPost:
    case NormSite::Query:
    case NormSite::Key:
    case NormSite::Value: return NormKind::RMSNorm;
    default: return c.norm;
  }
}

// The weights of the norm at `site` (LayerWeights and the float64 copy name them alike).
template <class LayerWeights>
const auto& norm_weights(const LayerWeights& w, NormSite site) {
  switch (site) {
    case NormSite::AttnPre: return w.attn_norm;
    case NormSite::AttnPost: return w.attn_post_norm;
    case NormSite::MlpPre: return w.mlp_norm;
    case NormSite::MlpPost: return w.mlp_post_norm;
    case NormSite::Query: return w.q_norm;
    case NormSite::Key: return w.k_norm;
    case NormSite::PerLayerInputPost: return w.ple_post_norm;
    case NormSite::Value: break;
  }
  static const std::decay_t<decltype(w.q_norm)> no_scale{};  // the v-norm's
  return no_scale;
}

// What attention makes of a position's raw projections before the scores, in place: the QK-norm (OLMo 3: over the
// whole projection; Gemma 3/4, Qwen 3: per head) and RoPE of the queries and, on a layer with its own keys and values
// (own: not KV-shared), of the keys, with Gemma 4's v-norm of the values between. k and v are not read otherwise.
template <class S, class Value>
void attention_inputs(S& step, Value& q, Value& k, Value& v, bool own) {
  const ModelConfig& c = step.config();
  auto qk_norm = [&](Value& x, int64_t heads, NormSite site) {
    if (c.qk_norm == QKNorm::FullProjection) step.norm_heads(x, 1, site);
    if (c.qk_norm == QKNorm::PerHead) step.norm_heads(x, heads, site);
  };
  qk_norm(q, c.n_heads, NormSite::Query);
  step.rope(q, c.n_heads);
  step.capture_heads(q, c.n_heads, "attn.hook_q");
  if (!own) return;
  qk_norm(k, c.n_kv_heads, NormSite::Key);
  if (c.v_norm) step.norm_heads(v, c.n_kv_heads, NormSite::Value);
  step.rope(k, c.n_kv_heads);
  step.capture_heads(k, c.n_kv_heads, "attn.hook_k");
  step.capture_heads(v, c.n_kv_heads, "attn.hook_v");
}

// What the sublayer reads of its step's input x: x after the pre-norm where the family pre-norms (made in
// `storage`), else x itself.
template <class S, class Value>
const Value& sublayer_input(S& step, Sublayer which, const Value& x, Value& storage) {
  if (!has_pre_norm(step.config().norm_placement)) return x;
  step.norm(x, storage, pre_norm(which));
  return storage;
}

// The step's output from the sublayer's output f, in place. x: the step's input, which the residual adds (null
// for the map without the residual). By norm placement:
//   Pre                     f + x
//   PostSublayer, Sandwich  post_norm(f) + x    (HF Olmo3 / Gemma 4 post_*_layernorm)
//   PostResidual            post_norm(f + x)    (BERT / ALBERT Add & LayerNorm)
// What is added to x passes S::added first.
template <class S, class Value>
void sublayer_output(S& step, Sublayer which, Value& f, const Value* x) {
  const NormPlacement placement = step.config().norm_placement;
  if (placement == NormPlacement::PostSublayer || placement == NormPlacement::Sandwich) step.norm(f, f, post_norm(which));
  step.added(f, which);
  if (x) step.add(f, *x);
  if (placement == NormPlacement::PostResidual) step.norm(f, f, post_norm(which));
}

// The end of a layer, after the MLP step's residual, in place up to hook_resid_post: Gemma 4's per-layer-input
// branch (Gemma4TextDecoderLayer: y += post_per_layer_input_norm(per_layer_projection(act(per_layer_input_gate(y))
// ⊙ per_layer_input))), then the layer scalar.
template <class S, class Value>
void finish_layer(S& step, Value& y) {
  if (step.config().d_per_layer_input > 0) {
    step.capture(y, "hook_resid_after_mlp");
    Value gate = step.linear(step.weights().ple_gate, y);
    step.gate_by_per_layer_input(gate);
    Value branch = step.linear(step.weights().ple_proj, gate);
    step.norm(branch, branch, NormSite::PerLayerInputPost);
    step.capture(branch, "hook_ple_out");
    step.add(y, branch);
    step.capture(y, "hook_resid_after_ple");
  }
  if (const double s = step.output_scale(); s != 1) step.scale(y, s);
}

}  // namespace tdyn::block
