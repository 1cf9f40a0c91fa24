// Phi-3: Llama with fused q|k|v and gate|up projections, used in place.
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

// GGUF architecture "phi3", as llama.cpp's converter writes Phi3ForCausalLM: qkv_proj kept fused as attn_qkv
// (q | k | v rows) and gate_up_proj as ffn_up (gate | up rows), partial rotate-half RoPE, a sliding window on every
// layer (phi3.attention.sliding_window, 0 for none). LongRoPE models carry rope_factors_long/short tensors: refused.
ModelConfig parse_gguf_phi3(const GgufKeys& keys, const TensorStore& store) {
  const std::string& origin = keys.origin();
  for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (store.contains(name))
      fail("{}: GGUF phi3 tensor '{}' (Phi-3 LongRoPE) is not supported: its short/long frequency factors and attention "
           "scaling are not implemented", origin, name);
  }
  ModelConfig c = gguf_settings::llama_like(keys, store, "phi3");
  gguf_settings::rotate_half_rope(keys, "phi3", c);
  gguf_settings::refuse_rope_scaling(keys, "phi3");
  const int64_t window = keys.integer("phi3.attention.sliding_window", 0);
  if (window < 0) fail("{}: GGUF phi3.attention.sliding_window must be 0 (none) or positive, got {}", origin, window);
  window_every_layer(c, window);
  return c;
}

// Phi-3 (Phi3ForCausalLM): Llama with q|k|v fused into one qkv projection and gate|up into one MLP input
// projection, both along the output rows; every part is used in place as a row slice.
struct Phi3Names {
  std::string embed, attn_norm, qkv, o, mlp_norm, gate_up, down, final_norm, unembed;
};

FamilyTable phi3_table(const std::string& format, const Phi3Names& n, FamilyTable t) {
  t.family = "phi3";
  t.format = format;
  auto& s = t.tensors;
  auto qkv_shape = [](C c, int64_t l) { return Shape{(c.n_heads + 2 * c.n_kv_heads) * c.layer(l).d_head, c.d_model}; };
  auto qkv_sizes = [](C c, int64_t l) {
    const int64_t hd = c.layer(l).d_head;
    return std::vector<int64_t>{c.n_heads * hd, c.n_kv_heads * hd, c.n_kv_heads * hd};
  };
  auto gate_up_shape = [](C c, int64_t l) { return Shape{2 * c.layer(l).d_mlp, c.d_model}; };
  s.push_back(weight(Role::Embed, n.embed, embed_shape));
  s.push_back(vec(Role::AttnNorm, n.attn_norm, model_vec));
  const Role qkv[3] = {Role::AttnQ, Role::AttnK, Role::AttnV};
  for (int i = 0; i < 3; ++i) {
    TensorSpec w = weight(qkv[i], n.qkv, qkv_shape);
    w.fused_index = i;
    w.fused_count = 3;
    w.fused_sizes = qkv_sizes;
    s.push_back(w);
  }
  s.push_back(weight(Role::AttnO, n.o, o_shape));
  s.push_back(vec(Role::MlpNorm, n.mlp_norm, model_vec));
  const Role gate_up[2] = {Role::MlpGate, Role::MlpUp};  // Phi3MLP: gate, up = gate_up_proj(x).chunk(2)
  for (int i = 0; i < 2; ++i) {
    TensorSpec w = weight(gate_up[i], n.gate_up, gate_up_shape);
    w.fused_index = i;
    w.fused_count = 2;
    s.push_back(w);
  }
  s.push_back(weight(Role::MlpDown, n.down, down_shape));
  s.push_back(vec(Role::FinalNorm, n.final_norm, model_vec));
  s.push_back(weight(Role::Unembed, n.unembed, embed_shape, Layout::OutIn, untied));
  return t;
}

// Hugging Face names; llama.cpp's converter keeps both fusions, as attn_qkv and ffn_up (gate | up rows).
FamilyTable hf_phi3_table() {
  const std::string h = "{p}layers.{l}.";
  return phi3_table("hf",
                    {"{p}embed_tokens.weight", h + "input_layernorm.weight", h + "self_attn.qkv_proj.weight",
                     h + "self_attn.o_proj.weight", h + "post_attention_layernorm.weight", h + "mlp.gate_up_proj.weight",
                     h + "mlp.down_proj.weight", "{p}norm.weight", "lm_head.weight"},
                    {.ignored_suffixes = {".rotary_emb.inv_freq"}, .prefixes = {"model."}});
}

FamilyTable gguf_phi3_table() {
  const std::string h = "blk.{l}.";
  return phi3_table("gguf",
                    {"token_embd.weight", h + "attn_norm.weight", h + "attn_qkv.weight", h + "attn_output.weight",
                     h + "ffn_norm.weight", h + "ffn_up.weight", h + "ffn_down.weight", "output_norm.weight",
                     "output.weight"},
                    {});
}

}  // namespace

FamilyDefinition phi3_family() {
  FamilyDefinition f;
  f.model_types = {{"phi3", parse_phi3}};
  f.gguf_architectures = {{"phi3", parse_gguf_phi3}};
  auto& tables = f.tables;
  tables.push_back(hf_phi3_table());
  tables.push_back(gguf_phi3_table());
  return f;
}

}  // namespace tdyn
