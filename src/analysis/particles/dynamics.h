// Self-attention as an interacting particle system (Geshkovski, Letrouit, Polyanskiy, Rigollet, "The emergence
// of clusters in self-attention dynamics", NeurIPS 2023; SPEC §4).
//
// n tokens x_i ∈ ℝ^d are the rows of X (n × d) and move by the paper's equation (1.1)
//     ẋ_i = Σ_j P_ij W x_j,   P_ij = softmax_j ⟨Q x_i, K x_j⟩,
// where W = O V is the value map (V alone when there is no output matrix) and β is absorbed in Q, K. The
// rescaled variables z_i = e^{−tW} x_i (paper §2) obey ż_i = Σ_j P_ij W (z_j − z_i) with P computed from
// x = e^{tW} z; their limits are the polytopes / hyperplanes of Theorems 2.1 and 3.1. Optional extras the paper
// also simulates: a feed-forward term added to the velocity and projection onto the unit sphere.
//
// This layer knows nothing about models or files: a head is given as plain matrices (column-vector convention
// y = M x), so a checkpoint bridge only has to hand over one head's Q, K, V, O. Everything is float64.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/Core>

namespace tdyn::particles {

// Row-major so that row i is token i and the buffers go straight to BLAS and .npy.
using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXd;

// One self-attention head. Shapes: query, key (d_head × d); value (d_value × d); output (d × d_value) or empty,
// meaning the identity (then d_value must equal d). Q and K need not be square.
struct AttentionHead {
  Matrix query;   // Q (d_head × d)
  Matrix key;     // K (d_head × d)
  Matrix value;   // V (d_value × d)
  Matrix output;  // O (d × d_value), or empty

  int64_t d_model() const { return query.cols(); }
  Matrix value_map() const;  // W = O V (d × d): the matrix that moves the tokens
  // Throws Error naming the matrix and expected vs got shape when the shapes do not fit together.
  void validate() const;
};

enum class Activation { relu, tanh };

// Feed-forward term added to the velocity: ffn(x) = W_out σ(W_in x + b_in) + b_out (paper §6, "adding an MLP").
struct FeedForward {
  Activation activation = Activation::relu;
  Matrix w_in;   // (d_ff × d)
  Vector b_in;   // (d_ff), or empty = 0
  Matrix w_out;  // (d × d_ff)
  Vector b_out;  // (d), or empty = 0
  void validate(int64_t d) const;
};

struct ParticleSystem {
  AttentionHead head;
  std::optional<FeedForward> ffn;
  // Keeps every token on the unit sphere: the velocity is projected onto the tangent space at x_i and the
  // integrators renormalise after each step (the LayerNorm idealisation of the paper's §6).
  bool project_to_sphere = false;
};

// P (n × n) for tokens X (n × d): row-wise log-sum-exp softmax of the scores ⟨Q x_i, K x_j⟩, which grow like
// e^{2λt} and overflow a naive exp within a few time units.
Matrix attention_matrix(const AttentionHead& head, const Matrix& X);

// e^{tW} for the value map W: by eigendecomposition when W is symmetric (exact and cheap per time), otherwise
// by scaling-and-squaring Padé.
class ValueFlow {
 public:
  explicit ValueFlow(const Matrix& value_map);
  Matrix exp(double t) const;  // e^{tW} (d × d)
  bool symmetric() const { return symmetric_; }

 private:
  Matrix value_map_;
  bool symmetric_;
  Matrix eigenvectors_;  // columns, when symmetric
  Vector eigenvalues_;
};

// The right-hand side of the dynamics with its scratch buffers (one per integration; not thread-safe).
class VelocityField {
 public:
  // split_rows: BLAS runs single-threaded (the products are small), and the field's own threads take blocks of
  // tokens instead.
  explicit VelocityField(const ParticleSystem& system, bool split_rows = false);
  // dX/dt at tokens X (n × d) in the original variables.
  void x_velocity(const Matrix& X, Matrix& dX);
  // One Euler step in the original variables, X += dt · dX/dt(X), with P evaluated at X; dX is left holding the
  // velocity. The same values as x_velocity followed by the update. Returns whether every entry of X is finite.
  bool euler_step(Matrix& X, double dt, Matrix& dX);
  // dZ/dt at rescaled tokens Z (n × d) at time t: (P Z − Z) Wᵀ + ffn(X) e^{−tW}ᵀ, with X = Z e^{tW}ᵀ.
  void z_velocity(double t, const Matrix& Z, Matrix& dZ);
  // P of the last evaluation.
  const Matrix& attention() const { return attention_; }
  const Matrix& value_map() const { return value_map_; }
  const ValueFlow& flow() const { return flow_; }
  int64_t evaluations() const { return evaluations_; }

 private:
  bool scores_through_map(int64_t n) const;
  const Matrix& score_map();
  void compute_attention(const Matrix& X);
  // x_velocity, and with `advance` (only when nothing is added after attention) also advance += dt · dX; returns
  // whether every entry of *advance is then finite (true without it).
  bool x_velocity(const Matrix& X, Matrix& dX, Matrix* advance, double dt);
  void add_ffn(const Matrix& X, Matrix& dX, const Matrix* rotate_back);

  const ParticleSystem& system_;
  Matrix value_map_;  // W (d × d)
  ValueFlow flow_;
  Matrix score_map_;       // M = Qᵀ K (d × d), formed at the first evaluation that scores through it
  Matrix map_and_value_;   // [M  Wᵀ] (d × 2d), likewise
  Matrix projected_;       // X [M  Wᵀ] (n × 2d)
  Matrix transposed_;      // Xᵀ (d × n), for small products (split_rows)
  Matrix queries_, keys_;  // X Qᵀ, X Kᵀ (n × d_head), or X M in queries_
  Matrix attention_;       // scores, then P (n × n)
  Matrix mixed_;           // P X or P Z (n × d)
  Matrix hidden_;          // ffn pre-activation (n × d_ff)
  Matrix ffn_out_;         // (n × d)
  bool split_rows_ = false;
  int64_t evaluations_ = 0;
};

enum class Integrator {
  euler_frozen,  // x^{k+1} = x^k + Δt Σ_j P_ij(x^k) W x_j^k: the discrete transformer the authors ran
  rk4,           // classic 4-stage Runge–Kutta, P re-evaluated at each stage
  dopri5,        // adaptive Dormand–Prince 5(4) (Boost.Odeint), dense output at the save times
};
enum class StateVariable { x, z };  // which variables the integrator advances

Integrator parse_integrator(const std::string& name);  // "euler", "rk4", "dopri5"
std::string to_string(Integrator integrator);
StateVariable parse_state_variable(const std::string& name);  // "x", "z"
std::string to_string(StateVariable variable);

struct SimulationOptions {
  double t_end = 5.0;
  double dt = 0.1;  // step (fixed-step integrators) and spacing of the output grid (all integrators)
  Integrator integrator = Integrator::euler_frozen;
  StateVariable variable = StateVariable::x;
  double abs_tol = 1e-10, rel_tol = 1e-10;  // dopri5 error control
  int save_every = 1;                        // keep every k-th grid time (the last one is always kept)
};

// Trajectories on the saved grid; x[k] and z[k] are (n × d) at times[k].
//
// The rescaling z = R(t)⁻¹ x removes the linear growth. For the continuous system R(t) = e^{tW}. For the Euler
// scheme advancing x, R(t_k) = (I + ΔtW)^k instead, because it is exact for that scheme:
//     z^{k+1} = z^k + Δt W (I + ΔtW)⁻¹ Σ_j P_ij (z_j^k − z_i^k),
// the discrete twin of ż_i = Σ_j P_ij W (z_j − z_i), so the discrete limits obey the same theorems even when
// λΔt is not small (with e^{−tW} the rescaled tokens of a stiff Euler run would drift to 0 or infinity).
struct Trajectory {
  std::vector<double> times;
  std::vector<Matrix> x, z;
  double euler_rescaling_dt = 0;     // Δt when R(t_k) = (I + ΔtW)^k, 0 when R(t) = e^{tW}
  int64_t steps = 0;                 // accepted steps
  int64_t velocity_evaluations = 0;  // right-hand-side evaluations (each one O(n² d))

  // The eigenvalue of R(t) for an eigenvalue λ of W: φᵀz = φᵀx / rescale_factor(λ, t) for a left eigenvector φ.
  // Computing projections this way avoids the rounding that R(t)⁻¹ amplifies along W's negative directions.
  double rescale_factor(double lambda, double t) const;
  std::string rescaling() const;  // "exp(-tV)" or "(I + dt V)^-k"
};

// Number of Δt steps in [0, t_end]; throws Error when t_end is not a multiple of Δt or either is not positive.
int64_t step_count(double t_end, double dt);

// Integrates from X0 (n × d) at t = 0 to t_end.
Trajectory simulate(const ParticleSystem& system, const Matrix& X0, const SimulationOptions& options);

// Projects each row onto the unit sphere (rows of zero norm are an error: the direction is undefined).
void normalize_rows(Matrix& X);

}  // namespace tdyn::particles
