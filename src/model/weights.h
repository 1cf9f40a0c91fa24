// Model weights bound to their roles. Matrices stay in the memory-mapped checkpoint whenever they are
// float32 and usable as stored (either nn.Linear [out, in] or Conv1D [in, out] layout, optionally a
// column/row slice of a fused matrix); other dtypes are converted once to float32 and owned here.
#pragma once

#include <memory>
#include <string>
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

// One transformer block. Which fields are bound depends on the family's features (model/config.h); an
// unbound Linear / Norm has w == nullptr. d_head and d_mlp are the layer's own (LayerConfig).
struct LayerWeights {
  Norm attn_norm;        // [d_model] pre-norm on the attention input (NormPlacement Pre, Sandwich)
  Linear q, k, v, o;     // q: [n_heads*d_head, d_model], k/v: [n_kv_heads*d_head, d_model], o: [d_model, n_heads*d_head]
                         // k/v unbound on KV-shared layers (Gemma 4), which read an earlier layer's keys/values
  Norm q_norm, k_norm;   // QK-norm scales: [n_heads*d_head] / [n_kv_heads*d_head] (FullProjection) or [d_head] (PerHead)
  Norm attn_post_norm;   // [d_model] PostSublayer/Sandwich: on the attention output; PostResidual: on resid_pre + attn_out
  Norm mlp_norm;         // [d_model] pre-norm on the MLP input (Pre, Sandwich)
  Linear gate, up, down; // gate/up: [d_mlp, d_model], down: [d_model, d_mlp]; gate only for gated MLPs
  Norm mlp_post_norm;    // [d_model] as attn_post_norm, for the MLP
  // Gemma 4 per-layer-input branch, added after the MLP: ple_post_norm(ple_proj(act(ple_gate x) * ple_input)).
  Linear ple_gate;       // [d_per_layer, d_model]
  Linear ple_proj;       // [d_model, d_per_layer]
  Norm ple_post_norm;    // [d_model]
  const float* layer_scalar = nullptr;  // [1] Gemma 4: the layer's output is multiplied by it
};

struct ModelWeights {
  const float* embed = nullptr;             // [d_vocab, d_embed] token embeddings
  // Storage dtypes of the token and per-layer embedding tables: HF's scaled embeddings (Gemma) cast their
  // scale to the table's dtype before multiplying, so a bf16 checkpoint uses bf16(sqrt(d_model)).
  DType embed_dtype = DType::F32, ple_embed_dtype = DType::F32;
  const float* pos_embed = nullptr;         // [n_ctx, d_embed] learned absolute positions
  const float* token_type_embed = nullptr;  // [n_token_types, d_embed]
  Norm embed_norm;                          // [d_embed] LayerNorm of the summed embeddings (BERT, ALBERT)
  Linear embed_map;                         // [d_model, d_embed] ALBERT embedding_hidden_mapping_in
  // Gemma 4 per-layer inputs.
  const float* ple_embed = nullptr;         // [d_vocab_per_layer, n_layers * d_per_layer]
  Linear ple_model_proj;                    // [n_layers * d_per_layer, d_model]
  Norm ple_proj_norm;                       // [d_per_layer]
  std::vector<LayerWeights> layers;         // one per layer (shared layers repeat the same views)
  Norm final_norm;                          // [d_model]; unbound for BERT/ALBERT (their stream ends post-LN)
  Linear head_dense;                        // [d_embed, d_model] MLM head transform (BERT, ALBERT)
  Norm head_norm;                           // [d_embed]
  Linear unembed;                           // [d_vocab, d_embed] (+ [d_vocab] bias: MLM decoder bias)
  std::vector<FloatBuffer> storage;  // owns converted copies; views point into the store's mappings

  // Every checkpoint tensor bound above, once, as the float32 data the forward pass reads (a view into the
  // mapping or a converted copy in `storage`): what load_model checks for NaN/Inf, by checkpoint name.
  struct Source {
    std::string name;
    int64_t layer;  // stored layer index of a per-layer tensor; -1 for model-wide tensors
    const float* data;
    int64_t size;
  };
  std::vector<Source> sources;
};

}  // namespace tdyn
