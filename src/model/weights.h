// Model weights bound to their roles. Matrices stay in the memory-mapped checkpoint whenever they are
// float32 and usable as stored (either nn.Linear [out, in] or Conv1D [in, out] layout, optionally a
// column/row slice of a fused matrix); other dtypes are converted once to float32 and owned here.
#pragma once

#include <memory>
#include <vector>

#include "io/tensor_store.h"
#include "model/config.h"

namespace tdyn {

// y = W x + b for every row x of X. The stored matrix is either [out, in] (nn.Linear) or [in, out] (GPT-2
// Conv1D), with row stride `ld` so that slices of fused matrices are used in place.
struct Linear {
  const float* w = nullptr;
  const float* b = nullptr;  // [out] or null
  int64_t out = 0, in = 0;
  int64_t ld = 0;
  bool in_out = false;

  explicit operator bool() const { return w != nullptr; }
  // Y[rows, out] = X[rows, in] W^T (+ b). Y must not alias X.
  void apply(const float* x, int64_t rows, float* y) const;
  // Element W[o, i] in the nn.Linear convention, whatever the storage.
  float at(int64_t o, int64_t i) const { return in_out ? w[i * ld + o] : w[o * ld + i]; }
};

struct Norm {
  const float* w = nullptr;  // [d] scale (may be null: no scale)
  const float* b = nullptr;  // [d] bias (LayerNorm only; may be null)
};

struct LayerWeights {
  Norm attn_norm;
  Linear q, k, v, o;  // q: [n_heads*d_head, d_model], k/v: [n_kv_heads*d_head, d_model], o: [d_model, n_heads*d_head]
  Norm mlp_norm;
  Linear gate, up, down;  // gate/up: [d_mlp, d_model], down: [d_model, d_mlp]; gate only for gated MLPs
};

struct ModelWeights {
  const float* embed = nullptr;  // [d_vocab, d_model]
  std::vector<LayerWeights> layers;
  Norm final_norm;
  Linear unembed;  // [d_vocab, d_model]
  std::vector<FloatBuffer> storage;  // owns converted copies; views point into the store's mappings
};

}  // namespace tdyn
