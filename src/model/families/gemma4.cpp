// Gemma 4 (the text model, alone or inside Gemma4ForConditionalGeneration): per-layer inputs, KV sharing,
// sliding and full layers with their own head sizes.
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

// rope_parameters: one RoPE per layer type.
RopeConfig rope_for_type(const nlohmann::json& rope_parameters, const std::string& type, const std::string& origin) {
  if (!rope_parameters.is_object() || !rope_parameters.contains(type) || !rope_parameters[type].is_object())
    fail("{}: rope_parameters has no object for layer type '{}'", origin, type);
  RopeConfig r;
  r.style = RopeStyle::RotateHalf;
  parse_rope_object(rope_parameters[type], r, origin);
  return r;
}

// Each layer's head size, window and RoPE by its type (sliding or full attention), and KV sharing
// (Gemma4TextModel): the last num_kv_shared_layers layers compute no keys/values and reuse those of the last
// earlier non-shared layer of the same type; use_double_wide_mlp doubles their MLP width.
void parse_gemma4_layers(const nlohmann::json& j, ModelConfig& c, const std::string& origin) {
  const int64_t global_head_dim = get_int(j, "global_head_dim", c.d_head, origin);
  const int64_t window = required_int(j, "sliding_window", origin);
  if (window <= 0) fail("{}: sliding_window must be positive, got {}", origin, window);
  required(j, "layer_types", origin);
  const std::vector<std::string> types = parse_layer_types(j, c.n_layers, origin);
  const nlohmann::json& rope_parameters = required(j, "rope_parameters", origin);
  c.rope = rope_for_type(rope_parameters, types[0], origin);
  const int64_t n_shared = get_int(j, "num_kv_shared_layers", 0, origin);
  if (n_shared < 0 || n_shared >= c.n_layers)
    fail("{}: num_kv_shared_layers must be in [0, num_hidden_layers), got {}", origin, n_shared);
  const int64_t first_shared = c.n_layers - n_shared;
  const bool double_wide = get_or<bool>(j, "use_double_wide_mlp", false, origin);
  c.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerOverrides& o = c.layers[l];
    const bool full = types[l] == "full_attention";
    o.d_head = full ? global_head_dim : c.d_head;
    o.sliding_window = full ? 0 : window;
    o.rope = rope_for_type(rope_parameters, types[l], origin);
    if (l >= first_shared && n_shared > 0) {
      for (int64_t s = first_shared - 1; s >= 0; --s) {
        if (types[s] == types[l]) {
          o.kv_source = s;
          break;
        }
      }
      if (o.kv_source < 0) fail("{}: KV-shared layer {} ({}) has no earlier layer of its type to share with", origin, l, types[l]);
      if (double_wide) o.d_mlp = 2 * c.d_mlp;
    }
  }
}

// Gemma 4 text model (Gemma4TextConfig; the "E" variants with per-layer inputs and KV sharing). Keys whose HF
// default tdyn cannot confirm are required.
ModelConfig parse_gemma4_text(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = {
      "attention_bias", "attention_k_eq_v", "enable_moe_block", "final_logit_softcapping", "global_head_dim",
      "head_dim", "hidden_activation", "hidden_size", "hidden_size_per_layer_input", "intermediate_size",
      "layer_types", "max_position_embeddings", "moe_intermediate_size", "num_attention_heads", "num_experts",
      "num_global_key_value_heads", "num_hidden_layers", "num_key_value_heads", "num_kv_shared_layers",
      "rms_norm_eps", "rope_parameters", "sliding_window", "top_k_experts", "use_bidirectional_attention",
      "use_double_wide_mlp", "vocab_size", "vocab_size_per_layer_input"};
  check_keys(j, keys, origin, opts);
  require_value(j, "attention_bias", false, origin, "Gemma 4 attention biases are not implemented");
  require_value(j, "attention_k_eq_v", false, origin, "keys-as-values attention is not implemented");
  require_value(j, "enable_moe_block", false, origin, "the Gemma 4 mixture-of-experts block is not implemented");
  require_value<int64_t>(j, "num_experts", 0, origin, "mixture-of-experts is not implemented");
  if (j.contains("use_bidirectional_attention") && !j["use_bidirectional_attention"].is_null())
    fail("{}: use_bidirectional_attention = {} is not supported (only causal text attention is implemented)", origin,
         j["use_bidirectional_attention"].dump());
  ModelConfig c;
  c.family = "gemma4";
  c.format = "hf";
  c.d_vocab = required_int(j, "vocab_size", origin);
  c.d_model = required_int(j, "hidden_size", origin);
  c.d_mlp = required_int(j, "intermediate_size", origin);
  c.n_layers = required_int(j, "num_hidden_layers", origin);
  c.n_heads = required_int(j, "num_attention_heads", origin);
  c.n_kv_heads = required_int(j, "num_key_value_heads", origin);
  c.d_head = required_int(j, "head_dim", origin);
  c.n_ctx = required_int(j, "max_position_embeddings", origin);
  c.norm = NormKind::RMSNorm;  // Gemma4RMSNorm multiplies by w (not 1 + w as Gemma 1-3)
  required(j, "rms_norm_eps", origin);
  c.norm_eps = get_or<double>(j, "rms_norm_eps", 0.0, origin);
  c.norm_placement = NormPlacement::Sandwich;
  c.qk_norm = QKNorm::PerHead;
  c.v_norm = true;
  c.activation = parse_activation(get_or<std::string>(j, "hidden_activation", "gelu_pytorch_tanh", origin), "hidden_activation", origin);
  c.gated_mlp = true;
  c.attn_scale = 1.0;  // Gemma 4 text attention: scaling 1.0 (q/k are RMS-normalised instead)
  // Gemma4TextScaledWordEmbedding: embed_scale = hidden_size ** 0.5 (cast to the weight dtype at run time).
  c.embed_scale = std::sqrt(static_cast<double>(c.d_model));
  c.tied_embeddings = get_or<bool>(j, "tie_word_embeddings", true, origin);
  c.final_logit_softcap = get_or<double>(j, "final_logit_softcapping", 0.0, origin);
  c.d_per_layer_input = get_int(j, "hidden_size_per_layer_input", 0, origin);
  if (c.d_per_layer_input > 0) c.d_vocab_per_layer = get_int(j, "vocab_size_per_layer_input", c.d_vocab, origin);
  parse_token_ids(j, c);
  parse_gemma4_layers(j, c, origin);
  return c;
}

// Gemma4ForConditionalGeneration: the text model's settings live in text_config; the vision and audio towers
// are not run (tdyn analyses the language model).
ModelConfig parse_gemma4(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = {
      "audio_config", "audio_token_id", "boa_token_id", "boi_token_id", "eoa_token_index", "eoi_token_id",
      "image_token_id", "text_config", "video_token_id", "vision_config"};
  check_keys(j, keys, origin, opts);
  if (!j.contains("text_config") || !j["text_config"].is_object()) fail("{}: gemma4 config has no text_config object", origin);
  nlohmann::json text = j["text_config"];
  std::string inner = get_or<std::string>(text, "model_type", "gemma4_text", origin);
  if (inner != "gemma4_text") fail("{}: text_config.model_type is '{}', expected gemma4_text", origin, inner);
  // The wrapper's tie_word_embeddings governs the LM head of the conditional-generation model.
  if (j.contains("tie_word_embeddings") && !j["tie_word_embeddings"].is_null()) text["tie_word_embeddings"] = j["tie_word_embeddings"];
  ModelConfig c = parse_gemma4_text(text, origin + " (text_config)", opts);
  return c;
}

// Gemma 4 text model. Gemma4ForConditionalGeneration names it "model.language_model.", Gemma4ForCausalLM
// "model.". KV-shared layers have no k/v projections or k_norm; files that still carry them are accepted and
// those tensors ignored (HF _keys_to_ignore_on_load_unexpected). The vision/audio towers are not run.
FamilyTable gemma4_table() {
  FamilyTable t{.family = "gemma4",
                .format = "hf",
                .ignored_suffixes = {".rotary_emb.inv_freq"},
                .prefixes = {"model.language_model.", "model."},
                .ignored_prefixes = {"model.vision_tower.", "model.audio_tower.", "model.embed_vision.",
                                     "model.embed_audio.", "model.multi_modal_projector."}};
  auto& s = t.tensors;
  const std::string h = "{p}layers.{l}.";
  auto per_layer_width = [](C c) { return c.n_layers * c.d_per_layer_input; };
  s.push_back(weight(Role::Embed, "{p}embed_tokens.weight", embed_shape));
  s.push_back(weight(Role::PleEmbed, "{p}embed_tokens_per_layer.weight",
                     [=](C c, int64_t) { return Shape{c.d_vocab_per_layer, per_layer_width(c)}; }, Layout::OutIn, has_ple));
  s.push_back(weight(Role::PleModelProj, "{p}per_layer_model_projection.weight",
                     [=](C c, int64_t) { return Shape{per_layer_width(c), c.d_model}; }, Layout::OutIn, has_ple));
  s.push_back(vec(Role::PleProjNorm, "{p}per_layer_projection_norm.weight",
                  [](C c, int64_t) { return Shape{c.d_per_layer_input}; }, has_ple));
  s.push_back(vec(Role::AttnNorm, h + "input_layernorm.weight", model_vec));
  s.push_back(weight(Role::AttnQ, h + "self_attn.q_proj.weight", q_shape));
  s.push_back(vec(Role::AttnQNorm, h + "self_attn.q_norm.weight", head_vec));
  s.push_back(weight(Role::AttnK, h + "self_attn.k_proj.weight", kv_shape, Layout::OutIn, own_kv));
  s.push_back(weight(Role::AttnV, h + "self_attn.v_proj.weight", kv_shape, Layout::OutIn, own_kv));
  s.push_back(vec(Role::AttnKNorm, h + "self_attn.k_norm.weight", head_vec, own_kv));
  for (const char* n : {"self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.k_norm.weight"})
    s.push_back(ignored(h + n, shared_kv));
  s.push_back(weight(Role::AttnO, h + "self_attn.o_proj.weight", o_shape));
  s.push_back(vec(Role::AttnPostNorm, h + "post_attention_layernorm.weight", model_vec));
  s.push_back(vec(Role::MlpNorm, h + "pre_feedforward_layernorm.weight", model_vec));
  s.push_back(weight(Role::MlpGate, h + "mlp.gate_proj.weight", up_shape));
  s.push_back(weight(Role::MlpUp, h + "mlp.up_proj.weight", up_shape));
  s.push_back(weight(Role::MlpDown, h + "mlp.down_proj.weight", down_shape));
  s.push_back(vec(Role::MlpPostNorm, h + "post_feedforward_layernorm.weight", model_vec));
  s.push_back(weight(Role::PleGate, h + "per_layer_input_gate.weight",
                     [](C c, int64_t) { return Shape{c.d_per_layer_input, c.d_model}; }, Layout::OutIn, has_ple));
  s.push_back(weight(Role::PleProj, h + "per_layer_projection.weight",
                     [](C c, int64_t) { return Shape{c.d_model, c.d_per_layer_input}; }, Layout::OutIn, has_ple));
  s.push_back(vec(Role::PlePostNorm, h + "post_per_layer_input_norm.weight", model_vec, has_ple));
  s.push_back(vec(Role::LayerScalar, h + "layer_scalar", [](C, int64_t) { return Shape{1}; }));
  s.push_back(vec(Role::FinalNorm, "{p}norm.weight", model_vec));
  s.push_back(weight(Role::Unembed, "lm_head.weight", embed_shape, Layout::OutIn, untied));
  return t;
}

}  // namespace

FamilyDefinition gemma4_family() {
  FamilyDefinition f;
  f.model_types = {{"gemma4", parse_gemma4}, {"gemma4_text", parse_gemma4_text}};
  auto& tables = f.tables;
  tables.push_back(gemma4_table());
  return f;
}

}  // namespace tdyn
