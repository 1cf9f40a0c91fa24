#include "model/config_json.h"

#include <cmath>
#include <iostream>

namespace tdyn::config_json {
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

}  // namespace

const std::set<std::string> kSummaryKeys = {"summary_activation", "summary_first_dropout", "summary_proj_to_labels",
                                            "summary_type", "summary_use_proj"};

int64_t get_int(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& origin) {
  if (j.contains(key) && !j[key].is_null() && !j[key].is_number_integer())
    fail("{}: config key '{}' must be an integer, got {}", origin, key, j[key].dump());
  return get_or<int64_t>(j, key, fallback, origin);
}

int64_t get_layer_count(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& origin) {
  int64_t n = get_int(j, key, fallback, origin);
  if (n <= 0 || n > kMaxLayers) fail("{}: config key '{}' must be in [1, {}], got {}", origin, key, kMaxLayers, n);
  return n;
}

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
  c.d_head = get_int(j, "head_dim", d.head_dim > 0 ? d.head_dim : c.d_model / c.n_heads, origin);
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

int64_t window_key(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& origin) {
  if (!j.contains(key)) return fallback;
  if (j[key].is_null()) return 0;
  int64_t window = get_int(j, key, 0, origin);
  if (window <= 0) fail("{}: {} must be a positive integer or null, got {}", origin, key, window);
  return window;
}

void window_every_layer(ModelConfig& c, int64_t window) {
  if (window == 0) return;
  c.layers.resize(c.n_layers);
  for (auto& o : c.layers) o.sliding_window = window;
}

}  // namespace tdyn::config_json
