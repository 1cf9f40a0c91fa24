// Dynamics and integrators of the self-attention particle system (see dynamics.h for the equations).
#include "analysis/particles/dynamics.h"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include <boost/numeric/odeint.hpp>
#include <unsupported/Eigen/MatrixFunctions>

#include "core/error.h"
#include "core/heap.h"
#include "kernels/team.h"
#include "linalg/gemm.h"

namespace tdyn::particles {
namespace {

// A row-major matrix or a block of columns of one (rows with a stride), as OpenBLAS takes them.
using ConstView = Eigen::Ref<const Matrix, 0, Eigen::OuterStride<>>;

// A row-major matrix or a block of rows or columns of one, written in place.
using View = Eigen::Ref<Matrix, 0, Eigen::OuterStride<>>;

// C = A · op(B) into C, already of the product's shape, through OpenBLAS: the O(n² d) products dominate every step.
// `small` (see small_products) takes linalg::multiply_small for C = A B instead.
void multiply_into(const ConstView& A, const ConstView& B, bool transpose_b, View C, bool small = false) {
  const int64_t rows = A.rows(), inner = A.cols(), cols = transpose_b ? B.rows() : B.cols();
  TDYN_CHECK((transpose_b ? B.cols() : B.rows()) == inner && C.rows() == rows && C.cols() == cols);
  if (small && !transpose_b) {  // row-major C = A B is column-major Cᵀ = Bᵀ Aᵀ
    linalg::multiply_small(cols, rows, inner, B.data(), B.outerStride(), A.data(), A.outerStride(), C.data(),
                           C.outerStride());
    return;
  }
  if (rows == 0 || cols == 0) return;
  if (inner == 0) {
    C.setZero();
    return;
  }
  cblas_dgemm(CblasRowMajor, CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, rows, cols, inner, 1.0, A.data(),
              A.outerStride(), B.data(), B.outerStride(), 0.0, C.data(), C.outerStride());
}

// C = A · op(B), C resized to the product's shape.
void multiply(const ConstView& A, const ConstView& B, bool transpose_b, Matrix& C) {
  const int64_t rows = A.rows(), cols = transpose_b ? B.rows() : B.cols();
  if (C.rows() != rows || C.cols() != cols) C.resize(rows, cols);
  multiply_into(A, B, transpose_b, C);
}

// T = Aᵀ, eight of A's columns at a time: each row of A is read a cache line at a time and each of T's eight rows
// written in order. Eigen's assignment from A.transpose() walks A down its columns, one cache line per element: 6%
// of a one-thread step at n = d = 128, against 3%.
void transpose_into(const ConstView& A, View T) {
  TDYN_CHECK(T.rows() == A.cols() && T.cols() == A.rows());
  constexpr int64_t kBlock = 8;
  for (int64_t first = 0; first < A.cols(); first += kBlock) {
    const int64_t width = std::min(kBlock, A.cols() - first);
    for (int64_t i = 0; i < A.rows(); ++i)
      for (int64_t j = 0; j < width; ++j) T(first + j, i) = A(i, first + j);
  }
}

// multiply(), with C's rows split over the threads when `split` (small_products: BLAS then single-threaded, and
// C = A B through multiply_small).
void multiply_split(const ConstView& A, const ConstView& B, bool transpose_b, Matrix& C, bool split) {
  const int64_t rows = A.rows(), cols = transpose_b ? B.rows() : B.cols();
  if (C.rows() != rows || C.cols() != cols) C.resize(rows, cols);
  on_thread_shares(split && rows >= 64, rows, [&](int64_t begin, int64_t end) {
    multiply_into(A.middleRows(begin, end - begin), B, transpose_b, C.middleRows(begin, end - begin), split);
  });
}

// Clones of a loop for each x86-64 microarchitecture level: the build's baseline is SSE2, and the O(n²) loops of a
// step (softmax, the Euler update) cost as much as one of its O(n² d) products at that width. The clones are chosen
// by the CPU's features (microarchitecture levels), not its model, so AMD's cores get them too.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TDYN_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TDYN_VECTOR_CLONES
#endif

// e^x for x ≤ 0 (or NaN), within 1 ulp of std::exp: Cody–Waite reduction x = k ln 2 + r, |r| ≤ ln2 / 2, then a
// degree-13 Taylor polynomial (truncation error below 1e-17) scaled by 2^k built from its bits. std::exp does not
// vectorise; this does, inlined into a cloned loop (an order of magnitude faster, docs/performance.md). Results under −708 (subnormal,
// below 1e-307) are returned as 0.
[[gnu::always_inline]] inline double exp_nonpositive(double x) {
  const double v = std::max(x, -708.0);  // keeps 2^k normal; NaN passes through
  // k = round(v / ln 2) by the 1.5·2⁵² shift: the low bits of t then hold k as an integer.
  const double shift = 6755399441055744.0;
  const double t = v * 1.4426950408889634 + shift;
  const double k = t - shift;
  // ln 2 split into a head with trailing zero bits (k · head is exact) and a tail.
  const double r = (v - k * 6.93147180369123816490e-01) - k * 1.90821492927058770002e-10;
  double p = 1.0 / 6227020800;
  p = p * r + 1.0 / 479001600;
  p = p * r + 1.0 / 39916800;
  p = p * r + 1.0 / 3628800;
  p = p * r + 1.0 / 362880;
  p = p * r + 1.0 / 40320;
  p = p * r + 1.0 / 5040;
  p = p * r + 1.0 / 720;
  p = p * r + 1.0 / 120;
  p = p * r + 1.0 / 24;
  p = p * r + 1.0 / 6;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  int64_t t_bits;
  std::memcpy(&t_bits, &t, sizeof t);
  const int64_t scale_bits = (t_bits + 1023) << 52;  // exponent field k + 1023 (the shift's bits fall off the top)
  double scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  return x < -708.0 ? 0.0 : p * scale;
}

// Softmax of one row in place, with its maximum subtracted (log-sum-exp): exact for any score magnitude. A NaN or
// infinite score makes the whole row NaN, which the step's finiteness check then reports.
TDYN_VECTOR_CLONES void softmax_row(double* row, int64_t count) {
  double top = -std::numeric_limits<double>::infinity();
#pragma omp simd reduction(max : top)
  for (int64_t i = 0; i < count; ++i) top = row[i] > top ? row[i] : top;  // (std::max's reference defeats simd)
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < count; ++i) {
    row[i] = exp_nonpositive(row[i] - top);
    sum += row[i];
  }
  const double inverse = 1 / sum;  // one division a row: vector divisions issue far more slowly than multiplies
  for (int64_t i = 0; i < count; ++i) row[i] *= inverse;
}

// Row-wise softmax in place (softmax_row).
// Single-threaded on purpose: its O(n²) exps cost a few percent of the O(n² d) products, and an OpenMP pool
// spinning beside OpenBLAS's own threads slowed whole steps several-fold on a loaded machine.
void softmax_rows(View scores) {
  for (int64_t i = 0; i < scores.rows(); ++i) softmax_row(scores.row(i).data(), scores.cols());
}

// An entry is finite unless its exponent bits are all ones (infinity or NaN). Tested bit by bit, the test
// vectorises as an integer OR where a floating-point reduction would not (its order is fixed without -ffast-math).
constexpr uint64_t kExponentBits = uint64_t{0x7ff} << 52;
[[gnu::always_inline]] inline uint64_t nonfinite_bit(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return (bits & kExponentBits) == kExponentBits;
}

// Whether every entry of x is finite.
TDYN_VECTOR_CLONES bool all_finite(const double* x, int64_t count) {
  uint64_t nonfinite = 0;
#pragma omp simd reduction(| : nonfinite)
  for (int64_t i = 0; i < count; ++i) nonfinite |= nonfinite_bit(x[i]);
  return nonfinite == 0;
}
bool all_finite(const Matrix& m) { return all_finite(m.data(), m.size()); }

// The Euler update x += dt · v of `count` entries, checking each new x as it is written: whether all are finite.
TDYN_VECTOR_CLONES bool advance_finite(double* x, const double* v, double dt, int64_t count) {
  uint64_t nonfinite = 0;
#pragma omp simd reduction(| : nonfinite)
  for (int64_t i = 0; i < count; ++i) {
    x[i] += dt * v[i];
    nonfinite |= nonfinite_bit(x[i]);
  }
  return nonfinite == 0;
}

// Whether a simulation's products are small enough to run OpenBLAS single-threaded (SerialBlas).
// OpenBLAS threads each product by its own size; at n·d·(n + d) ≤ 2²⁴ (n ≤ 256 at d = 128) a product takes
// well under a millisecond, and a step waits on the hand-off to the pool three times: with other work on the
// machine, two BLAS threads ran such steps slower than one (docs/performance.md). A pool of many threads splits
// such products finer still. Larger sizes keep OpenBLAS's choice.
bool small_products(int64_t n, int64_t d) {
  constexpr int64_t kSmallWork = int64_t{1} << 24;
  return n * d * (n + d) <= kSmallWork;
}

std::string shape_of(const Matrix& m) { return fmt::format("[{}, {}]", m.rows(), m.cols()); }

}  // namespace

Matrix AttentionHead::value_map() const { return output.size() == 0 ? value : Matrix(output * value); }

void AttentionHead::validate() const {
  const int64_t d = query.cols();
  if (d == 0 || query.rows() == 0) fail("query matrix Q is empty (expected [d_head, d])");
  if (key.rows() != query.rows() || key.cols() != d)
    fail("key matrix K: expected shape [{}, {}] (like Q), got {}", query.rows(), d, shape_of(key));
  if (value.cols() != d) fail("value matrix V: expected {} columns (d), got shape {}", d, shape_of(value));
  if (output.size() == 0) {
    if (value.rows() != d) fail("value matrix V: expected shape [{}, {}] when there is no output matrix, got {}", d, d, shape_of(value));
  } else if (output.rows() != d || output.cols() != value.rows()) {
    fail("output matrix O: expected shape [{}, {}] (d × d_value), got {}", d, value.rows(), shape_of(output));
  }
  if (!all_finite(query) || !all_finite(key) || !all_finite(value) || !all_finite(output))
    fail("attention matrices contain NaN or infinite entries");
}

void FeedForward::validate(int64_t d) const {
  if (w_in.cols() != d || w_in.rows() == 0) fail("feed-forward W_in: expected shape [d_ff, {}], got {}", d, shape_of(w_in));
  if (w_out.rows() != d || w_out.cols() != w_in.rows())
    fail("feed-forward W_out: expected shape [{}, {}], got {}", d, w_in.rows(), shape_of(w_out));
  if (b_in.size() != 0 && b_in.size() != w_in.rows())
    fail("feed-forward b_in: expected {} entries, got {}", w_in.rows(), b_in.size());
  if (b_out.size() != 0 && b_out.size() != d) fail("feed-forward b_out: expected {} entries, got {}", d, b_out.size());
}

Matrix attention_matrix(const AttentionHead& head, const Matrix& X) {
  Matrix queries, keys, scores;
  multiply(X, head.query, true, queries);  // (n × d_head)
  multiply(X, head.key, true, keys);        // (n × d_head)
  multiply(queries, keys, true, scores);    // (n × n): ⟨Q x_i, K x_j⟩
  softmax_rows(scores);
  return scores;
}

ValueFlow::ValueFlow(const Matrix& value_map) : value_map_(value_map) {
  const double scale = std::max(1.0, value_map.norm());
  symmetric_ = value_map.rows() == value_map.cols() && (value_map - value_map.transpose()).norm() <= 1e-13 * scale;
  if (symmetric_) {
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(Eigen::MatrixXd(0.5 * (value_map + value_map.transpose())));
    TDYN_CHECK(eig.info() == Eigen::Success);
    eigenvectors_ = eig.eigenvectors();
    eigenvalues_ = eig.eigenvalues();
  }
}

Matrix ValueFlow::exp(double t) const {
  if (symmetric_) {
    // e^{tW} = U e^{tΛ} Uᵀ
    Matrix scaled = eigenvectors_ * (t * eigenvalues_).array().exp().matrix().asDiagonal(), result;
    multiply(scaled, eigenvectors_, true, result);
    return result;
  }
  Eigen::MatrixXd scaled = t * value_map_;
  return Matrix(scaled.exp());
}

VelocityField::VelocityField(const ParticleSystem& system, bool split_rows)
    : system_(system), value_map_(system.head.value_map()), flow_(value_map_), split_rows_(split_rows) {
  system.head.validate();
  if (system.ffn) system.ffn->validate(system.head.d_model());
}

// The scores X Qᵀ K Xᵀ as (X Qᵀ)(X Kᵀ)ᵀ cost 2 n d h + n² h multiply-adds (h = d_head), as (X M) Xᵀ with
// M = Qᵀ K (d × d, formed once) n d² + n² d: one product fewer per evaluation when h = d. Same values up to rounding.
bool VelocityField::scores_through_map(int64_t n) const {
  const int64_t d = system_.head.d_model(), h = system_.head.query.rows();
  return d * d + n * d <= 2 * d * h + n * h;
}

const Matrix& VelocityField::score_map() {
  if (score_map_.size() == 0) {
    const Matrix& query = system_.head.query;
    Matrix query_transposed(query.cols(), query.rows());
    transpose_into(query, query_transposed);
    multiply_split(query_transposed, system_.head.key, false, score_map_, split_rows_);
  }
  return score_map_;
}

void VelocityField::compute_attention(const Matrix& X) {
  if (scores_through_map(X.rows())) {
    multiply(X, score_map(), false, queries_);
    multiply(queries_, X, true, attention_);
  } else {
    multiply(X, system_.head.query, true, queries_);
    multiply(X, system_.head.key, true, keys_);
    multiply(queries_, keys_, true, attention_);
  }
  softmax_rows(attention_);
  ++evaluations_;
}

// Adds ffn(X) (n × d) to dX, mapped by rotate_back (e^{−tW}, for the rescaled variables) when given.
void VelocityField::add_ffn(const Matrix& X, Matrix& dX, const Matrix* rotate_back) {
  if (!system_.ffn) return;
  const FeedForward& ffn = *system_.ffn;
  multiply(X, ffn.w_in, true, hidden_);
  if (ffn.b_in.size()) hidden_.rowwise() += ffn.b_in.transpose();
  if (ffn.activation == Activation::relu)
    hidden_ = hidden_.cwiseMax(0.0);
  else
    hidden_ = hidden_.array().tanh().matrix();
  multiply(hidden_, ffn.w_out, true, ffn_out_);
  if (ffn.b_out.size()) ffn_out_.rowwise() += ffn.b_out.transpose();
  if (rotate_back) {
    Matrix rotated;
    multiply(ffn_out_, *rotate_back, true, rotated);
    dX += rotated;
  } else {
    dX += ffn_out_;
  }
}

void VelocityField::x_velocity(const Matrix& X, Matrix& dX) { x_velocity(X, dX, nullptr, 0.0); }

bool VelocityField::euler_step(Matrix& X, double dt, Matrix& dX) {
  // Without a feed-forward or the sphere, nothing is added to the velocity after attention: each thread then
  // moves its own tokens as soon as it has their velocity, and checks them, instead of one thread moving and
  // checking all of them after (5% of a step at n = d = 128 that the other threads waited through).
  if (scores_through_map(X.rows()) && !system_.ffn && !system_.project_to_sphere) return x_velocity(X, dX, &X, dt);
  x_velocity(X, dX);
  return advance_finite(X.data(), dX.data(), dt, X.size());
}

bool VelocityField::x_velocity(const Matrix& X, Matrix& dX, Matrix* advance, double dt) {
  const int64_t d = X.cols();
  std::atomic<bool> advanced_finite{true};
  if (scores_through_map(X.rows())) {
    // X [M  Wᵀ] in one product gives X M for the scores and X Wᵀ for the velocity P (X Wᵀ): one pass over X
    // instead of two, and the wider product runs nearer the kernel's peak (docs/performance.md).
    if (map_and_value_.size() == 0) {
      map_and_value_.resize(d, 2 * d);
      map_and_value_.leftCols(d) = score_map();
      transpose_into(value_map_, map_and_value_.rightCols(d));
    }
    const int64_t n = X.rows();
    projected_.resize(n, 2 * d);
    if (split_rows_) transposed_.resize(d, n);
    attention_.resize(n, n);
    dX.resize(n, d);
    // Small products run single-threaded (small_products); the threads then take blocks of at least 32 tokens:
    // each computes its rows of [X M  X Wᵀ] and its columns of Xᵀ, after all are done its rows of the scores and
    // P, and after that (nothing reads X then) its rows of the velocity, and moves them (docs/performance.md says what
    // two threads gain).
    const bool small = split_rows_;
    const int64_t most_parts = small ? std::max<int64_t>(1, n / 32) : 1;
    on_threads(most_parts > 1, [&](int thread, int threads) {
      const int64_t parts = std::min<int64_t>(threads, most_parts);
      const auto [begin, end] = thread < parts ? thread_share(n, parts, thread) : std::pair<int64_t, int64_t>{n, n};
      const int64_t rows = end - begin;
      const auto tokens = X.middleRows(begin, rows);
      auto projected = projected_.middleRows(begin, rows), scores = attention_.middleRows(begin, rows);
      multiply_into(tokens, map_and_value_, false, projected, small);  // [X M  X Wᵀ]
      if (small) {
        // The scores (X M) Xᵀ from Xᵀ: multiply_small takes untransposed operands only. (Large runs skip the copy,
        // 6% of a step at n = 512.)
        transpose_into(tokens, transposed_.middleCols(begin, rows));
        job_barrier();
        multiply_into(projected.leftCols(d), transposed_, false, scores, true);
      } else {
        multiply_into(projected.leftCols(d), X, true, scores);
      }
      softmax_rows(scores);
      job_barrier();
      multiply_into(scores, projected_.rightCols(d), false, dX.middleRows(begin, rows), small);  // Σ_j P_ij W x_j
      if (advance && !advance_finite(advance->data() + begin * d, dX.data() + begin * d, dt, rows * d))
        advanced_finite.store(false, std::memory_order_relaxed);
    });
    ++evaluations_;
  } else {
    compute_attention(X);
    multiply(attention_, X, false, mixed_);  // Σ_j P_ij x_j (n × d)
    multiply(mixed_, value_map_, true, dX);  // W Σ_j P_ij x_j
  }
  add_ffn(X, dX, nullptr);
  if (system_.project_to_sphere) {
    // Tangent projection v_i − ⟨v_i, x_i⟩ x_i / ‖x_i‖² keeps ‖x_i‖ constant.
    Eigen::VectorXd along = (dX.cwiseProduct(X)).rowwise().sum().cwiseQuotient(X.rowwise().squaredNorm());
    dX -= along.asDiagonal() * X;
  }
  return advanced_finite.load(std::memory_order_relaxed);
}

void VelocityField::z_velocity(double t, const Matrix& Z, Matrix& dZ) {
  TDYN_CHECK(!system_.project_to_sphere);  // the rescaling e^{−tW} does not commute with the projection
  Matrix forward = flow_.exp(t);
  Matrix X;
  multiply(Z, forward, true, X);  // x_i = e^{tW} z_i
  compute_attention(X);
  multiply(attention_, Z, false, mixed_);
  mixed_ -= Z;                             // Σ_j P_ij (z_j − z_i), using Σ_j P_ij = 1
  multiply(mixed_, value_map_, true, dZ);  // W Σ_j P_ij (z_j − z_i)
  if (system_.ffn) {
    Matrix backward = flow_.exp(-t);
    add_ffn(X, dZ, &backward);
  }
}

Integrator parse_integrator(const std::string& name) {
  if (name == "euler") return Integrator::euler_frozen;
  if (name == "rk4") return Integrator::rk4;
  if (name == "dopri5") return Integrator::dopri5;
  fail("--integrator: expected one of euler, rk4, dopri5; got '{}'", name);
}

std::string to_string(Integrator integrator) {
  switch (integrator) {
    case Integrator::euler_frozen: return "euler";
    case Integrator::rk4: return "rk4";
    case Integrator::dopri5: return "dopri5";
  }
  return "?";
}

StateVariable parse_state_variable(const std::string& name) {
  if (name == "x") return StateVariable::x;
  if (name == "z") return StateVariable::z;
  fail("--integrate: expected x (original tokens) or z (rescaled tokens e^{{-tV}} x); got '{}'", name);
}

std::string to_string(StateVariable variable) { return variable == StateVariable::x ? "x" : "z"; }

int64_t step_count(double t_end, double dt) {
  if (!(dt > 0) || !std::isfinite(dt)) fail("--dt must be positive and finite, got {}", dt);
  if (!(t_end > 0) || !std::isfinite(t_end)) fail("--T must be positive and finite, got {}", t_end);
  const double ratio = t_end / dt;
  const int64_t steps = std::llround(ratio);
  if (steps < 1 || std::abs(ratio - steps) > 1e-9 * std::max(1.0, ratio))
    fail("--T = {} is not a whole number of steps --dt = {} (T / dt = {})", t_end, dt, ratio);
  return steps;
}

double Trajectory::rescale_factor(double lambda, double t) const {
  if (euler_rescaling_dt > 0) return std::pow(1.0 + euler_rescaling_dt * lambda, std::llround(t / euler_rescaling_dt));
  return std::exp(lambda * t);
}

std::string Trajectory::rescaling() const { return euler_rescaling_dt > 0 ? "(I + dt V)^-k" : "exp(-tV)"; }

void normalize_rows(Matrix& X) {
  for (int64_t i = 0; i < X.rows(); ++i) {
    const double norm = X.row(i).norm();
    if (!(norm > 0)) fail("token {} has zero norm and cannot be projected onto the sphere", i);
    X.row(i) /= norm;
  }
}

namespace {

// The velocity in the integrated variable: ż (z_velocity, t-dependent) or ẋ.
void velocity(VelocityField& field, bool in_z, double t, const Matrix& Y, Matrix& dY) {
  if (in_z)
    field.z_velocity(t, Y, dY);
  else
    field.x_velocity(Y, dY);
}

// Whether step k of `steps` is saved: every save_every-th and the last.
bool saved_step(const SimulationOptions& options, int64_t k, int64_t steps) { return k % options.save_every == 0 || k == steps; }

// Dormand–Prince with dense output at the saved steps' times: their times into out.times, the states into `states`.
void integrate_dopri5(VelocityField& field, bool in_z, const Matrix& Y0, const SimulationOptions& options, int64_t steps, double dt,
                      Trajectory& out, std::vector<Matrix>& states) {
  namespace odeint = boost::numeric::odeint;
  using State = std::vector<double>;
  const int64_t n = Y0.rows(), d = Y0.cols();
  std::vector<double> save_times;
  for (int64_t k = 0; k <= steps; ++k)
    if (saved_step(options, k, steps)) save_times.push_back(k * dt);
  Matrix Ybuf(n, d), dYbuf(n, d);
  auto ode = [&](const State& y, State& dy, double t) {
    std::copy(y.begin(), y.end(), Ybuf.data());
    velocity(field, in_z, t, Ybuf, dYbuf);
    std::copy(dYbuf.data(), dYbuf.data() + n * d, dy.begin());
  };
  auto observe = [&](const State& y, double t) {
    out.times.push_back(t);
    states.emplace_back(Eigen::Map<const Matrix>(y.data(), n, d));
  };
  State y(Y0.data(), Y0.data() + n * d);
  auto stepper = odeint::make_dense_output(options.abs_tol, options.rel_tol, odeint::runge_kutta_dopri5<State>());
  out.steps = odeint::integrate_times(stepper, ode, y, save_times.begin(), save_times.end(), dt, observe);
}

// The fixed-step schemes: Euler with P frozen over each step, or RK4; the tokens back on the sphere after each step
// when the system keeps them there. The saved steps' times into out.times, their states into `states`.
void integrate_fixed_steps(const ParticleSystem& system, VelocityField& field, bool in_z, Matrix Y, const SimulationOptions& options,
                           int64_t steps, double dt, Trajectory& out, std::vector<Matrix>& states) {
  const int64_t n = Y.rows(), d = Y.cols();
  Matrix k1(n, d), k2(n, d), k3(n, d), k4(n, d), stage(n, d);
  out.times.push_back(0.0);
  states.push_back(Y);
  for (int64_t k = 0; k < steps; ++k) {
    const double t = k * dt;
    bool checked_finite = false;  // the step itself found every entry of Y finite
    if (options.integrator == Integrator::euler_frozen) {
      // P is evaluated once at x^k and held for the whole step.
      if (in_z) {
        velocity(field, in_z, t, Y, k1);
        checked_finite = advance_finite(Y.data(), k1.data(), dt, Y.size());  // (no sphere in z: see simulate)
      } else {
        checked_finite = field.euler_step(Y, dt, k1) && !system.project_to_sphere;
      }
    } else {
      velocity(field, in_z, t, Y, k1);
      stage = Y + 0.5 * dt * k1;
      velocity(field, in_z, t + 0.5 * dt, stage, k2);
      stage = Y + 0.5 * dt * k2;
      velocity(field, in_z, t + 0.5 * dt, stage, k3);
      stage = Y + dt * k3;
      velocity(field, in_z, t + dt, stage, k4);
      Y += (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4);
    }
    if (system.project_to_sphere) normalize_rows(Y);
    if (!checked_finite && !all_finite(Y)) fail("the tokens became non-finite at t = {} (try a smaller --dt)", t + dt);
    if (saved_step(options, k + 1, steps)) {
      out.times.push_back((k + 1) * dt);
      states.push_back(Y);
    }
  }
  out.steps = steps;
}

// (I + dt W)⁻¹, the Euler scheme's rescaling step, by LAPACK (not Eigen's LU, whose OpenMP pool would then spin
// beside OpenBLAS's threads).
Matrix euler_step_inverse(const Matrix& W, double dt, bool small) {
  const int64_t d = W.rows();
  Matrix step = Matrix::Identity(d, d) + dt * W;
  Matrix step_inverse = Matrix::Identity(d, d);
  std::vector<lapack_int> pivots(d);
  // Row-major A is column-major Aᵀ: solving Aᵀ Y = I column-major leaves Y = A⁻ᵀ, which read row-major is A⁻¹.
  // LAPACK then works on the data as it lies (LAPACKE's row-major calls copy both matrices in and out
  // transposed, and check them for NaN, which W was: 9% of a 1-step call at n = d = 128). The solves, two thirds
  // of the work, share the columns of Y over the threads of a small run.
  const lapack_int info = LAPACKE_dgetrf_work(LAPACK_COL_MAJOR, d, d, step.data(), d, pivots.data());
  if (info == 0) {
    on_thread_shares(small, d, [&](int64_t begin, int64_t end) {
      LAPACKE_dgetrs_work(LAPACK_COL_MAJOR, 'N', d, end - begin, step.data(), d, pivots.data(), step_inverse.data() + begin * d, d);
    });
  }
  if (info != 0 || !all_finite(step_inverse))
    fail("I + dt V is singular (V has the eigenvalue -1/dt = {}): the rescaled tokens of the Euler scheme are undefined; "
         "change --dt", -1.0 / dt);
  return step_inverse;
}

// The saved states in both variables: z = R(t)⁻¹ x, x = R(t) z (rows: Z = X R⁻ᵀ), see Trajectory; R(t)⁻¹ is
// (I + ΔtW)^{-k} for the Euler scheme in x, exp(−tW) otherwise.
void both_variables(const VelocityField& field, bool in_z, bool euler_rescaling, double dt, bool small, std::vector<Matrix>& states,
                    Trajectory& out) {
  const Matrix step_inverse = euler_rescaling ? euler_step_inverse(field.value_map(), dt, small) : Matrix();
  if (euler_rescaling) out.euler_rescaling_dt = dt;
  Matrix power = Matrix::Identity(step_inverse.rows(), step_inverse.cols());  // (I + ΔtW)^{-k}
  int64_t power_k = 0;
  bool power_is_identity = true;  // until k > 0: products with it are copies, skipped
  for (size_t k = 0; k < states.size(); ++k) {
    Matrix other;
    if (euler_rescaling) {
      // (I + ΔtW)^{-k} by squaring from the previous saved power: O(d³ log gap), not O(d³) per step.
      const int64_t target = std::llround(out.times[k] / dt);
      Matrix base = step_inverse;
      Matrix product;
      for (int64_t gap = target - power_k; gap > 0; gap >>= 1) {
        if (gap & 1) {
          if (power_is_identity)
            power = base;
          else
            multiply_split(base, power, false, product, small), power.swap(product);
          power_is_identity = false;
        }
        if (gap > 1) multiply_split(base, base, false, product, small), base.swap(product);
      }
      power_k = target;
      if (power_is_identity)
        other = states[k];
      else
        multiply_split(states[k], power, true, other, small);
    } else {
      multiply(states[k], field.flow().exp(in_z ? out.times[k] : -out.times[k]), true, other);
    }
    if (in_z) {
      out.z.push_back(std::move(states[k]));
      out.x.push_back(std::move(other));
    } else {
      out.x.push_back(std::move(states[k]));
      out.z.push_back(std::move(other));
    }
  }
}

// simulate() once its arguments are checked, over `steps` steps of dt; `small`: see small_products.
Trajectory run_simulation(const ParticleSystem& system, const Matrix& X0, const SimulationOptions& options, int64_t steps,
                          double dt, bool small) {
  const bool in_z = options.variable == StateVariable::z;
  SerialBlas blas_threads(small);
  VelocityField field(system, small);
  Trajectory out;
  std::vector<Matrix> states;
  Matrix Y = X0;
  if (system.project_to_sphere) normalize_rows(Y);
  if (options.integrator == Integrator::dopri5)
    integrate_dopri5(field, in_z, Y, options, steps, dt, out, states);
  else
    integrate_fixed_steps(system, field, in_z, std::move(Y), options, steps, dt, out, states);
  out.velocity_evaluations = field.evaluations();
  both_variables(field, in_z, options.integrator == Integrator::euler_frozen && !in_z, dt, small, states, out);
  return out;
}

}  // namespace

Trajectory simulate(const ParticleSystem& system, const Matrix& X0, const SimulationOptions& options) {
  const int64_t n = X0.rows(), d = X0.cols();
  if (d != system.head.d_model())
    fail("initial tokens have d = {} but Q has {} columns (d)", d, system.head.d_model());
  if (n < 1) fail("need at least one token");
  if (!all_finite(X0)) fail("initial tokens contain NaN or infinite entries");
  if (options.save_every < 1) fail("--save-every must be at least 1, got {}", options.save_every);
  if (system.project_to_sphere && options.variable == StateVariable::z)
    fail("--sphere cannot be combined with --integrate z: the rescaling e^(-tV) leaves the sphere; integrate x");
  const int64_t steps = step_count(options.t_end, options.dt);
  const double dt = options.t_end / steps;  // exact grid: t_k = k · dt ends at t_end

  reuse_large_buffers();  // the field's products and the saved states, allocated afresh per call
  if (!small_products(n, d)) return run_simulation(system, X0, options, steps, dt, false);
  // Small systems share each step, and the rescaling's products, over the threads: one team of them for the
  // whole run, since a step at n = d = 128 takes a fraction of a millisecond.
  Trajectory out;
  with_team([&] { out = run_simulation(system, X0, options, steps, dt, true); });
  return out;
}

}  // namespace tdyn::particles
