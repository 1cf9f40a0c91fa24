#include "analysis/power/dynamics.h"

#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "analysis/layer_matrix.h"
#include "core/error.h"
#include "model/ops.h"

namespace tdyn {
namespace {

// The states as layer `layer` reads them in attn-only-l2: G x̂ with G = diag(sqrt(d) g) (unit_token_gain), the
// pre-attention norm's output for a unit token. Feeding x̂ itself would make the scores ~1/d of the model's.
Tensor unit_token_input(const Transformer& model, int64_t layer, const Tensor& x) {
  const std::vector<double> gain = unit_token_gain(model.model(), layer);
  const int64_t d = x.dim(1);
  Tensor input = x;
  for (int64_t r = 0; r < x.dim(0); ++r) {
    float* row = input.row(r);
    for (int64_t i = 0; i < d; ++i) row[i] = static_cast<float>(row[i] * gain[i]);
  }
  return input;
}

// Recomputes the keys/values a KV-shared layer reads, from the current states, with the source layer's
// projections (and its own pre-norm where the family has one).
void refresh_source_kv(const Transformer& model, int64_t source, TokenState& s, DynamicsMode mode) {
  const ModelConfig& c = model.config();
  Tensor input = mode == DynamicsMode::AttnOnlyL2 ? unit_token_input(model, source, s.x) : s.x;
  if (mode != DynamicsMode::AttnOnlyL2 && has_pre_norm(c.norm_placement))
    apply_norm(c.norm, s.x.ptr(), s.x.dim(0), c.d_model, model.model().weights.layers[source].attn_norm, c.norm_eps,
               input.ptr());
  model.attention(source, input, 0, &s.kv);  // writes the source's keys/values into s.kv
}

}  // namespace

const char* to_string(DynamicsMode mode) {
  switch (mode) {
    case DynamicsMode::Full: return "full";
    case DynamicsMode::AttnOnly: return "attn-only";
    case DynamicsMode::AttnOnlyL2: return "attn-only-l2";
  }
  return "?";
}

const char* attention_input(DynamicsMode mode) {
  if (mode == DynamicsMode::AttnOnlyL2)
    return "G x for the unit state x, G = diag(sqrt(d_model) g) with g the layer's pre-attention norm weight (1 without "
           "one): the norm's output for a unit token, so the scores have the model's scale";
  return "the state as the model presents it: its pre-attention norm's output (pre-norm families), the state itself otherwise";
}

DynamicsMode parse_dynamics_mode(std::string_view text) {
  for (DynamicsMode m : {DynamicsMode::Full, DynamicsMode::AttnOnly, DynamicsMode::AttnOnlyL2})
    if (text == to_string(m)) return m;
  fail("unknown dynamics mode '{}': expected full, attn-only or attn-only-l2", text);
}

void normalize_rows(Tensor& x) {
  const int64_t d = x.dim(1);
  for (int64_t r = 0; r < x.dim(0); ++r) {
    float* row = x.row(r);
    double sum = 0;
    for (int64_t j = 0; j < d; ++j) sum += static_cast<double>(row[j]) * row[j];
    if (sum == 0) continue;
    const double inv = 1.0 / std::sqrt(sum);
    for (int64_t j = 0; j < d; ++j) row[j] = static_cast<float>(row[j] * inv);
  }
}

TokenState initial_state(const Transformer& model, std::span<const int32_t> ids, const DynamicsOptions& options) {
  const ModelConfig& c = model.config();
  const int64_t n = static_cast<int64_t>(ids.size());
  TokenState s;
  s.x = model.embed(ids, 0);
  s.per_layer = model.per_layer_inputs(ids, s.x);
  // Storage for the layers whose keys/values a KV-shared layer reads, as forward() keeps them for one chunk.
  std::vector<bool> is_source(c.n_layers, false);
  for (int64_t l = 0; l < c.n_layers; ++l)
    if (c.layer(l).kv_source != l) is_source[c.layer(l).kv_source] = true;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const Shape shape = is_source[l] ? Shape{n, c.n_kv_heads * c.layer(l).d_head} : Shape{0, 0};
    s.kv.k.emplace_back(shape);
    s.kv.v.emplace_back(shape);
  }
  if (options.mode == DynamicsMode::AttnOnlyL2) normalize_rows(s.x);
  return s;
}

void apply_layer(const Transformer& model, int64_t layer, TokenState& s, const DynamicsOptions& options,
                 bool refresh_shared_kv) {
  const ModelConfig& c = model.config();
  if (layer < 0 || layer >= c.n_layers) fail("layer {} is out of range (the model has {} layers)", layer, c.n_layers);
  const int64_t source = model.layer_config(layer).kv_source;
  if (refresh_shared_kv && source != layer) refresh_source_kv(model, source, s, options.mode);
  const float* per_layer = s.per_layer.empty() ? nullptr : s.per_layer[layer].ptr();

  const std::unique_ptr<ActivationCache> edits = options.zeroed.edits(layer);  // null: nothing zeroed here
  switch (options.mode) {
    case DynamicsMode::Full:
      if (options.residual) model.layer_step(layer, s.x, 0, &s.kv, per_layer, edits.get());
      else s.x = model.layer_without_residual(layer, s.x, 0, &s.kv, edits.get());
      break;
    case DynamicsMode::AttnOnly:
      if (options.residual) model.attention_block(layer, s.x, 0, &s.kv, edits.get());
      else s.x = model.sublayer_without_residual(layer, Sublayer::Attention, s.x, 0, &s.kv, edits.get());
      break;
    case DynamicsMode::AttnOnlyL2: {
      // A_t(G x) [pos, d_model], biases included
      Tensor a = model.attention(layer, unit_token_input(model, layer, s.x), 0, &s.kv, edits.get());
      if (edits) edits->edit_and_capture(fmt::format("blocks.{}.hook_attn_out", layer), 0, a.ptr(), a.shape);
      if (options.residual) {
        for (int64_t i = 0; i < a.size(); ++i) s.x.data[i] += a.data[i];
      } else {
        s.x = std::move(a);
      }
      normalize_rows(s.x);
      break;
    }
  }
}

}  // namespace tdyn
