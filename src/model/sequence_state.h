// A sequence's residual states through the model, layer by layer: the layer step that the shared sample pass
// (analysis/pass/run.h) and JacobianModel::run take, keeping what the analyses read at every boundary, with the
// ablated parts set to 0 on the way.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "model/ablation.h"
#include "model/transformer.h"

namespace tdyn {

// The float32 forward-pass state of one sequence that the local maps read (JacobianModel).
struct SequenceState {
  int64_t n_pos = 0;
  std::vector<Tensor> resid_pre, resid_mid, resid_post;  // per layer [pos, d_model]
  std::vector<Tensor> keys, values;  // per layer [pos, n_kv_heads * d_head] after norms and RoPE; empty on KV-shared layers
  std::vector<Tensor> per_layer_inputs;  // per layer [pos, d_per_layer] (Gemma 4), or none
  // A pass that runs the model one layer at a time fills only the current layer's entries (and the keys/values
  // of the layer it reads): every vector has n_layers entries, the others empty.
};

// Keys/values storage [n_pos, n_kv_heads * d_head] for the layers that KV-shared layers read (Gemma 4), empty
// tensors elsewhere: what run_layer needs to carry between layers.
KVCache kv_sources(const Transformer& t, int64_t n_pos);

// One layer of the float32 forward pass (JacobianModel::run is these in order): x enters as `layer`'s
// hook_resid_pre and leaves as its hook_resid_post, and that layer's entries of `state` are filled (every vector
// sized n_layers on first use; on a KV-shared layer the source's keys/values are copied from `kv`). kv: from
// kv_sources; embeddings: the layer-0 input (Gemma 4 per-layer inputs, else ignored). `zeroed`: the parts set to
// 0 on the way (none by default).
void run_layer(const Transformer& t, int64_t layer, std::span<const int32_t> ids, const Tensor& embeddings, Tensor& x,
               KVCache& kv, SequenceState& state, const ZeroedParts& zeroed = {});

// run_layer in two halves, for several sequences at once, whose rows the products of each half take stacked: one
// product per projection for all (W_Q, W_K, W_V, W_O; the MLP's), the attention mix one sequence per thread. The
// attention half leaves each x at hook_resid_mid and fills its state's resid_pre, resid_mid, keys/values and per-layer
// input; the MLP half takes each sequence from there to hook_resid_post and fills resid_post. Rows do not interact in
// the products, so stacking changes only their shapes (and so their float32 round-off); an error names the position
// within its own sequence (the first sequence that fails).
struct LayerEntry {
  std::span<const int32_t> ids;
  const Tensor* embeddings = nullptr;  // the layer-0 input (Gemma 4 per-layer inputs; else unread)
  Tensor* x = nullptr;
  KVCache* kv = nullptr;               // kv_sources(); the attention half's
  SequenceState* state = nullptr;
};
void run_attention_half(const Transformer& t, int64_t layer, std::span<const LayerEntry> sequences,
                        const ZeroedParts& zeroed = {});
void run_mlp_half(const Transformer& t, int64_t layer, std::span<const LayerEntry> sequences, const ZeroedParts& zeroed = {});

}  // namespace tdyn
