#include "model/transformer.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/heap.h"
#include "model/block.h"
#include "model/finite.h"
#include "kernels/products.h"
#include "kernels/team.h"
#include "model/ops.h"

namespace tdyn {
namespace {

std::string block_hook(int64_t layer, const char* name) { return fmt::format("blocks.{}.{}", layer, name); }

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void hook(ActivationCache* hooks, const std::string& name, const float* data, Shape shape) {
  if (hooks) hooks->capture(name, data, std::move(shape));
}

// A block's hook: the name is only formatted when activations are being captured or edited.
void hook(ActivationCache* hooks, int64_t layer, const char* name, const float* data, Shape shape) {
  if (hooks) hooks->capture(block_hook(layer, name), data, std::move(shape));
}

// A writable block hook: the cache's edits change `data` in place, and the pass goes on from the edited values.
void edit_hook(ActivationCache* hooks, int64_t layer, const char* name, int64_t start, float* data, Shape shape) {
  if (hooks) hooks->edit_and_capture(block_hook(layer, name), start, data, std::move(shape));
}

// block.h's layer step on float32 rows [n, d] of one layer: the pre-norms capture ln1 / ln2.hook_normalized, and
// what a residual step adds is the writable hook hook_attn_out / hook_mlp_out.
struct RowsStep {
  using Value = Tensor;
  const ModelConfig& c;
  const LayerWeights& w;
  int64_t layer = 0;
  int64_t start = 0;  // absolute position of the first row
  ActivationCache* hooks = nullptr;
  const RopeTable* rope_table = nullptr;  // the layer's (for rope())
  float layer_scale = 1;                  // Transformer::layer_output_scale (for finish_layer)
  const float* per_layer_input = nullptr;  // [n, d_per_layer] (Gemma 4, for finish_layer)

  const ModelConfig& config() const { return c; }
  const LayerWeights& weights() const { return w; }
  void norm(const Tensor& in, Tensor& out, block::NormSite site) const {
    if (&out != &in) out = Tensor(in.shape);
    apply_norm(block::norm_kind(c, site), in.ptr(), in.dim(0), in.dim(1), block::norm_weights(w, site), c.norm_eps, out.ptr());
    if (site == block::NormSite::AttnPre) capture(out, "ln1.hook_normalized");
    if (site == block::NormSite::MlpPre) capture(out, "ln2.hook_normalized");
  }
  void norm_heads(Tensor& x, int64_t heads, block::NormSite site) const {
    apply_norm(block::norm_kind(c, site), x.ptr(), x.dim(0) * heads, x.dim(1) / heads, block::norm_weights(w, site),
               c.norm_eps, x.ptr());
  }
  void rope(Tensor& x, int64_t heads) const { apply_rope(*rope_table, x.ptr(), x.dim(0), heads, x.dim(1) / heads, start); }
  void added(Tensor& f, Sublayer which) const {
    edit_hook(hooks, layer, which == Sublayer::Attention ? "hook_attn_out" : "hook_mlp_out", start, f.ptr(), f.shape);
  }
  void add(Tensor& x, const Tensor& y) const { add_inplace(x.ptr(), y.ptr(), x.size()); }
  Tensor linear(const Linear& l, const Tensor& x) const {
    Tensor y({x.dim(0), l.out});
    l.apply(x.ptr(), x.dim(0), y.ptr());
    return y;
  }
  void gate_by_per_layer_input(Tensor& g) const {
    TDYN_CHECK(per_layer_input != nullptr);
    const int64_t P = g.dim(1);
    for (int64_t i = 0; i < g.dim(0); ++i) {
      const float* input = per_layer_input + i * P;
      for (int64_t j = 0; j < P; ++j) g.row(i)[j] = activate(c.activation, g.row(i)[j]) * input[j];
    }
  }
  void capture(const Tensor& x, const char* name) const { hook(hooks, layer, name, x.ptr(), x.shape); }
  void capture_heads(const Tensor& x, int64_t heads, const char* name) const {
    hook(hooks, layer, name, x.ptr(), {x.dim(0), heads, x.dim(1) / heads});
  }
  double output_scale() const { return layer_scale; }
  void scale(Tensor& x, double s) const {
    const float f = static_cast<float>(s);
    for (float& v : x.data) v *= f;
  }
};

// `value` rounded to a checkpoint dtype, as torch's `scale.to(weight.dtype)` does (round to nearest even).
float round_to_dtype(double value, DType dtype) {
  const float f = static_cast<float>(value);
  if (dtype == DType::F16) return half_to_float(float_to_half(f));
  if (dtype == DType::BF16) return bf16_to_float(float_to_bf16(f));
  return f;
}

}  // namespace

// Positions whose RoPE angles are tabled (2 × 4096 × d_head / 2 floats at most per distinct table); a longer
// context computes the rest per call.
constexpr int64_t kTabledRopePositions = 4096;

std::shared_ptr<const RopeTable> Transformer::rope_table(const LayerConfig& layer) const {
  std::vector<double> inv_freq = rope_inv_freq(layer.rope, layer.d_head);
  for (const auto& table : rope_)
    if (table->style() == layer.rope.style && table->inv_freq() == inv_freq) return table;
  const int64_t n_ctx = config().n_ctx;
  const int64_t tabled = n_ctx > 0 ? std::min(n_ctx, kTabledRopePositions) : kTabledRopePositions;
  return std::make_shared<const RopeTable>(layer.rope.style, std::move(inv_freq), tabled);
}

Transformer::Transformer(std::shared_ptr<const Model> model) : model_(std::move(model)) {
  reuse_large_buffers();
  const ModelConfig& c = config();
  // The parallel block below (mlp_reads_layer_input) places its norms as GPT-NeoX does, and nothing else.
  if (c.parallel_residual && (c.norm_placement != NormPlacement::Pre || c.d_per_layer_input > 0))
    fail("{}: a parallel-residual block is only supported with pre-norms and without per-layer inputs", model_->path.string());
  is_kv_source_.assign(c.n_layers, false);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    layers_.push_back(c.layer(l));
    rope_.push_back(rope_table(layers_[l]));
    if (layers_[l].kv_source != l) is_kv_source_[layers_[l].kv_source] = true;
  }
}

ActivationCache Transformer::listing() const {
  ActivationCache listing = ActivationCache::keeping_nothing();
  const int32_t token = 0;
  forward(std::span(&token, 1), &listing);
  return listing;
}

std::set<std::string> Transformer::hook_names() const { return listing().offered(); }

std::set<std::string> Transformer::writable_hook_names() const { return listing().offered_writable(); }

void Transformer::check_hook_patterns(const std::string& patterns) const {
  ActivationCache(patterns).require_every_pattern_matches(hook_names());
}

KVCache Transformer::new_cache(int64_t max_positions) const {
  const ModelConfig& c = config();
  if (c.is_encoder()) fail("{} is a bidirectional encoder: it has no KV cache (run whole sequences)", c.family);
  if (max_positions <= 0) fail("a KV cache needs a positive number of positions, got {}", max_positions);
  KVCache cache;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const bool own = layers_[l].kv_source == l;
    const Shape shape = own ? Shape{max_positions, c.n_kv_heads * layers_[l].d_head} : Shape{0, 0};
    cache.k.emplace_back(shape);
    cache.v.emplace_back(shape);
  }
  return cache;
}

Tensor Transformer::embed(std::span<const int32_t> ids, int64_t start, std::span<const int32_t> token_types,
                          ActivationCache* hooks) const {
  const ModelConfig& c = config();
  const ModelWeights& W = model_->weights;
  const int64_t n = static_cast<int64_t>(ids.size()), E = c.embed_dim();
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= c.d_vocab)
      fail("token id {} at position {} is outside the vocabulary [0, {})", ids[i], start + i, c.d_vocab);
  }
  if (!token_types.empty()) {
    if (static_cast<int64_t>(token_types.size()) != n)
      fail("{} token types given for {} tokens", token_types.size(), n);
    for (int64_t i = 0; i < n; ++i) {
      if (c.n_token_types == 0 && token_types[i] != 0)
        fail("token type {} at position {}: {} has no token-type embeddings (only encoders such as BERT do)",
             token_types[i], start + i, c.family);
      if (c.n_token_types > 0 && (token_types[i] < 0 || token_types[i] >= c.n_token_types))
        fail("token type {} at position {} is outside [0, {}) (type_vocab_size)", token_types[i], start + i, c.n_token_types);
    }
  }
  if (c.learned_positions && start + n > c.n_ctx)
    fail("positions {}..{} exceed the {} learned positions of this {} model", start, start + n - 1, c.n_ctx, c.family);

  Tensor e({n, E});  // summed embeddings [pos, d_embed]
  gather_rows(W.embed, ids, 0, E, e.ptr());
  const float scale = round_to_dtype(c.embed_scale, W.embed_dtype);
  if (scale != 1.0f)
    for (float& v : e.data) v *= scale;
  hook(hooks, "hook_embed", e.ptr(), {n, E});
  if (c.n_token_types > 0) {  // BertEmbeddings: word + token_type, then + position
    Tensor types({n, E});
    for (int64_t i = 0; i < n; ++i) {
      const int64_t type = token_types.empty() ? 0 : token_types[i];
      std::memcpy(types.row(i), W.token_type_embed + type * E, E * sizeof(float));
    }
    hook(hooks, "hook_token_type_embed", types.ptr(), {n, E});
    add_inplace(e.ptr(), types.ptr(), e.size());
  }
  if (c.learned_positions) {
    const float* pos = W.pos_embed + start * E;
    hook(hooks, "hook_pos_embed", pos, {n, E});
    add_inplace(e.ptr(), pos, e.size());
  }
  if (c.embed_norm) {
    apply_norm(c.norm, e.ptr(), n, E, W.embed_norm, c.norm_eps, e.ptr());
    hook(hooks, "embed.ln.hook_normalized", e.ptr(), {n, E});
  }
  if (W.embed_map) {
    Tensor x({n, c.d_model});  // ALBERT embedding_hidden_mapping_in: [pos, d_embed] -> [pos, d_model]
    W.embed_map.apply(e.ptr(), n, x.ptr());
    e = std::move(x);
  }
  check_finite(e, start, 0, "hook_resid_pre", "the embeddings");
  return e;
}

Tensor Transformer::per_layer_input(int64_t l, std::span<const int32_t> ids, const Tensor& embeddings) const {
  const ModelConfig& c = config();
  const ModelWeights& W = model_->weights;
  if (c.d_per_layer_input == 0) return {};
  // Gemma4TextModel.get_per_layer_inputs / project_per_layer_inputs, columns [l P, (l + 1) P) of both terms:
  //   (RMSNorm_P(per_layer_model_projection(x0) * d_model^-0.5) + embed_tokens_per_layer(ids) * sqrt(P)) * 2^-0.5
  // Only this layer's slice of the table and of the projection is read.
  const int64_t n = static_cast<int64_t>(ids.size()), P = c.d_per_layer_input;
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] >= c.d_vocab_per_layer)
      fail("token id {} has no per-layer embedding (vocab_size_per_layer_input = {})", ids[i], c.d_vocab_per_layer);
  Tensor tokens({n, P});  // [pos, d_per_layer]
  gather_rows(W.ple_embed, ids, l * P, P, tokens.ptr());
  const float token_scale = round_to_dtype(std::sqrt(static_cast<double>(P)), W.ple_embed_dtype);
  Tensor out({n, P});
  Linear projection = W.ple_model_proj;
  projection.w = projection.w.row_slice(l * P, P);
  projection.out = P;
  projection.apply(embeddings.ptr(), n, out.ptr());
  const float proj_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.d_model)));
  for (float& v : out.data) v *= proj_scale;
  rms_norm(out.ptr(), n, P, W.ple_proj_norm, c.norm_eps, out.ptr());
  const float mix = static_cast<float>(1.0 / std::sqrt(2.0));
  for (int64_t i = 0; i < out.size(); ++i) out.data[i] = (out.data[i] + tokens.data[i] * token_scale) * mix;
  return out;
}

std::vector<Tensor> Transformer::per_layer_inputs(std::span<const int32_t> ids, const Tensor& embeddings,
                                                  ActivationCache* hooks) const {
  const ModelConfig& c = config();
  if (c.d_per_layer_input == 0) return {};
  std::vector<Tensor> inputs;
  for (int64_t l = 0; l < c.n_layers; ++l) inputs.push_back(per_layer_input(l, ids, embeddings));
  if (hooks && hooks->wants("hook_per_layer_inputs")) {
    const int64_t n = static_cast<int64_t>(ids.size()), L = c.n_layers, P = c.d_per_layer_input;
    Tensor all({n, L, P});
    for (int64_t i = 0; i < n; ++i)
      for (int64_t l = 0; l < L; ++l) std::copy_n(inputs[l].row(i), P, all.ptr() + (i * L + l) * P);
    hook(hooks, "hook_per_layer_inputs", all.ptr(), all.shape);
  }
  return inputs;
}

Transformer::AttentionProjections Transformer::project_qkv(int64_t l, const Tensor& input) const {
  const ModelConfig& c = config();
  const LayerWeights& L = model_->weights.layers[l];
  const LayerConfig& lc = layers_[l];
  const int64_t n = input.dim(0), hd = lc.d_head;
  AttentionProjections p;
  p.q = Tensor({n, c.n_heads * hd});  // [pos, n_heads * d_head]
  if (lc.kv_source != l) {
    L.q.apply(input.ptr(), n, p.q.ptr());
    return p;
  }
  p.k = Tensor({n, c.n_kv_heads * hd});  // [pos, n_kv_heads * d_head]
  p.v = Tensor({n, c.n_kv_heads * hd});
  apply_each(input.ptr(), n, {{L.q, p.q.ptr()}, {L.k, p.k.ptr()}, {L.v, p.v.ptr()}});
  return p;
}

Transformer::AttentionProjections Transformer::attention_in(int64_t l, const Tensor& x, ActivationCache* hooks) const {
  const RowsStep step{.c = config(), .w = model_->weights.layers[l], .layer = l, .hooks = hooks};
  Tensor normed;
  return project_qkv(l, block::sublayer_input(step, Sublayer::Attention, x, normed));
}

Tensor Transformer::attention_mix(int64_t l, AttentionProjections p, int64_t start, KVCache* cache, ActivationCache* hooks) const {
  const ModelConfig& c = config();
  const LayerWeights& L = model_->weights.layers[l];
  const LayerConfig& lc = layers_[l];
  const int64_t n = p.q.dim(0), hd = lc.d_head, q_dim = c.n_heads * hd;
  const int64_t src = lc.kv_source;
  const bool own_kv = src == l;
  Tensor &q = p.q, &k = p.k, &v = p.v;  // k, v: this chunk's own keys/values
  const RowsStep step{.c = c, .w = L, .layer = l, .start = start, .hooks = hooks, .rope_table = rope_[l].get()};
  block::attention_inputs(step, q, k, v, own_kv);
  const float* keys = k.ptr();
  const float* values = v.ptr();
  int64_t n_keys = n;
  const bool stored = cache && !cache->k[src].data.empty();
  if (stored) {
    if (start + n > cache->k[src].dim(0))
      fail("sequence of {} positions exceeds the KV cache ({} positions)", start + n, cache->k[src].dim(0));
    if (own_kv) {
      std::memcpy(cache->k[l].row(start), k.ptr(), k.size() * sizeof(float));
      std::memcpy(cache->v[l].row(start), v.ptr(), v.size() * sizeof(float));
    }
    keys = cache->k[src].ptr();
    values = cache->v[src].ptr();
    n_keys = start + n;
  } else {
    TDYN_CHECK(own_kv && start == 0);  // a KV-shared layer needs its source's keys; a later chunk its past
  }

  const bool want_pattern = hooks && hooks->wants(block_hook(l, "attn.hook_pattern"));
  Tensor pattern = want_pattern ? Tensor({c.n_heads, n, n_keys}) : Tensor();
  Tensor z({n, q_dim});  // attention mix per head, before W_O
  AttentionShape shape{n, n_keys, start, c.n_heads, c.n_kv_heads, hd, lc.attn_scale, c.causal, lc.sliding_window};
  tdyn::attention(shape, q.ptr(), keys, values, z.ptr(), want_pattern ? pattern.ptr() : nullptr);
  if (want_pattern) hook(hooks, l, "attn.hook_pattern", pattern.ptr(), pattern.shape);
  edit_hook(hooks, l, "attn.hook_z", start, z.ptr(), {n, c.n_heads, hd});
  return z;
}

Tensor Transformer::project_out(int64_t l, const Tensor& z, int64_t start, ActivationCache* hooks) const {
  const int64_t n = z.dim(0), d = config().d_model;
  Tensor out({n, d});
  model_->weights.layers[l].o.apply(z.ptr(), n, out.ptr());
  check_finite(out, start, l, "attn.hook_out_proj", "the attention sublayer");
  hook(hooks, l, "attn.hook_out_proj", out.ptr(), {n, d});
  return out;
}

void Transformer::attention_out(int64_t l, Tensor& x, const Tensor& z, int64_t start, ActivationCache* hooks) const {
  const RowsStep step{.c = config(), .w = model_->weights.layers[l], .layer = l, .start = start, .hooks = hooks};
  Tensor f = project_out(l, z, start, hooks);
  block::sublayer_output(step, Sublayer::Attention, f, &x);
  x = std::move(f);
  check_finite(x, start, l, "hook_resid_mid",
               "the attention step's residual add or post-norm (the attention output was finite)");
  edit_hook(hooks, l, "hook_resid_mid", start, x.ptr(), x.shape);
}

Tensor Transformer::attention(int64_t l, const Tensor& input, int64_t start, KVCache* cache, ActivationCache* hooks) const {
  return project_out(l, attention_mix(l, project_qkv(l, input), start, cache, hooks), start, hooks);
}

Tensor Transformer::mlp(int64_t l, const Tensor& input, ActivationCache* hooks, int64_t start) const {
  const ModelConfig& c = config();
  const LayerWeights& L = model_->weights.layers[l];
  const int64_t n = input.dim(0), d_mlp = layers_[l].d_mlp;
  Tensor up({n, d_mlp});  // [pos, d_mlp]
  if (c.gated_mlp) {
    Tensor gate({n, d_mlp});
    apply_each(input.ptr(), n, {{L.gate, gate.ptr()}, {L.up, up.ptr()}});
    hook(hooks, l, "mlp.hook_pre", gate.ptr(), {n, d_mlp});
    hook(hooks, l, "mlp.hook_pre_linear", up.ptr(), {n, d_mlp});
    gated_activate(c.activation, gate.ptr(), up.ptr(), up.size());
  } else {
    L.up.apply(input.ptr(), n, up.ptr());
    hook(hooks, l, "mlp.hook_pre", up.ptr(), {n, d_mlp});
    activate_inplace(c.activation, up.ptr(), up.size());
  }
  edit_hook(hooks, l, "mlp.hook_post", start, up.ptr(), {n, d_mlp});
  Tensor out({n, c.d_model});
  L.down.apply(up.ptr(), n, out.ptr());
  check_finite(out, start, l, "mlp.hook_out_proj", "the MLP sublayer");
  hook(hooks, l, "mlp.hook_out_proj", out.ptr(), {n, c.d_model});
  return out;
}

void Transformer::attention_block(int64_t l, Tensor& x, int64_t start, KVCache* cache, ActivationCache* hooks) const {
  attention_out(l, x, attention_mix(l, attention_in(l, x, hooks), start, cache, hooks), start, hooks);
}

void Transformer::mlp_block(int64_t l, Tensor& x, const float* per_layer_input, ActivationCache* hooks,
                            int64_t start, const Tensor* resid_pre) const {
  // A parallel block's MLP reads the layer's input, not the stream after attention.
  if (mlp_reads_layer_input() && (!resid_pre || resid_pre->shape != x.shape))
    fail("layer {} is a parallel-residual block: its MLP step needs the layer's input (hook_resid_pre)", l);
  const Tensor& input = mlp_reads_layer_input() ? *resid_pre : x;
  const RowsStep step{.c = config(), .w = model_->weights.layers[l], .layer = l, .start = start, .hooks = hooks,
                      .layer_scale = layer_output_scale(l), .per_layer_input = per_layer_input};
  Tensor normed;
  Tensor f = mlp(l, block::sublayer_input(step, Sublayer::Mlp, input, normed), hooks, start);
  block::sublayer_output(step, Sublayer::Mlp, f, &x);
  x = std::move(f);
  block::finish_layer(step, x);
  check_finite(x, start, l, "hook_resid_post",
               "the MLP step's residual add, post-norm, per-layer-input branch or layer scalar (the MLP output was finite)");
  edit_hook(hooks, l, "hook_resid_post", start, x.ptr(), x.shape);
}

bool Transformer::mlp_reads_layer_input() const { return config().parallel_residual; }

float Transformer::layer_output_scale(int64_t l) const {
  const float* scale = model_->weights.layers[l].layer_scalar;
  return scale ? scale[0] : 1.0f;
}

void Transformer::layer_step(int64_t l, Tensor& x, int64_t start, KVCache* cache, const float* per_layer_input,
                             ActivationCache* hooks) const {
  edit_hook(hooks, l, "hook_resid_pre", start, x.ptr(), {x.dim(0), config().d_model});
  const Tensor resid_pre = mlp_reads_layer_input() ? x : Tensor();  // what a parallel block's MLP reads
  attention_block(l, x, start, cache, hooks);
  mlp_block(l, x, per_layer_input, hooks, start, &resid_pre);
}

Tensor Transformer::sublayer_without_residual(int64_t l, Sublayer which, const Tensor& x, int64_t start,
                                              KVCache* cache, ActivationCache* hooks) const {
  const RowsStep step{.c = config(), .w = model_->weights.layers[l], .layer = l, .start = start, .hooks = hooks};
  Tensor normed;
  const Tensor& input = block::sublayer_input(step, which, x, normed);
  Tensor f = which == Sublayer::Attention ? attention(l, input, start, cache, hooks) : mlp(l, input, hooks, start);
  block::sublayer_output(step, which, f, static_cast<const Tensor*>(nullptr));
  return f;
}

Tensor Transformer::layer_without_residual(int64_t l, const Tensor& x, int64_t start, KVCache* cache,
                                           ActivationCache* hooks) const {
  Tensor y = sublayer_without_residual(l, Sublayer::Attention, x, start, cache, hooks);
  if (mlp_reads_layer_input()) {
    const Tensor m = sublayer_without_residual(l, Sublayer::Mlp, x, start, cache, hooks);
    add_inplace(y.ptr(), m.ptr(), y.size());
  } else {
    y = sublayer_without_residual(l, Sublayer::Mlp, y, start, cache, hooks);
  }
  if (const float s = layer_output_scale(l); s != 1)
    for (float& v : y.data) v *= s;
  return y;
}

Tensor Transformer::unembed(const Tensor& x, ActivationCache* hooks, int64_t start) const {
  const ModelConfig& c = config();
  const ModelWeights& W = model_->weights;
  const int64_t n = x.dim(0), d = c.d_model;
  Tensor h = x;  // [pos, d_model], then [pos, d_embed] after an MLM transform
  if (W.final_norm.w) {
    apply_norm(c.norm, h.ptr(), n, d, W.final_norm, c.norm_eps, h.ptr());
    hook(hooks, "ln_final.hook_normalized", h.ptr(), {n, d});
  }
  if (c.mlm_head) {
    // BertLMPredictionHead / AlbertMLMHead: LayerNorm(act(dense(x))) before the (tied) decoder.
    const int64_t E = c.embed_dim();
    Tensor t({n, E});
    W.head_dense.apply(h.ptr(), n, t.ptr());
    activate_inplace(c.activation, t.ptr(), t.size());
    apply_norm(c.norm, t.ptr(), n, E, W.head_norm, c.norm_eps, t.ptr());
    hook(hooks, "mlm.hook_transform", t.ptr(), {n, E});
    h = std::move(t);
  }
  Tensor logits({n, c.d_vocab});
  W.unembed.apply(h.ptr(), n, logits.ptr());
  if (c.final_logit_softcap > 0) {
    hook(hooks, "hook_logits_pre_softcap", logits.ptr(), logits.shape);
    softcap_inplace(logits.ptr(), logits.size(), c.final_logit_softcap);
  }
  check_finite(logits, start, -1, "logits",
               "the unembedding (final norm and output head; the residual stream was finite)");
  return logits;
}

Tensor Transformer::forward(std::span<const int32_t> ids, ActivationCache* hooks, KVCache* cache,
                            std::span<const int32_t> token_types) const {
  const ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t start = cache ? cache->length : 0;
  if (n == 0) fail("no tokens to run");
  if (cache && c.is_encoder()) fail("{} is a bidirectional encoder: it takes no KV cache (run whole sequences)", c.family);
  if (cache && start + n > cache->capacity())
    fail("sequence of {} positions exceeds the KV cache ({} positions)", start + n, cache->capacity());
  if (hooks && hooks->has_unchecked_edits()) hooks->check_edits(writable_hook_names());
  // A decoding step is a string of short products, about four a layer: one team of threads serves them all.
  if (n <= kDotProductRows) {
    Tensor logits;
    with_team([&] { logits = run_chunk(ids, hooks, cache, token_types); });
    return logits;
  }
  return run_chunk(ids, hooks, cache, token_types);
}

Tensor Transformer::run_chunk(std::span<const int32_t> ids, ActivationCache* hooks, KVCache* cache,
                              std::span<const int32_t> token_types) const {
  const ModelConfig& c = config();
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t start = cache ? cache->length : 0;
  Tensor x = embed(ids, start, token_types, hooks);  // residual stream [pos, d_model]
  const std::vector<Tensor> per_layer = per_layer_inputs(ids, x, hooks);  // per layer [pos, d_per_layer], or none

  // Without a cache, keep this chunk's keys/values only for the layers that KV-shared layers read.
  KVCache chunk;
  if (!cache) {
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const Shape shape = is_kv_source_[l] ? Shape{n, c.n_kv_heads * layers_[l].d_head} : Shape{0, 0};
      chunk.k.emplace_back(shape);
      chunk.v.emplace_back(shape);
    }
  }
  KVCache* kv = cache ? cache : &chunk;
  for (int64_t l = 0; l < c.n_layers; ++l) layer_step(l, x, start, kv, per_layer.empty() ? nullptr : per_layer[l].ptr(), hooks);
  if (cache) cache->length = start + n;
  return unembed(x, hooks, start);
}

}  // namespace tdyn
