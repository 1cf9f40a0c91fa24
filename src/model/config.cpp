#include "model/config.h"

#include <cmath>
#include <iostream>
#include <numbers>
#include <set>

#include "core/error.h"
#include "model/config_json.h"
#include "model/families.h"

namespace tdyn {

const char* to_string(NormKind k) { return k == NormKind::RMSNorm ? "rmsnorm" : "layernorm"; }
const char* to_string(Activation a) {
  switch (a) {
    case Activation::SiLU: return "silu";
    case Activation::GeluTanh: return "gelu_tanh";
    case Activation::GeluErf: return "gelu_erf";
    case Activation::ReLU: return "relu";
  }
  return "?";
}
const char* to_string(RopeStyle s) {
  switch (s) {
    case RopeStyle::None: return "none";
    case RopeStyle::RotateHalf: return "rotate_half";
    case RopeStyle::Interleaved: return "interleaved";
  }
  return "?";
}
const char* to_string(NormPlacement p) {
  switch (p) {
    case NormPlacement::Pre: return "pre";
    case NormPlacement::PostResidual: return "post_residual";
    case NormPlacement::PostSublayer: return "post_sublayer";
    case NormPlacement::Sandwich: return "sandwich";
  }
  return "?";
}
const char* to_string(QKNorm q) {
  switch (q) {
    case QKNorm::None: return "none";
    case QKNorm::FullProjection: return "full_projection";
    case QKNorm::PerHead: return "per_head";
  }
  return "?";
}

// HF: int(head_dim * partial_rotary_factor) (Phi3RotaryEmbedding's `dim`); "proportional" zeroes frequencies
// instead and keeps every pair.
int64_t RopeConfig::rotary_dim(int64_t d_head) const {
  if (scaling == "proportional" || partial_rotary_factor == 1.0) return d_head;
  return static_cast<int64_t>(static_cast<double>(d_head) * partial_rotary_factor);
}

LayerConfig ModelConfig::layer(int64_t l) const {
  TDYN_CHECK(l >= 0 && l < n_layers);
  LayerConfig out{d_head, d_mlp, 0, rope, l, l, attn_scale};
  if (layers.empty()) return out;
  TDYN_CHECK(static_cast<int64_t>(layers.size()) == n_layers);
  const LayerOverrides& o = layers[l];
  if (o.d_head > 0) out.d_head = o.d_head;
  if (o.d_mlp > 0) out.d_mlp = o.d_mlp;
  out.sliding_window = o.sliding_window;
  if (o.rope) out.rope = *o.rope;
  if (o.kv_source >= 0) out.kv_source = o.kv_source;
  if (o.weights >= 0) out.weights = o.weights;
  if (o.attn_scale > 0) out.attn_scale = o.attn_scale;
  return out;
}

int64_t ModelConfig::n_stored_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layers; ++l) n = std::max(n, layer(l).weights + 1);
  return n;
}

void ModelConfig::validate(const std::string& origin) const {
  auto positive = [&](const char* what, int64_t v) {
    if (v <= 0 || v > (int64_t{1} << 31)) fail("{}: {} must be a positive integer below 2^31, got {}", origin, what, v);
  };
  positive("d_model", d_model);
  positive("n_layers", n_layers);
  if (n_layers > kMaxLayers) fail("{}: {} layers is more than the {} tdyn accepts", origin, n_layers, kMaxLayers);
  positive("n_heads", n_heads);
  positive("n_kv_heads", n_kv_heads);
  positive("d_head", d_head);
  positive("d_mlp", d_mlp);
  positive("d_vocab", d_vocab);
  positive("n_ctx", n_ctx);
  positive("d_embed", embed_dim());
  if (n_heads % n_kv_heads != 0)
    fail("{}: n_heads ({}) must be a multiple of n_kv_heads ({})", origin, n_heads, n_kv_heads);
  if (!(norm_eps > 0) || !std::isfinite(norm_eps)) fail("{}: norm epsilon must be positive, got {}", origin, norm_eps);
  if (!(attn_scale > 0) || !std::isfinite(attn_scale)) fail("{}: attention scale must be positive, got {}", origin, attn_scale);
  if (!(embed_scale > 0) || !std::isfinite(embed_scale)) fail("{}: embedding scale must be positive, got {}", origin, embed_scale);
  if (final_logit_softcap < 0 || !std::isfinite(final_logit_softcap))
    fail("{}: final logit softcap must be >= 0, got {}", origin, final_logit_softcap);
  if (n_token_types < 0) fail("{}: type_vocab_size must be >= 0, got {}", origin, n_token_types);
  if (embed_dim() != d_model && !mlm_head && !tied_embeddings)
    fail("{}: a factorised embedding ({} != d_model {}) is only supported with a tied MLM head", origin, embed_dim(), d_model);
  if (d_per_layer_input > 0) positive("vocab_size_per_layer_input", d_vocab_per_layer);
  if (!layers.empty() && static_cast<int64_t>(layers.size()) != n_layers)
    fail("{}: {} per-layer settings for {} layers", origin, layers.size(), n_layers);
  for (int64_t l = 0; l < n_layers; ++l) {
    LayerConfig L = layer(l);
    positive("d_head (per layer)", L.d_head);
    positive("d_mlp (per layer)", L.d_mlp);
    if (L.rope.style != RopeStyle::None && L.d_head % 2 != 0)
      fail("{}: RoPE needs an even head dimension, layer {} has {}", origin, l, L.d_head);
    if (L.rope.style != RopeStyle::None) {
      const int64_t rotary = L.rope.rotary_dim(L.d_head);
      if (rotary <= 0 || rotary > L.d_head || rotary % 2 != 0)
        fail("{}: partial_rotary_factor {} gives {} rotary dimensions of layer {}'s {}; expected an even number in [2, {}]",
             origin, L.rope.partial_rotary_factor, rotary, l, L.d_head, L.d_head);
    }
    if (L.sliding_window < 0) fail("{}: layer {} has a negative sliding window {}", origin, l, L.sliding_window);
    if (L.kv_source > l) fail("{}: layer {} reads keys/values of a later layer {}", origin, l, L.kv_source);
    if (L.kv_source != l) {
      LayerConfig S = layer(L.kv_source);
      if (S.kv_source != L.kv_source || S.d_head != L.d_head || S.sliding_window != L.sliding_window)
        fail("{}: layer {} shares keys/values with layer {}, which has different attention settings", origin, l, L.kv_source);
    }
    if (L.weights > l) fail("{}: layer {} reuses the weights of a later stored layer {}", origin, l, L.weights);
    if (!(L.attn_scale > 0) || !std::isfinite(L.attn_scale))
      fail("{}: layer {} attention scale must be positive, got {}", origin, l, L.attn_scale);
  }
}

ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  if (!j.is_object()) fail("{}: config must be a JSON object", origin);
  if (!j.contains("model_type") || !j["model_type"].is_string()) fail("{}: config has no \"model_type\"", origin);
  std::string type = j["model_type"].get<std::string>();
  std::string supported;
  const HfConfigParser parse = find_parser(&FamilyDefinition::model_types, type, supported);
  if (!parse) fail("{}: unknown model_type '{}' (supported: {})", origin, type, supported);
  ModelConfig c = parse(j, origin, opts);
  if (!c.bos_id && !c.eos_id) config_json::parse_token_ids(j, c);  // gemma4 takes them from text_config
  c.source = j;
  c.validate(origin);
  return c;
}

ModelConfig read_hf_config(const fs::path& config_json, const ConfigParseOptions& opts) {
  std::string text = read_file(config_json);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", config_json.string(), e.what());
  }
  return parse_hf_config(j, config_json.string(), opts);
}

std::vector<double> rope_inv_freq(const RopeConfig& rope, int64_t d_head) {
  const int64_t dim = rope.rotary_dim(d_head);
  std::vector<double> inv(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i) inv[i] = 1.0 / std::pow(rope.theta, (2.0 * i) / dim);
  if (rope.scaling == "linear") {
    for (double& f : inv) f /= rope.factor;
  } else if (rope.scaling == "proportional") {
    // Gemma 4 (modeling_rope_utils "proportional"): the first int(partial_rotary_factor * d_head // 2)
    // frequencies keep their exponents 2i / d_head over the FULL head dimension; the others are 0, so those
    // rotate-half pairs pass through unrotated. All divided by `factor`.
    const auto rope_angles = static_cast<int64_t>(std::floor(rope.partial_rotary_factor * static_cast<double>(d_head) / 2.0));
    for (int64_t i = 0; i < d_head / 2; ++i) inv[i] = (i < rope_angles ? inv[i] : 0.0) / rope.factor;
  } else if (rope.scaling == "llama3") {
    // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, and the band between them
    // interpolated smoothly (HF modeling_rope_utils._compute_llama3_parameters).
    double old_ctx = static_cast<double>(rope.original_max_position);
    double low_wavelen = old_ctx / rope.low_freq_factor, high_wavelen = old_ctx / rope.high_freq_factor;
    for (double& f : inv) {
      double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = f / rope.factor;
      } else if (wavelen >= high_wavelen) {
        double smooth = (old_ctx / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
        f = (1 - smooth) * f / rope.factor + smooth * f;
      }
    }
  }
  if (!rope.freq_divisors.empty()) {
    TDYN_CHECK(rope.freq_divisors.size() == inv.size());
    for (size_t i = 0; i < inv.size(); ++i) inv[i] /= rope.freq_divisors[i];
  }
  return inv;
}

}  // namespace tdyn
