#include "model/sequence_state.h"

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/serial_blas.h"
#include "model/hooks.h"

namespace tdyn {

KVCache kv_sources(const Transformer& t, int64_t n_pos) {
  const ModelConfig& c = t.config();
  KVCache kv;
  kv.k.assign(c.n_layers, Tensor());
  kv.v.assign(c.n_layers, Tensor());
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const int64_t src = t.layer_config(l).kv_source;
    if (src == l || !kv.k[src].data.empty()) continue;
    const Shape shape{n_pos, c.n_kv_heads * t.layer_config(src).d_head};
    kv.k[src] = Tensor(shape);
    kv.v[src] = Tensor(shape);
  }
  return kv;
}

namespace {

// The rows of `parts` one after another.
Tensor stack_rows(std::span<const Tensor* const> parts) {
  int64_t rows = 0;
  for (const Tensor* p : parts) rows += p->dim(0);
  Tensor out({rows, parts.front()->dim(1)});
  float* at = out.ptr();
  for (const Tensor* p : parts) at = std::copy(p->data.begin(), p->data.end(), at);
  return out;
}

// Rows [begin, begin + n) of x.
Tensor rows_of(const Tensor& x, int64_t begin, int64_t n) {
  if (x.data.empty()) return Tensor();
  Tensor out({n, x.dim(1)});
  std::copy_n(x.row(begin), n * x.dim(1), out.ptr());
  return out;
}

// Each sequence's x from the stacked rows.
void unstack_rows(const Tensor& stacked, std::span<const LayerEntry> sequences) {
  const float* at = stacked.ptr();
  for (const LayerEntry& e : sequences) {
    std::copy(at, at + e.x->size(), e.x->data.begin());
    at += e.x->size();
  }
}

}  // namespace

void run_attention_half(const Transformer& t, int64_t layer, std::span<const LayerEntry> sequences,
                        const ZeroedParts& zeroed) {
  TDYN_CHECK(!sequences.empty());
  const ModelConfig& c = t.config();
  const int64_t src = t.layer_config(layer).kv_source, n = static_cast<int64_t>(sequences.size());
  const bool own = src == layer;
  std::vector<const Tensor*> inputs;
  for (const LayerEntry& e : sequences) {
    SequenceState& state = *e.state;
    if (state.resid_pre.empty()) {
      state.n_pos = e.x->dim(0);
      for (auto* v : {&state.resid_pre, &state.resid_mid, &state.resid_post, &state.keys, &state.values, &state.per_layer_inputs})
        v->assign(c.n_layers, Tensor());
    }
    state.resid_pre[layer] = *e.x;
    inputs.push_back(&state.resid_pre[layer]);
  }
  Tensor x = n == 1 ? Tensor() : stack_rows(inputs);  // the group's rows stacked (n > 1): resid_pre, then resid_mid
  Transformer::AttentionProjections projected = t.attention_in(layer, n == 1 ? *sequences[0].x : x);
  std::vector<Tensor> z(n);
  std::vector<int64_t> first_row(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) first_row[i + 1] = first_row[i] + sequences[i].x->dim(0);
  parallel_tasks(n, [&](int64_t i) {
    const LayerEntry& e = sequences[i];
    const int64_t rows = e.x->dim(0);
    Transformer::AttentionProjections mine =
        n == 1 ? std::move(projected)
               : Transformer::AttentionProjections{rows_of(projected.q, first_row[i], rows), rows_of(projected.k, first_row[i], rows),
                                                   rows_of(projected.v, first_row[i], rows)};
    SequenceState& state = *e.state;
    // What the layer's own keys and values become, kept in the state; the zeroed heads of z.
    std::unique_ptr<ActivationCache> hooks =
        own ? std::make_unique<ActivationCache>(fmt::format("blocks.{0}.attn.hook_k,blocks.{0}.attn.hook_v", layer))
            : zeroed.edits(layer);
    if (own) zeroed.add_edits(*hooks);
    z[i] = t.attention_mix(layer, std::move(mine), 0, e.kv, hooks.get());
    auto flat = [](Tensor tensor) {
      if (tensor.shape.size() == 3) tensor.shape = {tensor.dim(0), tensor.dim(1) * tensor.dim(2)};
      return tensor;
    };
    if (own) {
      state.keys[layer] = flat(hooks->at(fmt::format("blocks.{}.attn.hook_k", layer)));
      state.values[layer] = flat(hooks->at(fmt::format("blocks.{}.attn.hook_v", layer)));
    } else if (state.keys[src].data.empty()) {  // a KV-shared layer reads its source's keys and values
      state.keys[src] = e.kv->k[src];
      state.values[src] = e.kv->v[src];
    }
  });
  auto finish = [&](const LayerEntry& e) {
    e.state->resid_mid[layer] = *e.x;
    e.state->per_layer_inputs[layer] = t.per_layer_input(layer, e.ids, e.embeddings ? *e.embeddings : Tensor());
  };
  const std::unique_ptr<ActivationCache> out_edits = zeroed.edits(layer);
  auto one_by_one = [&] {  // each x still holds its resid_pre: only a stacked step that succeeds writes them
    for (int64_t i = 0; i < n; ++i) {
      t.attention_out(layer, *sequences[i].x, z[i], 0, out_edits.get());
      finish(sequences[i]);
    }
  };
  if (n == 1) return one_by_one();
  std::vector<const Tensor*> zs;
  for (const Tensor& zi : z) zs.push_back(&zi);
  try {
    t.attention_out(layer, x, stack_rows(zs), 0, out_edits.get());
  } catch (const Error&) {
    return one_by_one();  // again sequence by sequence, for the error of the first one that fails
  }
  unstack_rows(x, sequences);
  for (const LayerEntry& e : sequences) finish(e);
}

namespace {

// The MLP step of one sequence, or of several whose rows are stacked; x enters as hook_resid_mid.
void mlp_step(const Transformer& t, int64_t layer, Tensor& x, const Tensor& resid_pre, const Tensor& per_layer,
              const ZeroedParts& zeroed) {
  const std::unique_ptr<ActivationCache> edits = zeroed.edits(layer);
  t.mlp_block(layer, x, per_layer.data.empty() ? nullptr : per_layer.ptr(), edits.get(), 0, &resid_pre);
}

}  // namespace

void run_mlp_half(const Transformer& t, int64_t layer, std::span<const LayerEntry> sequences, const ZeroedParts& zeroed) {
  TDYN_CHECK(!sequences.empty());
  const bool parallel = t.mlp_reads_layer_input(), per_layer = t.config().d_per_layer_input > 0;
  auto one_by_one = [&] {
    for (const LayerEntry& e : sequences) {
      mlp_step(t, layer, *e.x, parallel ? e.state->resid_pre[layer] : Tensor(), e.state->per_layer_inputs[layer], zeroed);
      e.state->resid_post[layer] = *e.x;
    }
  };
  if (sequences.size() == 1) return one_by_one();
  std::vector<const Tensor*> mids, pres, inputs;
  for (const LayerEntry& e : sequences) {
    mids.push_back(e.x);
    pres.push_back(&e.state->resid_pre[layer]);
    inputs.push_back(&e.state->per_layer_inputs[layer]);
  }
  Tensor x = stack_rows(mids);
  try {
    mlp_step(t, layer, x, parallel ? stack_rows(pres) : Tensor(), per_layer ? stack_rows(inputs) : Tensor(), zeroed);
  } catch (const Error&) {
    return one_by_one();  // again sequence by sequence, for the error of the first one that fails
  }
  unstack_rows(x, sequences);
  for (const LayerEntry& e : sequences) e.state->resid_post[layer] = *e.x;
}

void run_layer(const Transformer& t, int64_t layer, std::span<const int32_t> ids, const Tensor& embeddings, Tensor& x,
               KVCache& kv, SequenceState& state, const ZeroedParts& zeroed) {
  const LayerEntry entry[] = {{ids, &embeddings, &x, &kv, &state}};
  run_attention_half(t, layer, entry, zeroed);
  run_mlp_half(t, layer, entry, zeroed);
}

}  // namespace tdyn
