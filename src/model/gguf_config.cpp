#include "model/gguf_config.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_keys.h"

namespace tdyn {
namespace {

constexpr const char* kSupportedArchitectures = "llama (Llama, Mistral), qwen2, phi3, gpt2, gptneox";

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

// The settings every RMSNorm / SwiGLU / RoPE architecture of llama.cpp (llama, qwen2, phi3) writes under its
// "<arch>." keys: sizes, grouped-query heads, epsilon, RoPE base, vocabulary and head tying.
ModelConfig llama_like(const GgufKeys& keys, const TensorStore& store, const std::string& arch, const std::string& origin) {
  ModelConfig c;
  c.family = arch;
  c.format = "gguf";
  c.d_model = keys.integer(arch + ".embedding_length");
  c.n_layers = keys.integer(arch + ".block_count");
  c.d_mlp = keys.integer(arch + ".feed_forward_length");
  c.n_heads = keys.integer(arch + ".attention.head_count");
  if (c.n_heads <= 0) fail("{}: GGUF {}.attention.head_count must be positive, got {}", origin, arch, c.n_heads);
  c.n_kv_heads = keys.integer(arch + ".attention.head_count_kv", c.n_heads);
  c.d_head = keys.integer(arch + ".attention.key_length", c.d_model / c.n_heads);
  if (c.d_head <= 0) fail("{}: GGUF head dimension must be positive, got {}", origin, c.d_head);
  if (keys.has(arch + ".attention.value_length") && keys.integer(arch + ".attention.value_length") != c.d_head)
    fail("{}: GGUF {}.attention.value_length {} differs from key_length {}; tdyn needs equal key and value heads",
         origin, arch, keys.integer(arch + ".attention.value_length"), c.d_head);
  c.n_ctx = keys.integer(arch + ".context_length");
  c.norm = NormKind::RMSNorm;
  c.norm_eps = keys.real(arch + ".attention.layer_norm_rms_epsilon");
  c.activation = Activation::SiLU;
  c.gated_mlp = true;
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  c.rope.theta = keys.real(arch + ".rope.freq_base", 10000.0);
  c.d_vocab = vocab_size(keys, store, arch, origin);
  c.tied_embeddings = !store.contains("output.weight");
  return c;
}

// <arch>.rope.dimension_count (default: the whole head): RoPE over the first that many dimensions of each head,
// as rotate-half pairs (llama.cpp's NEOX rope type, which its qwen2, phi3 and gptneox use), the rest passing
// through unrotated.
void rotate_half_rope(const GgufKeys& keys, const std::string& arch, ModelConfig& c, const std::string& origin) {
  const std::string key = arch + ".rope.dimension_count";
  const int64_t dims = keys.integer(key, c.d_head);
  if (dims < 0 || dims > c.d_head || dims % 2 != 0)
    fail("{}: GGUF {} is {}; expected an even number from 0 to the head dimension {}", origin, key, dims, c.d_head);
  c.rope.style = dims == 0 ? RopeStyle::None : RopeStyle::RotateHalf;
  c.rope.partial_rotary_factor = static_cast<double>(dims) / static_cast<double>(c.d_head);
  if (c.rope.rotary_dim(c.d_head) != dims)
    fail("{}: GGUF {} {} cannot be expressed as a fraction of the {}-dim head", origin, key, dims, c.d_head);
}

// <arch>.rope.scaling.type other than none (e.g. Qwen2's YaRN) is refused: tdyn reads RoPE scaling from GGUF for
// the llama architecture only.
void refuse_rope_scaling(const GgufKeys& keys, const std::string& arch, const std::string& origin) {
  const std::string key = arch + ".rope.scaling.type";
  if (keys.has(key) && keys.text(key) != "none")
    fail("{}: GGUF {} '{}' is not supported (RoPE scaling is read for the llama architecture only)", origin, key,
         keys.text(key));
}

// Llama-architecture GGUF: the keys llama.cpp's converter writes for LlamaForCausalLM and MistralForCausalLM
// (which it writes as "llama", without Mistral's sliding window).
ModelConfig parse_llama(const GgufKeys& keys, const TensorStore& store, const std::string& origin) {
  if (keys.integer("llama.expert_count", 0) > 0)
    fail("{}: GGUF llama model with {} experts: mixture-of-experts is not supported", origin, keys.integer("llama.expert_count"));
  ModelConfig c = llama_like(keys, store, "llama", origin);
  // llama.cpp's converter permutes HF q/k rows back to adjacent (2i, 2i+1) RoPE pairs.
  c.rope.style = RopeStyle::Interleaved;
  int64_t rotary_dims = keys.integer("llama.rope.dimension_count", c.d_head);
  if (rotary_dims != c.d_head)
    fail("{}: GGUF llama.rope.dimension_count is {} but the head dimension is {}: partial rotary embeddings are not "
         "supported", origin, rotary_dims, c.d_head);
  parse_rope_scaling(keys, store, c, origin);
  // Biases are optional in llama.cpp's llama architecture; their presence in layer 0 decides.
  c.attn_qkv_bias = store.contains("blk.0.attn_q.bias");
  c.attn_o_bias = store.contains("blk.0.attn_output.bias");
  c.mlp_bias = store.contains("blk.0.ffn_up.bias");
  return c;
}

// Qwen2 as llama.cpp's converter writes Qwen2ForCausalLM: Llama's tensors plus q/k/v biases, rotate-half RoPE
// (no q/k permutation), the tied head left out. llama.cpp keeps no sliding window for qwen2: every layer
// attends to the whole context.
ModelConfig parse_qwen2(const GgufKeys& keys, const TensorStore& store, const std::string& origin) {
  ModelConfig c = llama_like(keys, store, "qwen2", origin);
  rotate_half_rope(keys, "qwen2", c, origin);
  refuse_rope_scaling(keys, "qwen2", origin);
  if (c.rope.partial_rotary_factor != 1.0)
    fail("{}: GGUF qwen2.rope.dimension_count is {} but the head dimension is {}: Qwen2 rotates whole heads", origin,
         c.rope.rotary_dim(c.d_head), c.d_head);
  c.attn_qkv_bias = true;
  return c;
}

// Phi-3 as llama.cpp's converter writes Phi3ForCausalLM: qkv_proj kept fused as attn_qkv (q | k | v rows) and
// gate_up_proj as ffn_up (gate | up rows), partial rotate-half RoPE, a sliding window on every layer
// (phi3.attention.sliding_window, 0 for none). LongRoPE models carry rope_factors_long/short tensors: refused.
ModelConfig parse_phi3(const GgufKeys& keys, const TensorStore& store, const std::string& origin) {
  for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (store.contains(name))
      fail("{}: GGUF phi3 tensor '{}' (Phi-3 LongRoPE) is not supported: its short/long frequency factors and attention "
           "scaling are not implemented", origin, name);
  }
  ModelConfig c = llama_like(keys, store, "phi3", origin);
  rotate_half_rope(keys, "phi3", c, origin);
  refuse_rope_scaling(keys, "phi3", origin);
  const int64_t window = keys.integer("phi3.attention.sliding_window", 0);
  if (window < 0) fail("{}: GGUF phi3.attention.sliding_window must be 0 (none) or positive, got {}", origin, window);
  if (window > 0) {
    c.layers.resize(c.n_layers);
    for (auto& layer : c.layers) layer.sliding_window = window;
  }
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

// The settings llama.cpp's LayerNorm / GELU architectures with biases everywhere (gpt2, gptneox) write under their
// "<arch>." keys: sizes, heads, epsilon, vocabulary and head tying.
ModelConfig gpt_like(const GgufKeys& keys, const TensorStore& store, const std::string& arch, const std::string& family,
                     const std::string& origin) {
  ModelConfig c;
  c.family = family;
  c.format = "gguf";
  c.d_model = keys.integer(arch + ".embedding_length");
  c.n_layers = keys.integer(arch + ".block_count");
  c.d_mlp = keys.integer(arch + ".feed_forward_length");
  c.n_ctx = keys.integer(arch + ".context_length");
  plain_heads(keys, arch, c, origin);
  c.norm = NormKind::LayerNorm;
  c.norm_eps = keys.real(arch + ".attention.layer_norm_epsilon");
  c.gated_mlp = false;
  c.attn_qkv_bias = c.attn_o_bias = c.mlp_bias = true;
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  c.d_vocab = vocab_size(keys, store, arch, origin);
  c.tied_embeddings = !store.contains("output.weight");
  return c;
}

// GPT-2 as llama.cpp's converter writes GPT2LMHeadModel: gelu (tanh approximation, HF "gelu_new", which is what
// llama.cpp's GELU computes), learned positions.
ModelConfig parse_gpt2(const GgufKeys& keys, const TensorStore& store, const std::string& origin) {
  ModelConfig c = gpt_like(keys, store, "gpt2", "gpt2", origin);
  c.activation = Activation::GeluTanh;
  c.learned_positions = true;
  return c;
}

// GPT-NeoX / Pythia as llama.cpp's converter writes GPTNeoXForCausalLM: query_key_value regrouped from per-head
// [q_h; k_h; v_h] to q | k | v rows (attn_qkv), partial rotate-half RoPE, the parallel block flag. HF's GPT-NeoX
// uses the exact (erf) GELU, computed here as in the checkpoint's own definition (llama.cpp computes the tanh
// approximation for this architecture).
ModelConfig parse_gptneox(const GgufKeys& keys, const TensorStore& store, const std::string& origin) {
  ModelConfig c = gpt_like(keys, store, "gptneox", "gpt_neox", origin);
  c.activation = Activation::GeluErf;
  c.parallel_residual = keys.boolean("gptneox.use_parallel_residual");
  c.rope.theta = keys.real("gptneox.rope.freq_base", 10000.0);
  rotate_half_rope(keys, "gptneox", c, origin);
  refuse_rope_scaling(keys, "gptneox", origin);
  return c;
}

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
  std::string arch = keys.text("general.architecture");
  ModelConfig c;
  if (arch == "llama") c = parse_llama(keys, store, origin);
  else if (arch == "gpt2") c = parse_gpt2(keys, store, origin);
  else if (arch == "qwen2") c = parse_qwen2(keys, store, origin);
  else if (arch == "phi3") c = parse_phi3(keys, store, origin);
  else if (arch == "gptneox") c = parse_gptneox(keys, store, origin);
  else if (const char* why = refusal_reason(arch)) fail("{}: GGUF architecture '{}' is not supported: {}", origin, arch, why);
  else fail("{}: GGUF architecture '{}' is not supported (supported: {})", origin, arch, kSupportedArchitectures);
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
