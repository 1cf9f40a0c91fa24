#include "model/gguf_config.h"

#include <cmath>

#include "core/error.h"

namespace tdyn {
namespace {

// Typed access to the GGUF metadata (JSON in the store) with errors naming the key and the file.
class GgufKeys {
 public:
  GgufKeys(const nlohmann::json& metadata, std::string origin) : m_(metadata), origin_(std::move(origin)) {}

  bool has(const std::string& key) const { return m_.contains(key); }

  int64_t integer(const std::string& key) const {
    const auto& v = required(key);
    if (!v.is_number_integer()) fail("{}: GGUF key '{}' must be an integer, got {}", origin_, key, v.dump());
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail("{}: GGUF key '{}' = {} is out of range", origin_, key, v.dump());
    return v.get<int64_t>();
  }
  int64_t integer(const std::string& key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }

  double real(const std::string& key) const {
    const auto& v = required(key);
    if (!v.is_number()) fail("{}: GGUF key '{}' must be a number, got {}", origin_, key, v.dump());
    return v.get<double>();
  }
  double real(const std::string& key, double fallback) const { return has(key) ? real(key) : fallback; }

  std::string text(const std::string& key) const {
    const auto& v = required(key);
    if (!v.is_string()) fail("{}: GGUF key '{}' must be a string, got {}", origin_, key, v.dump());
    return v.get<std::string>();
  }

 private:
  const nlohmann::json& required(const std::string& key) const {
    if (!m_.contains(key)) fail("{}: GGUF metadata has no '{}'", origin_, key);
    return m_[key];
  }

  const nlohmann::json& m_;
  std::string origin_;
};

// RoPE frequency scaling: llama.rope.scaling.* (none / linear), the legacy llama.rope.scale_linear, and the
// rope_freqs.weight tensor through which llama.cpp's converter stores Llama 3.1 scaling as one divisor per
// frequency pair.
void parse_rope_scaling(const GgufKeys& keys, const TensorStore& store, ModelConfig& c, const std::string& origin) {
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

// The vocabulary size: <arch>.vocab_size, else the rows of token_embd.weight.
int64_t vocab_size(const GgufKeys& keys, const TensorStore& store, const std::string& arch, const std::string& origin) {
  if (keys.has(arch + ".vocab_size")) return keys.integer(arch + ".vocab_size");
  const TensorInfo* embed = store.find("token_embd.weight");
  if (!embed || embed->shape.size() != 2)
    fail("{}: GGUF has neither {}.vocab_size nor a 2-D token_embd.weight to take the vocabulary size from", origin, arch);
  return embed->shape[0];
}

// Llama-architecture GGUF: the keys llama.cpp's converter writes for LlamaForCausalLM.
ModelConfig parse_llama(const GgufKeys& keys, const TensorStore& store, const std::string& origin) {
  if (keys.integer("llama.expert_count", 0) > 0)
    fail("{}: GGUF llama model with {} experts: mixture-of-experts is not supported", origin, keys.integer("llama.expert_count"));
  ModelConfig c;
  c.family = "llama";
  c.format = "gguf";
  c.d_model = keys.integer("llama.embedding_length");
  c.n_layers = keys.integer("llama.block_count");
  c.d_mlp = keys.integer("llama.feed_forward_length");
  c.n_heads = keys.integer("llama.attention.head_count");
  if (c.n_heads <= 0) fail("{}: GGUF llama.attention.head_count must be positive, got {}", origin, c.n_heads);
  c.n_kv_heads = keys.integer("llama.attention.head_count_kv", c.n_heads);
  c.d_head = keys.integer("llama.attention.key_length", c.d_model / c.n_heads);
  if (keys.has("llama.attention.value_length") && keys.integer("llama.attention.value_length") != c.d_head)
    fail("{}: GGUF llama.attention.value_length {} differs from key_length {}; tdyn needs equal key and value heads",
         origin, keys.integer("llama.attention.value_length"), c.d_head);
  c.n_ctx = keys.integer("llama.context_length");
  c.norm = NormKind::RMSNorm;
  c.norm_eps = keys.real("llama.attention.layer_norm_rms_epsilon");
  c.activation = Activation::SiLU;
  c.gated_mlp = true;
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));

  // llama.cpp's converter permutes HF q/k rows back to adjacent (2i, 2i+1) RoPE pairs.
  c.rope.style = RopeStyle::Interleaved;
  c.rope.theta = keys.real("llama.rope.freq_base", 10000.0);
  int64_t rotary_dims = keys.integer("llama.rope.dimension_count", c.d_head);
  if (rotary_dims != c.d_head)
    fail("{}: GGUF llama.rope.dimension_count is {} but the head dimension is {}: partial rotary embeddings are not "
         "supported", origin, rotary_dims, c.d_head);
  if (c.d_head <= 0) fail("{}: GGUF head dimension must be positive, got {}", origin, c.d_head);
  parse_rope_scaling(keys, store, c, origin);

  c.d_vocab = vocab_size(keys, store, "llama", origin);
  c.tied_embeddings = !store.contains("output.weight");
  // Biases are optional in llama.cpp's llama architecture; their presence in layer 0 decides.
  c.attn_qkv_bias = store.contains("blk.0.attn_q.bias");
  c.attn_o_bias = store.contains("blk.0.attn_output.bias");
  c.mlp_bias = store.contains("blk.0.ffn_up.bias");

  return c;
}

// Attention heads of an architecture whose keys and values have as many heads as its queries.
void plain_heads(const GgufKeys& keys, const std::string& arch, ModelConfig& c, const std::string& origin) {
  c.n_heads = keys.integer(arch + ".attention.head_count");
  if (c.n_heads <= 0) fail("{}: GGUF {}.attention.head_count must be positive, got {}", origin, arch, c.n_heads);
  c.n_kv_heads = keys.integer(arch + ".attention.head_count_kv", c.n_heads);
  if (c.n_kv_heads != c.n_heads)
    fail("{}: GGUF {}.attention.head_count_kv {} differs from head_count {}; {} has no grouped-query attention", origin,
         arch, c.n_kv_heads, c.n_heads, arch);
  c.d_head = c.d_model / c.n_heads;
  if (c.d_head * c.n_heads != c.d_model)
    fail("{}: GGUF {}.embedding_length {} is not a multiple of the head count {}", origin, arch, c.d_model, c.n_heads);
}

// GPT-2 as llama.cpp's converter writes GPT2LMHeadModel: LayerNorm, gelu (tanh approximation, HF "gelu_new", which
// is what llama.cpp's GELU computes), learned positions, biases everywhere.
ModelConfig parse_gpt2(const GgufKeys& keys, const TensorStore& store, const std::string& origin) {
  ModelConfig c;
  c.family = "gpt2";
  c.format = "gguf";
  c.d_model = keys.integer("gpt2.embedding_length");
  c.n_layers = keys.integer("gpt2.block_count");
  c.d_mlp = keys.integer("gpt2.feed_forward_length");
  c.n_ctx = keys.integer("gpt2.context_length");
  plain_heads(keys, "gpt2", c, origin);
  c.norm = NormKind::LayerNorm;
  c.norm_eps = keys.real("gpt2.attention.layer_norm_epsilon");
  c.activation = Activation::GeluTanh;
  c.gated_mlp = false;
  c.attn_qkv_bias = c.attn_o_bias = c.mlp_bias = true;
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  c.learned_positions = true;
  c.d_vocab = vocab_size(keys, store, "gpt2", origin);
  c.tied_embeddings = !store.contains("output.weight");
  return c;
}

}  // namespace

ModelConfig gguf_config(const TensorStore& store, const std::string& origin) {
  GgufKeys keys(store.metadata(), origin);
  std::string arch = keys.text("general.architecture");
  ModelConfig c;
  if (arch == "llama") c = parse_llama(keys, store, origin);
  else if (arch == "gpt2") c = parse_gpt2(keys, store, origin);
  else fail("{}: GGUF architecture '{}' is not supported (supported: llama, gpt2)", origin, arch);
  if (keys.has("tokenizer.ggml.bos_token_id")) c.bos_id = static_cast<int32_t>(keys.integer("tokenizer.ggml.bos_token_id"));
  if (keys.has("tokenizer.ggml.eos_token_id")) c.eos_id = static_cast<int32_t>(keys.integer("tokenizer.ggml.eos_token_id"));
  // The description for `tdyn info`: every key except long arrays (the tokenizer's vocabulary, scores and
  // merges), which stay in the store's metadata.
  c.source = nlohmann::json::object();
  for (const auto& [key, value] : store.metadata().items()) {
    if (!value.is_array() || value.size() <= 64) c.source[key] = value;
  }
  c.validate(origin);
  return c;
}

}  // namespace tdyn
