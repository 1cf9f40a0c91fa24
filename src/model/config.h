// The model description as data: one ModelConfig for every family and format. Parsers turn HF config.json,
// a llama2.c header or GGUF metadata into this struct; the forward pass reads only these fields.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/files.h"

namespace tdyn {

enum class NormKind { RMSNorm, LayerNorm };
enum class Activation { SiLU, GeluTanh, GeluErf, ReLU };
// RoPE pair layout: HF rotates halves (i, i + d_head/2); llama2.c and GGUF rotate adjacent pairs (2i, 2i+1).
enum class RopeStyle { None, RotateHalf, Interleaved };

const char* to_string(NormKind k);
const char* to_string(Activation a);
const char* to_string(RopeStyle s);

struct RopeConfig {
  RopeStyle style = RopeStyle::None;
  double theta = 10000.0;
  // rope_scaling: "default" (none) or "llama3" (wavelength-dependent frequency scaling of Llama 3.1).
  std::string scaling = "default";
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position = 0;
  // Per-frequency divisors stored with the weights (GGUF rope_freqs.weight, llama.cpp's form of llama3
  // scaling); empty when absent. Applied after `scaling`.
  std::vector<double> freq_divisors;
};

struct ModelConfig {
  std::string family;  // "llama" (more families add their own name)
  std::string format;  // "hf", "llama2c", "gguf"
  int64_t d_model = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, d_head = 0, d_mlp = 0, d_vocab = 0;
  int64_t n_ctx = 0;  // maximum positions (max_position_embeddings / seq_len)
  NormKind norm = NormKind::RMSNorm;
  double norm_eps = 1e-5;
  Activation activation = Activation::SiLU;
  bool gated_mlp = true;  // SwiGLU: down(act(gate x) * up x)
  bool attn_qkv_bias = false, attn_o_bias = false, mlp_bias = false;
  double attn_scale = 0;  // multiplies q.k; 1/sqrt(d_head) unless the family says otherwise
  bool causal = true;
  RopeConfig rope;
  bool tied_embeddings = false;
  std::optional<int32_t> bos_id, eos_id;
  nlohmann::json source;  // the raw description it was parsed from, for `tdyn info`

  int64_t q_dim() const { return n_heads * d_head; }
  int64_t kv_dim() const { return n_kv_heads * d_head; }
  // Checks internal consistency (positive sizes, heads divide, GQA groups); throws Error naming `origin`.
  void validate(const std::string& origin) const;
};

struct ConfigParseOptions {
  bool allow_unknown_keys = false;  // unknown config.json keys are an error unless allowed (then a warning)
};

// Parses a Hugging Face config.json (dispatching on model_type).
ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts = {});
ModelConfig read_hf_config(const fs::path& config_json, const ConfigParseOptions& opts = {});

// RoPE inverse frequencies [d_head/2] after scaling, in float64.
std::vector<double> rope_inv_freq(const RopeConfig& rope, int64_t d_head);

}  // namespace tdyn
