// The forward pass: one generic block driven by ModelConfig fields, evaluating a chunk of positions at a
// time. A whole sequence (analysis) is one chunk starting at position 0; generation feeds one token per
// chunk against a KV cache. Activations are exposed through an optional ActivationCache (model/hooks.h).
//
// A layer is two (Gemma 4: three) residual steps, each a named public function so that analyses can run one
// sublayer on inputs of their choice. Their wiring (norm placement, residual, per-layer-input branch, layer scalar)
// is model/block.h's, shared with the Jacobians' float64 reference:
//   attention_block:  resid_pre -> resid_mid   (pre-norm, attention, post-norm, residual add, per NormPlacement)
//   mlp_block:        resid_mid -> resid_post  (likewise; Gemma 4 adds its per-layer-input branch and output scale)
// A parallel-residual block (GPT-NeoX) runs the same two steps, but its MLP reads the
// layer's input: resid_mid = resid_pre + attn(ln1(resid_pre)), resid_post = resid_mid + mlp(ln2(resid_pre)).
// Its hook_resid_mid is thus the stream with only the attention output added, a point no sublayer reads, and
// ln1 / ln2.hook_normalized are both norms of resid_pre.
//
// Hook names follow TransformerLens; what each holds for every norm placement:
//   hook_embed [pos, d_embed]           token embeddings (times embed_scale)
//   hook_pos_embed, hook_token_type_embed [pos, d_embed]   learned position / token-type rows
//   embed.ln.hook_normalized [pos, d_embed]   BERT/ALBERT embedding LayerNorm output (ALBERT: before mapping_in)
//   hook_per_layer_inputs [pos, n_layers, d_per_layer]      Gemma 4 per-layer inputs
//   blocks.{l}.hook_resid_pre / hook_resid_mid / hook_resid_post [pos, d_model]
//   blocks.{l}.ln1.hook_normalized, ln2.hook_normalized     pre-norm outputs (Pre, Sandwich)
//   blocks.{l}.attn.hook_q [pos, n_heads, d_head], hook_k / hook_v [pos, n_kv_heads, d_head] (after QK-norm,
//       v-norm and RoPE; not emitted by KV-shared layers), attn.hook_pattern [n_heads, pos, n_keys],
//       attn.hook_z [pos, n_heads, d_head]
//   blocks.{l}.attn.hook_out_proj / mlp.hook_out_proj [pos, d_model]  output projection incl. bias, before any
//       post-norm (equal to hook_attn_out / hook_mlp_out for Pre and PostResidual placements)
//   blocks.{l}.hook_attn_out / hook_mlp_out [pos, d_model]   what the sublayer adds to the stream:
//       Pre, PostSublayer, Sandwich: resid_mid = resid_pre + attn_out, resid_post = resid_mid + mlp_out (exact;
//       parallel blocks too, with mlp_out computed from resid_pre)
//       PostResidual (BERT, ALBERT): resid_mid = LN(resid_pre + attn_out), resid_post = LN(resid_mid + mlp_out)
//   blocks.{l}.mlp.hook_pre [pos, d_mlp] (gated: the gate), mlp.hook_pre_linear (gated: up), mlp.hook_post
//   Gemma 4 only: blocks.{l}.hook_resid_after_mlp = resid_mid + mlp_out;
//       blocks.{l}.hook_ple_out (the post-normed per-layer-input branch);
//       blocks.{l}.hook_resid_after_ple = hook_resid_after_mlp + hook_ple_out;
//       hook_resid_post = hook_resid_after_ple * the layer's stored scalar (layer_output_scale)
//   ln_final.hook_normalized [pos, d_model]   final norm output (families with one)
//   mlm.hook_transform [pos, d_embed]         BERT/ALBERT MLM head transform output
//   hook_logits_pre_softcap [pos, d_vocab]    Gemma logits before soft-capping
#pragma once

#include <memory>
#include <set>
#include <span>

#include "model/hooks.h"
#include "model/loader.h"

namespace tdyn {

// Keys and values of past positions, per layer: [max_positions, n_kv_heads * d_head(layer)] each. Layers that
// read another layer's keys/values (Gemma 4 KV sharing) hold empty tensors.
struct KVCache {
  std::vector<Tensor> k, v;
  int64_t length = 0;  // positions filled
  int64_t capacity() const { return k.empty() ? 0 : k[0].dim(0); }
};

class RopeTable;

enum class Sublayer { Attention, Mlp };

class Transformer {
 public:
  explicit Transformer(std::shared_ptr<const Model> model);

  const ModelConfig& config() const { return model_->config; }
  const Model& model() const { return *model_; }
  const std::shared_ptr<const Model>& shared_model() const { return model_; }
  const LayerConfig& layer_config(int64_t layer) const { return layers_.at(layer); }

  // Evaluates tokens `ids` at positions cache->length .. + ids.size() - 1 (0.. without a cache) and returns
  // logits [ids.size(), d_vocab]. With a cache the new keys/values are appended to it. `token_types` (segment
  // ids, one per token; default all 0) only for encoders with a token-type table. Learned-position models
  // reject positions >= n_ctx; encoders take no cache.
  Tensor forward(std::span<const int32_t> ids, ActivationCache* hooks = nullptr, KVCache* cache = nullptr,
                 std::span<const int32_t> token_types = {}) const;

  KVCache new_cache(int64_t max_positions) const;

  // Every hook name forward() offers, as a one-token pass finds them (so the list cannot drift from the code).
  std::set<std::string> hook_names() const;
  // Throws Error, before any real work, when a pattern of `patterns` matches none of hook_names().
  void check_hook_patterns(const std::string& patterns) const;
  // The hooks an ActivationCache's edits may change (forward goes on from the edited values): every layer's
  // hook_resid_pre, hook_resid_mid, hook_resid_post, hook_attn_out, hook_mlp_out, attn.hook_z and mlp.hook_post.
  // The others (norms' outputs, q/k/v, patterns, embeddings, logits) are read-only.
  std::set<std::string> writable_hook_names() const;

  // ---- The steps of forward(), for analyses that run pieces of the model. `start`: absolute position of
  // the first row; x: residual stream [n, d_model].
  //
  // Every step checks what it produces for NaN/Inf (model/finite.h) and throws tdyn::Error naming the hook,
  // layer, position and unit: the embeddings (as blocks.0.hook_resid_pre), each sublayer output
  // (attn.hook_out_proj, mlp.hook_out_proj), the stream after each residual step (hook_resid_mid,
  // hook_resid_post) and the logits. Each input was checked by the step before, so the first failure names the
  // step that made the value. One pass over [n, d_model] per check, next to the step's matrix products.

  // Residual stream entering layer 0 [n, d_model]: token (+ position, + token-type) embeddings, embedding norm,
  // ALBERT mapping_in. `token_types` empty: all 0. Validates ids, types and positions.
  Tensor embed(std::span<const int32_t> ids, int64_t start, std::span<const int32_t> token_types = {},
               ActivationCache* hooks = nullptr) const;
  // Gemma 4 per-layer input of one layer [n, d_per_layer] from the ids and the embeddings [n, d_model] (an empty
  // tensor for families without them), and of every layer (the hook_per_layer_inputs capture assembles them).
  Tensor per_layer_input(int64_t layer, std::span<const int32_t> ids, const Tensor& embeddings) const;
  std::vector<Tensor> per_layer_inputs(std::span<const int32_t> ids, const Tensor& embeddings,
                                       ActivationCache* hooks = nullptr) const;
  // resid_pre -> resid_mid in place. Keys/values of the layer (positions start..) are written to `cache` when
  // it has storage for the layer, and attention reads keys 0 .. start + n - 1 from there; a layer without
  // storage (no cache, or an empty tensor in it) attends within the chunk only, which must then start at 0.
  // A KV-shared layer reads its source layer's storage, which must hold this chunk (forward() keeps it).
  void attention_block(int64_t layer, Tensor& x, int64_t start, KVCache* cache, ActivationCache* hooks = nullptr) const;
  // attention_block in its three parts, so that several sequences' rows can share the projections' products:
  //   attention_in   x [n, d_model] (resid_pre) -> the pre-norm's output projected by W_Q, W_K, W_V, raw (no keys or
  //                  values on a KV-shared layer); row by row, so the rows of several sequences may be stacked.
  //   attention_mix  one sequence's projections -> z [n, n_heads * d_head]: QK-norms, RoPE, the KV cache (as above),
  //                  the softmax mix.
  //   attention_out  z -> W_O and the residual step into x (resid_pre -> resid_mid); row by row again.
  struct AttentionProjections {
    Tensor q, k, v;
  };
  AttentionProjections attention_in(int64_t layer, const Tensor& x, ActivationCache* hooks = nullptr) const;
  Tensor attention_mix(int64_t layer, AttentionProjections p, int64_t start, KVCache* cache,
                       ActivationCache* hooks = nullptr) const;
  void attention_out(int64_t layer, Tensor& x, const Tensor& z, int64_t start, ActivationCache* hooks = nullptr) const;
  // resid_mid -> resid_post in place. per_layer_input: this layer's [n, d_per_layer] (Gemma 4) or null.
  // `start` (here, in mlp() and unembed()) only numbers the positions in NaN/Inf errors. resid_pre: the layer's
  // input, which a parallel-residual block's MLP reads (required there, ignored elsewhere).
  void mlp_block(int64_t layer, Tensor& x, const float* per_layer_input, ActivationCache* hooks = nullptr,
                 int64_t start = 0, const Tensor* resid_pre = nullptr) const;
  // How the layer's steps are wired, for analyses that chain their maps (analysis/jacobian): whether the MLP step
  // reads the layer's input (hook_resid_pre) as the attention step does, where it otherwise reads hook_resid_mid
  // (a parallel block: GPT-NeoX), and the factor the layer's output is multiplied by (Gemma 4's layer scalar; 1
  // elsewhere).
  bool mlp_reads_layer_input() const;
  float layer_output_scale(int64_t layer) const;
  // One whole layer, resid_pre -> resid_post in place (blocks.{l}.hook_resid_pre captured first): attention_block,
  // then mlp_block reading the layer's input where the block is parallel. Arguments as there.
  void layer_step(int64_t layer, Tensor& x, int64_t start, KVCache* cache, const float* per_layer_input,
                  ActivationCache* hooks = nullptr) const;
  // The residual stream after the last layer [n, d_model] -> logits [n, d_vocab] (final norm, MLM head
  // transform, unembedding, soft-capping).
  Tensor unembed(const Tensor& x, ActivationCache* hooks = nullptr, int64_t start = 0) const;

  // The sublayer functions themselves, without norms around them or the residual: input [n, d_model] (already
  // pre-normed where the family pre-norms) -> output projection incl. bias [n, d_model].
  Tensor attention(int64_t layer, const Tensor& input, int64_t start, KVCache* cache, ActivationCache* hooks = nullptr) const;
  Tensor mlp(int64_t layer, const Tensor& input, ActivationCache* hooks = nullptr, int64_t start = 0) const;

  // The maps the power analogy iterates when the residual connections are removed: one sublayer within its norms,
  // as NormPlacement places them (Pre: f(N(x)); PostResidual, PostSublayer: N(f(x)); Sandwich: N_post(f(N_pre(x)))),
  // and a whole layer: its sublayers composed f_mlp(f_attn(x)), or summed f_attn(x) + f_mlp(x) in a parallel block,
  // times the layer scalar (Gemma 4). The per-layer-input branch is left out. Keys and values as in attention().
  // `hooks` sees (and may edit) the sublayers' hooks, hook_attn_out and hook_mlp_out where the residual step offers them.
  Tensor sublayer_without_residual(int64_t layer, Sublayer which, const Tensor& x, int64_t start, KVCache* cache,
                                   ActivationCache* hooks = nullptr) const;
  Tensor layer_without_residual(int64_t layer, const Tensor& x, int64_t start, KVCache* cache,
                                ActivationCache* hooks = nullptr) const;

 private:
  // A one-token pass with a cache that keeps nothing and lists every hook offered to it.
  ActivationCache listing() const;
  // The projections of the attention sublayer: W_Q, W_K, W_V of an input already pre-normed, and W_O of z.
  AttentionProjections project_qkv(int64_t layer, const Tensor& input) const;
  Tensor project_out(int64_t layer, const Tensor& z, int64_t start, ActivationCache* hooks) const;
  // forward() once its arguments are checked.
  Tensor run_chunk(std::span<const int32_t> ids, ActivationCache* hooks, KVCache* cache,
                   std::span<const int32_t> token_types) const;
  // The layer's RoPE table: one already built with the same style and frequencies, or a new one.
  std::shared_ptr<const RopeTable> rope_table(const LayerConfig& layer) const;

  std::shared_ptr<const Model> model_;
  std::vector<LayerConfig> layers_;                // resolved per-layer settings
  std::vector<std::shared_ptr<const RopeTable>> rope_;  // per layer; layers with the same frequencies share one
  std::vector<bool> is_kv_source_;                 // read by a later KV-shared layer
};

}  // namespace tdyn
