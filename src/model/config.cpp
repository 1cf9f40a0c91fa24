#include "model/config.h"

#include <cmath>
#include <iostream>
#include <numbers>
#include <set>

#include "core/error.h"

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
  if (parallel_residual && (norm_placement != NormPlacement::Pre || d_per_layer_input > 0 || layer_scalar))
    fail("{}: a parallel-residual block is only supported with pre-norms and without per-layer inputs or layer "
         "scalars", origin);
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

namespace {

// Keys every PretrainedConfig may carry that do not change the eval-mode forward pass.
const std::set<std::string> kCommonHarmlessKeys = {
    "architectures", "torch_dtype", "dtype", "transformers_version", "use_cache", "_name_or_path",
    "initializer_range", "attention_dropout", "hidden_dropout", "hidden_dropout_prob",
    "attention_probs_dropout_prob", "pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id",
    "id2label", "label2id", "return_dict", "output_hidden_states", "output_attentions", "torchscript",
    "tie_encoder_decoder", "is_decoder", "is_encoder_decoder", "add_cross_attention", "tokenizer_class", "prefix",
    "task_specific_params", "problem_type", "chunk_size_feed_forward", "model_type", "num_labels",
    "finetuning_task", "pruned_heads", "decoder_start_token_id", "max_length", "min_length", "do_sample",
    "num_beams", "temperature", "top_k", "top_p", "repetition_penalty", "length_penalty", "early_stopping",
    "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
    "diversity_penalty", "num_beam_groups", "typical_p", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens", "cross_attention_hidden_size", "tf_legacy_loss",
    "use_bfloat16", "gradient_checkpointing", "auto_map", "tie_word_embeddings", "_attn_implementation",
    "_attn_implementation_autoset", "model_name", "base_model_tp_plan", "base_model_pp_plan"};

// GPT-2 / GPT-Neo sequence-classification ("summary") head settings: unused by the LM forward pass.
const std::set<std::string> kSummaryKeys = {"summary_activation", "summary_first_dropout", "summary_proj_to_labels",
                                            "summary_type", "summary_use_proj"};

template <typename T>
T get_or(const nlohmann::json& j, const char* key, T fallback, const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: config key '{}' has the wrong type (value {})", origin, key, j[key].dump());
  }
}

int64_t get_int(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& origin) {
  if (j.contains(key) && !j[key].is_null() && !j[key].is_number_integer())
    fail("{}: config key '{}' must be an integer, got {}", origin, key, j[key].dump());
  return get_or<int64_t>(j, key, fallback, origin);
}

// Per-layer settings are built before validate() runs, so the layer count is bounded as it is read: a corrupt
// count must not drive a huge allocation or loop.
int64_t get_layer_count(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& origin) {
  int64_t n = get_int(j, key, fallback, origin);
  if (n <= 0 || n > kMaxLayers) fail("{}: config key '{}' must be in [1, {}], got {}", origin, key, kMaxLayers, n);
  return n;
}

// For keys whose HF default tdyn cannot vouch for: absent is an error rather than a guess.
const nlohmann::json& required(const nlohmann::json& j, const char* key, const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) fail("{}: config key '{}' is required", origin, key);
  return j[key];
}
int64_t required_int(const nlohmann::json& j, const char* key, const std::string& origin) {
  required(j, key, origin);
  return get_int(j, key, 0, origin);
}

std::set<std::string> with(std::set<std::string> a, const std::set<std::string>& b) {
  a.insert(b.begin(), b.end());
  return a;
}

void check_keys(const nlohmann::json& j, const std::set<std::string>& family_keys, const std::string& origin,
                const ConfigParseOptions& opts) {
  std::vector<std::string> unknown;
  for (auto& [key, _] : j.items()) {
    if (!kCommonHarmlessKeys.count(key) && !family_keys.count(key)) unknown.push_back(key);
  }
  if (unknown.empty()) return;
  std::string list;
  for (const auto& k : unknown) list += (list.empty() ? "'" : ", '") + k + "'";
  if (!opts.allow_unknown_keys)
    fail("{}: unknown config key(s) {}; tdyn does not know whether they change the computation "
         "(pass --allow-unknown-config-keys to ignore them)", origin, list);
  std::cerr << "tdyn: warning: " << origin << ": ignoring unknown config key(s) " << list << "\n";
}

// A flag whose non-default value changes the computation in a way tdyn does not implement.
template <typename T>
void require_value(const nlohmann::json& j, const char* key, T supported, const std::string& origin, const char* what) {
  if (!j.contains(key) || j[key].is_null()) return;
  T got = get_or<T>(j, key, supported, origin);
  if (got != supported) fail("{}: config key '{}' = {} is not supported ({})", origin, key, j[key].dump(), what);
}

Activation parse_activation(const std::string& name, const std::string& key, const std::string& origin) {
  // HF ACT2FN: "gelu" is the exact erf GELU; "gelu_new", "gelu_pytorch_tanh" and "gelu_fast" are the tanh
  // approximation (gelu_fast writes the same formula factored differently).
  if (name == "gelu") return Activation::GeluErf;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return Activation::GeluTanh;
  if (name == "silu" || name == "swish") return Activation::SiLU;
  if (name == "relu") return Activation::ReLU;
  fail("{}: {} '{}' is not supported (supported: gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, silu, swish, relu)",
       origin, key, name);
}

// rope_scaling (transformers <= 4.x) or rope_parameters (5.x), flat form. Unsupported types are errors.
void parse_rope_object(const nlohmann::json& s, RopeConfig& rope, const std::string& origin) {
  if (s.contains("rope_theta")) rope.theta = get_or<double>(s, "rope_theta", rope.theta, origin);
  std::string type = get_or<std::string>(s, "rope_type", get_or<std::string>(s, "type", "default", origin), origin);
  rope.scaling = type;
  rope.factor = get_or<double>(s, "factor", 1.0, origin);
  rope.partial_rotary_factor = get_or<double>(s, "partial_rotary_factor", 1.0, origin);
  if (rope.partial_rotary_factor != 1.0 && type != "proportional")
    fail("{}: partial_rotary_factor {} with rope type '{}' is not supported", origin, rope.partial_rotary_factor, type);
  if (!(rope.factor > 0) || !std::isfinite(rope.factor)) fail("{}: RoPE scaling factor must be positive, got {}", origin, rope.factor);
  if (type == "default") {
    rope.factor = 1.0;
    return;
  }
  if (type == "linear" || type == "proportional") return;
  if (type == "llama3") {
    rope.low_freq_factor = get_or<double>(s, "low_freq_factor", 1.0, origin);
    rope.high_freq_factor = get_or<double>(s, "high_freq_factor", 4.0, origin);
    rope.original_max_position = get_int(s, "original_max_position_embeddings", 8192, origin);
    if (!(rope.high_freq_factor > rope.low_freq_factor))
      fail("{}: llama3 rope_scaling needs high_freq_factor > low_freq_factor", origin);
    return;
  }
  fail("{}: rope scaling type '{}' is not supported (supported: default, linear, llama3, proportional)", origin, type);
}

void parse_rope_scaling(const nlohmann::json& j, RopeConfig& rope, const std::string& origin) {
  const nlohmann::json* s = nullptr;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) s = &j["rope_parameters"];
  else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) s = &j["rope_scaling"];
  if (s) parse_rope_object(*s, rope, origin);
  if (rope.scaling == "proportional") fail("{}: 'proportional' RoPE is only supported for gemma4", origin);
}

void parse_token_ids(const nlohmann::json& j, ModelConfig& c) {
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_id = j["bos_token_id"].get<int32_t>();
  if (j.contains("eos_token_id") && j["eos_token_id"].is_number_integer()) c.eos_id = j["eos_token_id"].get<int32_t>();
}

// Sliding-window layers from HF `layer_types` ("sliding_attention" / "full_attention").
std::vector<std::string> parse_layer_types(const nlohmann::json& j, int64_t n_layers, const std::string& origin) {
  auto types = get_or<std::vector<std::string>>(j, "layer_types", {}, origin);
  if (static_cast<int64_t>(types.size()) != n_layers)
    fail("{}: layer_types has {} entries for {} layers", origin, types.size(), n_layers);
  for (const auto& t : types) {
    if (t != "sliding_attention" && t != "full_attention")
      fail("{}: layer type '{}' is not supported (supported: sliding_attention, full_attention)", origin, t);
  }
  return types;
}

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

// Settings shared by the Llama-style decoders Mistral, Qwen2 and Phi-3: pre-RMSNorm, gated MLP, rotate-half
// RoPE, grouped-query attention scaled by 1/sqrt(head_dim). Defaults are those of each HF config class.
struct DecoderDefaults {
  int64_t vocab, hidden, mlp, layers, heads;
  int64_t kv_heads;  // 0: num_attention_heads
  int64_t positions;
  double eps;
};

ModelConfig llama_style(const nlohmann::json& j, const char* family, const DecoderDefaults& d, const std::string& origin) {
  ModelConfig c;
  c.family = family;
  c.format = "hf";
  c.d_vocab = get_int(j, "vocab_size", d.vocab, origin);
  c.d_model = get_int(j, "hidden_size", d.hidden, origin);
  c.d_mlp = get_int(j, "intermediate_size", d.mlp, origin);
  c.n_layers = get_layer_count(j, "num_hidden_layers", d.layers, origin);
  c.n_heads = get_int(j, "num_attention_heads", d.heads, origin);
  if (c.n_heads <= 0) fail("{}: num_attention_heads must be positive", origin);
  // An explicit null means "as many as the query heads" in every one of these config classes.
  const bool kv_null = j.contains("num_key_value_heads") && j["num_key_value_heads"].is_null();
  c.n_kv_heads = kv_null ? c.n_heads : get_int(j, "num_key_value_heads", d.kv_heads > 0 ? d.kv_heads : c.n_heads, origin);
  c.d_head = get_int(j, "head_dim", c.d_model / c.n_heads, origin);
  c.n_ctx = get_int(j, "max_position_embeddings", d.positions, origin);
  c.norm = NormKind::RMSNorm;
  c.norm_eps = get_or<double>(j, "rms_norm_eps", d.eps, origin);
  c.activation = parse_activation(get_or<std::string>(j, "hidden_act", "silu", origin), "hidden_act", origin);
  c.gated_mlp = true;
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  c.rope.style = RopeStyle::RotateHalf;
  c.rope.theta = get_or<double>(j, "rope_theta", 10000.0, origin);
  parse_rope_scaling(j, c.rope, origin);
  c.tied_embeddings = get_or<bool>(j, "tie_word_embeddings", false, origin);
  return c;
}

// A sliding-window size key: `fallback` when absent, 0 (no window) when null, else a positive integer.
int64_t window_key(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& origin) {
  if (!j.contains(key)) return fallback;
  if (j[key].is_null()) return 0;
  int64_t window = get_int(j, key, 0, origin);
  if (window <= 0) fail("{}: {} must be a positive integer or null, got {}", origin, key, window);
  return window;
}

// One sliding window on every layer (Mistral, Phi-3: the attention passes config.sliding_window to all layers).
void window_every_layer(ModelConfig& c, int64_t window) {
  if (window == 0) return;
  c.layers.resize(c.n_layers);
  for (auto& o : c.layers) o.sliding_window = window;
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

// Qwen2ForCausalLM (HF Qwen2Config defaults; Qwen2.5 uses the same class): q/k/v projections with bias, o_proj
// without. Sliding windows only with use_sliding_window (Qwen2Config sets sliding_window to None otherwise), on
// the layers that layer_types marks "sliding_attention" - by default those from max_window_layers on.
ModelConfig parse_qwen2(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = {
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps", "rope_theta",
      "rope_scaling", "rope_parameters", "use_sliding_window", "sliding_window", "max_window_layers", "layer_types"};
  check_keys(j, keys, origin, opts);
  ModelConfig c = llama_style(j, "qwen2", {151936, 4096, 22016, 32, 32, 32, 32768, 1e-6}, origin);
  c.attn_qkv_bias = true;
  c.attn_o_bias = false;
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
  return c;
}

// Phi3ForCausalLM (HF Phi3Config defaults): fused qkv_proj and gate_up_proj, an optional sliding window on every
// layer, partial rotary embeddings. LongRoPE ("longrope", formerly "su") switches between two frequency sets by
// sequence length and rescales cos/sin: not implemented, so refused rather than run with plain RoPE.
ModelConfig parse_phi3(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = {
      "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "original_max_position_embeddings",
      "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor", "sliding_window",
      "resid_pdrop", "embd_pdrop"};
  check_keys(j, keys, origin, opts);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(key) || !j[key].is_object()) continue;
    const std::string type = get_or<std::string>(j[key], "rope_type", get_or<std::string>(j[key], "type", "default", origin), origin);
    if (type == "longrope" || type == "su")
      fail("{}: config key '{}' of type '{}' (Phi-3 LongRoPE) is not supported: its short/long frequency factors and "
           "attention scaling are not implemented", origin, key, type);
  }
  ModelConfig c = llama_style(j, "phi3", {32064, 3072, 8192, 32, 32, 0, 4096, 1e-5}, origin);
  c.rope.partial_rotary_factor = get_or<double>(j, "partial_rotary_factor", c.rope.partial_rotary_factor, origin);
  if (!(c.rope.partial_rotary_factor > 0 && c.rope.partial_rotary_factor <= 1))
    fail("{}: partial_rotary_factor must be in (0, 1], got {}", origin, c.rope.partial_rotary_factor);
  window_every_layer(c, window_key(j, "sliding_window", 0, origin));
  return c;
}

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

// Settings shared by the BERT-style encoders: post-LN, absolute learned positions, token types, embedding
// LayerNorm, bidirectional attention, MLM head tied to the word embeddings.
void encoder_common(const nlohmann::json& j, ModelConfig& c, const std::string& origin) {
  std::string pos = get_or<std::string>(j, "position_embedding_type", "absolute", origin);
  if (pos != "absolute")
    fail("{}: position_embedding_type '{}' is not supported (supported: absolute)", origin, pos);
  if (get_or<bool>(j, "is_decoder", false, origin))
    fail("{}: is_decoder = true (a causal {}) is not supported", origin, c.family);
  c.d_vocab = get_int(j, "vocab_size", c.d_vocab, origin);
  c.d_model = get_int(j, "hidden_size", c.d_model, origin);
  c.n_layers = get_layer_count(j, "num_hidden_layers", 12, origin);
  c.n_heads = c.n_kv_heads = get_int(j, "num_attention_heads", c.n_heads, origin);
  if (c.n_heads <= 0) fail("{}: num_attention_heads must be positive", origin);
  c.d_head = c.d_model / c.n_heads;
  if (c.d_head * c.n_heads != c.d_model)
    fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", origin, c.d_model, c.n_heads);
  c.d_mlp = get_int(j, "intermediate_size", c.d_mlp, origin);
  c.n_ctx = get_int(j, "max_position_embeddings", 512, origin);
  c.n_token_types = get_int(j, "type_vocab_size", 2, origin);
  c.norm = NormKind::LayerNorm;
  c.norm_eps = get_or<double>(j, "layer_norm_eps", 1e-12, origin);
  c.norm_placement = NormPlacement::PostResidual;
  c.gated_mlp = false;
  c.attn_qkv_bias = c.attn_o_bias = c.mlp_bias = true;
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  c.causal = false;
  c.learned_positions = true;
  c.embed_norm = true;
  c.mlm_head = true;
  c.tied_embeddings = get_or<bool>(j, "tie_word_embeddings", true, origin);
}

// BertForMaskedLM (HF BertConfig defaults).
ModelConfig parse_bert(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = {
      "classifier_dropout", "hidden_act", "hidden_size", "intermediate_size", "layer_norm_eps",
      "max_position_embeddings", "num_attention_heads", "num_hidden_layers", "position_embedding_type",
      "type_vocab_size", "vocab_size"};
  check_keys(j, keys, origin, opts);
  ModelConfig c;
  c.family = "bert";
  c.format = "hf";
  c.d_vocab = 30522;
  c.d_model = 768;
  c.n_heads = 12;
  c.d_mlp = 3072;
  encoder_common(j, c, origin);
  c.activation = parse_activation(get_or<std::string>(j, "hidden_act", "gelu", origin), "hidden_act", origin);
  return c;
}

// AlbertForMaskedLM (HF AlbertConfig defaults). Factorised embeddings; layer groups shared across depth.
ModelConfig parse_albert(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  // down_scale_factor, gap_size, net_structure_type, num_memory_blocks: kept in AlbertConfig for the original
  // TF code; the HF modeling code never reads them.
  static const std::set<std::string> keys = {
      "classifier_dropout_prob", "down_scale_factor", "embedding_size", "gap_size", "hidden_act", "hidden_size",
      "inner_group_num", "intermediate_size", "layer_norm_eps", "max_position_embeddings", "net_structure_type",
      "num_attention_heads", "num_hidden_groups", "num_hidden_layers", "num_memory_blocks",
      "position_embedding_type", "type_vocab_size", "vocab_size"};
  check_keys(j, keys, origin, opts);
  ModelConfig c;
  c.family = "albert";
  c.format = "hf";
  c.d_vocab = 30000;
  c.d_model = 4096;
  c.n_heads = 64;
  c.d_mlp = 16384;
  encoder_common(j, c, origin);
  c.activation = parse_activation(get_or<std::string>(j, "hidden_act", "gelu_new", origin), "hidden_act", origin);
  c.d_embed = get_int(j, "embedding_size", 128, origin);
  int64_t inner = get_int(j, "inner_group_num", 1, origin);
  if (inner != 1) fail("{}: inner_group_num = {} is not supported (supported: 1)", origin, inner);
  int64_t groups = get_int(j, "num_hidden_groups", 1, origin);
  if (groups <= 0 || groups > c.n_layers)
    fail("{}: num_hidden_groups must be in [1, num_hidden_layers = {}], got {}", origin, c.n_layers, groups);
  // AlbertTransformer: layer i runs group int(i / (num_hidden_layers / num_hidden_groups)).
  c.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    c.layers[l].weights = static_cast<int64_t>(static_cast<double>(l) / (static_cast<double>(c.n_layers) / groups));
  }
  return c;
}

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
  c.layer_scalar = true;
  c.d_per_layer_input = get_int(j, "hidden_size_per_layer_input", 0, origin);
  if (c.d_per_layer_input > 0) c.d_vocab_per_layer = get_int(j, "vocab_size_per_layer_input", c.d_vocab, origin);
  parse_token_ids(j, c);
  const int64_t global_head_dim = get_int(j, "global_head_dim", c.d_head, origin);
  const int64_t window = required_int(j, "sliding_window", origin);
  if (window <= 0) fail("{}: sliding_window must be positive, got {}", origin, window);
  required(j, "layer_types", origin);
  std::vector<std::string> types = parse_layer_types(j, c.n_layers, origin);

  // rope_parameters: one RoPE per layer type.
  const nlohmann::json& rp = required(j, "rope_parameters", origin);
  auto rope_for = [&](const std::string& type) {
    if (!rp.is_object() || !rp.contains(type) || !rp[type].is_object())
      fail("{}: rope_parameters has no object for layer type '{}'", origin, type);
    RopeConfig r;
    r.style = RopeStyle::RotateHalf;
    parse_rope_object(rp[type], r, origin);
    return r;
  };
  c.rope = rope_for(types[0]);

  // KV sharing (Gemma4TextModel): the last num_kv_shared_layers layers compute no keys/values and reuse those
  // of the last earlier non-shared layer of the same type; use_double_wide_mlp doubles their MLP width.
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
    o.rope = rope_for(types[l]);
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

}  // namespace

ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  if (!j.is_object()) fail("{}: config must be a JSON object", origin);
  if (!j.contains("model_type") || !j["model_type"].is_string()) fail("{}: config has no \"model_type\"", origin);
  std::string type = j["model_type"].get<std::string>();
  ModelConfig c;
  if (type == "llama") c = parse_llama(j, origin, opts);
  else if (type == "mistral") c = parse_mistral(j, origin, opts);
  else if (type == "qwen2") c = parse_qwen2(j, origin, opts);
  else if (type == "phi3") c = parse_phi3(j, origin, opts);
  else if (type == "gpt2") c = parse_gpt2(j, origin, opts);
  else if (type == "gpt_neo") c = parse_gpt_neo(j, origin, opts);
  else if (type == "gpt_neox") c = parse_gpt_neox(j, origin, opts);
  else if (type == "bert") c = parse_bert(j, origin, opts);
  else if (type == "albert") c = parse_albert(j, origin, opts);
  else if (type == "olmo3") c = parse_olmo3(j, origin, opts);
  else if (type == "gemma4") c = parse_gemma4(j, origin, opts);
  else if (type == "gemma4_text") c = parse_gemma4_text(j, origin, opts);
  else fail("{}: unknown model_type '{}' (supported: llama, mistral, qwen2, phi3, gpt2, gpt_neo, gpt_neox, bert, albert, olmo3, gemma4, gemma4_text)", origin, type);
  if (!c.bos_id && !c.eos_id) parse_token_ids(j, c);  // gemma4 takes them from text_config
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
