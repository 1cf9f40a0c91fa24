// The BERT-style masked-LM encoders: BERT and ALBERT (factorised embeddings, layer groups shared across depth).
#include "model/families/definitions.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "model/config_json.h"
#include "model/family_tables.h"

namespace tdyn {
namespace {

using namespace config_json;
using namespace family_tables;

// Settings shared by the BERT-style encoders: post-LN, absolute learned positions, token types, embedding
// LayerNorm, bidirectional attention, MLM head tied to the word embeddings.
void encoder_common(const nlohmann::json& j, ModelConfig& c, const std::string& origin) {
  std::string pos = get_or<std::string>(j, "position_embedding_type", "absolute", origin);
  if (pos != "absolute")
    fail("{}: position_embedding_type '{}' is not supported (supported: absolute)", origin, pos);
  if (get_or<bool>(j, "is_decoder", false, origin))
    fail("{}: is_decoder = true (a causal {}) is not supported", origin, c.family);
  c.d_vocab = get_int(j, "vocab_size", c.d_vocab, origin);
  c.d_model = get_int(j, "hidden_size", c.d_model, origin);
  c.n_layers = get_layer_count(j, "num_hidden_layers", 12, origin);
  c.n_heads = c.n_kv_heads = get_int(j, "num_attention_heads", c.n_heads, origin);
  if (c.n_heads <= 0) fail("{}: num_attention_heads must be positive", origin);
  c.d_head = c.d_model / c.n_heads;
  if (c.d_head * c.n_heads != c.d_model)
    fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", origin, c.d_model, c.n_heads);
  c.d_mlp = get_int(j, "intermediate_size", c.d_mlp, origin);
  c.n_ctx = get_int(j, "max_position_embeddings", 512, origin);
  c.n_token_types = get_int(j, "type_vocab_size", 2, origin);
  c.norm = NormKind::LayerNorm;
  c.norm_eps = get_or<double>(j, "layer_norm_eps", 1e-12, origin);
  c.norm_placement = NormPlacement::PostResidual;
  c.gated_mlp = false;
  c.attn_qkv_bias = c.attn_o_bias = c.mlp_bias = true;
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  c.causal = false;
  c.learned_positions = true;
  c.embed_norm = true;
  c.mlm_head = true;
  c.tied_embeddings = get_or<bool>(j, "tie_word_embeddings", true, origin);
}

// BertForMaskedLM (HF BertConfig defaults).
ModelConfig parse_bert(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  static const std::set<std::string> keys = {
      "classifier_dropout", "hidden_act", "hidden_size", "intermediate_size", "layer_norm_eps",
      "max_position_embeddings", "num_attention_heads", "num_hidden_layers", "position_embedding_type",
      "type_vocab_size", "vocab_size"};
  check_keys(j, keys, origin, opts);
  ModelConfig c;
  c.family = "bert";
  c.format = "hf";
  c.d_vocab = 30522;
  c.d_model = 768;
  c.n_heads = 12;
  c.d_mlp = 3072;
  encoder_common(j, c, origin);
  c.activation = parse_activation(get_or<std::string>(j, "hidden_act", "gelu", origin), "hidden_act", origin);
  return c;
}

// AlbertForMaskedLM (HF AlbertConfig defaults). Factorised embeddings; layer groups shared across depth.
ModelConfig parse_albert(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts) {
  // down_scale_factor, gap_size, net_structure_type, num_memory_blocks: kept in AlbertConfig for the original
  // TF code; the HF modeling code never reads them.
  static const std::set<std::string> keys = {
      "classifier_dropout_prob", "down_scale_factor", "embedding_size", "gap_size", "hidden_act", "hidden_size",
      "inner_group_num", "intermediate_size", "layer_norm_eps", "max_position_embeddings", "net_structure_type",
      "num_attention_heads", "num_hidden_groups", "num_hidden_layers", "num_memory_blocks",
      "position_embedding_type", "type_vocab_size", "vocab_size"};
  check_keys(j, keys, origin, opts);
  ModelConfig c;
  c.family = "albert";
  c.format = "hf";
  c.d_vocab = 30000;
  c.d_model = 4096;
  c.n_heads = 64;
  c.d_mlp = 16384;
  encoder_common(j, c, origin);
  c.activation = parse_activation(get_or<std::string>(j, "hidden_act", "gelu_new", origin), "hidden_act", origin);
  c.d_embed = get_int(j, "embedding_size", 128, origin);
  int64_t inner = get_int(j, "inner_group_num", 1, origin);
  if (inner != 1) fail("{}: inner_group_num = {} is not supported (supported: 1)", origin, inner);
  int64_t groups = get_int(j, "num_hidden_groups", 1, origin);
  if (groups <= 0 || groups > c.n_layers)
    fail("{}: num_hidden_groups must be in [1, num_hidden_layers = {}], got {}", origin, c.n_layers, groups);
  // AlbertTransformer: layer i runs group int(i / (num_hidden_layers / num_hidden_groups)).
  c.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    c.layers[l].weights = static_cast<int64_t>(static_cast<double>(l) / (static_cast<double>(c.n_layers) / groups));
  }
  return c;
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

}  // namespace

FamilyDefinition encoders_family() {
  FamilyDefinition f;
  f.model_types = {{"bert", parse_bert}, {"albert", parse_albert}};
  auto& tables = f.tables;
  tables.push_back(bert_table());
  tables.push_back(albert_table());
  return f;
}

}  // namespace tdyn
