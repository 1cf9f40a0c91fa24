// Exact sublayer Jacobians (structured factors, made dense in closed form, and the batched-JVP reference) and
// their structured mean; see jacobian_model.h for the definitions. The layer's wiring (the norms around each
// sublayer, the residual, Gemma 4's per-layer-input branch, the layer scalar) is model/block.h's, which the forward
// pass runs too; the sublayers follow model/transformer.cpp and model/ops.cpp step by step, in float64, and the
// activations, the norms' statistics and RoPE's rotations are the forward pass's own formulas (model/op_formulas.h)
// on double.
#include "analysis/jacobian/jacobian_model.h"

#include <cmath>

#include <omp.h>

#include "analysis/layer_matrix.h"
#include "core/error.h"
#include "kernels/serial_blas.h"
#include "linalg/gemm.h"
#include "model/block.h"
#include "model/op_formulas.h"
#include "model/ops.h"

namespace tdyn {

using linalg::Matrix;
using linalg::Vector;

const char* to_string(Sublayer s) { return s == Sublayer::Attention ? "attn" : "mlp"; }

// ---- float64 weights ------------------------------------------------------------------------------------

struct DenseLinear {
  Matrix w;  // [out, in] (nn.Linear convention)
  Vector b;  // [out] or empty
  explicit operator bool() const { return w.size() > 0; }
};

struct DenseNorm {
  Vector w, b;  // [n] each, or empty (no scale / no bias)
  bool present = false;
};

// An In matrix of the structured form, and what gives In V from the projection's forward value (in_times_v).
struct FoldedInput {
  Matrix w;      // In = W diag(pre-norm scale) [r, d]
  Vector shift;  // W b_norm + b: the projection's value when the normalized input a is 0 (pre-norm only)
  Vector ones;   // In 1 (LayerNorm pre-norm only)
};

struct JacobianModel::Weights {
  DenseNorm attn_norm, q_norm, k_norm, attn_post_norm, mlp_norm, mlp_post_norm, ple_post_norm;
  DenseLinear q, k, v, o, gate, up, down, ple_gate, ple_proj;
  FoldedInput q_in, k_in, v_in, gate_in, up_in;
  double output_scale = 1;
};

namespace {

// The float64 copies are written into what `d` / `f` hold from an earlier layer of the same shapes: faulting in a
// fresh buffer can cost more than writing it (docs/scale.md).
void to_dense(const Linear& l, DenseLinear& d) {
  if (!l) {
    d = {};
    return;
  }
  dense_matrix(l, d.w);
  if (l.b) d.b = Eigen::Map<const Eigen::VectorXf>(l.b, l.out).cast<double>();
  else d.b.resize(0);
}

DenseNorm to_dense(const Norm& n, int64_t size) {
  DenseNorm d;
  d.present = n.w != nullptr || n.b != nullptr;
  if (n.w) d.w = Eigen::Map<const Eigen::VectorXf>(n.w, size).cast<double>();
  if (n.b) d.b = Eigen::Map<const Eigen::VectorXf>(n.b, size).cast<double>();
  return d;
}

// `pre` is the pre-norm, or null without one.
void fold(const DenseLinear& l, const DenseNorm* pre, NormKind kind, FoldedInput& f) {
  if (!l) {
    f = {};
    return;
  }
  const bool scaled = pre && pre->w.size();
  f.w.resize(l.w.rows(), l.w.cols());
#pragma omp parallel for if (!omp_in_parallel())
  for (int64_t c = 0; c < l.w.cols(); ++c) {
    if (scaled) f.w.col(c) = l.w.col(c) * pre->w[c];  // In = W diag(w)
    else f.w.col(c) = l.w.col(c);
  }
  f.shift.resize(0);
  f.ones.resize(0);
  if (!pre) return;
  f.shift = pre->b.size() ? Vector(l.w * pre->b) : Vector::Zero(l.w.rows());
  if (l.b.size()) f.shift += l.b;
  if (kind == NormKind::LayerNorm) f.ones = f.w.rowwise().sum();
}

// A value and its tangents: column j of t is d v / d (input direction j). t has 0 columns for values only.
struct Dual {
  Vector v;  // [n]
  Matrix t;  // [n, m]
};

// A projection's value made beforehand (project_inputs), for a step that carries no tangents.
Dual given(const Vector& value, const Dual& x) {
  TDYN_CHECK(x.t.cols() == 0 && value.size() > 0);
  return Dual{value, Matrix(value.size(), 0)};
}

// Through BLAS: these products are the step's passes over the float64 weights (one per projection and sample
// in the structured mean).
Dual linear(const DenseLinear& l, const Dual& x) {
  Dual y{l.b.size() ? l.b : Vector::Zero(l.w.rows()), Matrix::Zero(l.w.rows(), x.t.cols())};
  linalg::multiply_add_vector(l.w, x.v, y.v);
  linalg::multiply_add(l.w, x.t, y.t);
  return y;
}

// The norm of rows [off, off + len) of x, in place (ops.cpp rms_norm / layer_norm):
//   RMSNorm   y = w ⊙ x/r,            r = sqrt(mean x² + eps),  J = diag(w)(1/r)(I − a aᵀ/n),          a = x/r
//   LayerNorm y = w ⊙ (x − μ)/σ + b,  σ = sqrt(var + eps),      J = diag(w)(1/σ)(I − 11ᵀ/n − a aᵀ/n), a = (x − μ)/σ
// `w`/`b` may be null (Gemma 4 v_norm has no scale). Returns the Jacobian factors when asked.
void norm_inplace(NormKind kind, const double* w, const double* b, double eps, Dual& x, int64_t off, int64_t len,
                  NormJacobian* jac = nullptr) {
  auto v = x.v.segment(off, len);
  const NormStatistics s = norm_statistics(kind, v.data(), len, eps);
  const Vector a = (v.array() - s.mean) * s.inverse_scale;
  if (x.t.cols() > 0) {
    auto t = x.t.middleRows(off, len);
    const Eigen::RowVectorXd at = a.transpose() * t / static_cast<double>(len);
    if (kind == NormKind::LayerNorm) {
      const Eigen::RowVectorXd column_means = t.colwise().mean();
      t.rowwise() -= column_means;
    }
    t -= a * at;
    t *= s.inverse_scale;
    if (w) t = Eigen::Map<const Vector>(w, len).asDiagonal() * t;
  }
  if (jac) {
    jac->scale = s.inverse_scale;
    const double inv_sqrt_n = 1.0 / std::sqrt(static_cast<double>(len));
    jac->u.resize(len, kind == NormKind::LayerNorm ? 2 : 1);
    if (kind == NormKind::LayerNorm) jac->u.col(0).setConstant(inv_sqrt_n);
    jac->u.rightCols(1) = a * inv_sqrt_n;
  }
  for (int64_t i = 0; i < len; ++i) v[i] = (w ? w[i] : 1.0) * a[i] + (b ? b[i] : 0.0);
}

void norm_inplace(NormKind kind, const DenseNorm& n, double eps, Dual& x, NormJacobian* jac = nullptr) {
  norm_inplace(kind, n.w.size() ? n.w.data() : nullptr, n.b.size() ? n.b.data() : nullptr, eps, x, 0, x.v.size(), jac);
}

// RoPE of every head of x (values and tangent rows) at absolute position `pos` (ops.cpp apply_rope).
void rope_inplace(RopeStyle style, const std::vector<double>& inv_freq, Dual& x, int64_t n_heads, int64_t d_head,
                  int64_t pos) {
  if (style == RopeStyle::None) return;
  const int64_t half = static_cast<int64_t>(inv_freq.size());  // rotated pairs; partial rotary: the rest pass through
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * inv_freq[i], c = std::cos(angle), s = std::sin(angle);
    const auto [first, second] = rope_pair(style, i, half);
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t a = h * d_head + first, b = h * d_head + second;
      rotate(x.v[a], x.v[b], c, s);
      if (x.t.cols() > 0) {
        Eigen::RowVectorXd t0 = x.t.row(a), t1 = x.t.row(b);
        rotate(t0, t1, c, s);
        x.t.row(a) = t0;
        x.t.row(b) = t1;
      }
    }
  }
}

Vector row64(const Tensor& t, int64_t r) {
  return Eigen::Map<const Eigen::VectorXf>(t.row(r), t.shape.back()).cast<double>();
}

// What the structured form needs from one evaluation of a step.
struct AttentionTrace {
  Vector q_raw, k_raw, v_raw;  // projections before QK-/V-norm and RoPE
  Vector q, k_self, v_self;    // after them (k/v: position p's own, on layers with their own keys/values)
  std::vector<Matrix> mix;     // per head: scale Σ_j P_j (v_j − z)k_jᵀ = ∂z_h/∂q_h   [d_head, d_head]
  Vector p_self;               // per head: P_pp
  Vector z;                    // [n_heads * d_head]
  NormJacobian pre;            // at the step input
};

struct MlpTrace {
  Vector pre_act, up;  // gated: gate pre-activation and up projection; else pre_act = up projection
  NormJacobian pre;
  Vector ple_gate_pre, ple_input;  // Gemma 4's per-layer-input branch: W_gate y and the input row
};

}  // namespace

// ---- JacobianModel -------------------------------------------------------------------------------------

JacobianModel::JacobianModel(std::shared_ptr<const Transformer> transformer, ZeroedParts zeroed)
    : transformer_(std::move(transformer)), zeroed_(std::move(zeroed)) {
  const ModelConfig& c = config();
  weights_.resize(c.n_stored_layers());
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerConfig& lc = transformer_->layer_config(l);
    inv_freq_.push_back(rope_inv_freq(lc.rope, lc.d_head));
  }
}

const JacobianModel::Weights& JacobianModel::weights(int64_t layer) const {
  const ModelConfig& c = config();
  const LayerConfig& lc = transformer_->layer_config(layer);
  std::lock_guard<std::mutex> lock(mutex_);
  std::unique_ptr<Weights>& slot = weights_.at(lc.weights);
  if (slot) return *slot;
  const LayerWeights& L = transformer_->model().weights.layers[layer];
  const int64_t d = c.d_model, q_dim = c.n_heads * lc.d_head, kv_dim = c.n_kv_heads * lc.d_head;
  std::unique_ptr<Weights> w = spare_ ? std::move(spare_) : std::make_unique<Weights>();
  const bool per_head = c.qk_norm == QKNorm::PerHead;
  w->attn_norm = to_dense(L.attn_norm, d);
  w->q_norm = to_dense(L.q_norm, per_head ? lc.d_head : q_dim);
  w->k_norm = to_dense(L.k_norm, per_head ? lc.d_head : kv_dim);
  w->attn_post_norm = to_dense(L.attn_post_norm, d);
  w->mlp_norm = to_dense(L.mlp_norm, d);
  w->mlp_post_norm = to_dense(L.mlp_post_norm, d);
  w->ple_post_norm = to_dense(L.ple_post_norm, d);
  to_dense(L.q, w->q);
  to_dense(L.k, w->k);
  to_dense(L.v, w->v);
  to_dense(L.o, w->o);
  to_dense(L.gate, w->gate);
  to_dense(L.up, w->up);
  to_dense(L.down, w->down);
  to_dense(L.ple_gate, w->ple_gate);
  to_dense(L.ple_proj, w->ple_proj);
  const bool pre = has_pre_norm(c.norm_placement);
  fold(w->q, pre ? &w->attn_norm : nullptr, c.norm, w->q_in);
  fold(w->k, pre ? &w->attn_norm : nullptr, c.norm, w->k_in);
  fold(w->v, pre ? &w->attn_norm : nullptr, c.norm, w->v_in);
  fold(w->gate, pre ? &w->mlp_norm : nullptr, c.norm, w->gate_in);
  fold(w->up, pre ? &w->mlp_norm : nullptr, c.norm, w->up_in);
  w->output_scale = transformer_->layer_output_scale(layer);
  slot = std::move(w);
  return *slot;
}

void JacobianModel::prepare_layer(int64_t layer) const { weights(layer); }

void JacobianModel::release_layer(int64_t layer, bool keep_buffers) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unique_ptr<Weights>& slot = weights_.at(transformer_->layer_config(layer).weights);
  if (keep_buffers) {
    spare_ = std::move(slot);
  } else {
    slot.reset();
    spare_.reset();
  }
}

JacobianModel::~JacobianModel() = default;

SequenceState JacobianModel::run(std::span<const int32_t> ids, std::span<const int32_t> token_types) const {
  Tensor x = transformer_->embed(ids, 0, token_types);
  const Tensor embeddings = config().d_per_layer_input > 0 ? x : Tensor();
  KVCache kv = kv_sources(*transformer_, x.dim(0));
  SequenceState s;
  for (int64_t l = 0; l < config().n_layers; ++l) run_layer(*transformer_, l, ids, embeddings, x, kv, s, zeroed_);
  return s;
}

Vector JacobianModel::input(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos) const {
  TDYN_CHECK(pos >= 0 && pos < s.n_pos);
  const bool reads_pre = which == Sublayer::Attention || transformer_->mlp_reads_layer_input();
  return row64(reads_pre ? s.resid_pre.at(layer) : s.resid_mid.at(layer), pos);
}

Vector JacobianModel::output(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos) const {
  TDYN_CHECK(pos >= 0 && pos < s.n_pos);
  if (which == Sublayer::Mlp && transformer_->mlp_reads_layer_input())  // resid_pre + mlp_out, from the stored boundaries
    return row64(s.resid_pre.at(layer), pos) + row64(s.resid_post.at(layer), pos) - row64(s.resid_mid.at(layer), pos);
  return row64(which == Sublayer::Attention ? s.resid_mid.at(layer) : s.resid_post.at(layer), pos);
}

namespace {

// block.h's layer step on one position's vector carrying its tangents: each norm fills its Jacobian factors where
// they are asked for, a zeroed sublayer (ZeroedParts) adds 0, and nothing is captured.
struct TangentStep {
  using Value = Dual;
  const ModelConfig& c;
  const JacobianModel::Weights& w;
  const ZeroedParts::Layer& zeroed;
  NormJacobian* pre = nullptr;       // the pre-norm's factors, when asked for
  NormJacobian* post = nullptr;      // the post-norm's
  NormJacobian* ple_post = nullptr;  // the per-layer-input branch's norm's
  const float* per_layer_input = nullptr;  // [d_per_layer] at this position (Gemma 4)
  MlpTrace* trace = nullptr;               // receives the branch's gate pre-activation and input
  RopeStyle rope_style = RopeStyle::None;  // the layer's RoPE at `pos` (for rope())
  const std::vector<double>* inv_freq = nullptr;
  int64_t pos = 0;

  const ModelConfig& config() const { return c; }
  const JacobianModel::Weights& weights() const { return w; }
  void norm(const Dual& in, Dual& out, block::NormSite site) const {
    if (&out != &in) out = in;
    NormJacobian* factors = site == block::NormSite::PerLayerInputPost ? ple_post
                            : site == block::NormSite::AttnPre || site == block::NormSite::MlpPre ? pre
                                                                                                  : post;
    norm_inplace(block::norm_kind(c, site), block::norm_weights(w, site), c.norm_eps, out, factors);
  }
  void norm_heads(Dual& x, int64_t heads, block::NormSite site) const {
    const DenseNorm& n = block::norm_weights(w, site);
    const int64_t width = x.v.size() / heads;
    for (int64_t i = 0; i < heads; ++i)
      norm_inplace(block::norm_kind(c, site), n.w.size() ? n.w.data() : nullptr, n.b.size() ? n.b.data() : nullptr,
                   c.norm_eps, x, i * width, width);
  }
  void rope(Dual& x, int64_t heads) const { rope_inplace(rope_style, *inv_freq, x, heads, x.v.size() / heads, pos); }
  void added(Dual& f, Sublayer which) const {
    if (which == Sublayer::Attention ? zeroed.attn_out : zeroed.mlp_out) {
      f.v.setZero();
      f.t.setZero();
    }
  }
  void add(Dual& x, const Dual& y) const {
    x.v += y.v;
    x.t += y.t;
  }
  Dual linear(const DenseLinear& l, const Dual& x) const { return tdyn::linear(l, x); }
  void gate_by_per_layer_input(Dual& g) const {
    TDYN_CHECK(per_layer_input != nullptr);
    const Vector input = Eigen::Map<const Eigen::VectorXf>(per_layer_input, g.v.size()).cast<double>();
    if (trace) trace->ple_gate_pre = g.v, trace->ple_input = input;
    g.t = g.v.unaryExpr([&](double x) { return activation_derivative(c.activation, x); }).cwiseProduct(input).asDiagonal() * g.t;
    g.v = g.v.unaryExpr([&](double x) { return activation(c.activation, x); }).cwiseProduct(input);
  }
  void capture(const Dual&, const char*) const {}
  void capture_heads(const Dual&, int64_t, const char*) const {}
  double output_scale() const { return w.output_scale; }
  void scale(Dual& x, double s) const {
    x.v *= s;
    x.t *= s;
  }
};

// The attention step's query at the step's position, and its own key and value where the layer makes them, from the
// pre-normed input h: projections (or the `projected` ones), then block.h's QK-/V-norms and RoPE.
struct QueryKeyValue {
  Dual q, k, v;  // k, v [n_kv_heads * d_head]: on layers with their own keys only
};
QueryKeyValue queries_keys_values(const TangentStep& step, bool own, const Dual& h, AttentionTrace* trace,
                                  const StepProjections* projected) {
  const JacobianModel::Weights& W = step.w;
  QueryKeyValue r;
  r.q = projected ? given(projected->q, h) : linear(W.q, h);  // [n_heads * d_head]
  if (trace) trace->q_raw = r.q.v;
  if (own) {
    r.k = projected ? given(projected->k, h) : linear(W.k, h);
    r.v = projected ? given(projected->v, h) : linear(W.v, h);
    if (trace) trace->k_raw = r.k.v, trace->v_raw = r.v.v;
  }
  block::attention_inputs(step, r.q, r.k, r.v, own);
  return r;
}

// Columns [col, col + width) of the visible rows of `stored` (the forward pass's keys or values) in float64, row
// `own_pos` (≥ 0) taken from `own` instead: position p's own key or value, which the local map varies.
Matrix visible_rows(const Tensor& stored, const KeyRange& range, int64_t col, int64_t width, int64_t own_pos, const Vector& own) {
  Matrix out(range.last - range.first + 1, width);
  for (int64_t j = 0; j < out.rows(); ++j) {
    const int64_t key = range.first + j;
    if (key == own_pos)
      out.row(j) = own.segment(col, width).transpose();
    else
      out.row(j) = Eigen::Map<const Eigen::RowVectorXf>(stored.row(key) + col, width).cast<double>();
  }
  return out;
}

// The local attention step at `pos` (transformer.cpp attention_block / attention, ops.cpp attention).
Dual attention_step(const ModelConfig& c, const LayerConfig& lc, const JacobianModel::Weights& W,
                    const std::vector<double>& inv_freq, const SequenceState& s, int64_t layer, int64_t pos, const Dual& x,
                    const ZeroedParts::Layer& zeroed, AttentionTrace* trace, NormJacobian* post,
                    const StepProjections* projected = nullptr) {
  const int64_t hd = lc.d_head, H = c.n_heads, G = c.n_kv_heads, group = H / G, q_dim = H * hd;
  const int64_t m = x.t.cols();
  const bool own = lc.kv_source == layer;

  const TangentStep step{.c = c, .w = W, .zeroed = zeroed, .pre = trace ? &trace->pre : nullptr, .post = post,
                         .rope_style = lc.rope.style, .inv_freq = &inv_freq, .pos = pos};
  Dual normed;
  const Dual& h = block::sublayer_input(step, Sublayer::Attention, x, normed);  // sublayer input [d]

  const QueryKeyValue qkv = queries_keys_values(step, own, h, trace, projected);
  const Dual &q = qkv.q, &k = qkv.k, &v = qkv.v;

  const Tensor& keys = s.keys.at(lc.kv_source);
  const Tensor& values = s.values.at(lc.kv_source);
  AttentionShape shape{1, s.n_pos, pos, H, G, hd, lc.attn_scale, c.causal, lc.sliding_window};
  const KeyRange range = visible_keys(shape, pos);

  Dual z{Vector::Zero(q_dim), Matrix::Zero(q_dim, m)};
  if (trace) {
    trace->mix.assign(H, Matrix());
    trace->p_self = Vector::Zero(H);
  }
  // One kv head and the query heads of its group per iteration. OpenMP splits the kv heads over threads unless
  // this runs inside a parallel region already (one sample per thread); either way the products inside run on
  // one thread, where Eigen would otherwise split each small product with a barrier of its own. The iterations
  // write disjoint rows of z and entries of the trace, and throw nothing.
#pragma omp parallel for schedule(dynamic, 1) if (!omp_in_parallel() && G > 1)
  for (int64_t g = 0; g < G; ++g) {
    const Matrix kh = visible_rows(keys, range, g * hd, hd, own ? pos : -1, k.v);  // [keys, d_head]
    const Matrix vh = visible_rows(values, range, g * hd, hd, own ? pos : -1, v.v);
    for (int64_t head = g * group; head < (g + 1) * group; ++head) {
      if (zeroed.head(head)) {  // z_h is the constant 0: no value, no derivative
        if (trace) {
          trace->mix[head] = Matrix::Zero(hd, hd);
          trace->p_self[head] = 0;
        }
        continue;
      }
      const auto qh = q.v.segment(head * hd, hd);
      Vector p = lc.attn_scale * (kh * qh);  // scores, then probabilities [keys]
      p = (p.array() - p.maxCoeff()).exp();
      p /= p.sum();
      const Vector zh = vh.transpose() * p;
      z.v.segment(head * hd, hd) = zh;
      // ∂z/∂q = scale Σ_j P_j (v_j − z) k_jᵀ (softmax derivative dP_j = P_j (ds_j − Σ_i P_i ds_i)).
      const Matrix mix = lc.attn_scale * (vh.rowwise() - zh.transpose()).transpose() * p.asDiagonal() * kh;
      const double p_self = own ? p[pos - range.first] : 0.0;
      if (m > 0) {
        auto tz = z.t.middleRows(head * hd, hd);
        tz = mix * q.t.middleRows(head * hd, hd);
        if (own) {
          // Position p's own score s_p = scale q·k_p and value v_p move too.
          const Vector vz = v.v.segment(g * hd, hd) - zh;
          tz += (lc.attn_scale * p_self) * vz * (qh.transpose() * k.t.middleRows(g * hd, hd));
          tz += p_self * v.t.middleRows(g * hd, hd);
        }
      }
      if (trace) {
        trace->mix[head] = mix;
        trace->p_self[head] = p_self;
      }
    }
  }
  if (trace) {
    trace->q = q.v;
    if (own) trace->k_self = k.v, trace->v_self = v.v;
    trace->z = z.v;
    // The structured form reads the output only through a post-norm's Jacobian: without one, W_o's product
    // (a d × q_dim float64 pass per sample) is not needed.
    if (c.norm_placement == NormPlacement::Pre) return Dual{};
  }
  Dual f = linear(W.o, z);  // [d]
  block::sublayer_output(step, Sublayer::Attention, f, &x);
  return f;
}

// The local MLP step at `pos` (transformer.cpp mlp_block / mlp), up to hook_resid_post.
Dual mlp_step(const ModelConfig& c, const JacobianModel::Weights& W, const SequenceState& s, int64_t layer,
              int64_t pos, const Dual& x, const ZeroedParts::Layer& zeroed, MlpTrace* trace, NormJacobian* post,
              NormJacobian* ple_post, const StepProjections* projected = nullptr) {
  const TangentStep step{.c = c, .w = W, .zeroed = zeroed, .pre = trace ? &trace->pre : nullptr, .post = post,
                         .ple_post = ple_post,
                         .per_layer_input = c.d_per_layer_input > 0 ? s.per_layer_inputs.at(layer).row(pos) : nullptr,
                         .trace = trace};
  Dual normed;
  const Dual& h = block::sublayer_input(step, Sublayer::Mlp, x, normed);
  Dual up = projected ? given(projected->up, h) : linear(W.up, h);  // [d_mlp]
  Dual hidden;
  if (c.gated_mlp) {
    Dual gate = projected ? given(projected->gate, h) : linear(W.gate, h);
    const Vector act = gate.v.unaryExpr([&](double g) { return activation(c.activation, g); });
    const Vector dact = gate.v.unaryExpr([&](double g) { return activation_derivative(c.activation, g); });
    hidden.v = act.cwiseProduct(up.v);
    hidden.t = (dact.cwiseProduct(up.v)).asDiagonal() * gate.t + act.asDiagonal() * up.t;
    if (trace) trace->pre_act = gate.v, trace->up = up.v;
  } else {
    hidden.v = up.v.unaryExpr([&](double u) { return activation(c.activation, u); });
    const Vector dact = up.v.unaryExpr([&](double u) { return activation_derivative(c.activation, u); });
    hidden.t = dact.asDiagonal() * up.t;
    if (trace) trace->pre_act = up.v;
  }
  if (zeroed.mlp_hidden) {  // mlp.hook_post is the constant 0
    hidden.v.setZero();
    hidden.t.setZero();
  }
  // As in attention_step: the structured form needs no output unless a post-norm or the per-layer-input branch
  // reads it.
  if (trace && c.norm_placement == NormPlacement::Pre && c.d_per_layer_input == 0) return Dual{};
  Dual y = linear(W.down, hidden);
  block::sublayer_output(step, Sublayer::Mlp, y, &x);
  block::finish_layer(step, y);
  return y;
}

}  // namespace

Vector JacobianModel::step(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos, const Vector& x) const {
  const LayerConfig& lc = transformer_->layer_config(layer);
  const Weights& W = weights(layer);
  Dual in{x, Matrix(x.size(), 0)};
  const ZeroedParts::Layer& zeroed = zeroed_.layer(layer);
  if (which == Sublayer::Attention)
    return attention_step(config(), lc, W, inv_freq_[layer], s, layer, pos, in, zeroed, nullptr, nullptr).v;
  return mlp_step(config(), W, s, layer, pos, in, zeroed, nullptr, nullptr, nullptr).v;
}

Matrix JacobianModel::jacobian(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos) const {
  return structure(s, layer, which, pos).dense();
}

Matrix JacobianModel::block_jacobian(const Matrix& attn, const Matrix& mlp) const {
  if (!transformer_->mlp_reads_layer_input()) return linalg::multiply(mlp, attn);
  Matrix block = attn + mlp;
  block.diagonal().array() -= 1.0;
  return block;
}

Matrix JacobianModel::jacobian_by_tangents(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos) const {
  const LayerConfig& lc = transformer_->layer_config(layer);
  const Weights& W = weights(layer);
  const int64_t d = d_model();
  Dual in{input(s, layer, which, pos), Matrix::Identity(d, d)};
  const ZeroedParts::Layer& zeroed = zeroed_.layer(layer);
  if (which == Sublayer::Attention)
    return attention_step(config(), lc, W, inv_freq_[layer], s, layer, pos, in, zeroed, nullptr, nullptr).t;
  return mlp_step(config(), W, s, layer, pos, in, zeroed, nullptr, nullptr, nullptr).t;
}

std::vector<StepProjections> JacobianModel::project_inputs(std::span<const StatePosition> at, int64_t layer,
                                                           Sublayer which) const {
  const ModelConfig& c = config();
  const Weights& W = weights(layer);
  const int64_t n = static_cast<int64_t>(at.size()), d = d_model();
  const bool attention = which == Sublayer::Attention;
  const TangentStep step{.c = c, .w = W, .zeroed = zeroed_.layer(layer)};
  Matrix h(d, n);  // each position's step input after the pre-norm, as attention_step / mlp_step make it
  for (int64_t j = 0; j < n; ++j) {
    const Dual x{input(*at[j].state, layer, which, at[j].pos), Matrix(d, 0)};
    Dual normed;
    h.col(j) = block::sublayer_input(step, which, x, normed).v;
  }
  std::vector<StepProjections> out(n);
  auto project = [&](const DenseLinear& l, Vector StepProjections::*field) {
    Matrix y = linalg::multiply(l.w, h);
    if (l.b.size()) y.colwise() += l.b;
    for (int64_t j = 0; j < n; ++j) out[j].*field = y.col(j);
  };
  if (attention) {
    project(W.q, &StepProjections::q);
    if (transformer_->layer_config(layer).kv_source == layer) {
      project(W.k, &StepProjections::k);
      project(W.v, &StepProjections::v);
    }
  } else {
    project(W.up, &StepProjections::up);
    if (c.gated_mlp) project(W.gate, &StepProjections::gate);
  }
  return out;
}

namespace {

// In V for a branch from its projection's forward value, without a pass over In: the pre-norm's output is
// w ⊙ a + b_n, so the value is W (w ⊙ a + b_n) + b = In a + shift, and V's columns are a/√n (after 1/√n under
// LayerNorm, whose In 1 is kept with the weights). [r, 0] without a pre-norm.
Matrix in_times_v(const FoldedInput& in, const Vector& value, const NormJacobian& pre) {
  const int64_t k = pre.u.cols();
  Matrix r(value.size(), k);
  if (k == 0) return r;
  const double inv_sqrt_n = 1.0 / std::sqrt(static_cast<double>(pre.u.rows()));
  r.col(k - 1) = (value - in.shift) * inv_sqrt_n;
  if (k == 2) r.col(0) = in.ones * inv_sqrt_n;
  return r;
}

BranchMiddle diagonal_middle(Vector diag) {
  BranchMiddle m;
  m.diagonal = true;
  m.cols = diag.size();
  m.diag = std::move(diag);
  return m;
}

BranchMiddle block_middle(int64_t n_blocks, int64_t block_rows, int64_t cols) {
  BranchMiddle m;
  m.cols = cols;
  m.block_rows = block_rows;
  m.blocks.resize(n_blocks);
  m.block_col.resize(n_blocks);
  return m;
}

// The attention step's factors at `pos` into `st` (JacobianModel::structure; st's identities and post-norm weight set).
void attention_structure(const ModelConfig& c, const LayerConfig& lc, const JacobianModel::Weights& W, const std::vector<double>& inv_freq,
                         const SequenceState& s, int64_t layer, int64_t pos, const Dual& in, const ZeroedParts::Layer& zeroed,
                         const StepProjections* projected, StepStructure& st) {
  AttentionTrace tr;
  attention_step(c, lc, W, inv_freq, s, layer, pos, in, zeroed, &tr, &st.post, projected);
  st.pre = tr.pre;
  st.out = &W.o.w;
  const int64_t hd = lc.d_head, H = c.n_heads, G = c.n_kv_heads, group = H / G, q_dim = H * hd, kv_dim = G * hd;
  const bool own = lc.kv_source == layer;
  const bool full_qk = c.qk_norm == QKNorm::FullProjection;

  // ∂(q, k, v after QK-/V-norm and RoPE)/∂(raw projection): the steps of block.h's attention_inputs on identity
  // tangents. Per head (d_head × d_head blocks) unless the QK-norm spans the whole projection (OLMo 3), where each
  // head's rows span the whole projection.
  const TangentStep step{.c = c, .w = W, .zeroed = zeroed, .rope_style = lc.rope.style, .inv_freq = &inv_freq, .pos = pos};
  const bool per_head_qk = c.qk_norm == QKNorm::PerHead;
  auto head_block = [&](const Vector& raw, int64_t head, bool norm, block::NormSite site, bool rope) {
    Dual b{raw.segment(head * hd, hd), Matrix::Identity(hd, hd)};
    if (norm) step.norm_heads(b, 1, site);
    if (rope) step.rope(b, 1);
    return b.t;
  };
  auto full_block = [&](const Vector& raw, block::NormSite site, int64_t heads) {
    Dual b{raw, Matrix::Identity(raw.size(), raw.size())};
    step.norm_heads(b, 1, site);
    step.rope(b, heads);
    return b.t;
  };
  // ∂z_h/∂q_h = mix_h (softmax derivative through the scores): one block per head (heads over threads as in
  // attention_step).
  JacobianBranch bq{&W.q_in.w, block_middle(H, hd, q_dim), in_times_v(W.q_in, tr.q_raw, st.pre)};
  const Matrix q_full = full_qk ? full_block(tr.q_raw, block::NormSite::Query, H) : Matrix();
#pragma omp parallel for schedule(dynamic, 1) if (!omp_in_parallel() && H > 1)
  for (int64_t h = 0; h < H; ++h) {
    if (full_qk) {
      bq.m.blocks[h] = tr.mix[h] * q_full.middleRows(h * hd, hd);
      bq.m.block_col[h] = 0;
    } else {
      bq.m.blocks[h] = tr.mix[h] * head_block(tr.q_raw, h, per_head_qk, block::NormSite::Query, true);
      bq.m.block_col[h] = h * hd;
    }
  }
  st.branches.push_back(std::move(bq));

  if (own) {
    // ∂z_h/∂k_p = scale P_pp (v_p − z_h) q_hᵀ; ∂z_h/∂v_p = P_pp I (per query head h, its kv head g = h / group,
    // so the heads of a group share their blocks' columns).
    const Matrix k_full = full_qk ? full_block(tr.k_raw, block::NormSite::Key, G) : Matrix();
    std::vector<Matrix> k_blocks(G), v_blocks(G);
    for (int64_t g = 0; g < G && !full_qk; ++g) k_blocks[g] = head_block(tr.k_raw, g, per_head_qk, block::NormSite::Key, true);
    for (int64_t g = 0; g < G; ++g) v_blocks[g] = head_block(tr.v_raw, g, c.v_norm, block::NormSite::Value, false);
    JacobianBranch bk{&W.k_in.w, block_middle(H, hd, kv_dim), in_times_v(W.k_in, tr.k_raw, st.pre)};
    JacobianBranch bv{&W.v_in.w, block_middle(H, hd, kv_dim), in_times_v(W.v_in, tr.v_raw, st.pre)};
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group;
      const Vector vz = (lc.attn_scale * tr.p_self[h]) * (tr.v_self.segment(g * hd, hd) - tr.z.segment(h * hd, hd));
      const auto qh = tr.q.segment(h * hd, hd).transpose();
      if (full_qk) {
        bk.m.blocks[h] = vz * (qh * k_full.middleRows(g * hd, hd));
        bk.m.block_col[h] = 0;
      } else {
        bk.m.blocks[h] = vz * (qh * k_blocks[g]);
        bk.m.block_col[h] = g * hd;
      }
      bv.m.blocks[h] = tr.p_self[h] * v_blocks[g];
      bv.m.block_col[h] = g * hd;
    }
    st.branches.push_back(std::move(bk));
    st.branches.push_back(std::move(bv));
  }
}

// The MLP step's factors at `pos` into `st` (as attention_structure).
void mlp_structure(const ModelConfig& c, const JacobianModel::Weights& W, const SequenceState& s, int64_t layer,
                   int64_t pos, const Dual& in, const ZeroedParts::Layer& zeroed, const StepProjections* projected, StepStructure& st) {
  MlpTrace tr;
  NormJacobian ple_post;
  mlp_step(c, W, s, layer, pos, in, zeroed, &tr, &st.post, &ple_post, projected);
  st.pre = tr.pre;
  st.out = &W.down.w;
  if (c.gated_mlp) {
    // ∂(act(g) ⊙ u) = diag(act'(g) ⊙ u) ∂g + diag(act(g)) ∂u
    Vector m_gate = tr.pre_act.unaryExpr([&](double g) { return activation_derivative(c.activation, g); }).cwiseProduct(tr.up);
    Vector m_up = tr.pre_act.unaryExpr([&](double g) { return activation(c.activation, g); });
    st.branches.push_back({&W.gate_in.w, diagonal_middle(std::move(m_gate)), in_times_v(W.gate_in, tr.pre_act, st.pre)});
    st.branches.push_back({&W.up_in.w, diagonal_middle(std::move(m_up)), in_times_v(W.up_in, tr.up, st.pre)});
  } else {
    Vector m_up = tr.pre_act.unaryExpr([&](double u) { return activation_derivative(c.activation, u); });
    st.branches.push_back({&W.up_in.w, diagonal_middle(std::move(m_up)), in_times_v(W.up_in, tr.pre_act, st.pre)});
  }
  if (zeroed.mlp_hidden || zeroed.mlp_out)  // the MLP adds a constant: no derivative through it
    for (JacobianBranch& b : st.branches) b.m.diag.setZero();
  if (c.d_per_layer_input > 0) {
    // ∂ branch/∂y = diag(w) λ'(I − U'U'ᵀ) W_proj diag(act'(W_gate y) ⊙ input) W_gate
    const Vector e = tr.ple_gate_pre.unaryExpr([&](double g) { return activation_derivative(c.activation, g); })
                         .cwiseProduct(tr.ple_input);
    Matrix left = W.ple_proj.w * e.asDiagonal();  // [d, P]
    left = ple_post.scale * (left - ple_post.u * (ple_post.u.transpose() * left));
    if (W.ple_post_norm.w.size()) left = W.ple_post_norm.w.asDiagonal() * left;
    st.ple_left = std::move(left);
    st.ple_gate = &W.ple_gate.w;
  }
  st.output_scale = W.output_scale;
}

}  // namespace

StepStructure JacobianModel::structure(const SequenceState& s, int64_t layer, Sublayer which, int64_t pos,
                                       const StepProjections* projected) const {
  const ModelConfig& c = config();
  const LayerConfig& lc = transformer_->layer_config(layer);
  const Weights& W = weights(layer);
  const int64_t d = d_model();
  const Vector x = input(s, layer, which, pos);
  Dual in{x, Matrix(d, 0)};
  const ZeroedParts::Layer& zeroed = zeroed_.layer(layer);

  StepStructure st;
  const bool post_residual = c.norm_placement == NormPlacement::PostResidual;
  st.identity = post_residual ? 0.0 : 1.0;
  st.inner_identity = post_residual ? 1.0 : 0.0;
  const DenseNorm& post_norm = which == Sublayer::Attention ? W.attn_post_norm : W.mlp_post_norm;
  if (has_post_norm(c.norm_placement) && post_norm.w.size()) st.post_weight = &post_norm.w;

  if (which == Sublayer::Attention)
    attention_structure(c, lc, W, inv_freq_[layer], s, layer, pos, in, zeroed, projected, st);
  else
    mlp_structure(c, W, s, layer, pos, in, zeroed, projected, st);
  return st;
}

// ---- BranchMiddle --------------------------------------------------------------------------------------

Matrix BranchMiddle::times(const Matrix& x) const {
  if (diagonal) return diag.asDiagonal() * x;
  Matrix y(rows(), x.cols());
  for (size_t h = 0; h < blocks.size(); ++h)
    y.middleRows(h * block_rows, block_rows).noalias() = blocks[h] * x.middleRows(block_col[h], blocks[h].cols());
  return y;
}

Matrix BranchMiddle::transpose_times(const Matrix& y) const {
  if (diagonal) return diag.asDiagonal() * y;
  Matrix x = Matrix::Zero(cols, y.cols());
  for (size_t h = 0; h < blocks.size(); ++h)
    x.middleRows(block_col[h], blocks[h].cols()).noalias() += blocks[h].transpose() * y.middleRows(h * block_rows, block_rows);
  return x;
}

void BranchMiddle::add_times(const Matrix& in, Matrix& out) const {
  if (diagonal) {
    out.noalias() += diag.asDiagonal() * in;
    return;
  }
  for (size_t h = 0; h < blocks.size(); ++h)
    linalg::multiply_add(blocks[h], in.middleRows(block_col[h], blocks[h].cols()), out.middleRows(h * block_rows, block_rows));
}

void BranchMiddle::add(double c, const BranchMiddle& other) {
  if (other.cols == 0) return;
  if (cols == 0) {  // empty: other's layout
    *this = other;
    if (diagonal) diag *= c;
    for (Matrix& b : blocks) b *= c;
    return;
  }
  TDYN_CHECK(diagonal == other.diagonal && cols == other.cols && blocks.size() == other.blocks.size());
  if (diagonal) diag += c * other.diag;
  for (size_t h = 0; h < blocks.size(); ++h) {
    TDYN_CHECK(block_col[h] == other.block_col[h] && blocks[h].cols() == other.blocks[h].cols());
    blocks[h] += c * other.blocks[h];
  }
}

int64_t BranchMiddle::bytes() const {
  int64_t n = diag.size();
  for (const Matrix& b : blocks) n += b.size();
  return n * static_cast<int64_t>(sizeof(double));
}

// ---- StepStructure -------------------------------------------------------------------------------------

namespace {

// X s (I − U Uᵀ) for X [k, d].
Matrix times_projector(const Matrix& x, const NormJacobian& n) {
  if (n.u.cols() == 0) return n.scale * x;
  return n.scale * (x - (x * n.u) * n.u.transpose());
}

}  // namespace

Matrix StepStructure::left_apply_step(const Matrix& x) const {
  // X K = a X + (X diag(w_L)) L (b I + Out Σ M In R)
  Matrix y = post_weight ? Matrix(x * post_weight->asDiagonal()) : x;
  y = times_projector(y, post);
  Matrix result = identity * x + inner_identity * y;
  const Matrix y_out = linalg::multiply(y, *out).transpose();  // (Y Out)ᵀ [r_out, k]
  Matrix inner = Matrix::Zero(x.rows(), x.cols());
  for (const auto& br : branches) linalg::multiply(Matrix(br.m.transpose_times(y_out).transpose()), *br.in, inner, 1.0);
  result += times_projector(inner, pre);
  return result;
}

Matrix StepStructure::dense() const {
  TDYN_CHECK(out != nullptr && !branches.empty());
  const int64_t d = out->rows();
  // F = Out (Σ M In): the one d × r × d product, whatever the number of branches. A diagonal first branch sets
  // Σ M In in the same pass that would otherwise clear it.
  const JacobianBranch& first = branches.front();
  Matrix m_in = first.m.diagonal ? Matrix(first.m.diag.asDiagonal() * *first.in) : Matrix(Matrix::Zero(out->cols(), d));
  for (size_t i = first.m.diagonal ? 1 : 0; i < branches.size(); ++i) branches[i].m.add_times(*branches[i].in, m_in);
  Matrix k = linalg::multiply(*out, m_in);
  // K = a I + diag(w_L) λ(I − UUᵀ) (b I + F ρ(I − VVᵀ)): the projectors as rank-k updates, in place.
  if (pre.u.cols()) {
    const Matrix k_v = k * pre.u;  // [d, kR]
    k.noalias() -= k_v * pre.u.transpose();
  }
  k *= pre.scale;
  k.diagonal().array() += inner_identity;
  if (post.u.cols()) {
    const Matrix ut_k = post.u.transpose() * k;  // [kL, d]
    k.noalias() -= post.u * ut_k;
  }
  k *= post.scale;
  if (post_weight) k.array().colwise() *= post_weight->array();
  k.diagonal().array() += identity;
  // J = s (K + P_ple (W_ple K)).
  if (ple_gate) linalg::multiply_add(ple_left, linalg::multiply(*ple_gate, k), k);
  k *= output_scale;
  return k;
}

int64_t StepStructure::bytes() const {
  int64_t n = post.u.size() + pre.u.size() + ple_left.size();
  for (const auto& br : branches) n += br.in_v.size() + br.m.bytes() / static_cast<int64_t>(sizeof(double));
  return n * static_cast<int64_t>(sizeof(double));
}

// ---- StructuredMean ------------------------------------------------------------------------------------

void StructuredMean::init(const StepStructure& s) {
  const int64_t d = s.out->rows();
  identity_ = s.identity;
  inner_identity_ = s.inner_identity;
  post_weight_ = s.post_weight;
  output_scale_ = s.output_scale;
  out_ = s.out;
  ple_gate_ = s.ple_gate;
  inner_ = Matrix::Zero(d, d);
  if (ple_gate_) ple_product_sum_ = Matrix::Zero(d, d);
  for (const auto& br : s.branches) ins_.push_back(br.in);
  m_sums_.resize(s.branches.size());
}

void StructuredMean::add(StepStructure&& s) {
  TDYN_CHECK(s.out != nullptr && !s.branches.empty());
  if (count_ == 0 && ins_.empty()) init(s);
  // Samples of one sublayer differ in their branches only on a bug (own vs shared keys is per layer).
  TDYN_CHECK(s.out == out_ && s.branches.size() == ins_.size());
  for (size_t i = 0; i < ins_.size(); ++i) TDYN_CHECK(s.branches[i].in == ins_[i]);
  ++count_;
  waiting_bytes_ += s.bytes();
  waiting_.push_back(std::move(s));
  if (batch_full()) flush();
}

bool StructuredMean::batch_full() const {
  // Batches of 64 samples share each pass over the weights; attention's per-head blocks (3 d · d_head per
  // sample) stop a batch at a quarter of the d × d sum's memory, so that waiting adds at most that to it.
  return waiting_.size() >= 64 || 4 * waiting_bytes_ >= static_cast<int64_t>(inner_.size() * sizeof(double));
}

void StructuredMean::flush() {
  if (waiting_.empty()) return;
  const int64_t n = static_cast<int64_t>(waiting_.size()), d = inner_.rows();
  const int64_t kR = waiting_[0].pre.u.cols(), kL = waiting_[0].post.u.cols();
  std::vector<double> c(n);  // λρ per sample
  for (int64_t j = 0; j < n; ++j) {
    const StepStructure& s = waiting_[j];
    TDYN_CHECK(s.pre.u.cols() == kR && s.post.u.cols() == kL);
    c[j] = s.post.scale * s.pre.scale;
    for (size_t i = 0; i < ins_.size(); ++i) m_sums_[i].add(c[j], s.branches[i].m);
    lambda_sum_ += s.post.scale;  // the identity part of L (b I) = b λ (I − UUᵀ)
  }
  // L F R = c (I − UUᵀ) F (I − VVᵀ) = c [F − P Vᵀ − U (Uᵀ F)] with F = Out Σ M In and P = (I − UUᵀ) F V. F is
  // summed as Σ c M above; the two low-rank terms of the whole batch reach inner_ by dgemm, as does the
  // −b λ U Uᵀ of L (b I).
  if (kR > 0) {
    Matrix x(out_->cols(), n * kR), v(d, n * kR);  // c Σ M In V, and V
    for (int64_t j = 0; j < n; ++j) {
      auto xj = x.middleCols(j * kR, kR);
      xj.setZero();
      for (const auto& br : waiting_[j].branches) xj += br.m.times(br.in_v);
      xj *= c[j];
      v.middleCols(j * kR, kR) = waiting_[j].pre.u;
    }
    Matrix p = linalg::multiply(*out_, x);  // c F V [d, n kR]
    if (kL > 0)
      for (int64_t j = 0; j < n; ++j) {
        const Matrix& u = waiting_[j].post.u;
        auto pj = p.middleCols(j * kR, kR);
        const Matrix ut_p = u.transpose() * pj;
        pj -= u * ut_p;
      }
    p *= -1.0;
    linalg::multiply(p, Matrix(v.transpose()), inner_, 1.0);
  }
  if (kL > 0) {
    Matrix u(d, n * kL);
    for (int64_t j = 0; j < n; ++j) u.middleCols(j * kL, kL) = waiting_[j].post.u;
    const Matrix u_out = linalg::multiply(Matrix(u.transpose()), *out_).transpose();  // Outᵀ U [r_out, n kL]
    Matrix ut_f = Matrix::Zero(n * kL, d);                                            // c Uᵀ F, per sample
    for (size_t i = 0; i < ins_.size(); ++i) {
      Matrix y(ins_[i]->rows(), n * kL);  // c Mᵀ Outᵀ U
      for (int64_t j = 0; j < n; ++j)
        y.middleCols(j * kL, kL) = c[j] * waiting_[j].branches[i].m.transpose_times(u_out.middleCols(j * kL, kL));
      linalg::multiply(Matrix(y.transpose()), *ins_[i], ut_f, 1.0);
    }
    if (inner_identity_ != 0)
      for (int64_t j = 0; j < n; ++j)
        ut_f.middleRows(j * kL, kL) += (inner_identity_ * waiting_[j].post.scale) * waiting_[j].post.u.transpose();
    u *= -1.0;
    linalg::multiply(u, ut_f, inner_, 1.0);
  }
  // Gemma 4 per-layer-input factor: J = s (K + P_ple (W_ple K)); K itself is summed above.
  if (ple_gate_)
    for (const StepStructure& s : waiting_) linalg::multiply(s.ple_left, s.left_apply_step(*ple_gate_), ple_product_sum_, 1.0);
  waiting_.clear();
  waiting_bytes_ = 0;
}

void StructuredMean::merge(const StructuredMean& o) {
  if (o.count_ == 0) return;
  if (count_ == 0 && ins_.empty()) {
    *this = o;
    return;
  }
  TDYN_CHECK(o.out_ == out_ && o.ins_ == ins_);
  count_ += o.count_;
  lambda_sum_ += o.lambda_sum_;
  inner_ += o.inner_;
  if (ple_gate_) ple_product_sum_ += o.ple_product_sum_;
  for (size_t i = 0; i < m_sums_.size(); ++i) m_sums_[i].add(1.0, o.m_sums_[i]);
  for (const StepStructure& s : o.waiting_) {
    waiting_bytes_ += s.bytes();
    waiting_.push_back(s);
  }
  if (batch_full()) flush();
}

Matrix StructuredMean::mean() const {
  TDYN_CHECK(count_ > 0);
  return sum() / static_cast<double>(count_);
}

Matrix StructuredMean::sum() const {
  if (count_ == 0) return {};
  if (!waiting_.empty()) {
    StructuredMean flushed = *this;
    flushed.flush();
    return flushed.sum();
  }
  // Σ L (b I + F R), then diag(w_L) on the left, a I, the per-layer-input factor and the layer scalar.
  Matrix m_in = Matrix::Zero(out_->cols(), inner_.cols());  // Σ c M In [r_out, d]
  for (size_t i = 0; i < m_sums_.size(); ++i) m_sums_[i].add_times(*ins_[i], m_in);
  Matrix inner = inner_;
  if (inner_identity_ != 0) inner.diagonal().array() += inner_identity_ * lambda_sum_;
  linalg::multiply(*out_, m_in, inner, 1.0);
  if (post_weight_) inner.array().colwise() *= post_weight_->array();
  inner.diagonal().array() += identity_ * static_cast<double>(count_);
  if (ple_gate_) inner += ple_product_sum_;
  return output_scale_ * inner;
}

}  // namespace tdyn
