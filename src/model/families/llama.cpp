// Llama and the decoders that share its tensor names: Mistral (sliding window), Qwen2 (q/k/v biases) and Qwen3
// (per-head q/k norms), in Hugging Face, llama2.c and GGUF naming.
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

ModelConfig parse_llama(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = {
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_theta",
      "rope_scaling", "rope_parameters", "attention_bias", "mlp_bias", "head_dim", "pretraining_tp"};
  check_keys(j, keys, origin, opts);
  ModelConfig c;
  c.family = "llama";
  c.format = "hf";
  c.d_vocab = get_int(j, "vocab_size", 32000, origin);
  c.d_model = get_int(j, "hidden_size", 4096, origin);
  c.d_mlp = get_int(j, "intermediate_size", 11008, origin);
  c.n_layers = get_layer_count(j, "num_hidden_layers", 32, origin);
  c.n_heads = get_int(j, "num_attention_heads", 32, origin);
  c.n_kv_heads = get_int(j, "num_key_value_heads", c.n_heads, origin);
  if (c.n_heads <= 0) fail("{}: num_attention_heads must be positive", origin);
  c.d_head = get_int(j, "head_dim", c.d_model / c.n_heads, origin);
  c.n_ctx = get_int(j, "max_position_embeddings", 2048, origin);
  c.norm = NormKind::RMSNorm;
  c.norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6, origin);
  std::string act = get_or<std::string>(j, "hidden_act", "silu", origin);
  if (act != "silu") fail("{}: hidden_act '{}' is not supported for llama (expected silu)", origin, act);
  c.activation = Activation::SiLU;
  c.gated_mlp = true;
  c.attn_qkv_bias = c.attn_o_bias = get_or<bool>(j, "attention_bias", false, origin);
  c.mlp_bias = get_or<bool>(j, "mlp_bias", false, origin);
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  c.rope.style = RopeStyle::RotateHalf;
  c.rope.theta = get_or<double>(j, "rope_theta", 10000.0, origin);
  parse_rope_scaling(j, c.rope, origin);
  c.tied_embeddings = get_or<bool>(j, "tie_word_embeddings", false, origin);
  return c;
}

// MistralForCausalLM (HF MistralConfig defaults): Llama with a sliding window (default 4096) on every layer.
ModelConfig parse_mistral(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = {
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_theta",
      "rope_scaling", "rope_parameters", "sliding_window"};
  check_keys(j, keys, origin, opts);
  ModelConfig c = llama_style(j, "mistral", {32000, 4096, 14336, 32, 32, 8, 4096 * 32, 1e-6}, origin);
  window_every_layer(c, window_key(j, "sliding_window", 4096, origin));
  return c;
}

// The sliding windows of Qwen2Config and Qwen3Config: none unless use_sliding_window (the config then sets
// sliding_window to None), else config.sliding_window on the layers that layer_types marks "sliding_attention" - by
// default those from max_window_layers on.
void qwen_windows(const nlohmann::json& j, ModelConfig& c, const std::string& origin) {
  const bool use_window = get_or<bool>(j, "use_sliding_window", false, origin);
  const int64_t window = use_window ? window_key(j, "sliding_window", 4096, origin) : 0;
  const int64_t max_window_layers = get_int(j, "max_window_layers", 28, origin);
  std::vector<std::string> types;
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    types = parse_layer_types(j, c.n_layers, origin);
  } else {
    for (int64_t l = 0; l < c.n_layers; ++l)
      types.push_back(window > 0 && l >= max_window_layers ? "sliding_attention" : "full_attention");
  }
  c.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (types[l] != "sliding_attention") continue;
    if (window == 0)
      fail("{}: layer_types marks layer {} sliding_attention but there is no window (use_sliding_window {}, "
           "sliding_window {})", origin, l, use_window, j.contains("sliding_window") ? j["sliding_window"].dump() : "absent");
    c.layers[l].sliding_window = window;
  }
}

// Qwen2ForCausalLM (HF Qwen2Config defaults; Qwen2.5 uses the same class): q/k/v projections with bias, o_proj
// without; Qwen's sliding windows.
ModelConfig parse_qwen2(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = {
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_theta",
      "rope_scaling", "rope_parameters", "use_sliding_window", "sliding_window", "max_window_layers", "layer_types"};
  check_keys(j, keys, origin, opts);
  ModelConfig c = llama_style(j, "qwen2", {151936, 4096, 22016, 32, 32, 32, 32768, 1e-6}, origin);
  c.attn_qkv_bias = true;
  c.attn_o_bias = false;
  qwen_windows(j, c, origin);
  return c;
}

// Qwen3ForCausalLM (HF Qwen3Config defaults): Qwen2's decoder with an RMSNorm over each head of the queries and
// keys before RoPE (q_norm, k_norm: one [head_dim] scale each, shared by the heads), head_dim its own setting
// (default 128, not hidden_size / heads), and attention_bias on q/k/v and o_proj alike.
ModelConfig parse_qwen3(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = {
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_theta",
      "rope_scaling", "rope_parameters", "attention_bias", "use_sliding_window", "sliding_window",
      "max_window_layers", "layer_types"};
  check_keys(j, keys, origin, opts);
  ModelConfig c = llama_style(j, "qwen3", {151936, 4096, 22016, 32, 32, 32, 32768, 1e-6, 128}, origin);
  c.qk_norm = QKNorm::PerHead;
  c.attn_qkv_bias = c.attn_o_bias = get_or<bool>(j, "attention_bias", false, origin);
  qwen_windows(j, c, origin);
  return c;
}

// RoPE frequency scaling as GGUF stores it for the llama architecture: llama.rope.scaling.* (none / linear), the
// legacy llama.rope.scale_linear, and the rope_freqs.weight tensor through which llama.cpp's converter stores
// Llama 3.1 scaling as one divisor per frequency pair.
void gguf_rope_scaling(const GgufKeys& keys, const TensorStore& store, ModelConfig& c) {
  const std::string& origin = keys.origin();
  std::string type = keys.has("llama.rope.scaling.type") ? keys.text("llama.rope.scaling.type") : "none";
  if (type == "linear") {
    c.rope.scaling = "linear";
    c.rope.factor = keys.real("llama.rope.scaling.factor");
  } else if (type != "none") {
    fail("{}: GGUF llama.rope.scaling.type '{}' is not supported (supported: none, linear, and llama3 scaling stored as "
         "the rope_freqs.weight tensor)", origin, type);
  }
  if (keys.has("llama.rope.scale_linear") && type == "none") {
    double factor = keys.real("llama.rope.scale_linear");
    if (factor != 1.0) {
      c.rope.scaling = "linear";
      c.rope.factor = factor;
    }
  }
  if (c.rope.scaling == "linear" && !(c.rope.factor > 0 && std::isfinite(c.rope.factor)))
    fail("{}: GGUF linear RoPE scaling factor must be positive, got {}", origin, c.rope.factor);

  if (const TensorInfo* freqs = store.find("rope_freqs.weight")) {
    const Shape expected = {c.d_head / 2};
    if (freqs->shape != expected)
      fail("{}: tensor 'rope_freqs.weight' has wrong shape; expected {} (d_head / 2), got {}", origin, shape_str(expected),
           shape_str(freqs->shape));
    c.rope.freq_divisors = store.doubles("rope_freqs.weight");
    for (double d : c.rope.freq_divisors) {
      if (!(d > 0) || !std::isfinite(d)) fail("{}: tensor 'rope_freqs.weight' holds {}, expected positive divisors", origin, d);
    }
  }
}

// GGUF architecture "llama": the keys llama.cpp's converter writes for LlamaForCausalLM and MistralForCausalLM
// (which it writes as "llama", without Mistral's sliding window).
ModelConfig parse_gguf_llama(const GgufKeys& keys, const TensorStore& store) {
  const std::string& origin = keys.origin();
  if (keys.integer("llama.expert_count", 0) > 0)
    fail("{}: GGUF llama model with {} experts: mixture-of-experts is not supported", origin, keys.integer("llama.expert_count"));
  ModelConfig c = gguf_settings::llama_like(keys, store, "llama");
  // llama.cpp's converter permutes HF q/k rows back to adjacent (2i, 2i+1) RoPE pairs.
  c.rope.style = RopeStyle::Interleaved;
  int64_t rotary_dims = keys.integer("llama.rope.dimension_count", c.d_head);
  if (rotary_dims != c.d_head)
    fail("{}: GGUF llama.rope.dimension_count is {} but the head dimension is {}: partial rotary embeddings are not "
         "supported", origin, rotary_dims, c.d_head);
  gguf_rope_scaling(keys, store, c);
  // Biases are optional in llama.cpp's llama architecture; their presence in layer 0 decides.
  c.attn_qkv_bias = store.contains("blk.0.attn_q.bias");
  c.attn_o_bias = store.contains("blk.0.attn_output.bias");
  c.mlp_bias = store.contains("blk.0.ffn_up.bias");
  return c;
}

// What llama.cpp's converter writes for Qwen2 and Qwen3 alike (arch "qwen2", "qwen3"): Llama's settings, rotate-half
// RoPE over whole heads (no q/k permutation), no RoPE scaling, the tied head left out. llama.cpp keeps no sliding
// window for either: every layer attends to the whole context.
ModelConfig qwen_gguf(const GgufKeys& keys, const TensorStore& store, const std::string& arch) {
  ModelConfig c = gguf_settings::llama_like(keys, store, arch);
  gguf_settings::rotate_half_rope(keys, arch, c);
  gguf_settings::refuse_rope_scaling(keys, arch);
  if (c.rope.partial_rotary_factor != 1.0)
    fail("{}: GGUF {}.rope.dimension_count is {} but the head dimension is {}: {} rotates whole heads", keys.origin(), arch,
         c.rope.rotary_dim(c.d_head), c.d_head, arch);
  return c;
}

// GGUF architecture "qwen2" (Qwen2ForCausalLM): Llama's tensors plus q/k/v biases.
ModelConfig parse_gguf_qwen2(const GgufKeys& keys, const TensorStore& store) {
  ModelConfig c = qwen_gguf(keys, store, "qwen2");
  c.attn_qkv_bias = true;
  return c;
}

// GGUF architecture "qwen3" (Qwen3ForCausalLM): the per-head q/k norms (attn_q_norm, attn_k_norm), head_dim as
// attention.key_length. Biases are bound where the file has them (the released models have none).
ModelConfig parse_gguf_qwen3(const GgufKeys& keys, const TensorStore& store) {
  ModelConfig c = qwen_gguf(keys, store, "qwen3");
  c.qk_norm = QKNorm::PerHead;
  c.attn_qkv_bias = store.contains("blk.0.attn_q.bias");
  c.attn_o_bias = store.contains("blk.0.attn_output.bias");
  return c;
}

// Llama (HF, llama2.c, GGUF naming).
struct LlamaNames {
  std::string embed, attn_norm, q, k, v, o, mlp_norm, gate, up, down, final_norm, unembed, bias_suffix, weight_suffix;
};

FamilyTable llama_table(const std::string& format, const LlamaNames& n, std::vector<std::string> ignored,
                        const std::string& family = "llama") {
  const std::string& W = n.weight_suffix;
  const std::string& B = n.bias_suffix;
  FamilyTable t{.family = family, .format = format, .ignored_suffixes = std::move(ignored)};
  t.tensors = {
      weight(Role::Embed, n.embed + W, embed_shape),
      vec(Role::AttnNorm, n.attn_norm + W, model_vec),
      weight(Role::AttnQ, n.q + W, q_shape),
      weight(Role::AttnK, n.k + W, kv_shape),
      weight(Role::AttnV, n.v + W, kv_shape),
      weight(Role::AttnO, n.o + W, o_shape),
      bias(Role::AttnQ, n.q + B, q_vec, qkv_bias),
      bias(Role::AttnK, n.k + B, kv_vec, qkv_bias),
      bias(Role::AttnV, n.v + B, kv_vec, qkv_bias),
      bias(Role::AttnO, n.o + B, model_vec, o_bias),
      vec(Role::MlpNorm, n.mlp_norm + W, model_vec),
      weight(Role::MlpGate, n.gate + W, up_shape),
      weight(Role::MlpUp, n.up + W, up_shape),
      weight(Role::MlpDown, n.down + W, down_shape),
      bias(Role::MlpGate, n.gate + B, mlp_vec, mlp_bias),
      bias(Role::MlpUp, n.up + B, mlp_vec, mlp_bias),
      bias(Role::MlpDown, n.down + B, model_vec, mlp_bias),
      vec(Role::FinalNorm, n.final_norm + W, model_vec),
      weight(Role::Unembed, n.unembed + W, embed_shape, Layout::OutIn, untied),
  };
  return t;
}

// `table` with a per-head query and key norm scale ([head_dim] each) of these names.
FamilyTable with_qk_norms(FamilyTable table, const std::string& q_norm, const std::string& k_norm) {
  table.tensors.push_back(vec(Role::AttnQNorm, q_norm, head_vec));
  table.tensors.push_back(vec(Role::AttnKNorm, k_norm, head_vec));
  return table;
}

// Hugging Face names of LlamaForCausalLM, shared by MistralForCausalLM and Qwen2ForCausalLM.
const LlamaNames kHfLlamaNames = {
    "model.embed_tokens", "model.layers.{l}.input_layernorm", "model.layers.{l}.self_attn.q_proj",
    "model.layers.{l}.self_attn.k_proj", "model.layers.{l}.self_attn.v_proj", "model.layers.{l}.self_attn.o_proj",
    "model.layers.{l}.post_attention_layernorm", "model.layers.{l}.mlp.gate_proj", "model.layers.{l}.mlp.up_proj",
    "model.layers.{l}.mlp.down_proj", "model.norm", "lm_head", ".bias", ".weight"};

// llama.cpp's names of the same tensors (GGUF arch "llama", "qwen2" with its q/k/v biases, "qwen3").
const LlamaNames kGgufLlamaNames = {
    "token_embd", "blk.{l}.attn_norm", "blk.{l}.attn_q", "blk.{l}.attn_k", "blk.{l}.attn_v", "blk.{l}.attn_output",
    "blk.{l}.ffn_norm", "blk.{l}.ffn_gate", "blk.{l}.ffn_up", "blk.{l}.ffn_down", "output_norm", "output", ".bias",
    ".weight"};

}  // namespace

FamilyDefinition llama_family() {
  FamilyDefinition f;
  f.model_types = {{"llama", parse_llama}, {"mistral", parse_mistral}, {"qwen2", parse_qwen2}, {"qwen3", parse_qwen3}};
  f.gguf_architectures = {{"llama", parse_gguf_llama}, {"qwen2", parse_gguf_qwen2}, {"qwen3", parse_gguf_qwen3}};
  auto& tables = f.tables;
  // Hugging Face LlamaForCausalLM. q/k rows are permuted for RoPE's rotate-half layout.
  tables.push_back(llama_table("hf", kHfLlamaNames, {".rotary_emb.inv_freq"}));
  // MistralForCausalLM and Qwen2ForCausalLM: Llama's names (Qwen2 adds q/k/v biases, bound through attn_qkv_bias).
  tables.push_back(llama_table("hf", kHfLlamaNames, {".rotary_emb.inv_freq"}, "mistral"));
  tables.push_back(llama_table("hf", kHfLlamaNames, {".rotary_emb.inv_freq"}, "qwen2"));
  // Qwen3ForCausalLM: Llama's names plus the per-head q/k norms.
  tables.push_back(with_qk_norms(llama_table("hf", kHfLlamaNames, {".rotary_emb.inv_freq"}, "qwen3"),
                                 "model.layers.{l}.self_attn.q_norm.weight", "model.layers.{l}.self_attn.k_norm.weight"));
  // llama2.c legacy .bin (names as in Meta's original checkpoints; see io/llama2c.h). Interleaved RoPE pairs.
  tables.push_back(llama_table("llama2c",
                               {"tok_embeddings", "layers.{l}.attention_norm", "layers.{l}.attention.wq",
                                "layers.{l}.attention.wk", "layers.{l}.attention.wv", "layers.{l}.attention.wo",
                                "layers.{l}.ffn_norm", "layers.{l}.feed_forward.w1", "layers.{l}.feed_forward.w3",
                                "layers.{l}.feed_forward.w2", "norm", "output", ".bias", ".weight"},
                               {}));
  // GGUF (llama.cpp naming). Interleaved RoPE pairs, as llama.cpp's converter stores q/k.
  tables.push_back(llama_table("gguf", kGgufLlamaNames, {"rope_freqs.weight"}));
  // GGUF Qwen2 (llama.cpp arch "qwen2"): the same names with q/k/v biases, rotate-half RoPE pairs.
  tables.push_back(llama_table("gguf", kGgufLlamaNames, {}, "qwen2"));
  // GGUF Qwen3 (arch "qwen3"): the same names plus the per-head q/k norms, rotate-half RoPE pairs.
  tables.push_back(with_qk_norms(llama_table("gguf", kGgufLlamaNames, {}, "qwen3"), "blk.{l}.attn_q_norm.weight",
                                 "blk.{l}.attn_k_norm.weight"));
  return f;
}

}  // namespace tdyn
