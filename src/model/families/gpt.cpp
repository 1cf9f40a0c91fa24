// The GPT decoders with LayerNorm and plain MLPs: GPT-2 (Conv1D weights, fused c_attn), GPT-Neo (global and
// local layers) and GPT-NeoX / Pythia (per-head fused query_key_value, partial rotary, parallel residual).
#include "model/families/definitions.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "model/config_json.h"
#include "model/family_tables.h"
#include "model/gguf_config.h"

namespace tdyn {
namespace {

using namespace config_json;
using namespace family_tables;

// GPT2LMHeadModel (HF GPT2Config defaults). Conv1D weights; fused c_attn; learned positions; pre-LN.
ModelConfig parse_gpt2(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = with(
      {"activation_function", "attn_pdrop", "embd_pdrop", "resid_pdrop", "layer_norm_epsilon", "n_ctx", "n_embd",
       "n_head", "n_inner", "n_layer", "n_positions", "reorder_and_upcast_attn", "scale_attn_by_inverse_layer_idx",
       "scale_attn_weights", "vocab_size"},
      kSummaryKeys);
  check_keys(j, keys, origin, opts);
  require_value(j, "add_cross_attention", false, origin, "cross-attention layers are not implemented");
  ModelConfig c;
  c.family = "gpt2";
  c.format = "hf";
  c.d_vocab = get_int(j, "vocab_size", 50257, origin);
  c.n_ctx = get_int(j, "n_positions", 1024, origin);
  c.d_model = get_int(j, "n_embd", 768, origin);
  c.n_layers = get_layer_count(j, "n_layer", 12, origin);
  c.n_heads = c.n_kv_heads = get_int(j, "n_head", 12, origin);
  if (c.n_heads <= 0) fail("{}: n_head must be positive", origin);
  c.d_head = c.d_model / c.n_heads;
  if (c.d_head * c.n_heads != c.d_model) fail("{}: n_embd {} is not a multiple of n_head {}", origin, c.d_model, c.n_heads);
  c.d_mlp = get_int(j, "n_inner", 4 * c.d_model, origin);  // n_inner: null -> 4 * n_embd
  c.norm = NormKind::LayerNorm;
  c.norm_eps = get_or<double>(j, "layer_norm_epsilon", 1e-5, origin);
  c.activation = parse_activation(get_or<std::string>(j, "activation_function", "gelu_new", origin), "activation_function", origin);
  c.gated_mlp = false;
  c.attn_qkv_bias = c.attn_o_bias = c.mlp_bias = true;
  // GPT2Attention: scores / sqrt(head_dim) if scale_attn_weights, and / (layer_idx + 1) if
  // scale_attn_by_inverse_layer_idx.
  c.attn_scale = get_or<bool>(j, "scale_attn_weights", true, origin) ? 1.0 / std::sqrt(static_cast<double>(c.d_head)) : 1.0;
  if (get_or<bool>(j, "scale_attn_by_inverse_layer_idx", false, origin)) {
    c.layers.resize(c.n_layers);
    for (int64_t l = 0; l < c.n_layers; ++l) c.layers[l].attn_scale = c.attn_scale / static_cast<double>(l + 1);
  }
  c.learned_positions = true;
  c.tied_embeddings = get_or<bool>(j, "tie_word_embeddings", true, origin);
  return c;
}

// GPTNeoForCausalLM (HF GPTNeoConfig defaults). No 1/sqrt(d_head) scaling; global / local layers.
ModelConfig parse_gpt_neo(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = with(
      {"activation_function", "attention_layers", "attention_types", "classifier_dropout", "embed_dropout",
       "hidden_size", "intermediate_size", "layer_norm_epsilon", "max_position_embeddings", "num_heads", "num_layers",
       "resid_dropout", "vocab_size", "window_size"},
      kSummaryKeys);
  check_keys(j, keys, origin, opts);
  ModelConfig c;
  c.family = "gpt_neo";
  c.format = "hf";
  c.d_vocab = get_int(j, "vocab_size", 50257, origin);
  c.n_ctx = get_int(j, "max_position_embeddings", 2048, origin);
  c.d_model = get_int(j, "hidden_size", 2048, origin);
  c.n_layers = get_layer_count(j, "num_layers", 24, origin);
  c.n_heads = c.n_kv_heads = get_int(j, "num_heads", 16, origin);
  if (c.n_heads <= 0) fail("{}: num_heads must be positive", origin);
  c.d_head = c.d_model / c.n_heads;
  if (c.d_head * c.n_heads != c.d_model) fail("{}: hidden_size {} is not a multiple of num_heads {}", origin, c.d_model, c.n_heads);
  c.d_mlp = get_int(j, "intermediate_size", 4 * c.d_model, origin);
  c.norm = NormKind::LayerNorm;
  c.norm_eps = get_or<double>(j, "layer_norm_epsilon", 1e-5, origin);
  c.activation = parse_activation(get_or<std::string>(j, "activation_function", "gelu_new", origin), "activation_function", origin);
  c.gated_mlp = false;
  c.attn_qkv_bias = false;  // q/k/v_proj have no bias, out_proj has one
  c.attn_o_bias = c.mlp_bias = true;
  c.attn_scale = 1.0;       // GPTNeoSelfAttention does not scale the scores
  c.learned_positions = true;
  c.tied_embeddings = get_or<bool>(j, "tie_word_embeddings", true, origin);

  // attention_types [[kinds, repeat], ...] expands to one kind per layer (GPTNeoConfig.expand_attention_types_params).
  nlohmann::json types = j.contains("attention_types") ? j["attention_types"] : nlohmann::json::parse(R"([[["global","local"],12]])");
  std::vector<std::string> kinds;
  try {
    for (const auto& entry : types) {
      for (int64_t r = 0; r < entry.at(1).get<int64_t>(); ++r) {
        for (const auto& k : entry.at(0)) kinds.push_back(k.get<std::string>());
      }
    }
  } catch (const nlohmann::json::exception&) {
    fail("{}: attention_types must be a list of [[kinds...], repeat] pairs, got {}", origin, types.dump());
  }
  if (static_cast<int64_t>(kinds.size()) != c.n_layers)
    fail("{}: attention_types expands to {} layers but num_layers is {}", origin, kinds.size(), c.n_layers);
  if (j.contains("attention_layers") && get_or<std::vector<std::string>>(j, "attention_layers", {}, origin) != kinds)
    fail("{}: attention_layers {} disagrees with attention_types {}", origin, j["attention_layers"].dump(), types.dump());
  int64_t window = get_int(j, "window_size", 256, origin);
  if (window <= 0) fail("{}: window_size must be positive, got {}", origin, window);
  c.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (kinds[l] == "local") c.layers[l].sliding_window = window;
    else if (kinds[l] != "global") fail("{}: attention type '{}' is not supported (global, local)", origin, kinds[l]);
  }
  return c;
}

// GPTNeoXForCausalLM (HF GPTNeoXConfig defaults): fused per-head query_key_value, partial rotary (rotary_pct),
// parallel attention + MLP (use_parallel_residual), LayerNorm, biases everywhere, untied embed_out.
ModelConfig parse_gpt_neox(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = {
      "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
      "rotary_pct", "partial_rotary_factor", "rotary_emb_base", "rope_theta", "rope_scaling", "rope_parameters",
      "classifier_dropout", "max_position_embeddings", "layer_norm_eps", "use_parallel_residual", "attention_bias"};
  check_keys(j, keys, origin, opts);
  ModelConfig c;
  c.family = "gpt_neox";
  c.format = "hf";
  c.d_vocab = get_int(j, "vocab_size", 50432, origin);
  c.d_model = get_int(j, "hidden_size", 6144, origin);
  c.n_layers = get_layer_count(j, "num_hidden_layers", 44, origin);
  c.n_heads = c.n_kv_heads = get_int(j, "num_attention_heads", 64, origin);
  if (c.n_heads <= 0) fail("{}: num_attention_heads must be positive", origin);
  c.d_head = c.d_model / c.n_heads;
  if (c.d_head * c.n_heads != c.d_model)
    fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", origin, c.d_model, c.n_heads);
  c.d_mlp = get_int(j, "intermediate_size", 24576, origin);
  c.n_ctx = get_int(j, "max_position_embeddings", 2048, origin);
  c.norm = NormKind::LayerNorm;
  c.norm_eps = get_or<double>(j, "layer_norm_eps", 1e-5, origin);
  c.activation = parse_activation(get_or<std::string>(j, "hidden_act", "gelu", origin), "hidden_act", origin);
  c.gated_mlp = false;
  c.attn_qkv_bias = c.attn_o_bias = get_or<bool>(j, "attention_bias", true, origin);
  c.mlp_bias = true;
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  c.parallel_residual = get_or<bool>(j, "use_parallel_residual", true, origin);
  c.tied_embeddings = get_or<bool>(j, "tie_word_embeddings", false, origin);

  // RoPE over the first int(d_head * rotary_pct) dimensions of each head (transformers 5 writes rope_theta and
  // partial_rotary_factor, possibly inside rope_parameters).
  c.rope.style = RopeStyle::RotateHalf;
  c.rope.theta = get_or<double>(j, "rotary_emb_base", get_or<double>(j, "rope_theta", 10000.0, origin), origin);
  double pct = get_or<double>(j, "rotary_pct", get_or<double>(j, "partial_rotary_factor", 0.25, origin), origin);
  const char* scaling_key = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? "rope_parameters"
                            : j.contains("rope_scaling") && j["rope_scaling"].is_object()  ? "rope_scaling"
                                                                                          : nullptr;
  if (scaling_key) {
    nlohmann::json s = j[scaling_key];
    if (s.contains("partial_rotary_factor")) {
      pct = get_or<double>(s, "partial_rotary_factor", pct, origin);
      s.erase("partial_rotary_factor");
    }
    parse_rope_object(s, c.rope, origin);
    if (c.rope.scaling != "default" && c.rope.scaling != "linear")
      fail("{}: gpt_neox {} type '{}' is not supported (supported: default, linear)", origin, scaling_key, c.rope.scaling);
  }
  if (!(pct >= 0 && pct <= 1)) fail("{}: rotary_pct must be in [0, 1], got {}", origin, pct);
  c.rope.partial_rotary_factor = pct;
  const int64_t rotary_dims = c.rope.rotary_dim(c.d_head);  // int(d_head * rotary_pct), as GPTNeoXAttention
  if (rotary_dims == 0) c.rope.style = RopeStyle::None;
  if (rotary_dims % 2 != 0)
    fail("{}: rotary_pct {} gives {} rotary dimensions of a {}-dim head; RoPE needs an even number", origin, pct,
         rotary_dims, c.d_head);
  return c;
}

// GPT-2 (GPT2LMHeadModel). Conv1D [in, out] weights used in place; c_attn is q|k|v fused along its output
// columns. save_pretrained names carry "transformer."; the hub checkpoint (converted from a GPT2Model) has no
// prefix and may carry the legacy buffers h.{i}.attn.bias / h.{i}.attn.masked_bias (causal mask, -1e4):
// ignored by exact name so that attn.c_attn.bias is never mistaken for one.
FamilyTable gpt2_table() {
  FamilyTable t{.family = "gpt2", .format = "hf", .prefixes = {"transformer.", ""}};
  auto& s = t.tensors;
  auto qkv_shape = [](C c, int64_t) { return Shape{c.d_model, 3 * c.q_dim()}; };
  auto qkv_vec = [](C c, int64_t) { return Shape{3 * c.q_dim()}; };
  auto mlp_in = [](C c, int64_t l) { return Shape{c.d_model, c.layer(l).d_mlp}; };
  auto mlp_out = [](C c, int64_t l) { return Shape{c.layer(l).d_mlp, c.d_model}; };
  const std::string h = "{p}h.{l}.";
  s.push_back(weight(Role::Embed, "{p}wte.weight", embed_shape));
  s.push_back(weight(Role::PosEmbed, "{p}wpe.weight", pos_shape));
  layer_norm(s, Role::AttnNorm, h + "ln_1", model_vec);
  const Role qkv[3] = {Role::AttnQ, Role::AttnK, Role::AttnV};
  for (int i = 0; i < 3; ++i) {
    TensorSpec w = weight(qkv[i], h + "attn.c_attn.weight", qkv_shape, Layout::InOut);
    TensorSpec b = bias(qkv[i], h + "attn.c_attn.bias", qkv_vec);
    w.fused_index = b.fused_index = i;
    w.fused_count = b.fused_count = 3;
    s.push_back(w);
    s.push_back(b);
  }
  linear(s, Role::AttnO, h + "attn.c_proj", [](C c, int64_t) { return Shape{c.q_dim(), c.d_model}; }, model_vec, nullptr,
         Layout::InOut);
  layer_norm(s, Role::MlpNorm, h + "ln_2", model_vec);
  linear(s, Role::MlpUp, h + "mlp.c_fc", mlp_in, mlp_vec, nullptr, Layout::InOut);
  linear(s, Role::MlpDown, h + "mlp.c_proj", mlp_out, model_vec, nullptr, Layout::InOut);
  layer_norm(s, Role::FinalNorm, "{p}ln_f", model_vec);
  s.push_back(weight(Role::Unembed, "lm_head.weight", embed_shape, Layout::OutIn, untied));
  s.push_back(ignored(h + "attn.bias"));
  s.push_back(ignored(h + "attn.masked_bias"));
  return t;
}

// GPT-2 as llama.cpp's converter writes it (arch "gpt2"): every Conv1D [in, out] weight transposed to nn.Linear
// [out, in] layout, c_attn kept fused as attn_qkv (q | k | v rows), and the tied head written out again as
// output.weight (so a tdyn GGUF GPT-2 is untied unless that tensor is absent). GPT-NeoX (arch "gptneox") has the
// same tensors without the position table: its converter regroups query_key_value's per-head [q_h; k_h; v_h] rows
// to q | k | v, and writes embed_out as output.weight.
FamilyTable gguf_gpt_table(const std::string& family, bool learned_positions) {
  FamilyTable t{.family = family, .format = "gguf"};
  auto& s = t.tensors;
  auto qkv_shape = [](C c, int64_t) { return Shape{3 * c.q_dim(), c.d_model}; };
  auto qkv_vec = [](C c, int64_t) { return Shape{3 * c.q_dim()}; };
  s.push_back(weight(Role::Embed, "token_embd.weight", embed_shape));
  if (learned_positions) s.push_back(weight(Role::PosEmbed, "position_embd.weight", pos_shape));
  layer_norm(s, Role::AttnNorm, "blk.{l}.attn_norm", model_vec);
  const Role qkv[3] = {Role::AttnQ, Role::AttnK, Role::AttnV};
  for (int i = 0; i < 3; ++i) {
    TensorSpec w = weight(qkv[i], "blk.{l}.attn_qkv.weight", qkv_shape);
    TensorSpec b = bias(qkv[i], "blk.{l}.attn_qkv.bias", qkv_vec);
    w.fused_index = b.fused_index = i;
    w.fused_count = b.fused_count = 3;
    s.push_back(w);
    s.push_back(b);
  }
  linear(s, Role::AttnO, "blk.{l}.attn_output", o_shape, model_vec, nullptr);
  layer_norm(s, Role::MlpNorm, "blk.{l}.ffn_norm", model_vec);
  linear(s, Role::MlpUp, "blk.{l}.ffn_up", up_shape, mlp_vec, nullptr);
  linear(s, Role::MlpDown, "blk.{l}.ffn_down", down_shape, model_vec, nullptr);
  layer_norm(s, Role::FinalNorm, "output_norm", model_vec);
  s.push_back(weight(Role::Unembed, "output.weight", embed_shape, Layout::OutIn, untied));
  return t;
}

// GPT-Neo (GPTNeoForCausalLM): nn.Linear everywhere; q/k/v without bias, out_proj with bias. Older files
// carry the causal-mask buffers attn.attention.bias / masked_bias.
FamilyTable gpt_neo_table() {
  FamilyTable t{.family = "gpt_neo", .format = "hf", .prefixes = {"transformer."}};
  auto& s = t.tensors;
  const std::string h = "{p}h.{l}.";
  s.push_back(weight(Role::Embed, "{p}wte.weight", embed_shape));
  s.push_back(weight(Role::PosEmbed, "{p}wpe.weight", pos_shape));
  layer_norm(s, Role::AttnNorm, h + "ln_1", model_vec);
  linear(s, Role::AttnQ, h + "attn.attention.q_proj", q_shape, q_vec, qkv_bias);
  linear(s, Role::AttnK, h + "attn.attention.k_proj", kv_shape, kv_vec, qkv_bias);
  linear(s, Role::AttnV, h + "attn.attention.v_proj", kv_shape, kv_vec, qkv_bias);
  linear(s, Role::AttnO, h + "attn.attention.out_proj", o_shape, model_vec, o_bias);
  layer_norm(s, Role::MlpNorm, h + "ln_2", model_vec);
  linear(s, Role::MlpUp, h + "mlp.c_fc", up_shape, mlp_vec, mlp_bias);
  linear(s, Role::MlpDown, h + "mlp.c_proj", down_shape, model_vec, mlp_bias);
  layer_norm(s, Role::FinalNorm, "{p}ln_f", model_vec);
  s.push_back(weight(Role::Unembed, "lm_head.weight", embed_shape, Layout::OutIn, untied));
  s.push_back(ignored(h + "attn.attention.bias"));
  s.push_back(ignored(h + "attn.attention.masked_bias"));
  return t;
}

// GPT-NeoX / Pythia (GPTNeoXForCausalLM): query_key_value fuses q, k and v per head ([q_h; k_h; v_h] for each
// head h), nn.Linear everywhere, untied embed_out. Older files carry the buffers attention.bias (causal mask),
// attention.masked_bias and attention.rotary_emb.inv_freq.
FamilyTable gpt_neox_table() {
  FamilyTable t{.family = "gpt_neox", .format = "hf", .ignored_suffixes = {".rotary_emb.inv_freq"},
                .prefixes = {"gpt_neox."}};
  auto& s = t.tensors;
  const std::string h = "{p}layers.{l}.";
  auto qkv_shape = [](C c, int64_t) { return Shape{3 * c.q_dim(), c.d_model}; };
  auto qkv_vec = [](C c, int64_t) { return Shape{3 * c.q_dim()}; };
  s.push_back(weight(Role::Embed, "{p}embed_in.weight", embed_shape));
  layer_norm(s, Role::AttnNorm, h + "input_layernorm", model_vec);
  const Role qkv[3] = {Role::AttnQ, Role::AttnK, Role::AttnV};
  for (int i = 0; i < 3; ++i) {
    TensorSpec w = weight(qkv[i], h + "attention.query_key_value.weight", qkv_shape);
    TensorSpec b = bias(qkv[i], h + "attention.query_key_value.bias", qkv_vec, qkv_bias);
    w.fused_index = b.fused_index = i;
    w.fused_count = b.fused_count = 3;
    w.fused_per_head = b.fused_per_head = true;
    s.push_back(w);
    s.push_back(b);
  }
  linear(s, Role::AttnO, h + "attention.dense", o_shape, model_vec, o_bias);
  layer_norm(s, Role::MlpNorm, h + "post_attention_layernorm", model_vec);
  linear(s, Role::MlpUp, h + "mlp.dense_h_to_4h", up_shape, mlp_vec, mlp_bias);
  linear(s, Role::MlpDown, h + "mlp.dense_4h_to_h", down_shape, model_vec, mlp_bias);
  layer_norm(s, Role::FinalNorm, "{p}final_layer_norm", model_vec);
  s.push_back(weight(Role::Unembed, "embed_out.weight", embed_shape, Layout::OutIn, untied));
  s.push_back(ignored(h + "attention.bias"));
  s.push_back(ignored(h + "attention.masked_bias"));
  return t;
}

// GGUF architecture "gpt2", as llama.cpp's converter writes GPT2LMHeadModel: gelu (tanh approximation, HF
// "gelu_new", which is what llama.cpp's GELU computes), learned positions.
ModelConfig parse_gguf_gpt2(const GgufKeys& keys, const TensorStore& store) {
  ModelConfig c = gguf_settings::gpt_like(keys, store, "gpt2", "gpt2");
  c.activation = Activation::GeluTanh;
  c.learned_positions = true;
  return c;
}

// GGUF architecture "gptneox", as llama.cpp's converter writes GPTNeoXForCausalLM: query_key_value regrouped from
// per-head [q_h; k_h; v_h] to q | k | v rows (attn_qkv), partial rotate-half RoPE, the parallel block flag. HF's
// GPT-NeoX uses the exact (erf) GELU, computed here as in the checkpoint's own definition (llama.cpp computes the
// tanh approximation for this architecture).
ModelConfig parse_gguf_gptneox(const GgufKeys& keys, const TensorStore& store) {
  ModelConfig c = gguf_settings::gpt_like(keys, store, "gptneox", "gpt_neox");
  c.activation = Activation::GeluErf;
  c.parallel_residual = keys.boolean("gptneox.use_parallel_residual");
  c.rope.theta = keys.real("gptneox.rope.freq_base", 10000.0);
  gguf_settings::rotate_half_rope(keys, "gptneox", c);
  gguf_settings::refuse_rope_scaling(keys, "gptneox");
  return c;
}

}  // namespace

FamilyDefinition gpt_family() {
  FamilyDefinition f;
  f.model_types = {{"gpt2", parse_gpt2}, {"gpt_neo", parse_gpt_neo}, {"gpt_neox", parse_gpt_neox}};
  f.gguf_architectures = {{"gpt2", parse_gguf_gpt2}, {"gptneox", parse_gguf_gptneox}};
  auto& tables = f.tables;
  tables.push_back(gpt2_table());
  tables.push_back(gguf_gpt_table("gpt2", /*learned_positions=*/true));
  tables.push_back(gpt_neo_table());
  tables.push_back(gpt_neox_table());
  tables.push_back(gguf_gpt_table("gpt_neox", /*learned_positions=*/false));
  return f;
}

}  // namespace tdyn
