#include "model/families.h"

#include <cstring>
#include <map>
#include <set>

#include "core/error.h"

namespace tdyn {
namespace {

using C = const ModelConfig&;
using ShapeFn = std::function<Shape(C, int64_t)>;
using PresentFn = std::function<bool(C, int64_t)>;

// Shapes as functions of the config and the (stored) layer index, in nn.Linear [out, in] layout.
Shape embed_shape(C c, int64_t) { return {c.d_vocab, c.embed_dim()}; }
Shape pos_shape(C c, int64_t) { return {c.n_ctx, c.embed_dim()}; }
Shape token_type_shape(C c, int64_t) { return {c.n_token_types, c.embed_dim()}; }
Shape embed_vec(C c, int64_t) { return {c.embed_dim()}; }
Shape vocab_vec(C c, int64_t) { return {c.d_vocab}; }
Shape model_vec(C c, int64_t) { return {c.d_model}; }
Shape q_shape(C c, int64_t l) { return {c.n_heads * c.layer(l).d_head, c.d_model}; }
Shape kv_shape(C c, int64_t l) { return {c.n_kv_heads * c.layer(l).d_head, c.d_model}; }
Shape o_shape(C c, int64_t l) { return {c.d_model, c.n_heads * c.layer(l).d_head}; }
Shape up_shape(C c, int64_t l) { return {c.layer(l).d_mlp, c.d_model}; }
Shape down_shape(C c, int64_t l) { return {c.d_model, c.layer(l).d_mlp}; }
Shape q_vec(C c, int64_t l) { return {c.n_heads * c.layer(l).d_head}; }
Shape kv_vec(C c, int64_t l) { return {c.n_kv_heads * c.layer(l).d_head}; }
Shape mlp_vec(C c, int64_t l) { return {c.layer(l).d_mlp}; }
Shape head_vec(C c, int64_t l) { return {c.layer(l).d_head}; }
bool untied(C c, int64_t) { return !c.tied_embeddings; }
bool tied(C c, int64_t) { return c.tied_embeddings; }
bool qkv_bias(C c, int64_t) { return c.attn_qkv_bias; }
bool o_bias(C c, int64_t) { return c.attn_o_bias; }
bool mlp_bias(C c, int64_t) { return c.mlp_bias; }
bool own_kv(C c, int64_t l) { return c.layer(l).kv_source == l; }
bool shared_kv(C c, int64_t l) { return c.layer(l).kv_source != l; }
bool has_ple(C c, int64_t) { return c.d_per_layer_input > 0; }

TensorSpec weight(Role r, std::string name, ShapeFn shape, Layout layout = Layout::OutIn, PresentFn present = nullptr) {
  return {r, Part::Weight, std::move(name), std::move(shape), layout, std::move(present)};
}
TensorSpec bias(Role r, std::string name, ShapeFn shape, PresentFn present = nullptr) {
  return {r, Part::Bias, std::move(name), std::move(shape), Layout::Vector, std::move(present)};
}
TensorSpec vec(Role r, std::string name, ShapeFn shape, PresentFn present = nullptr) {
  return {r, Part::Weight, std::move(name), std::move(shape), Layout::Vector, std::move(present)};
}
// Accepted if present, never used.
TensorSpec ignored(std::string name, PresentFn present = nullptr) {
  bool per_layer = name.find("{l}") != std::string::npos;
  return {per_layer ? Role::IgnoredPerLayer : Role::Ignored, Part::Weight, std::move(name), nullptr, Layout::Vector,
          std::move(present)};
}
// A Linear with its bias: "<name>.weight" / "<name>.bias".
void linear(std::vector<TensorSpec>& t, Role r, const std::string& name, ShapeFn w, ShapeFn b, PresentFn with_bias,
            Layout layout = Layout::OutIn) {
  t.push_back(weight(r, name + ".weight", std::move(w), layout));
  t.push_back(bias(r, name + ".bias", std::move(b), std::move(with_bias)));
}
// A LayerNorm "<name>.weight" / "<name>.bias".
void layer_norm(std::vector<TensorSpec>& t, Role r, const std::string& name, ShapeFn shape) {
  t.push_back(vec(r, name + ".weight", shape));
  t.push_back(bias(r, name + ".bias", shape));
}

// ---------------------------------------------------------------------------------------------------------
// Llama (HF, llama2.c, GGUF naming).
struct LlamaNames {
  std::string embed, attn_norm, q, k, v, o, mlp_norm, gate, up, down, final_norm, unembed, bias_suffix, weight_suffix;
};

FamilyTable llama_table(const std::string& format, const LlamaNames& n, std::vector<std::string> ignored,
                        const std::string& family = "llama") {
  const std::string& W = n.weight_suffix;
  const std::string& B = n.bias_suffix;
  FamilyTable t{.family = family, .format = format, .ignored_suffixes = std::move(ignored)};
  t.tensors = {
      weight(Role::Embed, n.embed + W, embed_shape),
      vec(Role::AttnNorm, n.attn_norm + W, model_vec),
      weight(Role::AttnQ, n.q + W, q_shape),
      weight(Role::AttnK, n.k + W, kv_shape),
      weight(Role::AttnV, n.v + W, kv_shape),
      weight(Role::AttnO, n.o + W, o_shape),
      bias(Role::AttnQ, n.q + B, q_vec, qkv_bias),
      bias(Role::AttnK, n.k + B, kv_vec, qkv_bias),
      bias(Role::AttnV, n.v + B, kv_vec, qkv_bias),
      bias(Role::AttnO, n.o + B, model_vec, o_bias),
      vec(Role::MlpNorm, n.mlp_norm + W, model_vec),
      weight(Role::MlpGate, n.gate + W, up_shape),
      weight(Role::MlpUp, n.up + W, up_shape),
      weight(Role::MlpDown, n.down + W, down_shape),
      bias(Role::MlpGate, n.gate + B, mlp_vec, mlp_bias),
      bias(Role::MlpUp, n.up + B, mlp_vec, mlp_bias),
      bias(Role::MlpDown, n.down + B, model_vec, mlp_bias),
      vec(Role::FinalNorm, n.final_norm + W, model_vec),
      weight(Role::Unembed, n.unembed + W, embed_shape, Layout::OutIn, untied),
  };
  return t;
}

// Hugging Face names of LlamaForCausalLM, shared by MistralForCausalLM and Qwen2ForCausalLM.
const LlamaNames kHfLlamaNames = {
    "model.embed_tokens", "model.layers.{l}.input_layernorm", "model.layers.{l}.self_attn.q_proj",
    "model.layers.{l}.self_attn.k_proj", "model.layers.{l}.self_attn.v_proj", "model.layers.{l}.self_attn.o_proj",
    "model.layers.{l}.post_attention_layernorm", "model.layers.{l}.mlp.gate_proj", "model.layers.{l}.mlp.up_proj",
    "model.layers.{l}.mlp.down_proj", "model.norm", "lm_head", ".bias", ".weight"};

// llama.cpp's names of the same tensors (GGUF arch "llama", and "qwen2" with its q/k/v biases).
const LlamaNames kGgufLlamaNames = {
    "token_embd", "blk.{l}.attn_norm", "blk.{l}.attn_q", "blk.{l}.attn_k", "blk.{l}.attn_v", "blk.{l}.attn_output",
    "blk.{l}.ffn_norm", "blk.{l}.ffn_gate", "blk.{l}.ffn_up", "blk.{l}.ffn_down", "output_norm", "output", ".bias",
    ".weight"};

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

// GPT-2 (GPT2LMHeadModel). Conv1D [in, out] weights used in place; c_attn is q|k|v fused along its output
// columns. save_pretrained names carry "transformer."; the hub checkpoint (converted from a GPT2Model) has no
// prefix and may carry the legacy buffers h.{i}.attn.bias / h.{i}.attn.masked_bias (causal mask, -1e4):
// ignored by exact name so that attn.c_attn.bias is never mistaken for one.
FamilyTable gpt2_table() {
  FamilyTable t{.family = "gpt2", .format = "hf", .prefixes = {"transformer.", ""}};
  auto& s = t.tensors;
  auto qkv_shape = [](C c, int64_t) { return Shape{c.d_model, 3 * c.q_dim()}; };
  auto qkv_vec = [](C c, int64_t) { return Shape{3 * c.q_dim()}; };
  auto mlp_in = [](C c, int64_t l) { return Shape{c.d_model, c.layer(l).d_mlp}; };
  auto mlp_out = [](C c, int64_t l) { return Shape{c.layer(l).d_mlp, c.d_model}; };
  const std::string h = "{p}h.{l}.";
  s.push_back(weight(Role::Embed, "{p}wte.weight", embed_shape));
  s.push_back(weight(Role::PosEmbed, "{p}wpe.weight", pos_shape));
  layer_norm(s, Role::AttnNorm, h + "ln_1", model_vec);
  const Role qkv[3] = {Role::AttnQ, Role::AttnK, Role::AttnV};
  for (int i = 0; i < 3; ++i) {
    TensorSpec w = weight(qkv[i], h + "attn.c_attn.weight", qkv_shape, Layout::InOut);
    TensorSpec b = bias(qkv[i], h + "attn.c_attn.bias", qkv_vec);
    w.fused_index = b.fused_index = i;
    w.fused_count = b.fused_count = 3;
    s.push_back(w);
    s.push_back(b);
  }
  linear(s, Role::AttnO, h + "attn.c_proj", [](C c, int64_t) { return Shape{c.q_dim(), c.d_model}; }, model_vec, nullptr,
         Layout::InOut);
  layer_norm(s, Role::MlpNorm, h + "ln_2", model_vec);
  linear(s, Role::MlpUp, h + "mlp.c_fc", mlp_in, mlp_vec, nullptr, Layout::InOut);
  linear(s, Role::MlpDown, h + "mlp.c_proj", mlp_out, model_vec, nullptr, Layout::InOut);
  layer_norm(s, Role::FinalNorm, "{p}ln_f", model_vec);
  s.push_back(weight(Role::Unembed, "lm_head.weight", embed_shape, Layout::OutIn, untied));
  s.push_back(ignored(h + "attn.bias"));
  s.push_back(ignored(h + "attn.masked_bias"));
  return t;
}

// GPT-2 as llama.cpp's converter writes it (arch "gpt2"): every Conv1D [in, out] weight transposed to nn.Linear
// [out, in] layout, c_attn kept fused as attn_qkv (q | k | v rows), and the tied head written out again as
// output.weight (so a tdyn GGUF GPT-2 is untied unless that tensor is absent). GPT-NeoX (arch "gptneox") has the
// same tensors without the position table: its converter regroups query_key_value's per-head [q_h; k_h; v_h] rows
// to q | k | v, and writes embed_out as output.weight.
FamilyTable gguf_gpt_table(const std::string& family, bool learned_positions) {
  FamilyTable t{.family = family, .format = "gguf"};
  auto& s = t.tensors;
  auto qkv_shape = [](C c, int64_t) { return Shape{3 * c.q_dim(), c.d_model}; };
  auto qkv_vec = [](C c, int64_t) { return Shape{3 * c.q_dim()}; };
  s.push_back(weight(Role::Embed, "token_embd.weight", embed_shape));
  if (learned_positions) s.push_back(weight(Role::PosEmbed, "position_embd.weight", pos_shape));
  layer_norm(s, Role::AttnNorm, "blk.{l}.attn_norm", model_vec);
  const Role qkv[3] = {Role::AttnQ, Role::AttnK, Role::AttnV};
  for (int i = 0; i < 3; ++i) {
    TensorSpec w = weight(qkv[i], "blk.{l}.attn_qkv.weight", qkv_shape);
    TensorSpec b = bias(qkv[i], "blk.{l}.attn_qkv.bias", qkv_vec);
    w.fused_index = b.fused_index = i;
    w.fused_count = b.fused_count = 3;
    s.push_back(w);
    s.push_back(b);
  }
  linear(s, Role::AttnO, "blk.{l}.attn_output", o_shape, model_vec, nullptr);
  layer_norm(s, Role::MlpNorm, "blk.{l}.ffn_norm", model_vec);
  linear(s, Role::MlpUp, "blk.{l}.ffn_up", up_shape, mlp_vec, nullptr);
  linear(s, Role::MlpDown, "blk.{l}.ffn_down", down_shape, model_vec, nullptr);
  layer_norm(s, Role::FinalNorm, "output_norm", model_vec);
  s.push_back(weight(Role::Unembed, "output.weight", embed_shape, Layout::OutIn, untied));
  return t;
}

// GPT-Neo (GPTNeoForCausalLM): nn.Linear everywhere; q/k/v without bias, out_proj with bias. Older files
// carry the causal-mask buffers attn.attention.bias / masked_bias.
FamilyTable gpt_neo_table() {
  FamilyTable t{.family = "gpt_neo", .format = "hf", .prefixes = {"transformer."}};
  auto& s = t.tensors;
  const std::string h = "{p}h.{l}.";
  s.push_back(weight(Role::Embed, "{p}wte.weight", embed_shape));
  s.push_back(weight(Role::PosEmbed, "{p}wpe.weight", pos_shape));
  layer_norm(s, Role::AttnNorm, h + "ln_1", model_vec);
  linear(s, Role::AttnQ, h + "attn.attention.q_proj", q_shape, q_vec, qkv_bias);
  linear(s, Role::AttnK, h + "attn.attention.k_proj", kv_shape, kv_vec, qkv_bias);
  linear(s, Role::AttnV, h + "attn.attention.v_proj", kv_shape, kv_vec, qkv_bias);
  linear(s, Role::AttnO, h + "attn.attention.out_proj", o_shape, model_vec, o_bias);
  layer_norm(s, Role::MlpNorm, h + "ln_2", model_vec);
  linear(s, Role::MlpUp, h + "mlp.c_fc", up_shape, mlp_vec, mlp_bias);
  linear(s, Role::MlpDown, h + "mlp.c_proj", down_shape, model_vec, mlp_bias);
  layer_norm(s, Role::FinalNorm, "{p}ln_f", model_vec);
  s.push_back(weight(Role::Unembed, "lm_head.weight", embed_shape, Layout::OutIn, untied));
  s.push_back(ignored(h + "attn.attention.bias"));
  s.push_back(ignored(h + "attn.attention.masked_bias"));
  return t;
}

// GPT-NeoX / Pythia (GPTNeoXForCausalLM): query_key_value fuses q, k and v per head ([q_h; k_h; v_h] for each
// head h), nn.Linear everywhere, untied embed_out. Older files carry the buffers attention.bias (causal mask),
// attention.masked_bias and attention.rotary_emb.inv_freq.
FamilyTable gpt_neox_table() {
  FamilyTable t{.family = "gpt_neox", .format = "hf", .ignored_suffixes = {".rotary_emb.inv_freq"},
                .prefixes = {"gpt_neox."}};
  auto& s = t.tensors;
  const std::string h = "{p}layers.{l}.";
  auto qkv_shape = [](C c, int64_t) { return Shape{3 * c.q_dim(), c.d_model}; };
  auto qkv_vec = [](C c, int64_t) { return Shape{3 * c.q_dim()}; };
  s.push_back(weight(Role::Embed, "{p}embed_in.weight", embed_shape));
  layer_norm(s, Role::AttnNorm, h + "input_layernorm", model_vec);
  const Role qkv[3] = {Role::AttnQ, Role::AttnK, Role::AttnV};
  for (int i = 0; i < 3; ++i) {
    TensorSpec w = weight(qkv[i], h + "attention.query_key_value.weight", qkv_shape);
    TensorSpec b = bias(qkv[i], h + "attention.query_key_value.bias", qkv_vec, qkv_bias);
    w.fused_index = b.fused_index = i;
    w.fused_count = b.fused_count = 3;
    w.fused_per_head = b.fused_per_head = true;
    s.push_back(w);
    s.push_back(b);
  }
  linear(s, Role::AttnO, h + "attention.dense", o_shape, model_vec, o_bias);
  layer_norm(s, Role::MlpNorm, h + "post_attention_layernorm", model_vec);
  linear(s, Role::MlpUp, h + "mlp.dense_h_to_4h", up_shape, mlp_vec, mlp_bias);
  linear(s, Role::MlpDown, h + "mlp.dense_4h_to_h", down_shape, model_vec, mlp_bias);
  layer_norm(s, Role::FinalNorm, "{p}final_layer_norm", model_vec);
  s.push_back(weight(Role::Unembed, "embed_out.weight", embed_shape, Layout::OutIn, untied));
  s.push_back(ignored(h + "attention.bias"));
  s.push_back(ignored(h + "attention.masked_bias"));
  return t;
}

// Embedding tables and MLM head shared by BERT and ALBERT. The MLM decoder weight is tied to the word
// embeddings and its bias to "<head>bias", so save_pretrained omits both decoder tensors; original Google
// conversions store them: accepted and ignored when tied, as HF re-ties them on load.
void encoder_embeddings(std::vector<TensorSpec>& s, const std::string& e) {
  s.push_back(weight(Role::Embed, e + "word_embeddings.weight", embed_shape));
  s.push_back(weight(Role::PosEmbed, e + "position_embeddings.weight", pos_shape));
  s.push_back(weight(Role::TokenTypeEmbed, e + "token_type_embeddings.weight", token_type_shape));
  layer_norm(s, Role::EmbedNorm, e + "LayerNorm", embed_vec);
  s.push_back(ignored(e + "position_ids"));   // buffer saved by older HF versions
  s.push_back(ignored(e + "token_type_ids"));  // buffer saved by some HF versions
}
void mlm_head(std::vector<TensorSpec>& s, const std::string& head, const std::string& dense, const std::string& norm) {
  linear(s, Role::HeadDense, head + dense, [](C c, int64_t) { return Shape{c.embed_dim(), c.d_model}; }, embed_vec,
         nullptr);
  layer_norm(s, Role::HeadNorm, head + norm, embed_vec);
  s.push_back(bias(Role::Unembed, head + "bias", vocab_vec));
  s.push_back(weight(Role::Unembed, head + "decoder.weight", embed_shape, Layout::OutIn, untied));
  s.push_back(ignored(head + "decoder.weight", tied));
  s.push_back(ignored(head + "decoder.bias"));
}

// BERT (BertForMaskedLM; BertForPreTraining files also carry the pooler and the next-sentence head, unused
// by the MLM logits).
FamilyTable bert_table() {
  FamilyTable t{.family = "bert", .format = "hf", .prefixes = {"bert."}};
  auto& s = t.tensors;
  const std::string h = "{p}encoder.layer.{l}.";
  encoder_embeddings(s, "{p}embeddings.");
  linear(s, Role::AttnQ, h + "attention.self.query", q_shape, q_vec, qkv_bias);
  linear(s, Role::AttnK, h + "attention.self.key", kv_shape, kv_vec, qkv_bias);
  linear(s, Role::AttnV, h + "attention.self.value", kv_shape, kv_vec, qkv_bias);
  linear(s, Role::AttnO, h + "attention.output.dense", o_shape, model_vec, o_bias);
  layer_norm(s, Role::AttnPostNorm, h + "attention.output.LayerNorm", model_vec);
  linear(s, Role::MlpUp, h + "intermediate.dense", up_shape, mlp_vec, mlp_bias);
  linear(s, Role::MlpDown, h + "output.dense", down_shape, model_vec, mlp_bias);
  layer_norm(s, Role::MlpPostNorm, h + "output.LayerNorm", model_vec);
  mlm_head(s, "cls.predictions.", "transform.dense", "transform.LayerNorm");
  for (const char* n : {"{p}pooler.dense.weight", "{p}pooler.dense.bias", "cls.seq_relationship.weight",
                        "cls.seq_relationship.bias"})
    s.push_back(ignored(n));
  return t;
}

// ALBERT (AlbertForMaskedLM): factorised embeddings mapped to d_model, layer groups ("{l}" = group index;
// inner_group_num 1) reused across depth. AlbertForPreTraining files add the pooler and the sentence-order head.
FamilyTable albert_table() {
  FamilyTable t{.family = "albert", .format = "hf", .prefixes = {"albert."}};
  auto& s = t.tensors;
  const std::string h = "{p}encoder.albert_layer_groups.{l}.albert_layers.0.";
  encoder_embeddings(s, "{p}embeddings.");
  linear(s, Role::EmbedMap, "{p}encoder.embedding_hidden_mapping_in",
         [](C c, int64_t) { return Shape{c.d_model, c.embed_dim()}; }, model_vec, nullptr);
  linear(s, Role::AttnQ, h + "attention.query", q_shape, q_vec, qkv_bias);
  linear(s, Role::AttnK, h + "attention.key", kv_shape, kv_vec, qkv_bias);
  linear(s, Role::AttnV, h + "attention.value", kv_shape, kv_vec, qkv_bias);
  linear(s, Role::AttnO, h + "attention.dense", o_shape, model_vec, o_bias);
  layer_norm(s, Role::AttnPostNorm, h + "attention.LayerNorm", model_vec);
  linear(s, Role::MlpUp, h + "ffn", up_shape, mlp_vec, mlp_bias);
  linear(s, Role::MlpDown, h + "ffn_output", down_shape, model_vec, mlp_bias);
  layer_norm(s, Role::MlpPostNorm, h + "full_layer_layer_norm", model_vec);
  mlm_head(s, "predictions.", "dense", "LayerNorm");
  for (const char* n : {"{p}pooler.weight", "{p}pooler.bias", "sop_classifier.classifier.weight",
                        "sop_classifier.classifier.bias"})
    s.push_back(ignored(n));
  return t;
}

// OLMo 3 (Olmo3ForCausalLM): no pre-norms; post_attention_layernorm / post_feedforward_layernorm on the
// sublayer outputs; q_norm / k_norm over the whole projections.
FamilyTable olmo3_table() {
  FamilyTable t{.family = "olmo3", .format = "hf", .ignored_suffixes = {".rotary_emb.inv_freq"}, .prefixes = {"model."}};
  auto& s = t.tensors;
  const std::string h = "{p}layers.{l}.";
  s.push_back(weight(Role::Embed, "{p}embed_tokens.weight", embed_shape));
  linear(s, Role::AttnQ, h + "self_attn.q_proj", q_shape, q_vec, qkv_bias);
  linear(s, Role::AttnK, h + "self_attn.k_proj", kv_shape, kv_vec, qkv_bias);
  linear(s, Role::AttnV, h + "self_attn.v_proj", kv_shape, kv_vec, qkv_bias);
  linear(s, Role::AttnO, h + "self_attn.o_proj", o_shape, model_vec, o_bias);
  s.push_back(vec(Role::AttnQNorm, h + "self_attn.q_norm.weight", q_vec));
  s.push_back(vec(Role::AttnKNorm, h + "self_attn.k_norm.weight", kv_vec));
  s.push_back(vec(Role::AttnPostNorm, h + "post_attention_layernorm.weight", model_vec));
  s.push_back(weight(Role::MlpGate, h + "mlp.gate_proj.weight", up_shape));
  s.push_back(weight(Role::MlpUp, h + "mlp.up_proj.weight", up_shape));
  s.push_back(weight(Role::MlpDown, h + "mlp.down_proj.weight", down_shape));
  s.push_back(vec(Role::MlpPostNorm, h + "post_feedforward_layernorm.weight", model_vec));
  s.push_back(vec(Role::FinalNorm, "{p}norm.weight", model_vec));
  s.push_back(weight(Role::Unembed, "lm_head.weight", embed_shape, Layout::OutIn, untied));
  return t;
}

// Gemma 4 text model. Gemma4ForConditionalGeneration names it "model.language_model.", Gemma4ForCausalLM
// "model.". KV-shared layers have no k/v projections or k_norm; files that still carry them are accepted and
// those tensors ignored (HF _keys_to_ignore_on_load_unexpected). The vision/audio towers are not run.
FamilyTable gemma4_table() {
  FamilyTable t{.family = "gemma4",
                .format = "hf",
                .ignored_suffixes = {".rotary_emb.inv_freq"},
                .prefixes = {"model.language_model.", "model."},
                .ignored_prefixes = {"model.vision_tower.", "model.audio_tower.", "model.embed_vision.",
                                     "model.embed_audio.", "model.multi_modal_projector."}};
  auto& s = t.tensors;
  const std::string h = "{p}layers.{l}.";
  auto per_layer_width = [](C c) { return c.n_layers * c.d_per_layer_input; };
  s.push_back(weight(Role::Embed, "{p}embed_tokens.weight", embed_shape));
  s.push_back(weight(Role::PleEmbed, "{p}embed_tokens_per_layer.weight",
                     [=](C c, int64_t) { return Shape{c.d_vocab_per_layer, per_layer_width(c)}; }, Layout::OutIn, has_ple));
  s.push_back(weight(Role::PleModelProj, "{p}per_layer_model_projection.weight",
                     [=](C c, int64_t) { return Shape{per_layer_width(c), c.d_model}; }, Layout::OutIn, has_ple));
  s.push_back(vec(Role::PleProjNorm, "{p}per_layer_projection_norm.weight",
                  [](C c, int64_t) { return Shape{c.d_per_layer_input}; }, has_ple));
  s.push_back(vec(Role::AttnNorm, h + "input_layernorm.weight", model_vec));
  s.push_back(weight(Role::AttnQ, h + "self_attn.q_proj.weight", q_shape));
  s.push_back(vec(Role::AttnQNorm, h + "self_attn.q_norm.weight", head_vec));
  s.push_back(weight(Role::AttnK, h + "self_attn.k_proj.weight", kv_shape, Layout::OutIn, own_kv));
  s.push_back(weight(Role::AttnV, h + "self_attn.v_proj.weight", kv_shape, Layout::OutIn, own_kv));
  s.push_back(vec(Role::AttnKNorm, h + "self_attn.k_norm.weight", head_vec, own_kv));
  for (const char* n : {"self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.k_norm.weight"})
    s.push_back(ignored(h + n, shared_kv));
  s.push_back(weight(Role::AttnO, h + "self_attn.o_proj.weight", o_shape));
  s.push_back(vec(Role::AttnPostNorm, h + "post_attention_layernorm.weight", model_vec));
  s.push_back(vec(Role::MlpNorm, h + "pre_feedforward_layernorm.weight", model_vec));
  s.push_back(weight(Role::MlpGate, h + "mlp.gate_proj.weight", up_shape));
  s.push_back(weight(Role::MlpUp, h + "mlp.up_proj.weight", up_shape));
  s.push_back(weight(Role::MlpDown, h + "mlp.down_proj.weight", down_shape));
  s.push_back(vec(Role::MlpPostNorm, h + "post_feedforward_layernorm.weight", model_vec));
  s.push_back(weight(Role::PleGate, h + "per_layer_input_gate.weight",
                     [](C c, int64_t) { return Shape{c.d_per_layer_input, c.d_model}; }, Layout::OutIn, has_ple));
  s.push_back(weight(Role::PleProj, h + "per_layer_projection.weight",
                     [](C c, int64_t) { return Shape{c.d_model, c.d_per_layer_input}; }, Layout::OutIn, has_ple));
  s.push_back(vec(Role::PlePostNorm, h + "post_per_layer_input_norm.weight", model_vec, has_ple));
  s.push_back(vec(Role::LayerScalar, h + "layer_scalar", [](C, int64_t) { return Shape{1}; }));
  s.push_back(vec(Role::FinalNorm, "{p}norm.weight", model_vec));
  s.push_back(weight(Role::Unembed, "lm_head.weight", embed_shape, Layout::OutIn, untied));
  return t;
}

std::vector<FamilyTable> build_tables() {
  std::vector<FamilyTable> tables;
  // Hugging Face LlamaForCausalLM. q/k rows are permuted for RoPE's rotate-half layout.
  tables.push_back(llama_table("hf", kHfLlamaNames, {".rotary_emb.inv_freq"}));
  // MistralForCausalLM and Qwen2ForCausalLM: Llama's names (Qwen2 adds q/k/v biases, bound through attn_qkv_bias).
  tables.push_back(llama_table("hf", kHfLlamaNames, {".rotary_emb.inv_freq"}, "mistral"));
  tables.push_back(llama_table("hf", kHfLlamaNames, {".rotary_emb.inv_freq"}, "qwen2"));
  tables.push_back(hf_phi3_table());
  // llama2.c legacy .bin (names as in Meta's original checkpoints; see io/llama2c.h). Interleaved RoPE pairs.
  tables.push_back(llama_table("llama2c",
                               {"tok_embeddings", "layers.{l}.attention_norm", "layers.{l}.attention.wq",
                                "layers.{l}.attention.wk", "layers.{l}.attention.wv", "layers.{l}.attention.wo",
                                "layers.{l}.ffn_norm", "layers.{l}.feed_forward.w1", "layers.{l}.feed_forward.w3",
                                "layers.{l}.feed_forward.w2", "norm", "output", ".bias", ".weight"},
                               {}));
  // GGUF (llama.cpp naming). Interleaved RoPE pairs, as llama.cpp's converter stores q/k.
  tables.push_back(llama_table("gguf", kGgufLlamaNames, {"rope_freqs.weight"}));
  // GGUF Qwen2 (llama.cpp arch "qwen2"): the same names with q/k/v biases, rotate-half RoPE pairs.
  tables.push_back(llama_table("gguf", kGgufLlamaNames, {}, "qwen2"));
  tables.push_back(gguf_phi3_table());
  tables.push_back(gpt2_table());
  tables.push_back(gguf_gpt_table("gpt2", /*learned_positions=*/true));
  tables.push_back(gpt_neo_table());
  tables.push_back(gpt_neox_table());
  tables.push_back(gguf_gpt_table("gpt_neox", /*learned_positions=*/false));
  tables.push_back(bert_table());
  tables.push_back(albert_table());
  tables.push_back(olmo3_table());
  tables.push_back(gemma4_table());
  return tables;
}

std::string substitute(const std::string& pattern, const char* key, const std::string& value) {
  std::string out = pattern;
  size_t at = out.find(key);
  if (at != std::string::npos) out.replace(at, std::string(key).size(), value);
  return out;
}

bool per_layer(Role r) { return r >= Role::AttnNorm && r != Role::Ignored; }

Linear* linear_for(LayerWeights& L, ModelWeights& M, Role r) {
  switch (r) {
    case Role::AttnQ: return &L.q;
    case Role::AttnK: return &L.k;
    case Role::AttnV: return &L.v;
    case Role::AttnO: return &L.o;
    case Role::MlpGate: return &L.gate;
    case Role::MlpUp: return &L.up;
    case Role::MlpDown: return &L.down;
    case Role::PleGate: return &L.ple_gate;
    case Role::PleProj: return &L.ple_proj;
    case Role::EmbedMap: return &M.embed_map;
    case Role::PleModelProj: return &M.ple_model_proj;
    case Role::HeadDense: return &M.head_dense;
    case Role::Unembed: return &M.unembed;
    default: return nullptr;
  }
}

Norm* norm_for(LayerWeights& L, ModelWeights& M, Role r) {
  switch (r) {
    case Role::AttnNorm: return &L.attn_norm;
    case Role::AttnQNorm: return &L.q_norm;
    case Role::AttnKNorm: return &L.k_norm;
    case Role::AttnPostNorm: return &L.attn_post_norm;
    case Role::MlpNorm: return &L.mlp_norm;
    case Role::MlpPostNorm: return &L.mlp_post_norm;
    case Role::PlePostNorm: return &L.ple_post_norm;
    case Role::EmbedNorm: return &M.embed_norm;
    case Role::PleProjNorm: return &M.ple_proj_norm;
    case Role::FinalNorm: return &M.final_norm;
    case Role::HeadNorm: return &M.head_norm;
    default: return nullptr;
  }
}

StoredMatrix* table_for(ModelWeights& M, Role r) {
  switch (r) {
    case Role::Embed: return &M.embed;
    case Role::PleEmbed: return &M.ple_embed;
    default: return nullptr;
  }
}

// Small float32 vectors and tables read directly by the forward pass (widened when stored otherwise).
const float** floats_for(LayerWeights& L, ModelWeights& M, Role r) {
  switch (r) {
    case Role::PosEmbed: return &M.pos_embed;
    case Role::TokenTypeEmbed: return &M.token_type_embed;
    case Role::LayerScalar: return &L.layer_scalar;
    default: return nullptr;
  }
}

// A 2-D tensor as a matrix in place.
StoredMatrix matrix_of(const TensorInfo& t) {
  TDYN_CHECK(t.shape.size() == 2);
  return {t.data, t.dtype, t.shape[0], t.shape[1], static_cast<int64_t>(tensor_bytes(t.dtype, t.shape[1]))};
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The "{p}" value of this checkpoint: the first of the table's prefixes under which its first tensor exists.
std::string detect_prefix(const FamilyTable& table, const TensorStore& store) {
  const std::string& first = table.tensors.front().name;
  std::string tried;
  for (const auto& p : table.prefixes) {
    std::string name = substitute(first, "{p}", p);
    if (store.contains(name)) return p;
    tried += (tried.empty() ? "'" : ", '") + name + "'";
  }
  fail("missing tensor {} ({} family, {} format)", tried, table.family, table.format);
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
  const int64_t n_stored = c.n_stored_layers();
  std::vector<LayerWeights> stored(n_stored);
  LayerWeights unused_layer;
  std::set<std::string> used;
  std::map<std::string, const float*> widened;  // vectors widened once, even when several specs slice them
  std::map<std::string, StoredMatrix> regrouped;  // per-head fused matrices regrouped once (fused_per_head)
  const std::string prefix = detect_prefix(table, store);
  for (const auto& spec : table.tensors) {
    const bool layered = per_layer(spec.role) || spec.role == Role::IgnoredPerLayer;
    const int64_t n_instances = layered ? n_stored : 1;
    for (int64_t l = 0; l < n_instances; ++l) {
      if (spec.present && !spec.present(c, l)) continue;
      std::string name = substitute(substitute(spec.name, "{p}", prefix), "{l}", std::to_string(l));
      const TensorInfo* t = store.find(name);
      if (spec.role == Role::Ignored || spec.role == Role::IgnoredPerLayer) {
        if (t) used.insert(name);
        continue;
      }
      if (!t) fail("missing tensor '{}' ({} family, {} format)", name, c.family, c.format);
      Shape expected = spec.shape(c, l);
      if (t->shape != expected)
        fail("tensor '{}' has wrong shape; expected {}, got {}", name, shape_str(expected), shape_str(t->shape));
      if (!is_float(t->dtype))
        fail("tensor '{}' has dtype {}, expected a floating-point type (float32, float16, bfloat16 or a GGUF quantization)", name, dtype_name(t->dtype));
      if (used.insert(name).second) m.sources.push_back({name, layered ? l : -1});
      // Output-axis index of element e of part `part` in a per-head fused tensor: [head][part][d_head] order.
      const int64_t head_dim = spec.fused_per_head ? expected[0] / (spec.fused_count * c.n_heads) : 0;
      auto per_head_index = [&](int64_t part, int64_t e) {
        return ((e / head_dim) * spec.fused_count + part) * head_dim + e % head_dim;
      };
      // Vectors as float32 pointers: in place when already aligned float32, else widened once and owned.
      auto vector_data = [&]() -> const float* {
        if (auto it = widened.find(name); it != widened.end()) return it->second;
        auto buffer = std::make_shared<FloatBuffer>(store.floats(name));
        if (spec.fused_per_head) {  // regrouped to [part][head][d_head]
          const int64_t n = expected[0] / spec.fused_count;
          std::vector<float> out(expected[0]);
          for (int64_t part = 0; part < spec.fused_count; ++part)
            for (int64_t e = 0; e < n; ++e) out[part * n + e] = buffer->data()[per_head_index(part, e)];
          buffer = std::make_shared<FloatBuffer>(std::move(out));
        }
        m.owners.push_back(buffer);
        return widened[name] = buffer->data();
      };
      // The per-head fused matrix with its rows regrouped to [part][head][d_head], in the stored dtype (each
      // row, quantized blocks included, is copied whole).
      auto regrouped_matrix = [&]() -> StoredMatrix {
        if (auto it = regrouped.find(name); it != regrouped.end()) return it->second;
        const StoredMatrix whole = matrix_of(*t);
        const int64_t n = whole.rows / spec.fused_count, row_bytes = whole.row_bytes;
        auto bytes = std::make_shared<std::vector<std::byte>>(whole.rows * row_bytes);
        for (int64_t part = 0; part < spec.fused_count; ++part)
          for (int64_t e = 0; e < n; ++e)
            std::memcpy(bytes->data() + (part * n + e) * row_bytes, whole.row(per_head_index(part, e)), row_bytes);
        m.owners.push_back(bytes);
        StoredMatrix copy = whole;
        copy.data = bytes->data();
        return regrouped[name] = copy;
      };
      LayerWeights& L = per_layer(spec.role) ? stored[l] : unused_layer;
      if (Linear* lin = linear_for(L, m, spec.role)) {
        // A fused tensor is `fused_count` parts along the output axis: columns of a Conv1D [in, out] matrix,
        // rows of an nn.Linear [out, in] one, elements of a bias. Part `fused_index` starts after the ones before it.
        const int64_t parts = spec.fused_count, index = spec.fused_index;
        const bool in_out = spec.layout == Layout::InOut;
        const int64_t total = spec.part == Part::Bias ? expected[0] : in_out ? expected[1] : expected[0];
        const std::vector<int64_t> sizes =
            spec.fused_sizes ? spec.fused_sizes(c, l) : std::vector<int64_t>(parts, total / parts);
        TDYN_CHECK(static_cast<int64_t>(sizes.size()) == parts);
        int64_t offset = 0;
        for (int64_t i = 0; i < index; ++i) offset += sizes[i];
        const int64_t size = sizes[index];
        if (spec.part == Part::Bias) {
          lin->b = vector_data() + offset;
        } else {
          TDYN_CHECK(!spec.fused_per_head || !in_out);
          const StoredMatrix whole = spec.fused_per_head ? regrouped_matrix() : matrix_of(*t);
          lin->in_out = in_out;
          lin->out = size;
          lin->in = in_out ? expected[0] : expected[1];
          if (parts > 1 && in_out && is_quantized(t->dtype))
            fail("tensor '{}' is a fused Conv1D matrix stored as {}: its parts cannot be cut out of quantized blocks", name,
                 dtype_name(t->dtype));
          lin->w = parts == 1 ? whole : in_out ? whole.column_slice(offset, size) : whole.row_slice(offset, size);
        }
      } else if (Norm* norm = norm_for(L, m, spec.role)) {
        (spec.part == Part::Bias ? norm->b : norm->w) = vector_data();
      } else if (StoredMatrix* matrix = table_for(m, spec.role)) {
        *matrix = matrix_of(*t);
        if (spec.role == Role::Embed) m.embed_dtype = t->dtype;
        if (spec.role == Role::PleEmbed) m.ple_embed_dtype = t->dtype;
      } else if (const float** data = floats_for(L, m, spec.role)) {
        *data = vector_data();
      } else {
        TDYN_CHECK(false);
      }
    }
  }
  if (c.tied_embeddings) {
    const float* decoder_bias = m.unembed.b;
    m.unembed = Linear{m.embed, decoder_bias, c.d_vocab, c.embed_dim(), false};
  }
  for (const auto& name : store.names()) {
    if (used.count(name)) continue;
    bool ignored = false;
    for (const auto& suffix : table.ignored_suffixes) ignored |= ends_with(name, suffix);
    for (const auto& p : table.ignored_prefixes) ignored |= starts_with(name, p);
    if (!ignored) fail("unknown tensor '{}' in a {} checkpoint ({} format): tdyn does not know what it does", name, c.family, c.format);
  }
  // Every layer gets its stored layer's views (ALBERT reuses one stored layer across depth).
  m.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerConfig lc = c.layer(l);
    m.layers[l] = stored[lc.weights];
    const LayerWeights& L = m.layers[l];
    TDYN_CHECK(L.q && L.o && L.up && L.down && m.embed && m.unembed);
    TDYN_CHECK(lc.kv_source != l || (L.k && L.v));
    TDYN_CHECK(!c.gated_mlp || L.gate);
  }
  return m;
}

}  // namespace tdyn
