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

void ModelConfig::validate(const std::string& origin) const {
  auto positive = [&](const char* what, int64_t v) {
    if (v <= 0 || v > (int64_t{1} << 31)) fail("{}: {} must be a positive integer below 2^31, got {}", origin, what, v);
  };
  positive("d_model", d_model);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("n_kv_heads", n_kv_heads);
  positive("d_head", d_head);
  positive("d_mlp", d_mlp);
  positive("d_vocab", d_vocab);
  positive("n_ctx", n_ctx);
  if (n_heads % n_kv_heads != 0)
    fail("{}: n_heads ({}) must be a multiple of n_kv_heads ({})", origin, n_heads, n_kv_heads);
  if (rope.style != RopeStyle::None && d_head % 2 != 0) fail("{}: RoPE needs an even head dimension, got {}", origin, d_head);
  if (!(norm_eps > 0) || !std::isfinite(norm_eps)) fail("{}: norm epsilon must be positive, got {}", origin, norm_eps);
  if (!(attn_scale > 0) || !std::isfinite(attn_scale)) fail("{}: attention scale must be positive, got {}", origin, attn_scale);
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

// rope_scaling (transformers <= 4.x) or rope_parameters (5.x). Unsupported types are errors.
void parse_rope_scaling(const nlohmann::json& j, RopeConfig& rope, const std::string& origin) {
  const nlohmann::json* s = nullptr;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) s = &j["rope_parameters"];
  else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) s = &j["rope_scaling"];
  if (!s) return;
  if (s->contains("rope_theta")) rope.theta = get_or<double>(*s, "rope_theta", rope.theta, origin);
  std::string type = get_or<std::string>(*s, "rope_type", get_or<std::string>(*s, "type", "default", origin), origin);
  rope.scaling = type;
  if (type == "default") return;
  rope.factor = get_or<double>(*s, "factor", 1.0, origin);
  if (type == "linear") return;
  if (type == "llama3") {
    rope.low_freq_factor = get_or<double>(*s, "low_freq_factor", 1.0, origin);
    rope.high_freq_factor = get_or<double>(*s, "high_freq_factor", 4.0, origin);
    rope.original_max_position = get_int(*s, "original_max_position_embeddings", 8192, origin);
    if (!(rope.high_freq_factor > rope.low_freq_factor))
      fail("{}: llama3 rope_scaling needs high_freq_factor > low_freq_factor", origin);
    return;
  }
  fail("{}: rope scaling type '{}' is not supported (supported: default, linear, llama3)", origin, type);
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
  c.n_layers = get_int(j, "num_hidden_layers", 32, origin);
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
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_id = j["bos_token_id"].get<int32_t>();
  if (j.contains("eos_token_id") && j["eos_token_id"].is_number_integer()) c.eos_id = j["eos_token_id"].get<int32_t>();
  c.source = j;
  c.validate(origin);
  return c;
}

}  // namespace

ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  if (!j.is_object()) fail("{}: config must be a JSON object", origin);
  if (!j.contains("model_type") || !j["model_type"].is_string()) fail("{}: config has no \"model_type\"", origin);
  std::string type = j["model_type"].get<std::string>();
  if (type == "llama") return parse_llama(j, origin, opts);
  fail("{}: unknown model_type '{}' (supported: llama)", origin, type);
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
  std::vector<double> inv(d_head / 2);
  for (int64_t i = 0; i < d_head / 2; ++i) inv[i] = 1.0 / std::pow(rope.theta, (2.0 * i) / d_head);
  if (rope.scaling == "linear") {
    for (double& f : inv) f /= rope.factor;
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
