// The model description as data: one ModelConfig for every family and format. Parsers turn HF config.json,
// a llama2.c header or GGUF metadata into this struct; the forward pass reads only these fields.
//
// A family is a set of feature values, not a code path. The generic block (model/transformer.cpp) reads:
//   norm_placement   where each sublayer's norms sit (pre-norm, post-LN, post-sublayer, sandwich)
//   parallel_residual  attention and MLP read the same stream (GPT-NeoX use_parallel_residual)
//   learned_positions / n_token_types / embed_scale / d_embed (+ embedding LayerNorm, mapping_in)
//   qk_norm, v_norm, attn_scale, per-layer windows / RoPE / head sizes / KV sources (`layers`)
//   per_layer_input (Gemma 4 PLE), final_logit_softcap, mlm_head
// Features that are weights alone (Gemma 4's per-layer output scale) need no field: the block applies what is stored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/files.h"
#include "core/json_value.h"

namespace tdyn {

enum class NormKind { RMSNorm, LayerNorm };
enum class Activation { SiLU, GeluTanh, GeluErf, ReLU };
// RoPE pair layout: HF rotates halves (i, i + d_head/2); llama2.c and GGUF rotate adjacent pairs (2i, 2i+1).
enum class RopeStyle { None, RotateHalf, Interleaved };

// Where the norms of a sublayer f (attention or MLP) sit; x is the residual stream entering it.
//   Pre:          x + f(N(x))                          GPT-2, GPT-Neo, Llama
//   PostResidual: N(x + f(x))                          BERT, ALBERT (post-LN)
//   PostSublayer: x + N(f(x))                          OLMo 2/3
//   Sandwich:     x + N_post(f(N_pre(x)))              Gemma 2/3/4
enum class NormPlacement { Pre, PostResidual, PostSublayer, Sandwich };
// QK-norm: none, one RMSNorm over the whole q (k) projection (OLMo 2/3), or one per head (Gemma 3/4, Qwen 3).
enum class QKNorm { None, FullProjection, PerHead };

const char* to_string(NormKind k);
const char* to_string(Activation a);
const char* to_string(RopeStyle s);
const char* to_string(NormPlacement p);
const char* to_string(QKNorm q);

inline bool has_pre_norm(NormPlacement p) { return p == NormPlacement::Pre || p == NormPlacement::Sandwich; }
inline bool has_post_norm(NormPlacement p) { return p != NormPlacement::Pre; }

// Layer counts above this are corruption, not a model (per-layer settings are allocated from the count).
inline constexpr int64_t kMaxLayers = 1 << 16;

struct RopeConfig {
  RopeStyle style = RopeStyle::None;
  double theta = 10000.0;
  // rope_scaling: "default" (none), "linear" (positions / factor), "llama3" (wavelength-dependent frequency
  // scaling of Llama 3.1) or "proportional" (Gemma 4: only the first partial_rotary_factor * d_head / 2
  // frequencies rotate, with exponents over the full d_head; the rest are 0, i.e. pass through).
  std::string scaling = "default";
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  // "proportional": see above. Any other scaling (Phi-3 partial_rotary_factor): only the first
  // rotary_dim(d_head) = int(factor * d_head) dimensions of each head rotate, as rotate-half pairs
  // (i, i + rotary_dim / 2) over frequencies with exponents 2i / rotary_dim; the rest pass through.
  double partial_rotary_factor = 1.0;
  int64_t original_max_position = 0;
  // Per-frequency divisors stored with the weights (GGUF rope_freqs.weight, llama.cpp's form of llama3
  // scaling); empty when absent. Applied after `scaling`.
  std::vector<double> freq_divisors;

  // Head dimensions that RoPE reads (pairs it rotates, times 2 and then the pass-through dimensions after them).
  int64_t rotary_dim(int64_t d_head) const;
};

// Per-layer deviations from the model-wide fields. A value of 0 / -1 / empty means "as the model".
struct LayerOverrides {
  int64_t d_head = 0;                 // Gemma 4 full-attention layers: global_head_dim
  int64_t d_mlp = 0;                  // Gemma 4 double-wide MLP on KV-shared layers
  int64_t sliding_window = 0;         // >0: key j visible from query i iff i - window < j <= i
  std::optional<RopeConfig> rope;     // OLMo 3 / Gemma 4: per layer type
  int64_t kv_source = -1;             // Gemma 4 KV sharing: the earlier layer whose keys/values this layer reads
  int64_t weights = -1;               // ALBERT: index of the stored layer whose weights this layer reuses
  double attn_scale = 0;              // GPT-2 scale_attn_by_inverse_layer_idx
};

// A layer's resolved settings (model-wide values with its overrides applied).
struct LayerConfig {
  int64_t d_head, d_mlp, sliding_window;
  RopeConfig rope;
  int64_t kv_source;  // == the layer itself unless it reuses an earlier layer's keys/values
  int64_t weights;    // stored layer index (== the layer itself unless weights are shared)
  double attn_scale;
};

struct ModelConfig {
  std::string family;  // "llama", "mistral", "qwen2", "qwen3", "phi3", "gpt2", "gpt_neo", "gpt_neox", "bert", "albert", "olmo3", "gemma4"
  std::string format;  // "hf", "llama2c", "gguf"
  int64_t d_model = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, d_head = 0, d_mlp = 0, d_vocab = 0;
  int64_t n_ctx = 0;  // maximum positions (max_position_embeddings / n_positions / seq_len)
  NormKind norm = NormKind::RMSNorm;
  double norm_eps = 1e-5;
  NormPlacement norm_placement = NormPlacement::Pre;
  // Parallel block (GPT-NeoX use_parallel_residual, Pre placement only): both sublayers read the layer's input,
  //   resid_post = resid_pre + attn(N1(resid_pre)) + mlp(N2(resid_pre)).
  // hook_resid_mid is then resid_pre + attn_out, a point the MLP does not read (see model/transformer.h).
  bool parallel_residual = false;
  Activation activation = Activation::SiLU;
  bool gated_mlp = true;  // SwiGLU / GeGLU: down(act(gate x) * up x)
  bool attn_qkv_bias = false, attn_o_bias = false, mlp_bias = false;
  double attn_scale = 0;  // multiplies q.k; 1/sqrt(d_head) unless the family says otherwise
  bool causal = true;     // false: bidirectional encoder (BERT, ALBERT)
  RopeConfig rope;

  // Embeddings. Token (and position / token-type) tables are [*, d_embed]; d_embed == d_model unless the
  // embedding is factorised (ALBERT embedding_size, mapped to d_model by embedding_hidden_mapping_in).
  int64_t d_embed = 0;              // 0: d_model
  bool learned_positions = false;   // absolute position table [n_ctx, d_embed] (GPT-2, GPT-Neo, BERT, ALBERT)
  int64_t n_token_types = 0;        // token-type (segment) table [n_token_types, d_embed] (BERT, ALBERT)
  bool embed_norm = false;          // LayerNorm over the summed embeddings (BERT, ALBERT)
  double embed_scale = 1.0;         // token embeddings multiplied by this (Gemma: sqrt(d_model))

  // Attention features.
  QKNorm qk_norm = QKNorm::None;
  bool v_norm = false;              // Gemma 4: values RMS-normalised per head, without a learned scale

  // Gemma 4 ("E" variants) per-layer inputs: a second embedding table [d_vocab_per_layer, n_layers * d_per_layer]
  // plus a projection of the embeddings, mixed into every layer after its MLP through a gated branch.
  int64_t d_per_layer_input = 0;    // hidden_size_per_layer_input; 0: no per-layer inputs
  int64_t d_vocab_per_layer = 0;    // vocab_size_per_layer_input

  // Output head.
  bool tied_embeddings = false;
  bool mlm_head = false;            // BERT/ALBERT MLM head: LN(act(dense x)) then decoder (+ bias)
  double final_logit_softcap = 0;   // >0: logits = cap * tanh(logits / cap) (Gemma)

  std::vector<LayerOverrides> layers;  // empty, or one entry per layer
  std::optional<int32_t> bos_id, eos_id;
  JsonValue source;  // the raw description it was parsed from, for `tdyn info`

  int64_t q_dim() const { return n_heads * d_head; }
  int64_t kv_dim() const { return n_kv_heads * d_head; }
  int64_t embed_dim() const { return d_embed > 0 ? d_embed : d_model; }
  bool is_encoder() const { return !causal; }
  // The settings of layer `l` with its overrides applied.
  LayerConfig layer(int64_t l) const;
  // Number of distinct stored layers (ALBERT: num_hidden_groups; else n_layers).
  int64_t n_stored_layers() const;
  // Checks internal consistency (positive sizes, heads divide, GQA groups); throws Error naming `origin`.
  void validate(const std::string& origin) const;
};

struct ConfigParseOptions {
  bool allow_unknown_keys = false;  // unknown config.json keys are an error unless allowed (then a warning)
};

// Parses a Hugging Face config.json (dispatching on model_type: llama, mistral, qwen2, qwen3, phi3, gpt2, gpt_neo,
// gpt_neox, bert, albert, olmo3, gemma4 / gemma4_text).
ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& origin, const ConfigParseOptions& opts = {});
ModelConfig read_hf_config(const fs::path& config_json, const ConfigParseOptions& opts = {});

// RoPE inverse frequencies [rope.rotary_dim(d_head) / 2] after scaling, in float64: entry i rotates the pair
// (i, i + size) (rotate-half) or (2i, 2i + 1) (interleaved); head dimensions past 2 * size pass through.
std::vector<double> rope_inv_freq(const RopeConfig& rope, int64_t d_head);

}  // namespace tdyn
