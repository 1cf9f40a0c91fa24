#include "model/families.h"

#include <set>

#include "core/error.h"

namespace tdyn {
namespace {

using C = const ModelConfig&;

// Shapes shared by every Llama-style table, in nn.Linear layout.
Shape embed_shape(C c) { return {c.d_vocab, c.d_model}; }
Shape model_vec(C c) { return {c.d_model}; }
Shape q_shape(C c) { return {c.q_dim(), c.d_model}; }
Shape kv_shape(C c) { return {c.kv_dim(), c.d_model}; }
Shape o_shape(C c) { return {c.d_model, c.q_dim()}; }
Shape up_shape(C c) { return {c.d_mlp, c.d_model}; }
Shape down_shape(C c) { return {c.d_model, c.d_mlp}; }
Shape q_vec(C c) { return {c.q_dim()}; }
Shape kv_vec(C c) { return {c.kv_dim()}; }
Shape mlp_vec(C c) { return {c.d_mlp}; }
bool untied(C c) { return !c.tied_embeddings; }
bool qkv_bias(C c) { return c.attn_qkv_bias; }
bool o_bias(C c) { return c.attn_o_bias; }
bool mlp_bias(C c) { return c.mlp_bias; }

struct LlamaNames {
  std::string embed, attn_norm, q, k, v, o, mlp_norm, gate, up, down, final_norm, unembed, bias_suffix, weight_suffix;
};

FamilyTable llama_table(const std::string& format, const LlamaNames& n, std::vector<std::string> ignored) {
  const std::string& W = n.weight_suffix;
  const std::string& B = n.bias_suffix;
  FamilyTable t{"llama", format, {}, std::move(ignored)};
  t.tensors = {
      {Role::Embed, Part::Weight, n.embed + W, embed_shape, Layout::OutIn, nullptr},
      {Role::AttnNorm, Part::Weight, n.attn_norm + W, model_vec, Layout::Vector, nullptr},
      {Role::AttnQ, Part::Weight, n.q + W, q_shape, Layout::OutIn, nullptr},
      {Role::AttnK, Part::Weight, n.k + W, kv_shape, Layout::OutIn, nullptr},
      {Role::AttnV, Part::Weight, n.v + W, kv_shape, Layout::OutIn, nullptr},
      {Role::AttnO, Part::Weight, n.o + W, o_shape, Layout::OutIn, nullptr},
      {Role::AttnQ, Part::Bias, n.q + B, q_vec, Layout::Vector, qkv_bias},
      {Role::AttnK, Part::Bias, n.k + B, kv_vec, Layout::Vector, qkv_bias},
      {Role::AttnV, Part::Bias, n.v + B, kv_vec, Layout::Vector, qkv_bias},
      {Role::AttnO, Part::Bias, n.o + B, model_vec, Layout::Vector, o_bias},
      {Role::MlpNorm, Part::Weight, n.mlp_norm + W, model_vec, Layout::Vector, nullptr},
      {Role::MlpGate, Part::Weight, n.gate + W, up_shape, Layout::OutIn, nullptr},
      {Role::MlpUp, Part::Weight, n.up + W, up_shape, Layout::OutIn, nullptr},
      {Role::MlpDown, Part::Weight, n.down + W, down_shape, Layout::OutIn, nullptr},
      {Role::MlpGate, Part::Bias, n.gate + B, mlp_vec, Layout::Vector, mlp_bias},
      {Role::MlpUp, Part::Bias, n.up + B, mlp_vec, Layout::Vector, mlp_bias},
      {Role::MlpDown, Part::Bias, n.down + B, model_vec, Layout::Vector, mlp_bias},
      {Role::FinalNorm, Part::Weight, n.final_norm + W, model_vec, Layout::Vector, nullptr},
      {Role::Unembed, Part::Weight, n.unembed + W, embed_shape, Layout::OutIn, untied},
  };
  return t;
}

std::vector<FamilyTable> build_tables() {
  std::vector<FamilyTable> tables;
  // Hugging Face LlamaForCausalLM. q/k rows are permuted for RoPE's rotate-half layout.
  tables.push_back(llama_table("hf",
                               {"model.embed_tokens", "model.layers.{l}.input_layernorm", "model.layers.{l}.self_attn.q_proj",
                                "model.layers.{l}.self_attn.k_proj", "model.layers.{l}.self_attn.v_proj",
                                "model.layers.{l}.self_attn.o_proj", "model.layers.{l}.post_attention_layernorm",
                                "model.layers.{l}.mlp.gate_proj", "model.layers.{l}.mlp.up_proj", "model.layers.{l}.mlp.down_proj",
                                "model.norm", "lm_head", ".bias", ".weight"},
                               {".rotary_emb.inv_freq"}));
  // llama2.c legacy .bin (names as in Meta's original checkpoints; see io/llama2c.h). Interleaved RoPE pairs.
  tables.push_back(llama_table("llama2c",
                               {"tok_embeddings", "layers.{l}.attention_norm", "layers.{l}.attention.wq",
                                "layers.{l}.attention.wk", "layers.{l}.attention.wv", "layers.{l}.attention.wo",
                                "layers.{l}.ffn_norm", "layers.{l}.feed_forward.w1", "layers.{l}.feed_forward.w3",
                                "layers.{l}.feed_forward.w2", "norm", "output", ".bias", ".weight"},
                               {}));
  // GGUF (llama.cpp naming). Interleaved RoPE pairs, as llama.cpp's converter stores q/k.
  tables.push_back(llama_table("gguf",
                               {"token_embd", "blk.{l}.attn_norm", "blk.{l}.attn_q", "blk.{l}.attn_k", "blk.{l}.attn_v",
                                "blk.{l}.attn_output", "blk.{l}.ffn_norm", "blk.{l}.ffn_gate", "blk.{l}.ffn_up",
                                "blk.{l}.ffn_down", "output_norm", "output", ".bias", ".weight"},
                               {"rope_freqs.weight"}));
  return tables;
}

std::string layer_name(const std::string& pattern, int64_t layer) {
  std::string out = pattern;
  size_t at = out.find("{l}");
  if (at != std::string::npos) out.replace(at, 3, std::to_string(layer));
  return out;
}

bool per_layer(Role r) { return r != Role::Embed && r != Role::FinalNorm && r != Role::Unembed; }

Linear* linear_for(LayerWeights& L, Role r) {
  switch (r) {
    case Role::AttnQ: return &L.q;
    case Role::AttnK: return &L.k;
    case Role::AttnV: return &L.v;
    case Role::AttnO: return &L.o;
    case Role::MlpGate: return &L.gate;
    case Role::MlpUp: return &L.up;
    case Role::MlpDown: return &L.down;
    default: return nullptr;
  }
}

Norm* norm_for(LayerWeights& L, ModelWeights& M, Role r) {
  switch (r) {
    case Role::AttnNorm: return &L.attn_norm;
    case Role::MlpNorm: return &L.mlp_norm;
    case Role::FinalNorm: return &M.final_norm;
    default: return nullptr;
  }
}

}  // namespace

const FamilyTable& family_table(const std::string& family, const std::string& format) {
  static const std::vector<FamilyTable> tables = build_tables();
  for (const auto& t : tables) {
    if (t.family == family && t.format == format) return t;
  }
  fail("no tensor table for family '{}' in format '{}'", family, format);
}

ModelWeights bind_weights(const ModelConfig& c, const TensorStore& store, const FamilyTable& table) {
  ModelWeights m;
  m.layers.resize(c.n_layers);
  std::set<std::string> used;
  LayerWeights unused_layer;
  for (const auto& spec : table.tensors) {
    if (spec.present && !spec.present(c)) continue;
    int64_t n_instances = per_layer(spec.role) ? c.n_layers : 1;
    for (int64_t l = 0; l < n_instances; ++l) {
      std::string name = layer_name(spec.name, l);
      const TensorInfo* t = store.find(name);
      if (!t) fail("missing tensor '{}' ({} family, {} format)", name, c.family, c.format);
      Shape expected = spec.shape(c);
      if (t->shape != expected)
        fail("tensor '{}' has wrong shape; expected {}, got {}", name, shape_str(expected), shape_str(t->shape));
      used.insert(name);
      m.storage.push_back(store.floats(name));
      const float* data = m.storage.back().data();
      LayerWeights& L = per_layer(spec.role) ? m.layers[l] : unused_layer;
      if (spec.role == Role::Embed) {
        m.embed = data;
      } else if (spec.role == Role::Unembed) {
        m.unembed = Linear{data, nullptr, c.d_vocab, c.d_model, c.d_model, false};
      } else if (Linear* lin = linear_for(L, spec.role)) {
        if (spec.part == Part::Bias) {
          lin->b = data;
        } else {
          bool in_out = spec.layout == Layout::InOut;
          lin->w = data;
          lin->out = in_out ? expected[1] : expected[0];
          lin->in = in_out ? expected[0] : expected[1];
          lin->ld = expected[1];
          lin->in_out = in_out;
        }
      } else if (Norm* norm = norm_for(L, m, spec.role)) {
        (spec.part == Part::Bias ? norm->b : norm->w) = data;
      } else {
        TDYN_CHECK(false);
      }
    }
  }
  if (c.tied_embeddings) m.unembed = Linear{m.embed, nullptr, c.d_vocab, c.d_model, c.d_model, false};
  for (const auto& name : store.names()) {
    if (used.count(name)) continue;
    bool ignored = false;
    for (const auto& suffix : table.ignored_suffixes) {
      ignored |= name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    }
    if (!ignored) fail("unknown tensor '{}' in a {} checkpoint ({} format): tdyn does not know what it does", name, c.family, c.format);
  }
  // Sizes of bound linears were set from the spec; sanity-check the ones the forward pass relies on.
  for (const auto& L : m.layers) TDYN_CHECK(L.q && L.k && L.v && L.o && L.up && L.down);
  return m;
}

}  // namespace tdyn
