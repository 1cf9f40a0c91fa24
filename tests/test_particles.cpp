// Self-attention particle dynamics (SPEC §4): the integrators against hand computations, known solutions and
// their convergence orders; the theorems of Geshkovski et al. (2023) on seeded runs; the Euler scheme against
// an independent numpy implementation; the CLI's outputs and its user errors.
#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <omp.h>
#include <Eigen/Dense>

#include "analysis/particles/dynamics.h"
#include "analysis/particles/diagnostics.h"
#include "analysis/particles/presets.h"
#include "analysis/particles/run.h"
#include "core/npy.h"
#include "test_util.h"

namespace tdyn::particles {
namespace {

// Plain-loop softmax of ⟨Q x_i, K x_j⟩, kept here as the scalar reference for the library's BLAS path.
Matrix naive_attention(const Matrix& Q, const Matrix& K, const Matrix& X) {
  const int64_t n = X.rows();
  Matrix P(n, n);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> s(n);
    for (int64_t j = 0; j < n; ++j) s[j] = (Q * X.row(i).transpose()).dot(K * X.row(j).transpose());
    const double top = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(s[j] - top);
    for (int64_t j = 0; j < n; ++j) P(i, j) = std::exp(s[j] - top) / sum;
  }
  return P;
}

void expect_matrix_close(const Matrix& a, const Matrix& b, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(a.rows(), b.rows()) << what;
  ASSERT_EQ(a.cols(), b.cols()) << what;
  auto c = test::compare(a.data(), b.data(), a.size(), rtol, atol);
  EXPECT_TRUE(c.ok) << c.describe(what);
}

ParticleSystem head_system(Matrix Q, Matrix K, Matrix V) {
  ParticleSystem s;
  s.head.query = std::move(Q);
  s.head.key = std::move(K);
  s.head.value = std::move(V);
  return s;
}

Matrix random_matrix(int64_t rows, int64_t cols, uint64_t seed, int role = 99) {
  return make_matrix("gaussian", rows, cols, seed, role, "test");
}

Experiment preset_run(const std::string& name, uint64_t seed, int64_t d = 0) {
  ExperimentSpec spec = preset(name);
  spec.seed = seed;
  if (d > 0) spec.d = d;
  return build(spec);
}

SimulationOptions options_of(const ExperimentSpec& spec) {
  SimulationOptions o;
  o.t_end = spec.t_end;
  o.dt = spec.dt;
  return o;
}

TEST(ParticlesDynamics, AttentionIsALogSumExpSoftmax) {
  Matrix Q = random_matrix(3, 4, 1, 1), K = random_matrix(3, 4, 1, 2), X = random_matrix(7, 4, 1, 3);
  expect_matrix_close(attention_matrix({Q, K, Matrix::Identity(4, 4), {}}, X), naive_attention(Q, K, X), 1e-13, 1e-15, "P");
  // Scores of order 1e8 overflow a naive exp; the rows must still be exact probability vectors.
  Matrix big = 1e4 * X;
  Matrix P = attention_matrix({Q, K, Matrix::Identity(4, 4), {}}, big);
  ASSERT_TRUE(P.allFinite());
  for (int64_t i = 0; i < P.rows(); ++i) EXPECT_NEAR(P.row(i).sum(), 1.0, 1e-14);
  expect_matrix_close(P, naive_attention(Q, K, big), 1e-12, 1e-14, "P at huge scores");
}

TEST(ParticlesDynamics, VelocityWithFeedForwardAndOutputMatrixMatchesFormula) {
  // d_head = 2 < d scores through (X Qᵀ)(X Kᵀ)ᵀ, d_head = 5 through (X QᵀK) Xᵀ with P (X Wᵀ): both orders of the products.
  const int64_t n = 5, d = 3, dv = 2, h = 4;
  for (const int64_t d_head : {2, 5}) {
    ParticleSystem s = head_system(random_matrix(d_head, d, 2, 1), random_matrix(d_head, d, 2, 2), random_matrix(dv, d, 2, 3));
    s.head.output = random_matrix(d, dv, 2, 4);
    FeedForward f;
    f.activation = Activation::tanh;
    f.w_in = random_matrix(h, d, 2, 5);
    f.b_in = Vector::LinSpaced(h, -0.5, 0.5);
    f.w_out = random_matrix(d, h, 2, 6);
    f.b_out = Vector::LinSpaced(d, 0.1, 0.3);
    s.ffn = f;
    Matrix X = random_matrix(n, d, 2, 7), dX;
    VelocityField field(s);
    field.x_velocity(X, dX);
    const Matrix P = naive_attention(s.head.query, s.head.key, X);
    expect_matrix_close(field.attention(), P, 1e-13, 1e-15, fmt::format("P at d_head = {}", d_head));
    const Matrix W = s.head.output * s.head.value;
    for (int64_t i = 0; i < n; ++i) {
      Vector v = Vector::Zero(d);
      for (int64_t j = 0; j < n; ++j) v += P(i, j) * (W * X.row(j).transpose());
      Vector hidden = (f.w_in * X.row(i).transpose() + f.b_in).array().tanh();
      v += f.w_out * hidden + f.b_out;
      expect_matrix_close(dX.row(i), v.transpose(), 1e-13, 1e-14, fmt::format("velocity of token {} at d_head = {}", i, d_head));
    }
  }
}

TEST(ParticlesIntegrators, NonFiniteTokensStopTheRun) {
  // V = 1e300: the tokens reach ~1e300 in the first step and overflow in the second (scores ~1e600).
  ParticleSystem s = head_system(Matrix::Ones(1, 1), Matrix::Ones(1, 1), Matrix::Constant(1, 1, 1e300));
  Matrix x0(3, 1);
  x0 << 1, -2, 3;
  SimulationOptions o;
  o.t_end = 1.0, o.dt = 0.5;
  try {
    simulate(s, x0, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite at t = 1 "), std::string::npos) << e.what();
  }
}

TEST(ParticlesIntegrators, EulerFrozenEqualsTwoHandComputedSteps) {
  // n = 2, d = 1, Q = K = V = 1, x0 = (1, 0), Δt = 0.5. Step 1: scores [[1, 0], [0, 0]], so
  // P = [[e/(e+1), 1/(e+1)], [1/2, 1/2]] and x1 = (1 + 0.5·e/(e+1), 0 + 0.5·1/2).
  const double e = std::exp(1.0);
  const double a1 = 1 + 0.5 * e / (e + 1), b1 = 0.25;
  // Step 2 with P frozen at x1: P_ij ∝ exp(x_i x_j).
  auto row = [](double xi, double a, double b) {
    const double wa = std::exp(xi * a), wb = std::exp(xi * b);
    return (wa * a + wb * b) / (wa + wb);
  };
  const double a2 = a1 + 0.5 * row(a1, a1, b1), b2 = b1 + 0.5 * row(b1, a1, b1);
  ParticleSystem s = head_system(Matrix::Ones(1, 1), Matrix::Ones(1, 1), Matrix::Ones(1, 1));
  Matrix x0(2, 1);
  x0 << 1, 0;
  SimulationOptions o;
  o.t_end = 1.0, o.dt = 0.5;
  Trajectory tr = simulate(s, x0, o);
  ASSERT_EQ(tr.times.size(), 3u);
  EXPECT_NEAR(tr.x[1](0, 0), a1, 1e-15);
  EXPECT_NEAR(tr.x[1](1, 0), b1, 1e-15);
  EXPECT_NEAR(tr.x[2](0, 0), a2, 1e-14);
  EXPECT_NEAR(tr.x[2](1, 0), b2, 1e-14);
  EXPECT_EQ(tr.velocity_evaluations, 2);  // one P per step: frozen
  // The Euler rescaling (I + ΔtV)^{-k}: z^2 = x^2 / 1.5².
  EXPECT_NEAR(tr.z[2](0, 0), a2 / 2.25, 1e-14);
}

// A system small enough to share each step over the threads (96 tokens in 40 dimensions: two blocks of rows on two
// threads), stepped on one thread and on two: both equal plain Euler steps P(x) x Vᵀ (+ ffn), and the rescaled
// tokens equal x (I + Δt V)^{-k}ᵀ. Plain heads move their tokens inside the threads' work; a feed-forward term or
// the sphere take the general path.
TEST(ParticlesIntegrators, EulerStepsSharedOverThreadsEqualPlainSteps) {
  const int64_t n = 96, d = 40, steps = 3;
  const double dt = 0.05;
  const Matrix x0 = random_matrix(n, d, 7) * 0.5;
  for (const int variant : {0, 1, 2}) {
    ParticleSystem s = head_system(random_matrix(d, d, 8, 1) / std::sqrt(double(d)), random_matrix(d, d, 8, 2) / std::sqrt(double(d)),
                                   Matrix::Identity(d, d) + 0.1 * random_matrix(d, d, 8, 3) / std::sqrt(double(d)));
    if (variant == 1) s.ffn = FeedForward{Activation::relu, random_matrix(8, d, 9, 1) * 0.1, Vector(), random_matrix(d, 8, 9, 2) * 0.1, Vector()};
    if (variant == 2) s.project_to_sphere = true;
    const std::string what = variant == 0 ? "plain head" : variant == 1 ? "with a feed-forward term" : "on the sphere";
    Matrix expected = x0;
    if (s.project_to_sphere) expected.rowwise().normalize();
    for (int64_t k = 0; k < steps; ++k) {
      Matrix velocity = naive_attention(s.head.query, s.head.key, expected) * expected * s.head.value.transpose();
      if (s.ffn) velocity += (expected * s.ffn->w_in.transpose()).cwiseMax(0.0) * s.ffn->w_out.transpose();
      if (s.project_to_sphere) {
        const Vector along = velocity.cwiseProduct(expected).rowwise().sum().cwiseQuotient(expected.rowwise().squaredNorm());
        velocity -= along.asDiagonal() * expected;
      }
      expected += dt * velocity;
      if (s.project_to_sphere) expected.rowwise().normalize();
    }
    SimulationOptions o;
    o.t_end = steps * dt, o.dt = dt;
    const int threads_before = omp_get_max_threads();
    for (const int threads : {1, 2}) {
      omp_set_num_threads(threads);
      const Trajectory tr = simulate(s, x0, o);
      omp_set_num_threads(threads_before);
      const std::string where = fmt::format("{}, {} thread(s)", what, threads);
      expect_matrix_close(tr.x.back(), expected, 1e-12, 1e-12, "x after three steps, " + where);
      if (s.project_to_sphere) continue;  // the sphere's tokens have no Euler rescaling to check
      const Matrix step_inverse = (Matrix::Identity(d, d) + dt * s.head.value).inverse();
      Matrix power = Matrix::Identity(d, d);
      for (int64_t k = 0; k < steps; ++k) power = step_inverse * power;
      expect_matrix_close(tr.z.back(), Matrix(tr.x.back() * power.transpose()), 1e-12, 1e-12, "z, " + where);
    }
  }
}

// The Euler scheme's rescaled tokens need (I + Δt V)⁻¹: where it does not exist, the run says so and why.
TEST(ParticlesIntegrators, EulerRescalingRefusesASingularStepMatrix) {
  const int64_t n = 96, d = 40;
  const double dt = 0.5;
  ParticleSystem s = head_system(random_matrix(d, d, 8, 1) / std::sqrt(double(d)), random_matrix(d, d, 8, 2) / std::sqrt(double(d)),
                                 Matrix::Identity(d, d));
  s.head.value(3, 3) = -1 / dt;  // I + Δt V has a zero row
  SimulationOptions o;
  o.t_end = 2 * dt, o.dt = dt;
  const int threads_before = omp_get_max_threads();
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::string message;
    try {
      simulate(s, random_matrix(n, d, 7), o);
    } catch (const Error& e) {
      message = e.what();
    }
    omp_set_num_threads(threads_before);
    EXPECT_NE(message.find("I + dt V is singular (V has the eigenvalue -1/dt = -2)"), std::string::npos)
        << threads << " thread(s): " << message;
  }
}

// A run whose tokens overflow stops with an error naming the time, on one thread and on two, whether each thread
// checks its own tokens as it moves them (a plain head) or the whole state is checked after the step.
TEST(ParticlesIntegrators, EulerRunsThatOverflowStopWithAnError) {
  const int64_t n = 96, d = 40;
  const Matrix x0 = random_matrix(n, d, 7);
  for (const bool with_ffn : {false, true}) {
    // V = 10^80 I: after one step of dt = 1 the tokens are 10^80 times larger; the scores overflow at the next.
    ParticleSystem s = head_system(random_matrix(d, d, 8, 1), random_matrix(d, d, 8, 2), 1e80 * Matrix::Identity(d, d));
    if (with_ffn) s.ffn = FeedForward{Activation::relu, random_matrix(8, d, 9, 1), Vector(), random_matrix(d, 8, 9, 2), Vector()};
    SimulationOptions o;
    o.t_end = 10, o.dt = 1;
    const int threads_before = omp_get_max_threads();
    for (const int threads : {1, 2}) {
      omp_set_num_threads(threads);
      std::string message;
      try {
        simulate(s, x0, o);
      } catch (const Error& e) {
        message = e.what();
      }
      omp_set_num_threads(threads_before);
      EXPECT_NE(message.find("the tokens became non-finite at t = "), std::string::npos)
          << (with_ffn ? "with a feed-forward term, " : "plain head, ") << threads << " thread(s): " << message;
    }
  }
}

// With Q = 0 the attention is uniform and the system is linear: x̄' = W x̄, so
// x_i(t) = x_i(0) + (e^{tW} − I) x̄(0). Errors at Δt and Δt/2 give the observed order.
double error_against_uniform_solution(Integrator integrator, double dt) {
  Matrix W(2, 2);
  W << 0.3, -1.0, 0.8, -0.2;
  ParticleSystem s = head_system(Matrix::Zero(2, 2), Matrix::Zero(2, 2), W);
  Matrix x0 = random_matrix(6, 2, 3);
  SimulationOptions o;
  o.t_end = 2.0, o.dt = dt, o.integrator = integrator;
  o.abs_tol = o.rel_tol = 1e-13;
  Trajectory tr = simulate(s, x0, o);
  const Vector mean = x0.colwise().mean().transpose();
  const Vector shift = (ValueFlow(W).exp(2.0) - Matrix::Identity(2, 2)) * mean;
  const Matrix exact = x0.rowwise() + shift.transpose();
  return (tr.x.back() - exact).cwiseAbs().maxCoeff();
}

TEST(ParticlesIntegrators, ConvergenceOrdersOnAKnownSolution) {
  const double euler = error_against_uniform_solution(Integrator::euler_frozen, 0.01) /
                       error_against_uniform_solution(Integrator::euler_frozen, 0.005);
  const double rk4 = error_against_uniform_solution(Integrator::rk4, 0.1) / error_against_uniform_solution(Integrator::rk4, 0.05);
  EXPECT_NEAR(std::log2(euler), 1.0, 0.1);
  EXPECT_NEAR(std::log2(rk4), 4.0, 0.2);
  EXPECT_LT(error_against_uniform_solution(Integrator::dopri5, 0.1), 1e-10);
}

TEST(ParticlesIntegrators, NonlinearRk4OrderAndAgreementWithDopri5) {
  // Full attention, P re-evaluated per stage: self-convergence of RK4 against a tight Dormand–Prince run.
  Experiment e = preset_run("polytope", 4);
  SimulationOptions o;
  o.t_end = 1.0;
  auto final_state = [&](Integrator integrator, double dt) {
    o.integrator = integrator, o.dt = dt;
    return simulate(e.system, e.x0 * 0.2, o).x.back();
  };
  o.abs_tol = o.rel_tol = 1e-13;
  const Matrix reference = final_state(Integrator::dopri5, 0.1);
  const double e1 = (final_state(Integrator::rk4, 0.02) - reference).cwiseAbs().maxCoeff();
  const double e2 = (final_state(Integrator::rk4, 0.01) - reference).cwiseAbs().maxCoeff();
  EXPECT_NEAR(std::log2(e1 / e2), 4.0, 0.3) << "errors " << e1 << ", " << e2;
  o.abs_tol = o.rel_tol = 1e-8;
  EXPECT_LT((final_state(Integrator::dopri5, 0.1) - reference).cwiseAbs().maxCoeff(), 1e-6);
}

TEST(ParticlesIntegrators, RescaledSystemAgreesWithOriginalVariables) {
  // Integrating ż_i = Σ_j P_ij W (z_j − z_i) (P from e^{tW} z) must give the same path as x, mapped back; a
  // non-symmetric W exercises the matrix-exponential path, a feed-forward term the e^{−tW} ffn(x) term.
  Experiment e = preset_run("hyperplanes", 5);
  e.system.ffn = FeedForward{Activation::relu, random_matrix(3, 2, 5, 1), Vector(), random_matrix(2, 3, 5, 2), Vector()};
  SimulationOptions o;
  o.t_end = 1.0, o.dt = 0.1, o.integrator = Integrator::dopri5, o.abs_tol = o.rel_tol = 1e-12;
  Trajectory in_x = simulate(e.system, e.x0 * 0.3, o);
  o.variable = StateVariable::z;
  Trajectory in_z = simulate(e.system, e.x0 * 0.3, o);
  expect_matrix_close(in_z.x.back(), in_x.x.back(), 1e-8, 1e-9, "x from the z integration");
  expect_matrix_close(in_z.z.back(), in_x.z.back(), 1e-8, 1e-9, "z");
}

TEST(ParticlesIntegrators, SphereProjectionKeepsUnitNorms) {
  Experiment e = preset_run("hyperplanes", 6);
  e.system.project_to_sphere = true;
  SimulationOptions o;
  o.t_end = 2.0, o.dt = 0.1, o.integrator = Integrator::rk4;
  Trajectory tr = simulate(e.system, e.x0, o);
  for (const auto& x : tr.x) EXPECT_NEAR(x.rowwise().norm().maxCoeff(), 1.0, 1e-14);
  EXPECT_NEAR(tr.x.back().rowwise().norm().minCoeff(), 1.0, 1e-14);
}

// ---- Geometry helpers --------------------------------------------------------------------------------------

TEST(ParticlesGeometry, DistanceToHullOfASquare) {
  Matrix square(4, 2);
  square << 0, 0, 1, 0, 1, 1, 0, 1;
  EXPECT_NEAR(distance_to_hull(square, Vector::Constant(2, 0.5)), 0.0, 1e-14);
  EXPECT_NEAR(distance_to_hull(square, (Vector(2) << 2, 0.5).finished()), 1.0, 1e-14);
  EXPECT_NEAR(distance_to_hull(square, (Vector(2) << 2, 2).finished()), std::sqrt(2.0), 1e-14);
  Matrix with_centre(5, 2);
  with_centre << square, 0.5, 0.5;
  HullVertices h = hull_vertices(with_centre, 1e-9);
  EXPECT_EQ(h.is_vertex, (std::vector<bool>{true, true, true, true, false}));
  EXPECT_NEAR(h.distance_to_rest[0], std::sqrt(0.5), 1e-14);  // corner (0, 0) to the diagonal from (1, 0) to (0, 1)
}

TEST(ParticlesGeometry, ClustersLevelsAndBooleanFit) {
  Matrix pts(5, 2);
  pts << 0, 0, 0.05, 0, 0.1, 0, 5, 5, 5.01, 5;  // a chain within 0.06 is one cluster (single linkage)
  Clusters c = find_clusters(pts, 0.06);
  EXPECT_EQ(c.count(), 2);
  EXPECT_EQ(c.membership, (std::vector<int>{0, 0, 0, 1, 1}));
  EXPECT_NEAR(c.centres(1, 0), 5.005, 1e-14);
  Levels l = find_levels({3.0, -1.0, 3.001, 0.0}, 0.01);
  EXPECT_EQ(l.count(), 3);
  EXPECT_EQ(l.membership, (std::vector<int>{2, 0, 2, 1}));
  Matrix P(3, 3);
  P << 0.9, 0.1, 0, 0.05, 0.95, 0, 0.99, 0, 0.01;
  BooleanFit b = nearest_boolean(P);
  EXPECT_EQ(b.leaders, (std::vector<int>{0, 1}));
  EXPECT_EQ(b.followers_per_leader, (std::vector<int>{2, 1}));
  EXPECT_NEAR(b.max_distance, 0.1, 1e-15);
  EXPECT_EQ(numerical_rank(singular_values(Matrix::Ones(3, 3)), 1e-10), 1);
}

TEST(ParticlesPresets, GeneratorsHaveTheirAdvertisedSpectra) {
  Matrix V = make_matrix("sparse-sym", 64, 64, 7, 4, "--value");
  EXPECT_EQ((V - V.transpose()).norm(), 0.0);
  EXPECT_LT((V.array() != 0).count(), 64 * 64 / 4) << "not sparse";
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig{Eigen::MatrixXd(V)};
  const Vector& lambda = eig.eigenvalues();
  EXPECT_GE(lambda.cwiseAbs().minCoeff(), 1.0);
  EXPECT_GT(lambda[63] - lambda[62], 1e-3) << "top eigenvalue not simple";
  Matrix S = make_matrix("psd:2", 5, 5, 7, 4, "--value");
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> ps{Eigen::MatrixXd(S)};
  EXPECT_NEAR(ps.eigenvalues()[4], 2.0, 1e-12);
  EXPECT_GE(ps.eigenvalues()[0], -1e-12);
  Matrix M = make_matrix("sym-mixed:2", 4, 4, 7, 4, "--value");
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> ms{Eigen::MatrixXd(M)};
  EXPECT_EQ((ms.eigenvalues().array() > 0).count(), 2);
  EXPECT_THROW(make_matrix("hyperplanes", 3, 3, 0, 4, "--value"), Error);
  EXPECT_THROW(make_matrix("nonsense", 3, 3, 0, 4, "--value"), Error);
  EXPECT_THROW(preset("no-such-preset"), Error);
}

// ---- The theorems on seeded runs ---------------------------------------------------------------------------

// Andrew's monotone chain, an independent 2-D hull for checking the vertex test.
std::vector<Vector> hull_2d(std::vector<Vector> p) {
  std::sort(p.begin(), p.end(), [](const Vector& a, const Vector& b) { return a[0] != b[0] ? a[0] < b[0] : a[1] < b[1]; });
  auto cross = [](const Vector& o, const Vector& a, const Vector& b) {
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]);
  };
  std::vector<Vector> h(2 * p.size());
  size_t k = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    while (k >= 2 && cross(h[k - 2], h[k - 1], p[i]) <= 0) --k;
    h[k++] = p[i];
  }
  for (size_t i = p.size() - 1, t = k + 1; i-- > 0;) {
    while (k >= t && cross(h[k - 2], h[k - 1], p[i]) <= 0) --k;
    h[k++] = p[i];
  }
  h.resize(k - 1);
  return h;
}

TEST(ParticlesTheorems, IdentityValueSendsRescaledTokensToPolytopeVertices) {
  // Theorem 2.1: V = I, QᵀK ≻ 0. Q = K = I (preset) and a random Q = K (QᵀK = QᵀQ ≻ 0), in d = 2 and 3.
  for (uint64_t seed : {1, 2}) {
    for (int64_t d : {2, 3}) {
      Experiment e = preset_run("polytope", seed, d);
      if (seed == 2) e.system.head.query = e.system.head.key = random_matrix(d, d, seed);
      Trajectory tr = simulate(e.system, e.x0, options_of(preset("polytope")));
      ParticleDiagnostics diag = diagnose(e.system, tr, DiagnosticOptions{});
      const auto& f = diag.final;
      SCOPED_TRACE(fmt::format("seed {} d {}", seed, d));
      ASSERT_EQ(f.polytope_dim, d);
      EXPECT_EQ(f.tokens_elsewhere, 0);
      EXPECT_GE(f.polytope_limits.rows(), 2);
      EXPECT_LT(f.max_distance_to_initial_hull, 1e-9) << "the hull of z must only shrink";
      // Every token is close to its limit (the clusters have formed) ...
      for (int64_t i = 0; i < e.x0.rows(); ++i)
        EXPECT_LT((tr.z.back().row(i) - f.clusters.centres.row(f.clusters.membership[i])).norm(), 0.01 * f.scale);
      // ... and in 2-D every limit is a vertex of the hull computed independently (or 0).
      if (d == 2) {
        std::vector<Vector> limits;
        for (int64_t c = 0; c < f.polytope_limits.rows(); ++c) limits.push_back(f.polytope_limits.row(c).transpose());
        std::vector<Vector> hull = limits.size() >= 3 ? hull_2d(limits) : limits;
        for (const auto& p : limits) {
          double nearest = p.norm();
          for (const auto& v : hull) nearest = std::min(nearest, (p - v).norm());
          EXPECT_LT(nearest, 1e-12 * f.scale) << "limit (" << p.transpose() << ") is neither a hull vertex nor 0";
        }
      }
    }
  }
}

TEST(ParticlesTheorems, SimpleTopEigenvalueGivesAtMostThreeHyperplanes) {
  // Theorem 3.1 with the paper's 2 × 2 V, and with the high-dimensional sparse symmetric V (n = d = 32).
  for (uint64_t seed : {1, 2, 3}) {
    Experiment e = preset_run("hyperplanes", seed);
    e.x0 = Matrix(e.x0.topRows(20));
    Trajectory tr = simulate(e.system, e.x0, options_of(preset("hyperplanes")));
    ParticleDiagnostics diag = diagnose(e.system, tr, DiagnosticOptions{});
    ASSERT_FALSE(diag.final.directions.empty());
    const EigenDirection& top = diag.final.directions[0];
    ASSERT_TRUE(top.is_top);
    const Matrix W = e.system.head.value_map();
    EXPECT_LT((top.left.transpose() * W - top.eigenvalue * top.left.transpose()).norm(), 1e-12) << "not a left eigenvector";
    EXPECT_LE(diag.final.levels[0].count(), 3) << "seed " << seed;
    EXPECT_LT(diag.final.levels[0].count(), diag.series.top_levels.front()) << "no clustering happened";
  }
  ExperimentSpec spec = preset("high-dim");
  spec.n = spec.d = 32;
  Experiment e = build(spec);
  Trajectory tr = simulate(e.system, e.x0, options_of(spec));
  ParticleDiagnostics diag = diagnose(e.system, tr, DiagnosticOptions{});
  ASSERT_TRUE(!diag.final.directions.empty() && diag.final.directions[0].is_top);
  EXPECT_LE(diag.final.levels[0].count(), 3);
  EXPECT_LE(diag.final.rank_P, 3);
}

TEST(ParticlesTheorems, OneDimensionalAttentionBecomesBooleanWithExtremeLeaders) {
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE(fmt::format("seed {}", seed));
    Experiment e = preset_run("leaders", seed);
    ASSERT_EQ(e.x0.cols(), 1);
    ASSERT_GT(e.system.head.value(0, 0), 0);
    SimulationOptions o = options_of(preset("leaders"));
    o.t_end = 8.0;
    Trajectory tr = simulate(e.system, e.x0, o);
    const Matrix P = naive_attention(e.system.head.query, e.system.head.key, tr.x.back());
    // The nearest 0/1 matrix, computed here by rounding.
    const Matrix B = (P.array() > 0.5).cast<double>().matrix();
    EXPECT_LT((P - B).cwiseAbs().maxCoeff(), 1e-3);
    // Its non-zero columns are the extreme tokens of the initial sequence (the order on the line is preserved).
    Eigen::Index lo, hi;
    e.x0.col(0).minCoeff(&lo);
    e.x0.col(0).maxCoeff(&hi);
    std::set<int64_t> columns;
    for (int64_t j = 0; j < B.cols(); ++j)
      if (B.col(j).sum() > 0) columns.insert(j);
    EXPECT_LE(columns.size(), 3u);
    for (int64_t j : columns) EXPECT_TRUE(j == lo || j == hi) << "leader " << j << " is not an extreme token";
    ParticleDiagnostics diag = diagnose(e.system, tr, DiagnosticOptions{});
    EXPECT_LE(diag.final.rank_P, 3);
    EXPECT_EQ(std::set<int64_t>(diag.final.boolean.leaders.begin(), diag.final.boolean.leaders.end()), columns);
  }
}

TEST(ParticlesTheorems, MinusIdentityCollapsesToZeroWithUniformAttention) {
  Experiment e = preset_run("collapse", 3);
  Trajectory tr = simulate(e.system, e.x0, options_of(preset("collapse")));
  ParticleDiagnostics diag = diagnose(e.system, tr, DiagnosticOptions{});
  const auto& s = diag.series;
  const size_t half = s.time.size() / 2;
  EXPECT_LT(s.max_norm_x.back(), 0.1 * s.max_norm_x.front());
  EXPECT_LT(s.uniform_distance.back(), 0.05);
  for (size_t k = half + 1; k < s.time.size(); ++k) {
    EXPECT_LE(s.max_norm_x[k], s.max_norm_x[k - 1]) << "t = " << s.time[k];
    EXPECT_LE(s.uniform_distance[k], s.uniform_distance[k - 1] + 1e-15) << "t = " << s.time[k];
  }
}

// ---- Verdicts: each claim's rule can fail -----------------------------------------------------------------------

// Runs `spec` to t_end and returns its verdict on `claim` ("clusters" or "boolean").
ClaimVerdict verdict_of(ExperimentSpec spec, double t_end, const std::string& claim, DiagnosticOptions options = {}) {
  spec.t_end = t_end;
  Experiment e = build(spec);
  Trajectory tr = simulate(e.system, e.x0, options_of(spec));
  ParticleDiagnostics diag = diagnose(e.system, tr, options);
  for (const ClaimVerdict& v : diag.verdicts)
    if (v.claim == claim) return v;
  ADD_FAILURE() << "no verdict on " << claim;
  return {};
}

std::string describe(const ClaimVerdict& v) {
  return fmt::format("{} ({}): {} = {} at T, {} at t = 0 -> {} [{}]", v.claim, v.theorem, v.measure, v.value, v.control, v.verdict,
                     v.note);
}

// Every preset's clustering claim is its own theorem's, and says "differs" when the dynamics have had no time to
// act (one Euler step) and "pass" at the preset's T. The same spec, so only the dynamics decide.
TEST(ParticlesVerdicts, EachPresetIsJudgedByItsTheoremAndCanFail) {
  struct Case {
    std::string preset, theorem;
    double t_pass;
  };
  for (const Case& c : {Case{"polytope", "polytope", 5}, Case{"polytope-x-subspace", "polytope", 5}, Case{"hyperplanes", "hyperplanes", 5},
                        Case{"codim-k", "codim-k", 10}, Case{"lowrank", "hyperplanes", 20}, Case{"collapse", "collapse", 10}}) {
    SCOPED_TRACE(c.preset);
    const ExperimentSpec spec = preset(c.preset);
    const ClaimVerdict early = verdict_of(spec, spec.dt, "clusters"), late = verdict_of(spec, c.t_pass, "clusters");
    EXPECT_EQ(late.theorem, c.theorem);
    EXPECT_EQ(early.verdict, "differs") << describe(early);
    EXPECT_EQ(late.verdict, "pass") << describe(late);
    EXPECT_EQ(late.control, early.control) << "the control is the measure at t = 0";
  }
}

// high-dim's sparse symmetric V has positive and negative eigenvalues, all simple: every positive direction is
// judged (lowrank's PSD V, above, only its top one).
TEST(ParticlesVerdicts, HighDimensionalPresetIsJudgedPerPositiveDirection) {
  ExperimentSpec spec = preset("high-dim");
  spec.n = spec.d = 32;
  const ClaimVerdict early = verdict_of(spec, spec.dt, "clusters"), late = verdict_of(spec, spec.t_end, "clusters");
  EXPECT_EQ(late.theorem, "codim-k");
  EXPECT_EQ(late.verdict, "pass") << describe(late);
  EXPECT_EQ(early.verdict, "differs") << describe(early);
}

// On the sphere z = R(t)⁻¹x shrinks to 0 whatever the dynamics, so the verdict counts clusters of x even when
// the diagnostics cluster z: V = I gathers the tokens (pass), V = −I spreads them (differs).
TEST(ParticlesVerdicts, OnTheSphereTheTokensThemselvesAreCounted) {
  ExperimentSpec spec = preset("polytope");
  spec.d = 3;
  spec.sphere = true;
  spec.initial = "sphere";
  DiagnosticOptions on_z;
  on_z.cluster_on = StateVariable::z;
  const ClaimVerdict gather = verdict_of(spec, 10, "clusters", on_z);
  EXPECT_EQ(gather.theorem, "sphere");
  EXPECT_EQ(gather.verdict, "pass") << describe(gather);
  // V = −I keeps the tokens apart, but on the sphere no theorem of the paper covers a V other than I: the count is
  // shown, not judged (as for a real model's head).
  spec.value = "minus-identity";
  const ClaimVerdict spread = verdict_of(spec, 10, "clusters", on_z);
  EXPECT_EQ(spread.verdict, "shown") << describe(spread);
  EXPECT_NE(spread.rule.find("proved for V = I"), std::string::npos) << describe(spread);
  EXPECT_GT(spread.value, spec.n / 2.0);
}

// A prediction that already holds for the initial tokens is shown, not passed; with no theorem for V (a complex
// top eigenvalue) or a feed-forward term, the count is shown.
TEST(ParticlesVerdicts, NoTheoremOrNothingToExplainIsShown) {
  ExperimentSpec few = preset("hyperplanes");
  few.n = 3;  // three tokens always have at most 3 levels
  const ClaimVerdict trivial = verdict_of(few, few.t_end, "clusters");
  EXPECT_EQ(trivial.verdict, "shown") << describe(trivial);
  ExperimentSpec rotation = preset("polytope");
  const fs::path dir = test::scratch_dir("particles_verdict_rotation");
  const double r[] = {0.0, -1.0, 1.0, 0.0};  // eigenvalues ±i: no real top eigenvalue
  write_npy(dir / "rotation.npy", r, {2, 2});
  rotation.value = (dir / "rotation.npy").string();
  const ClaimVerdict none = verdict_of(rotation, 2, "clusters");
  EXPECT_EQ(none.theorem, "none");
  EXPECT_EQ(none.verdict, "shown");
  ExperimentSpec ffn = preset("polytope");
  ffn.ffn = "relu";
  EXPECT_EQ(verdict_of(ffn, 1, "clusters").verdict, "shown");
}

// The one-dimensional theorem (d = 1, V > 0): P(t) → Boolean, its leaders are extreme tokens, its rank ≤ 3.
// Started close together (U[−0.5, 0.5]) the tokens attend nearly uniformly, so after one step each claim must
// differ, and at T = 12 pass (P(8) is still 0.07 from Boolean). V = −I shows the Boolean claim (the paper predicts P → 1/n there), and in d = 2 the
// leaders and rank claims are shown, not judged.
TEST(ParticlesVerdicts, BooleanLeadersAndRankCanFail) {
  ExperimentSpec spec = preset("leaders");
  spec.initial = "uniform:0.5";
  for (const char* claim : {"boolean", "leaders", "rank"}) {
    SCOPED_TRACE(claim);
    const ClaimVerdict late = verdict_of(spec, 12, claim), early = verdict_of(spec, spec.dt, claim);
    EXPECT_EQ(late.verdict, "pass") << describe(late);
    EXPECT_EQ(early.verdict, "differs") << describe(early);
  }
  EXPECT_LT(verdict_of(spec, 12, "boolean").value, 0.05);
  EXPECT_EQ(verdict_of(preset("collapse"), 10, "boolean").verdict, "shown");
  ExperimentSpec plane = preset("leaders");
  plane.d = 2;
  EXPECT_EQ(verdict_of(plane, 5, "leaders").verdict, "shown");
  EXPECT_EQ(verdict_of(plane, 5, "rank").verdict, "shown");
}

// Where the clusters end depends on where the tokens start (the polytope's vertices are initial tokens' own
// directions: they move with them), but not under V = −I, whose tokens all contract toward 0 whatever their start;
// and a run whose tokens did not cluster has no locations to follow.
TEST(ParticlesVerdicts, ClusterLocationsMoveWithPerturbedInitialTokens) {
  auto locations = [](ExperimentSpec spec, double t_end, StateVariable on) {
    spec.t_end = t_end;
    ParticlesOptions options;
    options.diagnostics.cluster_on = on;
    const ParticlesResult r = run_particles(spec, options);
    EXPECT_EQ(r.perturbed.size(), 3u);
    for (const ClaimVerdict& v : r.diagnostics.verdicts)
      if (v.claim == "locations") return v;
    ADD_FAILURE() << "no verdict on locations";
    return ClaimVerdict{};
  };
  const ClaimVerdict polytope = locations(preset("polytope"), 5, StateVariable::z);
  EXPECT_EQ(polytope.verdict, "pass") << describe(polytope);
  EXPECT_GT(polytope.value, 0.5) << "the vertices move about as much as the tokens";
  const ClaimVerdict collapse = locations(preset("collapse"), 30, StateVariable::x);
  EXPECT_EQ(collapse.verdict, "differs") << describe(collapse);
  const ClaimVerdict unclustered = locations(preset("polytope"), 0.1, StateVariable::z);
  EXPECT_EQ(unclustered.verdict, "shown") << describe(unclustered);
  ParticlesOptions none;
  none.perturbed_runs = 0;
  const ParticlesResult r = run_particles(preset("polytope"), none);
  EXPECT_TRUE(r.perturbed.empty());
  for (const ClaimVerdict& v : r.diagnostics.verdicts) EXPECT_NE(v.claim, "locations");
}

// ---- The CLI: reference implementation, outputs, user errors ------------------------------------------------

fs::path python3() { return "/usr/bin/python3"; }

TEST(ParticlesCli, EulerMatchesIndependentNumpyImplementation) {
  if (!fs::exists(python3())) GTEST_SKIP() << "/usr/bin/python3 not found: cannot run tests/particles_reference.py";
  if (std::system((python3().string() + " -c 'import numpy' 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "numpy is not importable by /usr/bin/python3: cannot run tests/particles_reference.py";
  fs::path dir = test::scratch_dir("particles_reference");
  // Non-square Q, K (d_head = 3, d = 4), a non-symmetric V, random tokens: nothing the scheme can simplify.
  const int64_t n = 12, d = 4, steps = 40;
  Matrix x0 = 2.0 * random_matrix(n, d, 11, 1), Q = random_matrix(3, d, 11, 2), K = random_matrix(3, d, 11, 3);
  Matrix V = Matrix::Identity(d, d) + 0.5 * random_matrix(d, d, 11, 4);
  write_npy(dir / "x0.npy", x0.data(), {n, d});
  write_npy(dir / "Q.npy", Q.data(), {3, d});
  write_npy(dir / "K.npy", K.data(), {3, d});
  write_npy(dir / "V.npy", V.data(), {d, d});
  std::string cmd = fmt::format("{} {} simulate {} {} {} {} 0.1 {} {}", python3().string(),
                                (test::source_dir() / "tests" / "particles_reference.py").string(), (dir / "x0.npy").string(),
                                (dir / "Q.npy").string(), (dir / "K.npy").string(), (dir / "V.npy").string(), steps,
                                (dir / "reference.npy").string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::string out, err;
  ASSERT_EQ(test::run_cli(fmt::format("particles --out {} --init {} --query {} --key {} --value {} --T 4 --dt 0.1",
                                      (dir / "run").string(), (dir / "x0.npy").string(), (dir / "Q.npy").string(),
                                      (dir / "K.npy").string(), (dir / "V.npy").string()),
                          &out, &err),
            0)
      << err;
  NpyArray ours = read_npy(dir / "run" / "x.npy"), reference = read_npy(dir / "reference.npy");
  ASSERT_EQ(ours.shape, (Shape{steps + 1, n, d}));
  ASSERT_EQ(reference.shape, ours.shape);
  std::vector<double> a = ours.as_double(), b = reference.as_double();
  double scale = 0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  test::expect_close(a, b, 1e-10, 1e-10 * scale, "x(t) vs numpy reference");
}

TEST(ParticlesCli, WritesResultsArraysAndFigures) {
  fs::path dir = test::scratch_dir("particles_cli") / "out";
  std::string out, err;
  ASSERT_EQ(test::run_cli(fmt::format("particles --preset polytope --n 8 --save-every 5 --attention-times 0,5 --out {}", dir.string()),
                          &out, &err),
            0)
      << err;
  auto j = nlohmann::json::parse(read_file(dir / "results.json"));
  EXPECT_EQ(j["command"], "particles");
  EXPECT_EQ(j["options"]["preset"], "polytope");
  EXPECT_EQ(j["options"]["n"], 8);
  EXPECT_EQ(j["options"]["integrator"], "euler");
  EXPECT_EQ(j["options"]["save_every"], 5);
  EXPECT_TRUE(j["results"]["final"].contains("polytope"));
  EXPECT_EQ(j["results"]["final"]["polytope"]["tokens_elsewhere"], 0);
  const auto& verdicts = j["results"]["verdicts"];
  ASSERT_EQ(verdicts.size(), 5u);
  EXPECT_EQ(verdicts[4]["claim"], "locations");
  EXPECT_EQ(j["results"]["perturbed_runs"].size(), 3u);
  EXPECT_EQ(verdicts[0]["paper"], "004");
  EXPECT_EQ(verdicts[0]["claim"], "clusters");
  EXPECT_EQ(verdicts[0]["theorem"], "polytope");
  EXPECT_EQ(verdicts[0]["value"], 0);
  EXPECT_EQ(verdicts[0]["control"], j["results"]["final"]["polytope"]["tokens_elsewhere_initially"]);
  for (const char* key : {"statement", "measure", "rule", "verdict", "note"}) EXPECT_TRUE(verdicts[0].contains(key)) << key;
  EXPECT_EQ(read_npy(dir / "x.npy").shape, (Shape{11, 8, 2}));  // t = 0, 0.5, ..., 5
  EXPECT_EQ(read_npy(dir / "z.npy").shape, (Shape{11, 8, 2}));
  EXPECT_EQ(read_npy(dir / "P.npy").shape, (Shape{2, 8, 8}));
  EXPECT_EQ(read_npy(dir / "t.npy").as_double().back(), 5.0);
  for (const char* f : {"diagnostics.csv", "trajectories.dat", "clusters.gp", "rank_P.dat", "attention_t0.dat", "attention_t5.dat"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
}

// The series of a figure's .dat file (blocks headed "# series s: label"), each as rows of numbers.
std::vector<std::vector<std::vector<double>>> dat_series(const fs::path& file) {
  std::vector<std::vector<std::vector<double>>> series;
  std::istringstream in(read_file(file));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# series", 0) == 0) series.emplace_back();
    else if (!line.empty() && !series.empty()) {
      std::istringstream row(line);
      std::vector<double> values;
      for (double v; row >> v;) values.push_back(v);
      series.back().push_back(values);
    }
  }
  return series;
}

// The title line of a figure's gnuplot script.
std::string gp_title(const fs::path& file) {
  const std::string gp = read_file(file);
  const size_t at = gp.find("set title ");
  return at == std::string::npos ? "" : gp.substr(at, gp.find('\n', at) - at);
}

// The trajectory figure draws the variable that clusters: z for the unnormalised theorems' presets, x on the
// sphere (where z = R(t)^-1 x of bounded tokens goes to 0 or to infinity) and with --cluster-on x.
TEST(ParticlesCli, TrajectoryFigureDrawsTheClusteredVariable) {
  const fs::path dir = test::scratch_dir("particles_trajectory_variable");
  struct Case {
    std::string name, flags, npy, cluster_on;
  };
  for (const Case& c : {Case{"plain", "", "z.npy", "z"}, Case{"sphere", "--sphere", "x.npy", "x"},
                        Case{"sphere_on_z", "--sphere --cluster-on z", "x.npy", "z"}, Case{"cluster_on_x", "--cluster-on x", "x.npy", "x"}}) {
    const fs::path run = dir / c.name;
    std::string out, err;
    ASSERT_EQ(test::run_cli(fmt::format("particles --preset hyperplanes --n 6 --T 2 {} --out {}", c.flags, run.string()), &out, &err), 0)
        << err;
    // d = 2: the figure's axes are the coordinates themselves; series i < n is token i's path.
    const NpyArray expected = read_npy(run / c.npy);
    ASSERT_EQ(expected.shape, (Shape{21, 6, 2}));
    const std::vector<double> v = expected.as_double();
    const auto series = dat_series(run / "trajectories.dat");
    ASSERT_GE(series.size(), 6u) << c.flags;
    for (int64_t i = 0; i < 6; ++i) {
      ASSERT_EQ(series[i].size(), 21u);
      for (int64_t k = 0; k < 21; ++k)
        for (int64_t j = 0; j < 2; ++j)
          EXPECT_NEAR(series[i][k][j], v[(k * 6 + i) * 2 + j], 1e-9 * (1 + std::abs(v[(k * 6 + i) * 2 + j])))
              << c.flags << ": token " << i << " save " << k;
    }
    const std::string var = c.npy.substr(0, 1);
    EXPECT_NE(gp_title(run / "trajectories.gp").find(var + "_i(t)"), std::string::npos) << c.flags;
    EXPECT_NE(gp_title(run / "clusters.gp").find("clusters of " + c.cluster_on), std::string::npos) << c.flags;
    const auto j = nlohmann::json::parse(read_file(run / "results.json"));
    EXPECT_EQ(j["options"]["cluster_on"], c.cluster_on);
    EXPECT_NE(j["files"]["trajectories.dat"].get<std::string>().find(var + "_i(t)"), std::string::npos) << c.flags;
  }
}

// The φ1 histogram shows φ1*(z_i(T)) minus its mean in units of max_i |φ1*(z_i(0))|, and its title gives the
// level count of results.json; a spread below the level tolerance says "1 level" in so many words.
TEST(ParticlesCli, Phi1HistogramIsRelativeAndNamesTheLevelCount) {
  const fs::path dir = test::scratch_dir("particles_phi1_histogram");
  std::string out, err;
  ASSERT_EQ(test::run_cli(fmt::format("particles --preset hyperplanes --out {}", (dir / "a").string()), &out, &err), 0) << err;
  auto j = nlohmann::json::parse(read_file(dir / "a" / "results.json"));
  int levels = -1;
  for (const auto& h : j["results"]["final"]["hyperplanes"])
    if (h["is_top"]) levels = h["level_count"];
  ASSERT_GE(levels, 1);
  const std::string title = gp_title(dir / "a" / "phi1_histogram.gp");
  EXPECT_NE(title.find(fmt::format(": {} level", levels)), std::string::npos) << title;
  EXPECT_NE(read_file(dir / "a" / "phi1_histogram.gp").find("- mean) / max_i |phi1*(z_i(0))|"), std::string::npos);
  auto bars = dat_series(dir / "a" / "phi1_histogram.dat");
  ASSERT_EQ(bars.size(), 1u);
  double tokens = 0, mean = 0;
  for (const auto& bar : bars[0]) {
    tokens += bar[1], mean += bar[0] * bar[1];
    EXPECT_LT(std::abs(bar[0]), 2.0) << "values are relative to max_i |phi1*(z_i(0))|";
  }
  EXPECT_EQ(tokens, 20);
  EXPECT_LT(std::abs(mean / tokens), 0.05) << "values are relative to their mean";

  // Identical tokens: one level, spread 0, drawn as one bar.
  Matrix x0(4, 2);
  x0 << 1, 2, 1, 2, 1, 2, 1, 2;
  write_npy(dir / "x0.npy", x0.data(), {4, 2});
  ASSERT_EQ(test::run_cli(fmt::format("particles --preset hyperplanes --init {} --T 1 --out {}", (dir / "x0.npy").string(),
                                      (dir / "b").string()),
                          &out, &err),
            0)
      << err;
  EXPECT_NE(gp_title(dir / "b" / "phi1_histogram.gp").find("1 level (spread 0 below the tolerance 0.01)"), std::string::npos)
      << gp_title(dir / "b" / "phi1_histogram.gp");
  bars = dat_series(dir / "b" / "phi1_histogram.dat");
  ASSERT_EQ(bars.size(), 1u);
  ASSERT_EQ(bars[0].size(), 1u);
  EXPECT_EQ(bars[0][0][1], 4);
}

TEST(ParticlesCli, UserErrorsNameTheFlagAndTheShapes) {
  fs::path dir = test::scratch_dir("particles_errors");
  Matrix Q = Matrix::Identity(3, 3);
  write_npy(dir / "Q3.npy", Q.data(), {3, 3});
  std::string err;
  EXPECT_EQ(test::run_cli(fmt::format("particles --preset polytope --query {} --out {}", (dir / "Q3.npy").string(), (dir / "a").string()),
                          nullptr, &err),
            1);
  EXPECT_NE(err.find("--query"), std::string::npos) << err;
  EXPECT_NE(err.find("expected shape [3, 2], got [3, 3]"), std::string::npos) << err;
  EXPECT_EQ(test::run_cli(fmt::format("particles --T 1.05 --dt 0.1 --out {}", (dir / "b").string()), nullptr, &err), 1);
  EXPECT_NE(err.find("--T"), std::string::npos) << err;
  EXPECT_EQ(test::run_cli(fmt::format("particles --integrator euler2 --out {}", (dir / "c").string()), nullptr, &err), 1);
  EXPECT_NE(err.find("--integrator"), std::string::npos) << err;
  EXPECT_EQ(test::run_cli(fmt::format("particles --sphere --integrate z --out {}", (dir / "d").string()), nullptr, &err), 1);
  EXPECT_NE(err.find("--sphere"), std::string::npos) << err;
}

}  // namespace
}  // namespace tdyn::particles
