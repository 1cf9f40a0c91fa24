// Math steps of the forward pass, knowing nothing of models: norms, activations, RoPE, attention.
// All operate on row-major float32 [rows, cols] buffers; reductions accumulate in float64.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace tdyn {

// out[r] = norm(x[r]) for each of `rows` rows of width d. out may alias x.
void rms_norm(const float* x, int64_t rows, int64_t d, const Norm& w, double eps, float* out);
void layer_norm(const float* x, int64_t rows, int64_t d, const Norm& w, double eps, float* out);
void apply_norm(NormKind kind, const float* x, int64_t rows, int64_t d, const Norm& w, double eps, float* out);

float activate(Activation a, float x);
void activate_inplace(Activation a, float* x, int64_t n);
// up[i] *= act(gate[i]): the gated MLP's product.
void gated_activate(Activation a, const float* gate, float* up, int64_t n);

// x = cap * tanh(x / cap) elementwise (Gemma final logit soft-capping).
void softcap_inplace(float* x, int64_t n, double cap);

// cos and sin of pos * inv_freq[i] as float, tabled for the first positions so that a forward pass does not
// recompute two transcendentals per rotating pair per row per call; later positions are computed the same way
// (in double, then rounded), so tabled and computed values are identical. inv_freq has one entry per rotating
// pair: d_head / 2, or fewer when only the leading dimensions rotate (partial rotary). Immutable once built.
class RopeTable {
 public:
  RopeTable(RopeStyle style, std::vector<double> inv_freq, int64_t tabled_positions);
  RopeStyle style() const { return style_; }
  int64_t pairs() const { return static_cast<int64_t>(inv_freq_.size()); }
  int64_t tabled_positions() const { return tabled_; }
  const std::vector<double>& inv_freq() const { return inv_freq_; }
  // cos[i], sin[i] for i < pairs() at `pos`: pointers into the table, or into `scratch` (2 * pairs()) past it.
  std::pair<const float*, const float*> at(int64_t pos, float* scratch) const;

 private:
  RopeStyle style_;
  std::vector<double> inv_freq_;
  int64_t tabled_ = 0;
  std::vector<float> cos_, sin_;  // [tabled][pairs]
};

// Rotates each head of x [rows, n_heads*d_head] in place; row r is at position start_pos + r.
void apply_rope(const RopeTable& rope, float* x, int64_t rows, int64_t n_heads, int64_t d_head, int64_t start_pos);

struct AttentionShape {
  int64_t n_queries;     // rows of q (positions start_pos .. start_pos + n_queries - 1)
  int64_t n_keys;        // rows of k/v (positions 0 .. n_keys - 1 when cached, else equal to the queries)
  int64_t start_pos;     // absolute position of the first query; keys are at absolute positions 0..n_keys-1
  int64_t n_heads, n_kv_heads, d_head;
  double scale;
  bool causal;                // false: every query sees every key (encoders)
  int64_t sliding_window = 0; // >0: query at position p sees keys p - window < j <= p (HF sliding-window layers)
};

// Visible keys of the query at absolute position `pos`: [first, last] (inclusive).
struct KeyRange {
  int64_t first, last;
};
KeyRange visible_keys(const AttentionShape& s, int64_t pos);

// z [n_queries, n_heads*d_head] = softmax(scale * q k^T + mask) v per head (query head h reads kv head
// h / (n_heads / n_kv_heads)). q: [n_queries, n_heads*d_head]; k, v: [n_keys, n_kv_heads*d_head].
// pattern (optional) receives probabilities [n_heads, n_queries, n_keys], masked entries exactly 0.
void attention(const AttentionShape& s, const float* q, const float* k, const float* v, float* z, float* pattern);

}  // namespace tdyn
