// OLMo 3: norms after each sublayer, QK-norm over the whole projections, sliding-window layers.
#include "model/families/definitions.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "model/config_json.h"
#include "model/family_tables.h"

namespace tdyn {
namespace {

using namespace config_json;
using namespace family_tables;

// Olmo3ForCausalLM (HF Olmo3Config defaults). Norms after each sublayer, QK-norm over the whole q/k
// projections, sliding-window layers with unscaled RoPE and full layers with rope_scaling.
ModelConfig parse_olmo3(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = {
      "attention_bias", "hidden_act", "hidden_size", "intermediate_size", "layer_types", "max_position_embeddings",
      "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "rms_norm_eps", "rope_parameters",
      "rope_scaling", "rope_theta", "sliding_window", "vocab_size"};
  check_keys(j, keys, origin, opts);
  ModelConfig c;
  c.family = "olmo3";
  c.format = "hf";
  c.d_vocab = get_int(j, "vocab_size", 50304, origin);
  c.d_model = get_int(j, "hidden_size", 4096, origin);
  c.d_mlp = get_int(j, "intermediate_size", 11008, origin);
  c.n_layers = get_layer_count(j, "num_hidden_layers", 32, origin);
  c.n_heads = get_int(j, "num_attention_heads", 32, origin);
  c.n_kv_heads = get_int(j, "num_key_value_heads", c.n_heads, origin);
  if (c.n_heads <= 0) fail("{}: num_attention_heads must be positive", origin);
  c.d_head = c.d_model / c.n_heads;
  c.n_ctx = get_int(j, "max_position_embeddings", 2048, origin);
  c.norm = NormKind::RMSNorm;
  c.norm_eps = get_or<double>(j, "rms_norm_eps", 1e-5, origin);
  c.norm_placement = NormPlacement::PostSublayer;
  c.qk_norm = QKNorm::FullProjection;
  c.activation = parse_activation(get_or<std::string>(j, "hidden_act", "silu", origin), "hidden_act", origin);
  c.gated_mlp = true;
  c.attn_qkv_bias = c.attn_o_bias = get_or<bool>(j, "attention_bias", false, origin);
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  c.rope.style = RopeStyle::RotateHalf;
  c.rope.theta = get_or<double>(j, "rope_theta", 10000.0, origin);
  parse_rope_scaling(j, c.rope, origin);
  c.tied_embeddings = get_or<bool>(j, "tie_word_embeddings", false, origin);

  // Olmo3Config: layer_types default to three sliding layers then one full layer, repeated.
  std::vector<std::string> types;
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    types = parse_layer_types(j, c.n_layers, origin);
  } else {
    for (int64_t l = 0; l < c.n_layers; ++l) types.push_back((l + 1) % 4 != 0 ? "sliding_attention" : "full_attention");
  }
  int64_t window = get_int(j, "sliding_window", 4096, origin);
  if (window <= 0) fail("{}: sliding_window must be positive, got {}", origin, window);
  // Olmo3Model builds the sliding layers' rotary embedding with rope_type "default": scaling applies to
  // full-attention layers only.
  RopeConfig unscaled;
  unscaled.style = RopeStyle::RotateHalf;
  unscaled.theta = c.rope.theta;
  c.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (types[l] == "sliding_attention") {
      c.layers[l].sliding_window = window;
      c.layers[l].rope = unscaled;
    }
  }
  return c;
}

// OLMo 3 (Olmo3ForCausalLM): no pre-norms; post_attention_layernorm / post_feedforward_layernorm on the
// sublayer outputs; q_norm / k_norm over the whole projections.
FamilyTable olmo3_table() {
  FamilyTable t{.family = "olmo3", .format = "hf", .ignored_suffixes = {".rotary_emb.inv_freq"}, .prefixes = {"model."}};
  auto& s = t.tensors;
  const std::string h = "{p}layers.{l}.";
  s.push_back(weight(Role::Embed, "{p}embed_tokens.weight", embed_shape));
  linear(s, Role::AttnQ, h + "self_attn.q_proj", q_shape, q_vec, qkv_bias);
  linear(s, Role::AttnK, h + "self_attn.k_proj", kv_shape, kv_vec, qkv_bias);
  linear(s, Role::AttnV, h + "self_attn.v_proj", kv_shape, kv_vec, qkv_bias);
  linear(s, Role::AttnO, h + "self_attn.o_proj", o_shape, model_vec, o_bias);
  s.push_back(vec(Role::AttnQNorm, h + "self_attn.q_norm.weight", q_vec));
  s.push_back(vec(Role::AttnKNorm, h + "self_attn.k_norm.weight", kv_vec));
  s.push_back(vec(Role::AttnPostNorm, h + "post_attention_layernorm.weight", model_vec));
  s.push_back(weight(Role::MlpGate, h + "mlp.gate_proj.weight", up_shape));
  s.push_back(weight(Role::MlpUp, h + "mlp.up_proj.weight", up_shape));
  s.push_back(weight(Role::MlpDown, h + "mlp.down_proj.weight", down_shape));
  s.push_back(vec(Role::MlpPostNorm, h + "post_feedforward_layernorm.weight", model_vec));
  s.push_back(vec(Role::FinalNorm, "{p}norm.weight", model_vec));
  s.push_back(weight(Role::Unembed, "lm_head.weight", embed_shape, Layout::OutIn, untied));
  return t;
}

}  // namespace

FamilyDefinition olmo3_family() {
  FamilyDefinition f;
  f.model_types = {{"olmo3", parse_olmo3}};
  auto& tables = f.tables;
  tables.push_back(olmo3_table());
  return f;
}

}  // namespace tdyn
