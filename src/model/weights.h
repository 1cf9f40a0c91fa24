// Model weights bound to their roles. Matrices (projections, embedding tables) stay in the memory-mapped
// checkpoint in their file dtype — float32, float16, bfloat16 or a GGUF block quantization — and are read
// through kernels/products.h; only vectors (norm scales, biases, learned position rows) are widened to float32
// when stored otherwise, which costs O(d_model) per layer. So a model needs about one copy of itself in the page
// cache and no float32 copy in anonymous memory.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "io/tensor_store.h"
#include "kernels/stored_matrix.h"
#include "model/config.h"

namespace tdyn {

// y = W x + b for every row x of X. The stored matrix is either [out, in] (nn.Linear) or [in, out] (GPT-2
// Conv1D, `in_out`), possibly a row or column slice of a fused matrix, used in place.
struct Linear {
  StoredMatrix w;            // [out, in], or [in, out] when in_out
  const float* b = nullptr;  // [out] or null
  int64_t out = 0, in = 0;
  bool in_out = false;

  explicit operator bool() const { return static_cast<bool>(w); }
  // Y[rows, out] = X[rows, in] W^T (+ b). Y must not alias X.
  void apply(const float* x, int64_t rows, float* y) const;
};

// One Linear of several applied to the same input, and where its output goes.
struct LinearOutput {
  const Linear& linear;
  float* y;
};
// Y_i = X W_iᵀ (+ b_i) for each output (through project_each: a decoding step's products share one parallel region).
void apply_each(const float* x, int64_t rows, std::initializer_list<LinearOutput> outputs);

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

// Views only, so copies are cheap and share what they point into (the store's mappings and `owners`): a variant
// of a model (steering) copies the weights and rebinds the few it changes.
struct ModelWeights {
  StoredMatrix embed;                       // [d_vocab, d_embed] token embeddings
  // Storage dtypes of the token and per-layer embedding tables: HF's scaled embeddings (Gemma) cast their
  // scale to the table's dtype before multiplying, so a bf16 checkpoint uses bf16(sqrt(d_model)).
  DType embed_dtype = DType::F32, ple_embed_dtype = DType::F32;
  const float* pos_embed = nullptr;         // [n_ctx, d_embed] learned absolute positions
  const float* token_type_embed = nullptr;  // [n_token_types, d_embed]
  Norm embed_norm;                          // [d_embed] LayerNorm of the summed embeddings (BERT, ALBERT)
  Linear embed_map;                         // [d_model, d_embed] ALBERT embedding_hidden_mapping_in
  // Gemma 4 per-layer inputs.
  StoredMatrix ple_embed;                   // [d_vocab_per_layer, n_layers * d_per_layer]
  Linear ple_model_proj;                    // [n_layers * d_per_layer, d_model]
  Norm ple_proj_norm;                       // [d_per_layer]
  std::vector<LayerWeights> layers;         // one per layer (shared layers repeat the same views)
  Norm final_norm;                          // [d_model]; unbound for BERT/ALBERT (their stream ends post-LN)
  Linear head_dense;                        // [d_embed, d_model] MLM head transform (BERT, ALBERT)
  Norm head_norm;                           // [d_embed]
  Linear unembed;                           // [d_vocab, d_embed] (+ [d_vocab] bias: MLM decoder bias)
  // Owners of the float32 vectors widened from other dtypes (and of any replaced matrix); shared by copies.
  std::vector<std::shared_ptr<const void>> owners;

  // Every checkpoint tensor bound above, once: what load_model checks for NaN/Inf, by checkpoint name.
  struct Source {
    std::string name;
    int64_t layer;  // stored layer index of a per-layer tensor; -1 for model-wide tensors
  };
  std::vector<Source> sources;
};

}  // namespace tdyn
