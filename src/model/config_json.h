// Reading a Hugging Face config.json, shared by every family's parser (model/families/): typed keys with
// HF's defaults and errors that name the file and key, the check for keys tdyn does not know, and the settings
// several families read the same way (activations, RoPE scaling, sliding windows, Llama-style decoders).
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"

namespace tdyn::config_json {

// GPT-2 / GPT-Neo sequence-classification ("summary") head settings: unused by the LM forward pass.
extern const std::set<std::string> kSummaryKeys;

template <typename T>
T get_or(const nlohmann::json& j, const char* key, T fallback, const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: config key '{}' has the wrong type (value {})", origin, key, j[key].dump());
  }
}

int64_t get_int(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& origin);
// Per-layer settings are built before validate() runs, so the layer count is bounded as it is read: a corrupt
// count must not drive a huge allocation or loop.
int64_t get_layer_count(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& origin);
// For keys whose HF default tdyn cannot vouch for: absent is an error rather than a guess.
const nlohmann::json& required(const nlohmann::json& j, const char* key, const std::string& origin);
int64_t required_int(const nlohmann::json& j, const char* key, const std::string& origin);

std::set<std::string> with(std::set<std::string> a, const std::set<std::string>& b);
// Keys outside `family_keys` and those every PretrainedConfig may carry are an error (a warning with
// opts.allow_unknown_keys): tdyn cannot know whether they change the computation.
void check_keys(const nlohmann::json& j, const std::set<std::string>& family_keys, const std::string& origin,
                const ConfigParseOptions& opts);

// A flag whose non-default value changes the computation in a way tdyn does not implement.
template <typename T>
void require_value(const nlohmann::json& j, const char* key, T supported, const std::string& origin, const char* what) {
  if (!j.contains(key) || j[key].is_null()) return;
  T got = get_or<T>(j, key, supported, origin);
  if (got != supported) fail("{}: config key '{}' = {} is not supported ({})", origin, key, j[key].dump(), what);
}

Activation parse_activation(const std::string& name, const std::string& key, const std::string& origin);
// rope_scaling (transformers <= 4.x) or rope_parameters (5.x), flat form. Unsupported types are errors.
void parse_rope_object(const nlohmann::json& s, RopeConfig& rope, const std::string& origin);
void parse_rope_scaling(const nlohmann::json& j, RopeConfig& rope, const std::string& origin);
void parse_token_ids(const nlohmann::json& j, ModelConfig& c);
// Sliding-window layers from HF `layer_types` ("sliding_attention" / "full_attention").
std::vector<std::string> parse_layer_types(const nlohmann::json& j, int64_t n_layers, const std::string& origin);

// Settings shared by the Llama-style decoders Mistral, Qwen2 and Phi-3: pre-RMSNorm, gated MLP, rotate-half
// RoPE, grouped-query attention scaled by 1/sqrt(head_dim). Defaults are those of each HF config class.
struct DecoderDefaults {
  int64_t vocab, hidden, mlp, layers, heads;
  int64_t kv_heads;  // 0: num_attention_heads
  int64_t positions;
  double eps;
  int64_t head_dim = 0;  // head_dim when absent; 0: hidden_size / num_attention_heads
};

ModelConfig llama_style(const nlohmann::json& j, const char* family, const DecoderDefaults& d, const std::string& origin);
// A sliding-window size key: `fallback` when absent, 0 (no window) when null, else a positive integer.
int64_t window_key(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& origin);
// One sliding window on every layer (Mistral, Phi-3: the attention passes config.sliding_window to all layers).
void window_every_layer(ModelConfig& c, int64_t window);

}  // namespace tdyn::config_json
