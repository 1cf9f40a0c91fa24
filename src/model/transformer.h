// The forward pass: one generic block driven by ModelConfig fields, evaluating a chunk of positions at a
// time. A whole sequence (analysis) is one chunk starting at position 0; generation feeds one token per
// chunk against a KV cache. Activations are exposed through an optional ActivationCache (model/hooks.h).
#pragma once

#include <memory>
#include <span>

#include "model/hooks.h"
#include "model/loader.h"

namespace tdyn {

// Keys and values of past positions, per layer: [max_positions, n_kv_heads * d_head] each.
struct KVCache {
  std::vector<Tensor> k, v;
  int64_t length = 0;  // positions filled
  int64_t capacity() const { return k.empty() ? 0 : k[0].dim(0); }
};

class Transformer {
 public:
  explicit Transformer(std::shared_ptr<const Model> model);

  const ModelConfig& config() const { return model_->config; }
  const Model& model() const { return *model_; }

  // Evaluates tokens `ids` at positions cache->length .. + ids.size() - 1 (0.. without a cache) and returns
  // logits [ids.size(), d_vocab]. With a cache the new keys/values are appended to it.
  Tensor forward(std::span<const int32_t> ids, ActivationCache* hooks = nullptr, KVCache* cache = nullptr) const;

  KVCache new_cache(int64_t max_positions) const;

 private:
  std::shared_ptr<const Model> model_;
  std::vector<double> inv_freq_;
};

}  // namespace tdyn
