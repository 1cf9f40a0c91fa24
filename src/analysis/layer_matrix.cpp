#include "analysis/layer_matrix.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace tdyn {
namespace {

void require_layer(const Model& model, int64_t layer) {
  if (layer < 0 || layer >= model.config.n_layers)
    fail("layer {} is out of range: the model has {} layers (0..{})", layer, model.config.n_layers, model.config.n_layers - 1);
}

const Linear& value_projection(const Model& model, int64_t layer) {
  const int64_t source = model.config.layer(layer).kv_source;
  const Linear& v = model.weights.layers.at(source).v;
  TDYN_CHECK(v && "a layer that owns its keys/values has a bound W_V");
  return v;
}

}  // namespace

linalg::Matrix dense_matrix(const Linear& linear) {
  linalg::Matrix d;
  dense_matrix(linear, d);
  return d;
}

void dense_matrix(const Linear& linear, linalg::Matrix& d) {
  d.resize(linear.out, linear.in);
  const StoredMatrix& w = linear.w;
  // Blocks of stored rows over the threads, each widened to float32 and then written into the column-major result.
  constexpr int64_t kBlock = 64;
  const int64_t n_blocks = (w.rows + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(dynamic, 1) if (!omp_in_parallel() && n_blocks > 1)
  for (int64_t block = 0; block < n_blocks; ++block) {
    const int64_t first = block * kBlock, n = std::min(kBlock, w.rows - first);
    std::vector<float> rows(n * w.cols);
    for (int64_t r = 0; r < n; ++r) w.row_floats(first + r, 0, w.cols, rows.data() + r * w.cols);
    const Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> stored(rows.data(), n, w.cols);
    if (linear.in_out) d.middleCols(first, n) = stored.transpose().cast<double>();  // storage row r is column r
    else d.middleRows(first, n) = stored.cast<double>();
  }
}

linalg::Matrix expanded_value_matrix(const Model& model, int64_t layer, const ZeroedParts& zeroed) {
  require_layer(model, layer);
  const ModelConfig& c = model.config;
  const int64_t d_head = c.layer(layer).d_head, group = c.n_heads / c.n_kv_heads;
  const Linear& v = value_projection(model, layer);  // [n_kv_heads * d_head, d_model]
  TDYN_CHECK(v.out == c.n_kv_heads * d_head && v.in == c.d_model);
  const linalg::Matrix stored = dense_matrix(v);
  linalg::Matrix expanded(c.n_heads * d_head, c.d_model);  // [n_heads * d_head, d_model]
  for (int64_t h = 0; h < c.n_heads; ++h) {
    if (zeroed.layer(layer).head(h)) expanded.middleRows(h * d_head, d_head).setZero();  // its z is 0
    else expanded.middleRows(h * d_head, d_head) = stored.middleRows((h / group) * d_head, d_head);
  }
  return expanded;
}

linalg::Matrix output_matrix(const Model& model, int64_t layer) {
  require_layer(model, layer);
  return dense_matrix(model.weights.layers.at(layer).o);  // [d_model, n_heads * d_head]
}

LayerMatrix layer_matrix(const Model& model, int64_t layer, const ZeroedParts& zeroed) {
  require_layer(model, layer);
  const ModelConfig& c = model.config;
  LayerMatrix m;
  m.layer = layer;
  m.value_layer = c.layer(layer).kv_source;
  const linalg::Matrix o = output_matrix(model, layer);                // [d_model, n_heads * d_head]
  const linalg::Matrix v = expanded_value_matrix(model, layer, zeroed);  // [n_heads * d_head, d_model]
  TDYN_CHECK(o.cols() == v.rows());
  m.f = o * v;

  // c_t = O b_V (b_V expanded like V, zeroed heads left out) + b_O.
  const ZeroedParts::Layer& zeroed_parts = zeroed.layer(layer);
  const int64_t d_head = c.layer(layer).d_head, group = c.n_heads / c.n_kv_heads;
  linalg::Vector value_bias = linalg::Vector::Zero(v.rows());
  if (const float* b = value_projection(model, layer).b) {
    for (int64_t h = 0; h < c.n_heads; ++h)
      if (!zeroed_parts.head(h))
        for (int64_t r = 0; r < d_head; ++r) value_bias[h * d_head + r] = b[(h / group) * d_head + r];
  }
  m.bias = o * value_bias;
  if (const float* b = model.weights.layers.at(layer).o.b; b && !zeroed_parts.attn_out)
    for (int64_t i = 0; i < c.d_model; ++i) m.bias[i] += b[i];
  return m;
}

std::vector<LayerMatrix> layer_matrices(const Model& model, const ZeroedParts& zeroed) {
  std::vector<LayerMatrix> out;
  for (int64_t l = 0; l < model.config.n_layers; ++l) out.push_back(layer_matrix(model, l, zeroed));
  return out;
}

std::vector<double> unit_token_gain(const Model& model, int64_t layer) {
  const int64_t d = model.config.d_model;
  const LayerWeights& w = model.weights.layers.at(layer);
  std::vector<double> gain(d, std::sqrt(static_cast<double>(d)));
  if (w.attn_norm.w)
    for (int64_t i = 0; i < d; ++i) gain[i] *= w.attn_norm.w[i];
  return gain;
}

}  // namespace tdyn
