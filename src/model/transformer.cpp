#include "model/transformer.h"

#include <cstring>

#include "core/error.h"
#include "model/ops.h"

namespace tdyn {
namespace {

std::string block_hook(int64_t layer, const char* name) { return fmt::format("blocks.{}.{}", layer, name); }

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

Transformer::Transformer(std::shared_ptr<const Model> model)
    : model_(std::move(model)), inv_freq_(rope_inv_freq(model_->config.rope, model_->config.d_head)) {}

KVCache Transformer::new_cache(int64_t max_positions) const {
  const ModelConfig& c = config();
  KVCache cache;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    cache.k.emplace_back(Shape{max_positions, c.kv_dim()});
    cache.v.emplace_back(Shape{max_positions, c.kv_dim()});
  }
  return cache;
}

Tensor Transformer::forward(std::span<const int32_t> ids, ActivationCache* hooks, KVCache* cache) const {
  const ModelConfig& c = config();
  const ModelWeights& W = model_->weights;
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t d = c.d_model, start = cache ? cache->length : 0, n_keys = start + n;
  if (n == 0) fail("no tokens to run");
  if (cache && n_keys > cache->capacity())
    fail("sequence of {} positions exceeds the KV cache ({} positions)", n_keys, cache->capacity());
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= c.d_vocab) fail("token id {} at position {} is outside the vocabulary [0, {})", ids[i], start + i, c.d_vocab);
  }
  auto hook = [&](const std::string& name, const float* data, Shape shape) {
    if (hooks) hooks->capture(name, data, std::move(shape));
  };

  Tensor x({n, d});                                          // residual stream [pos, d_model]
  for (int64_t i = 0; i < n; ++i) std::memcpy(x.row(i), W.embed + static_cast<int64_t>(ids[i]) * d, d * sizeof(float));
  hook("hook_embed", x.ptr(), {n, d});

  Tensor h({n, d});                                          // normalised stream
  Tensor q({n, c.q_dim()}), k({n, c.kv_dim()}), v({n, c.kv_dim()});
  Tensor z({n, c.q_dim()});                                  // attention mix per head, before W_O
  Tensor attn_out({n, d}), mlp_out({n, d});
  Tensor gate({n, c.d_mlp}), up({n, c.d_mlp});
  Tensor pattern;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = W.layers[l];
    hook(block_hook(l, "hook_resid_pre"), x.ptr(), {n, d});

    // Attention sub-layer: resid_mid = resid_pre + attn_out.
    apply_norm(c.norm, x.ptr(), n, d, L.attn_norm, c.norm_eps, h.ptr());
    hook(block_hook(l, "ln1.hook_normalized"), h.ptr(), {n, d});
    L.q.apply(h.ptr(), n, q.ptr());
    L.k.apply(h.ptr(), n, k.ptr());
    L.v.apply(h.ptr(), n, v.ptr());
    apply_rope(c.rope.style, inv_freq_, q.ptr(), n, c.n_heads, c.d_head, start);
    apply_rope(c.rope.style, inv_freq_, k.ptr(), n, c.n_kv_heads, c.d_head, start);
    hook(block_hook(l, "attn.hook_q"), q.ptr(), {n, c.n_heads, c.d_head});
    hook(block_hook(l, "attn.hook_k"), k.ptr(), {n, c.n_kv_heads, c.d_head});
    hook(block_hook(l, "attn.hook_v"), v.ptr(), {n, c.n_kv_heads, c.d_head});
    const float* keys = k.ptr();
    const float* values = v.ptr();
    if (cache) {
      std::memcpy(cache->k[l].row(start), k.ptr(), k.size() * sizeof(float));
      std::memcpy(cache->v[l].row(start), v.ptr(), v.size() * sizeof(float));
      keys = cache->k[l].ptr();
      values = cache->v[l].ptr();
    }
    const std::string pattern_name = block_hook(l, "attn.hook_pattern");
    const bool want_pattern = hooks && hooks->wants(pattern_name);
    if (want_pattern) pattern = Tensor({c.n_heads, n, n_keys});
    AttentionShape shape{n, n_keys, start, c.n_heads, c.n_kv_heads, c.d_head, c.attn_scale, c.causal};
    attention(shape, q.ptr(), keys, values, z.ptr(), want_pattern ? pattern.ptr() : nullptr);
    if (want_pattern) hook(pattern_name, pattern.ptr(), pattern.shape);
    hook(block_hook(l, "attn.hook_z"), z.ptr(), {n, c.n_heads, c.d_head});
    L.o.apply(z.ptr(), n, attn_out.ptr());
    hook(block_hook(l, "hook_attn_out"), attn_out.ptr(), {n, d});
    add_inplace(x.ptr(), attn_out.ptr(), x.size());
    hook(block_hook(l, "hook_resid_mid"), x.ptr(), {n, d});

    // MLP sub-layer: resid_post = resid_mid + mlp_out.
    apply_norm(c.norm, x.ptr(), n, d, L.mlp_norm, c.norm_eps, h.ptr());
    hook(block_hook(l, "ln2.hook_normalized"), h.ptr(), {n, d});
    L.up.apply(h.ptr(), n, up.ptr());
    if (c.gated_mlp) {
      L.gate.apply(h.ptr(), n, gate.ptr());
      hook(block_hook(l, "mlp.hook_pre"), gate.ptr(), {n, c.d_mlp});
      hook(block_hook(l, "mlp.hook_pre_linear"), up.ptr(), {n, c.d_mlp});
      for (int64_t i = 0; i < up.size(); ++i) up.data[i] *= activate(c.activation, gate.data[i]);
    } else {
      hook(block_hook(l, "mlp.hook_pre"), up.ptr(), {n, c.d_mlp});
      activate_inplace(c.activation, up.ptr(), up.size());
    }
    hook(block_hook(l, "mlp.hook_post"), up.ptr(), {n, c.d_mlp});
    L.down.apply(up.ptr(), n, mlp_out.ptr());
    hook(block_hook(l, "hook_mlp_out"), mlp_out.ptr(), {n, d});
    add_inplace(x.ptr(), mlp_out.ptr(), x.size());
    hook(block_hook(l, "hook_resid_post"), x.ptr(), {n, d});
  }
  if (cache) cache->length = n_keys;

  apply_norm(c.norm, x.ptr(), n, d, W.final_norm, c.norm_eps, h.ptr());
  hook("ln_final.hook_normalized", h.ptr(), {n, d});
  Tensor logits({n, c.d_vocab});
  W.unembed.apply(h.ptr(), n, logits.ptr());
  return logits;
}

}  // namespace tdyn
