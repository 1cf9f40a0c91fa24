#include "model/gguf_config.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/families.h"

namespace tdyn {
namespace gguf_settings {

int64_t vocab_size(const GgufKeys& keys, const TensorStore& store, const std::string& arch) {
  if (keys.has(arch + ".vocab_size")) return keys.integer(arch + ".vocab_size");
  const TensorInfo* embed = store.find("token_embd.weight");
  if (!embed || embed->shape.size() != 2)
    fail("{}: GGUF has neither {}.vocab_size nor a 2-D token_embd.weight to take the vocabulary size from",
         keys.origin(), arch);
  return embed->shape[0];
}

namespace {

// What every architecture writes alike: sizes, head counts, context, vocabulary and head tying.
ModelConfig sizes(const GgufKeys& keys, const TensorStore& store, const std::string& arch, const std::string& family) {
  ModelConfig c;
  c.family = family;
  c.format = "gguf";
  c.d_model = keys.integer(arch + ".embedding_length");
  c.n_layers = keys.integer(arch + ".block_count");
  c.d_mlp = keys.integer(arch + ".feed_forward_length");
  c.n_ctx = keys.integer(arch + ".context_length");
  c.n_heads = keys.integer(arch + ".attention.head_count");
  if (c.n_heads <= 0) fail("{}: GGUF {}.attention.head_count must be positive, got {}", keys.origin(), arch, c.n_heads);
  c.n_kv_heads = keys.integer(arch + ".attention.head_count_kv", c.n_heads);
  c.d_vocab = vocab_size(keys, store, arch);
  c.tied_embeddings = !store.contains("output.weight");
  return c;
}

}  // namespace

ModelConfig llama_like(const GgufKeys& keys, const TensorStore& store, const std::string& arch) {
  const std::string& origin = keys.origin();
  ModelConfig c = sizes(keys, store, arch, arch);
  c.d_head = keys.integer(arch + ".attention.key_length", c.d_model / c.n_heads);
  if (c.d_head <= 0) fail("{}: GGUF head dimension must be positive, got {}", origin, c.d_head);
  if (keys.has(arch + ".attention.value_length") && keys.integer(arch + ".attention.value_length") != c.d_head)
    fail("{}: GGUF {}.attention.value_length {} differs from key_length {}; tdyn needs equal key and value heads",
         origin, arch, keys.integer(arch + ".attention.value_length"), c.d_head);
  c.norm = NormKind::RMSNorm;
  c.norm_eps = keys.real(arch + ".attention.layer_norm_rms_epsilon");
  c.activation = Activation::SiLU;
  c.gated_mlp = true;
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  c.rope.theta = keys.real(arch + ".rope.freq_base", 10000.0);
  return c;
}

ModelConfig gpt_like(const GgufKeys& keys, const TensorStore& store, const std::string& arch, const std::string& family) {
  const std::string& origin = keys.origin();
  ModelConfig c = sizes(keys, store, arch, family);
  if (c.n_kv_heads != c.n_heads)
    fail("{}: GGUF {}.attention.head_count_kv {} differs from head_count {}; {} has no grouped-query attention", origin,
         arch, c.n_kv_heads, c.n_heads, arch);
  c.d_head = c.d_model / c.n_heads;
  if (c.d_head * c.n_heads != c.d_model)
    fail("{}: GGUF {}.embedding_length {} is not a multiple of the head count {}", origin, arch, c.d_model, c.n_heads);
  c.norm = NormKind::LayerNorm;
  c.norm_eps = keys.real(arch + ".attention.layer_norm_epsilon");
  c.gated_mlp = false;
  c.attn_qkv_bias = c.attn_o_bias = c.mlp_bias = true;
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  return c;
}

void rotate_half_rope(const GgufKeys& keys, const std::string& arch, ModelConfig& c) {
  const std::string key = arch + ".rope.dimension_count";
  const int64_t dims = keys.integer(key, c.d_head);
  if (dims < 0 || dims > c.d_head || dims % 2 != 0)
    fail("{}: GGUF {} is {}; expected an even number from 0 to the head dimension {}", keys.origin(), key, dims, c.d_head);
  c.rope.style = dims == 0 ? RopeStyle::None : RopeStyle::RotateHalf;
  c.rope.partial_rotary_factor = static_cast<double>(dims) / static_cast<double>(c.d_head);
  if (c.rope.rotary_dim(c.d_head) != dims)
    fail("{}: GGUF {} {} cannot be expressed as a fraction of the {}-dim head", keys.origin(), key, dims, c.d_head);
}

void refuse_rope_scaling(const GgufKeys& keys, const std::string& arch) {
  const std::string key = arch + ".rope.scaling.type";
  if (keys.has(key) && keys.text(key) != "none")
    fail("{}: GGUF {} '{}' is not supported (RoPE scaling is read for the llama architecture only)", keys.origin(), key,
         keys.text(key));
}

}  // namespace gguf_settings

namespace {

// Architectures llama.cpp defines for the families around tdyn's whose GGUF files tdyn cannot run, and why.
const char* refusal_reason(const std::string& arch) {
  if (arch == "bert" || arch == "nomic-bert")
    return "llama.cpp's converter writes BERT as an embedding model, without the masked-LM head (cls.predictions.*) "
           "that tdyn's BERT logits need";
  if (arch == "gemma" || arch == "gemma2" || arch == "gemma3" || arch == "gemma3n")
    return "tdyn runs Gemma 4 only, from Hugging Face files; Gemma 1-3 have no forward pass here";
  if (arch == "olmo" || arch == "olmo2")
    return "tdyn runs OLMo 3 only, from Hugging Face files: its per-layer-type RoPE (linear scaling on the "
           "full-attention layers only) has no GGUF form, as a GGUF file holds one rope scaling per architecture";
  return nullptr;
}

}  // namespace

ModelConfig gguf_config(const TensorStore& store, const std::string& origin) {
  GgufKeys keys(store.metadata(), origin);
  const std::string arch = keys.text("general.architecture");
  std::string supported;
  const GgufConfigParser parse = find_parser(&FamilyDefinition::gguf_architectures, arch, supported);
  if (!parse) {
    if (const char* why = refusal_reason(arch)) fail("{}: GGUF architecture '{}' is not supported: {}", origin, arch, why);
    fail("{}: GGUF architecture '{}' is not supported (supported: {}; Mistral is written as llama)", origin, arch,
         supported);
  }
  ModelConfig c = parse(keys, store);
  if (keys.has("tokenizer.ggml.bos_token_id")) c.bos_id = static_cast<int32_t>(keys.integer("tokenizer.ggml.bos_token_id"));
  if (keys.has("tokenizer.ggml.eos_token_id")) c.eos_id = static_cast<int32_t>(keys.integer("tokenizer.ggml.eos_token_id"));
  // The description for `tdyn info`: every key except long arrays (the tokenizer's vocabulary, scores and
  // merges), which stay in the store's metadata.
  c.source = nlohmann::json::object();
  for (const auto& [key, value] : store.metadata().items()) {
    if (!value.is_array() || value.size() <= 64) (*c.source)[key] = value;
  }
  c.validate(origin);
  return c;
}

}  // namespace tdyn
