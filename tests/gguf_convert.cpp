// HF checkpoints converted to GGUF as llama.cpp's convert_hf_to_gguf.py does (see gguf_convert.h).
#include "gguf_convert.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/config.h"

namespace tdyn::test {
namespace {

using Renames = std::vector<std::pair<std::string, std::string>>;

// llama.cpp's name for HF tensor `name`: "<layers>N.<from>.<part>" becomes "blk.N.<to>.<part>" for a per-layer
// (from, to) pair, "<from>.<part>" becomes "<to>.<part>" for a model-wide one; "" when nothing matches.
std::string gguf_tensor_name(const std::string& name, const std::string& layers, const Renames& per_layer,
                             const Renames& whole) {
  for (const auto& [from, to] : whole)
    if (name.starts_with(from + ".")) return to + name.substr(from.size());
  if (!name.starts_with(layers)) return "";
  const size_t dot = name.find('.', layers.size());
  if (dot == std::string::npos) return "";
  const std::string layer = name.substr(layers.size(), dot - layers.size()), rest = name.substr(dot + 1);
  for (const auto& [from, to] : per_layer)
    if (rest.starts_with(from + ".")) return "blk." + layer + "." + to + rest.substr(from.size());
  return "";
}

// The tensor under its llama.cpp name, data unchanged; a test failure when the name has no mapping.
GgufTensor renamed(const std::string& gguf_name, const TensorInfo& t) {
  if (gguf_name.empty()) ADD_FAILURE() << "no GGUF name for " << t.name;
  return {gguf_name, t.dtype, t.shape, raw_bytes(t)};
}

struct HfCheckpoint {
  nlohmann::json json;
  ModelConfig config;
  TensorStore tensors;
};
HfCheckpoint read_hf(const fs::path& dir) {
  HfCheckpoint hf{nlohmann::json::parse(read_file(dir / "config.json")), read_hf_config(dir / "config.json"), {}};
  read_safetensors(dir / "model.safetensors", hf.tensors);
  return hf;
}

// HF stores each head's q/k rows in rotate-half order: rows i and i + d_head/2 form RoPE pair i, rotated
// together by the angle pos * inv_freq[i]. GGUF (llama.cpp) rotates adjacent pairs: rows 2i and 2i + 1 form
// pair i. Moving, within every head, HF row i to row 2i and HF row i + d_head/2 to row 2i + 1 makes the
// interleaved rotation act on exactly the pairs HF rotates, with the same frequency. Permuting q and k the
// same way leaves every score q.k unchanged (a dot product does not depend on the order of its terms), so
// attention, and everything after it, is identical; v and o keep their order. This is llama.cpp's
// converter's permutation: reshape rows as [head, 2, d_head/2] and swap the last two axes.
std::string rotate_half_rows_to_interleaved(const TensorInfo& t, int64_t n_heads) {
  const int64_t rows = t.shape[0], d_head = rows / n_heads, half = d_head / 2;
  const size_t row_bytes = t.nbytes / rows;
  std::string out(t.nbytes, '\0');
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t which = 0; which < 2; ++which) {
        int64_t hf_row = h * d_head + which * half + i;
        int64_t gguf_row = h * d_head + 2 * i + which;
        std::memcpy(out.data() + gguf_row * row_bytes, t.data + hf_row * row_bytes, row_bytes);
      }
    }
  }
  return out;
}

// GPT-NeoX query_key_value rows (or bias elements) [head][q, k, v][d_head] regrouped to [q, k, v][head][d_head],
// as llama.cpp's GPTNeoXModel.modify_tensors does.
std::string per_head_qkv_to_fused(const TensorInfo& t, int64_t n_heads) {
  const int64_t rows = t.shape[0], d_head = rows / (3 * n_heads);
  const size_t row_bytes = t.nbytes / rows;
  std::string out(t.nbytes, '\0');
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t part = 0; part < 3; ++part)
      for (int64_t i = 0; i < d_head; ++i)
        std::memcpy(out.data() + ((part * n_heads + h) * d_head + i) * row_bytes,
                    t.data + ((h * 3 + part) * d_head + i) * row_bytes, row_bytes);
  return out;
}

}  // namespace

std::string raw_bytes(const TensorInfo& t) { return std::string(reinterpret_cast<const char*>(t.data), t.nbytes); }

GgufTensor transposed(const std::string& name, const TensorInfo& t) {
  EXPECT_EQ(t.dtype, DType::F32) << t.name;
  EXPECT_EQ(t.shape.size(), 2u) << t.name;
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<float> in(static_cast<size_t>(rows * cols)), out(in.size());
  std::memcpy(in.data(), t.data, t.nbytes);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  return gguf_f32_tensor(name, {cols, rows}, out.data());
}

GgufModel convert_hf_llama(const fs::path& hf_dir, const LlamaConversion& how) {
  const HfCheckpoint hf = read_hf(hf_dir);
  const ModelConfig& c = hf.config;
  const std::string& a = how.arch;
  GgufModel g;
  g.metadata = {
      {"general.architecture", GgufValue::string(a)},
      {"general.name", GgufValue::string(hf_dir.filename().string())},
      {a + ".context_length", u32(c.n_ctx)},
      {a + ".embedding_length", u32(c.d_model)},
      {a + ".block_count", u32(c.n_layers)},
      {a + ".feed_forward_length", u32(c.d_mlp)},
      {a + ".attention.head_count", u32(c.n_heads)},
      {a + ".attention.head_count_kv", u32(c.n_kv_heads)},
      {a + ".attention.layer_norm_rms_epsilon", GgufValue::float32(static_cast<float>(c.norm_eps))},
      {a + ".rope.freq_base", GgufValue::float32(static_cast<float>(c.rope.theta))},
  };
  if (a == "llama") g.metadata.push_back({"llama.rope.dimension_count", u32(c.d_head)});
  if (hf.json.contains("head_dim")) {  // as the converter writes a config's head_dim
    g.metadata.push_back({a + ".attention.key_length", u32(c.d_head)});
    g.metadata.push_back({a + ".attention.value_length", u32(c.d_head)});
  }
  if (c.bos_id) g.metadata.push_back({"tokenizer.ggml.bos_token_id", u32(*c.bos_id)});
  if (c.eos_id) g.metadata.push_back({"tokenizer.ggml.eos_token_id", u32(*c.eos_id)});
  if (how.write_vocab_size) g.metadata.push_back({a + ".vocab_size", u32(c.d_vocab)});

  const Renames per_layer = {{"input_layernorm", "attn_norm"},         {"self_attn.q_proj", "attn_q"},
                             {"self_attn.k_proj", "attn_k"},           {"self_attn.v_proj", "attn_v"},
                             {"self_attn.o_proj", "attn_output"},      {"post_attention_layernorm", "ffn_norm"},
                             {"mlp.gate_proj", "ffn_gate"},            {"mlp.up_proj", "ffn_up"},
                             {"mlp.down_proj", "ffn_down"},           {"self_attn.q_norm", "attn_q_norm"},
                             {"self_attn.k_norm", "attn_k_norm"}};
  const Renames whole = {{"model.embed_tokens", "token_embd"}, {"model.norm", "output_norm"}, {"lm_head", "output"}};
  for (const auto& name : hf.tensors.names()) {
    const TensorInfo& t = hf.tensors.get(name);
    GgufTensor out = renamed(gguf_tensor_name(name, "model.layers.", per_layer, whole), t);
    // Only the llama architecture rotates interleaved pairs; qwen2 and qwen3 keep HF's rotate-half rows.
    if (a == "llama" && name.find("q_proj") != std::string::npos) out.bytes = rotate_half_rows_to_interleaved(t, c.n_heads);
    if (a == "llama" && name.find("k_proj") != std::string::npos) out.bytes = rotate_half_rows_to_interleaved(t, c.n_kv_heads);
    if (how.quantize && t.dtype == DType::F32 && t.shape.size() == 2 &&
        t.shape.back() % dtype_layout(*how.quantize).block_elements == 0) {
      std::vector<float> values(out.bytes.size() / sizeof(float));
      std::memcpy(values.data(), out.bytes.data(), out.bytes.size());
      out = gguf_quantized_tensor(out.name, t.shape, *how.quantize, values.data());
    }
    g.tensors.push_back(std::move(out));
  }
  if (c.rope.scaling == "llama3") {
    // llama.cpp divides each default frequency by a stored factor: divisor = default / llama3-scaled.
    RopeConfig unscaled = c.rope;
    unscaled.scaling = "default";
    std::vector<double> plain = rope_inv_freq(unscaled, c.d_head), scaled = rope_inv_freq(c.rope, c.d_head);
    std::vector<float> divisors;
    for (size_t i = 0; i < plain.size(); ++i) divisors.push_back(static_cast<float>(plain[i] / scaled[i]));
    g.tensors.push_back(gguf_f32_tensor("rope_freqs.weight", {static_cast<int64_t>(divisors.size())}, divisors.data()));
  } else {
    EXPECT_EQ(c.rope.scaling, "default");
  }
  return g;
}

// convert_hf_to_gguf.py's GPT2Model: the Conv1D weights (c_attn, c_proj, c_fc) transposed, the causal-mask
// buffers dropped, c_attn kept fused as attn_qkv, and the (tied) token embedding written again as output.weight.
GgufModel convert_hf_gpt2(const fs::path& hf_dir) {
  const HfCheckpoint hf = read_hf(hf_dir);
  const ModelConfig& c = hf.config;
  GgufModel g;
  g.metadata = {{"general.architecture", GgufValue::string("gpt2")},
                {"general.name", GgufValue::string("gpt2 fixture")},
                {"gpt2.block_count", u32(c.n_layers)},
                {"gpt2.context_length", u32(c.n_ctx)},
                {"gpt2.embedding_length", u32(c.d_model)},
                {"gpt2.feed_forward_length", u32(c.d_mlp)},
                {"gpt2.attention.head_count", u32(c.n_heads)},
                {"gpt2.attention.layer_norm_epsilon", GgufValue::float32(static_cast<float>(c.norm_eps))}};
  const Renames per_layer = {{"ln_1", "attn_norm"}, {"attn.c_attn", "attn_qkv"}, {"attn.c_proj", "attn_output"},
                             {"ln_2", "ffn_norm"},  {"mlp.c_fc", "ffn_up"},      {"mlp.c_proj", "ffn_down"}};
  const Renames whole = {{"wte", "token_embd"}, {"wpe", "position_embd"}, {"ln_f", "output_norm"}};
  for (const std::string& name : hf.tensors.names()) {
    const TensorInfo& t = hf.tensors.get(name);
    const std::string n = name.starts_with("transformer.") ? name.substr(12) : name;
    if (n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias")) continue;
    if (n == "lm_head.weight") continue;  // tied: written from wte below
    const std::string out = gguf_tensor_name(n, "h.", per_layer, whole);
    const bool conv1d = out.ends_with(".weight") &&
                        (out.find("attn_qkv") != std::string::npos || out.find("attn_output") != std::string::npos ||
                         out.find("ffn_up") != std::string::npos || out.find("ffn_down") != std::string::npos);
    g.tensors.push_back(conv1d ? transposed(out, t) : renamed(out, t));
    if (out == "token_embd.weight") g.tensors.push_back(renamed("output.weight", t));
  }
  return g;
}

// convert_hf_to_gguf.py's Phi3MiniModel: tensors renamed, both fusions kept (qkv_proj as attn_qkv, gate_up_proj as
// ffn_up), rope.dimension_count int(partial_rotary_factor * d_model) / heads, the window (0 for none) written.
GgufModel convert_hf_phi3(const fs::path& hf_dir) {
  const HfCheckpoint hf = read_hf(hf_dir);
  const ModelConfig& c = hf.config;
  const double rot_pct = hf.json.value("partial_rotary_factor", 1.0);
  const int64_t window = hf.json.value("sliding_window", nlohmann::json()).is_number() ? hf.json["sliding_window"].get<int64_t>() : 0;
  GgufModel g;
  g.metadata = {
      {"general.architecture", GgufValue::string("phi3")},
      {"general.name", GgufValue::string(hf_dir.filename().string())},
      {"phi3.context_length", u32(c.n_ctx)},
      {"phi3.rope.scaling.original_context_length", u32(hf.json.value("original_max_position_embeddings", c.n_ctx))},
      {"phi3.embedding_length", u32(c.d_model)},
      {"phi3.feed_forward_length", u32(c.d_mlp)},
      {"phi3.block_count", u32(c.n_layers)},
      {"phi3.attention.head_count", u32(c.n_heads)},
      {"phi3.attention.head_count_kv", u32(c.n_kv_heads)},
      {"phi3.attention.layer_norm_rms_epsilon", GgufValue::float32(static_cast<float>(c.norm_eps))},
      {"phi3.rope.dimension_count", u32(static_cast<int64_t>(rot_pct * static_cast<double>(c.d_model)) / c.n_heads)},
      {"phi3.rope.freq_base", GgufValue::float32(static_cast<float>(c.rope.theta))},
      {"phi3.attention.sliding_window", u32(window)},
  };
  const Renames per_layer = {{"input_layernorm", "attn_norm"},    {"self_attn.qkv_proj", "attn_qkv"},
                             {"self_attn.o_proj", "attn_output"}, {"post_attention_layernorm", "ffn_norm"},
                             {"mlp.gate_up_proj", "ffn_up"},      {"mlp.down_proj", "ffn_down"}};
  const Renames whole = {{"model.embed_tokens", "token_embd"}, {"model.norm", "output_norm"}, {"lm_head", "output"}};
  for (const auto& name : hf.tensors.names())
    g.tensors.push_back(renamed(gguf_tensor_name(name, "model.layers.", per_layer, whole), hf.tensors.get(name)));
  return g;
}

// convert_hf_to_gguf.py's GPTNeoXModel: query_key_value regrouped from per-head to q | k | v, the buffers
// (attention.bias, attention.masked_bias, rotary_emb.inv_freq) dropped, embed_out written as output.weight.
GgufModel convert_hf_gpt_neox(const fs::path& hf_dir) {
  const HfCheckpoint hf = read_hf(hf_dir);
  const ModelConfig& c = hf.config;
  GgufModel g;
  g.metadata = {
      {"general.architecture", GgufValue::string("gptneox")},
      {"general.name", GgufValue::string(hf_dir.filename().string())},
      {"gptneox.context_length", u32(c.n_ctx)},
      {"gptneox.embedding_length", u32(c.d_model)},
      {"gptneox.block_count", u32(c.n_layers)},
      {"gptneox.feed_forward_length", u32(c.d_mlp)},
      {"gptneox.rope.dimension_count",
       u32(static_cast<int64_t>(hf.json.at("rotary_pct").get<double>() * static_cast<double>(c.d_model / c.n_heads)))},
      {"gptneox.attention.head_count", u32(c.n_heads)},
      {"gptneox.use_parallel_residual", GgufValue::boolean(hf.json.value("use_parallel_residual", true))},
      {"gptneox.attention.layer_norm_epsilon", GgufValue::float32(static_cast<float>(c.norm_eps))},
  };
  const Renames per_layer = {{"input_layernorm", "attn_norm"},      {"attention.query_key_value", "attn_qkv"},
                             {"attention.dense", "attn_output"},    {"post_attention_layernorm", "ffn_norm"},
                             {"mlp.dense_h_to_4h", "ffn_up"},       {"mlp.dense_4h_to_h", "ffn_down"}};
  const Renames whole = {{"gpt_neox.embed_in", "token_embd"}, {"gpt_neox.final_layer_norm", "output_norm"},
                         {"embed_out", "output"}};
  for (const auto& name : hf.tensors.names()) {
    if (name.ends_with(".attention.bias") || name.ends_with(".attention.masked_bias") || name.ends_with(".inv_freq")) continue;
    const TensorInfo& t = hf.tensors.get(name);
    GgufTensor out = renamed(gguf_tensor_name(name, "gpt_neox.layers.", per_layer, whole), t);
    if (name.find("query_key_value") != std::string::npos) out.bytes = per_head_qkv_to_fused(t, c.n_heads);
    g.tensors.push_back(std::move(out));
  }
  return g;
}

GgufModel without_key(GgufModel m, const std::string& key) {
  std::erase_if(m.metadata, [&](const auto& kv) { return kv.first == key; });
  return m;
}

GgufModel with_key(GgufModel m, const std::string& key, GgufValue value) {
  m = without_key(std::move(m), key);
  m.metadata.emplace_back(key, std::move(value));
  return m;
}

}  // namespace tdyn::test
