// Diagnostics of particle trajectories against the predictions of Geshkovski et al. (2023).
#include "analysis/particles_diagnostics.h"

#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace tdyn::particles {
namespace {

// Union–find over token indices, for single-linkage clustering.
struct DisjointSets {
  std::vector<int> parent;
  explicit DisjointSets(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  }
  void join(int a, int b) { parent[find(a)] = find(b); }
};

// Minimum-norm point of conv(rows of A) (Wolfe 1976): grows a corral S of affinely independent points whose
// affine minimiser lies inside their hull; drops points when the minimiser leaves it. Returns the point.
Vector min_norm_point(const Matrix& A) {
  const int m = static_cast<int>(A.rows());
  TDYN_CHECK(m > 0);
  Eigen::Index start;
  A.rowwise().squaredNorm().minCoeff(&start);
  std::vector<int> corral = {static_cast<int>(start)};
  std::vector<double> weights = {1.0};
  Vector x = A.row(start).transpose();
  const double scale = std::max(A.rowwise().squaredNorm().maxCoeff(), 1e-300);
  const double tiny = 1e-12;

  auto affine_minimiser = [&](std::vector<double>& alpha) {
    // min ‖s0 + D β‖ over β, D = [s_i − s0]; α = (1 − Σβ, β).
    const int k = static_cast<int>(corral.size());
    const Vector s0 = A.row(corral[0]).transpose();
    Eigen::MatrixXd D(A.cols(), k - 1);
    for (int i = 1; i < k; ++i) D.col(i - 1) = A.row(corral[i]).transpose() - s0;
    Vector beta = k > 1 ? Vector(D.completeOrthogonalDecomposition().solve(-s0)) : Vector();
    alpha.assign(k, 0.0);
    alpha[0] = 1.0 - beta.sum();
    for (int i = 1; i < k; ++i) alpha[i] = beta[i - 1];
  };
  auto point_of = [&](const std::vector<double>& w) {
    Vector p = Vector::Zero(A.cols());
    for (size_t i = 0; i < corral.size(); ++i) p += w[i] * A.row(corral[i]).transpose();
    return p;
  };

  for (int major = 0; major < 10 * m + 10; ++major) {
    Eigen::Index best;
    const double lowest = (A * x).minCoeff(&best);
    if (x.squaredNorm() - lowest <= tiny * scale) break;  // no point improves: x is optimal
    if (std::find(corral.begin(), corral.end(), static_cast<int>(best)) != corral.end()) break;  // rounding
    corral.push_back(static_cast<int>(best));
    weights.push_back(0.0);
    for (int minor = 0; minor < m + 1; ++minor) {
      std::vector<double> alpha;
      affine_minimiser(alpha);
      if (*std::min_element(alpha.begin(), alpha.end()) > tiny) {
        weights = alpha;
        x = point_of(weights);
        break;
      }
      // Walk from the current weights toward alpha until the first weight reaches zero, then drop it.
      double theta = 1.0;
      for (size_t i = 0; i < alpha.size(); ++i)
        if (alpha[i] <= tiny) theta = std::min(theta, weights[i] / (weights[i] - alpha[i]));
      for (size_t i = 0; i < alpha.size(); ++i) weights[i] += theta * (alpha[i] - weights[i]);
      std::vector<int> kept_points;
      std::vector<double> kept_weights;
      for (size_t i = 0; i < corral.size(); ++i)
        if (weights[i] > tiny) kept_points.push_back(corral[i]), kept_weights.push_back(weights[i]);
      corral = kept_points;
      weights = kept_weights;
      const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
      for (double& w : weights) w /= total;
      x = point_of(weights);
      if (corral.size() == 1) break;
    }
  }
  return x;
}

double max_row_norm(const Matrix& X) { return X.rows() ? X.rowwise().norm().maxCoeff() : 0.0; }

// Level count of the top direction (Theorem 3.1), or -1 when λ1 is not simple, real and positive.
const EigenDirection* top_direction(const std::vector<EigenDirection>& directions) {
  for (const auto& e : directions)
    if (e.is_top) return &e;
  return nullptr;
}

// φ*(z_i) at saved time k, from x (see Trajectory::rescale_factor).
std::vector<double> levels_of(const Trajectory& tr, size_t k, const EigenDirection& e) {
  Vector values = tr.x[k] * e.left / tr.rescale_factor(e.eigenvalue, tr.times[k]);
  return std::vector<double>(values.data(), values.data() + values.size());
}

}  // namespace

Clusters find_clusters(const Matrix& points, double tolerance) {
  const int n = static_cast<int>(points.rows());
  DisjointSets sets(n);
  const double tol2 = tolerance * tolerance;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      if ((points.row(i) - points.row(j)).squaredNorm() <= tol2) sets.join(i, j);
  Clusters out;
  out.membership.assign(n, -1);
  std::vector<int> label_of_root(n, -1);
  for (int i = 0; i < n; ++i) {
    int& label = label_of_root[sets.find(i)];
    if (label < 0) {
      label = out.count();
      out.sizes.push_back(0);
    }
    out.membership[i] = label;
    ++out.sizes[label];
  }
  out.centres = Matrix::Zero(out.count(), points.cols());
  for (int i = 0; i < n; ++i) out.centres.row(out.membership[i]) += points.row(i);
  for (int c = 0; c < out.count(); ++c) out.centres.row(c) /= out.sizes[c];
  return out;
}

Levels find_levels(const std::vector<double>& values, double tolerance) {
  const int n = static_cast<int>(values.size());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return values[a] < values[b]; });
  Levels out;
  out.membership.assign(n, -1);
  std::vector<double> sum;
  std::vector<int> size;
  for (int r = 0; r < n; ++r) {
    const int i = order[r];
    if (r == 0 || values[i] - values[order[r - 1]] > tolerance) sum.push_back(0), size.push_back(0);
    sum.back() += values[i];
    ++size.back();
    out.membership[i] = static_cast<int>(sum.size()) - 1;
  }
  for (size_t l = 0; l < sum.size(); ++l) out.values.push_back(sum[l] / size[l]);
  return out;
}

double distance_to_hull(const Matrix& points, const Vector& p) {
  if (points.rows() == 0) return std::numeric_limits<double>::infinity();
  Matrix shifted = points.rowwise() - p.transpose();
  return min_norm_point(shifted).norm();
}

HullVertices hull_vertices(const Matrix& points, double tolerance) {
  const int64_t m = points.rows();
  HullVertices out;
  for (int64_t k = 0; k < m; ++k) {
    Matrix rest(m - 1, points.cols());
    for (int64_t i = 0, r = 0; i < m; ++i)
      if (i != k) rest.row(r++) = points.row(i);
    const double distance = distance_to_hull(rest, points.row(k).transpose());
    out.distance_to_rest.push_back(distance);
    out.is_vertex.push_back(distance > tolerance);
  }
  return out;
}

Vector singular_values(const Matrix& M) {
  const lapack_int rows = static_cast<lapack_int>(M.rows()), cols = static_cast<lapack_int>(M.cols());
  Vector s(std::min(rows, cols));
  if (s.size() == 0) return s;
  Matrix a = M;  // dgesdd overwrites its input
  const lapack_int info =
      LAPACKE_dgesdd(LAPACK_ROW_MAJOR, 'N', rows, cols, a.data(), cols, s.data(), nullptr, rows, nullptr, cols);
  if (info != 0) fail("singular value decomposition failed (LAPACK dgesdd info = {})", info);
  return s;
}

int numerical_rank(const Vector& sv, double relative_tolerance) {
  if (sv.size() == 0 || !(sv[0] > 0)) return 0;
  return static_cast<int>((sv.array() > relative_tolerance * sv[0]).count());
}

BooleanFit nearest_boolean(const Matrix& P) {
  BooleanFit out;
  const Matrix rounded = (P.array() > 0.5).cast<double>().matrix();
  const Matrix gap = P - rounded;
  out.max_distance = gap.cwiseAbs().maxCoeff();
  out.frobenius_distance = gap.norm();
  const Eigen::VectorXd followers = rounded.colwise().sum().transpose();
  for (int j = 0; j < followers.size(); ++j)
    if (followers[j] > 0) {
      out.leaders.push_back(j);
      out.followers_per_leader.push_back(static_cast<int>(followers[j]));
    }
  return out;
}

std::vector<EigenDirection> simple_positive_directions(const Matrix& W) {
  // Left eigenvectors of W are right eigenvectors of Wᵀ.
  Eigen::EigenSolver<Eigen::MatrixXd> eig(Eigen::MatrixXd(W.transpose()));
  TDYN_CHECK(eig.info() == Eigen::Success);
  const Eigen::VectorXcd lambda = eig.eigenvalues();
  const double scale = std::max(1.0, lambda.cwiseAbs().maxCoeff());
  const double separation = 1e-8 * scale;
  Eigen::Index top;
  lambda.real().maxCoeff(&top);
  std::vector<EigenDirection> out;
  for (Eigen::Index k = 0; k < lambda.size(); ++k) {
    if (std::abs(lambda[k].imag()) > separation || lambda[k].real() <= separation) continue;
    bool simple = true;
    for (Eigen::Index j = 0; j < lambda.size(); ++j)
      if (j != k && std::abs(lambda[j] - lambda[k]) <= separation) simple = false;
    if (!simple) continue;
    EigenDirection e;
    e.eigenvalue = lambda[k].real();
    e.left = eig.eigenvectors().col(k).real().normalized();
    // Fix the sign so that the largest-magnitude coordinate is positive (eigenvectors are defined up to sign).
    Eigen::Index big;
    e.left.cwiseAbs().maxCoeff(&big);
    if (e.left[big] < 0) e.left = -e.left;
    e.is_top = k == top;
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.eigenvalue > b.eigenvalue; });
  return out;
}

Matrix polytope_basis(const Matrix& W) {
  const int64_t d = W.rows();
  const double scale = std::max(1.0, W.norm());
  if ((W - W.transpose()).norm() > 1e-12 * scale) return Matrix();
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(Eigen::MatrixXd(0.5 * (W + W.transpose())));
  TDYN_CHECK(eig.info() == Eigen::Success);
  const Vector& lambda = eig.eigenvalues();  // ascending
  const double top = lambda[d - 1];
  int64_t k = 0;
  while (k < d && top - lambda[d - 1 - k] <= 1e-8 * scale) ++k;
  if (!(top > 1e-8 * scale) || (k < 2 && k < d)) return Matrix();
  return Matrix(eig.eigenvectors().rightCols(k));
}

Assumptions check_assumptions(const AttentionHead& head) {
  Assumptions a;
  const Matrix W = head.value_map();
  const int64_t d = W.rows();
  const double tol = 1e-12 * std::max(1.0, W.norm());
  const Matrix identity = Matrix::Identity(d, d);
  a.value_is_identity = (W - identity).norm() <= tol;
  a.value_is_minus_identity = (W + identity).norm() <= tol;
  a.value_symmetric = (W - W.transpose()).norm() <= tol;
  const Matrix qk = head.query.transpose() * head.key;  // (d × d)
  a.qk_symmetric = (qk - qk.transpose()).norm() <= 1e-12 * std::max(1.0, qk.norm());
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> sym(Eigen::MatrixXd(0.5 * (qk + qk.transpose())), Eigen::EigenvaluesOnly);
  a.qk_min_eigenvalue = sym.eigenvalues()[0];
  Eigen::VectorXcd lambda = Eigen::EigenSolver<Eigen::MatrixXd>(Eigen::MatrixXd(W), false).eigenvalues();
  a.value_eigenvalues.assign(lambda.data(), lambda.data() + lambda.size());
  std::sort(a.value_eigenvalues.begin(), a.value_eigenvalues.end(),
            [](auto x, auto y) { return x.real() != y.real() ? x.real() > y.real() : x.imag() > y.imag(); });
  return a;
}

ParticleDiagnostics diagnose(const ParticleSystem& system, const Trajectory& trajectory, const DiagnosticOptions& options) {
  TDYN_CHECK(!trajectory.times.empty());
  if (options.every < 1) fail("--diagnose-every must be at least 1, got {}", options.every);
  ParticleDiagnostics out;
  out.assumptions = check_assumptions(system.head);
  const Matrix W = system.head.value_map();
  const auto& x0 = trajectory.x.front();
  const int64_t n = x0.rows(), d = x0.cols();
  const double scale = std::max(max_row_norm(x0), 1e-300);
  // Theorems 2.1 and 3.1 describe the limits of z = e^{-tV} x for the unnormalised dynamics. On the sphere the
  // tokens stay bounded, so z → 0 whenever V has a positive eigenvalue and any count of its levels or vertices
  // would pass without saying anything.
  const bool examine_limits = !system.project_to_sphere;
  const auto directions = examine_limits ? simple_positive_directions(W) : std::vector<EigenDirection>{};
  const EigenDirection* top = top_direction(directions);
  auto level_tolerance = [&](const EigenDirection& e) {
    return options.level_tol * std::max((x0 * e.left).cwiseAbs().maxCoeff(), 1e-300);
  };
  auto cluster_points = [&](size_t k) -> const Matrix& {
    return options.cluster_on == StateVariable::z ? trajectory.z[k] : trajectory.x[k];
  };

  const size_t last = trajectory.times.size() - 1;
  Matrix P_last;
  for (size_t k = 0; k <= last; ++k) {
    if (k % options.every != 0 && k != last) continue;
    const Matrix P = attention_matrix(system.head, trajectory.x[k]);
    const BooleanFit boolean = nearest_boolean(P);
    auto& s = out.series;
    s.time.push_back(trajectory.times[k]);
    s.clusters.push_back(find_clusters(cluster_points(k), options.cluster_tol * scale).count());
    s.rank_P.push_back(numerical_rank(singular_values(P), options.rank_tol));
    s.boolean_distance.push_back(boolean.max_distance);
    s.leaders.push_back(static_cast<int>(boolean.leaders.size()));
    s.uniform_distance.push_back((P.array() - 1.0 / n).abs().maxCoeff());
    s.max_norm_x.push_back(max_row_norm(trajectory.x[k]));
    if (top) s.top_levels.push_back(find_levels(levels_of(trajectory, k, *top), level_tolerance(*top)).count());
    if (k == last) P_last = P;
  }

  FinalDiagnostics& f = out.final;
  const Matrix& x = trajectory.x[last];
  f.time = trajectory.times[last];
  f.scale = scale;
  f.clusters = find_clusters(cluster_points(last), options.cluster_tol * scale);
  f.singular_values_P = singular_values(P_last);
  f.rank_P = numerical_rank(f.singular_values_P, options.rank_tol);
  f.boolean = nearest_boolean(P_last);
  f.uniform_distance = out.series.uniform_distance.back();
  f.max_norm_x = out.series.max_norm_x.back();
  f.directions = directions;
  for (const auto& e : directions) f.levels.push_back(find_levels(levels_of(trajectory, last, e), level_tolerance(e)));

  if (!examine_limits)
    f.limits_not_examined = "the tokens move on the unit sphere: the polytope and hyperplane theorems are about the limits "
                            "of the rescaled tokens of the unnormalised dynamics, which do not apply here";
  const Matrix basis = examine_limits ? polytope_basis(W) : Matrix(d, 0);  // (d × k)
  f.polytope_dim = static_cast<int>(basis.cols());
  if (f.polytope_dim > 0) {
    // Theorem 2.1: each z_i converges to 0 or to a vertex of the polytope spanned by the limits.
    const double top_eigenvalue = (basis.transpose() * W * basis).trace() / f.polytope_dim;
    const Matrix projected = x * basis / trajectory.rescale_factor(top_eigenvalue, f.time);  // Πz (n × k)
    const double tol = options.hull_tol * scale;
    const Clusters limits = find_clusters(projected, options.cluster_tol * scale);
    f.polytope_limits = limits.centres;
    f.hull = hull_vertices(limits.centres, tol);
    for (int64_t i = 0; i < n; ++i) {
      const int c = limits.membership[i];
      const bool at_zero = limits.centres.row(c).norm() <= tol;
      f.token_at_vertex.push_back(f.hull.is_vertex[c]);
      f.token_at_zero.push_back(at_zero);
      if (!f.hull.is_vertex[c] && !at_zero) ++f.tokens_elsewhere;
    }
    // On the top eigenspace d/dt Πz_i = λ1 Σ_j P_ij (Πz_j − Πz_i) points into the hull of the Πz_j, so that
    // hull only shrinks.
    const Matrix projected0 = x0 * basis;
    for (int64_t i = 0; i < n; ++i)
      f.max_distance_to_initial_hull =
          std::max(f.max_distance_to_initial_hull, distance_to_hull(projected0, projected.row(i).transpose()));
  }
  if (d == 1) {
    Eigen::Index lo, hi;
    x.col(0).minCoeff(&lo);
    x.col(0).maxCoeff(&hi);
    f.extreme_tokens = {static_cast<int>(lo), static_cast<int>(hi)};
  }
  return out;
}

nlohmann::json to_json(const ParticleDiagnostics& diag) {
  using nlohmann::json;
  const auto& f = diag.final;
  const auto& a = diag.assumptions;
  auto matrix_json = [](const Matrix& m) {
    json rows = json::array();
    for (int64_t i = 0; i < m.rows(); ++i) rows.push_back(std::vector<double>(m.row(i).data(), m.row(i).data() + m.cols()));
    return rows;
  };
  json eigen = json::array();
  for (auto l : a.value_eigenvalues) eigen.push_back({l.real(), l.imag()});
  json out;
  out["assumptions"] = {{"value_is_identity", a.value_is_identity},
                        {"value_is_minus_identity", a.value_is_minus_identity},
                        {"value_symmetric", a.value_symmetric},
                        {"qk_symmetric", a.qk_symmetric},
                        {"qk_sym_min_eigenvalue", a.qk_min_eigenvalue},
                        {"qk_positive_definite", a.qk_symmetric && a.qk_min_eigenvalue > 0},
                        {"value_eigenvalues_re_im", eigen}};
  json final_json = {{"time", f.time},
                     {"scale_max_initial_norm", f.scale},
                     {"clusters", {{"count", f.clusters.count()},
                                   {"sizes", f.clusters.sizes},
                                   {"membership", f.clusters.membership},
                                   {"centres", matrix_json(f.clusters.centres)}}},
                     {"attention", {{"rank", f.rank_P},
                                    {"singular_values", std::vector<double>(f.singular_values_P.data(), f.singular_values_P.data() + f.singular_values_P.size())},
                                    {"boolean_max_distance", f.boolean.max_distance},
                                    {"boolean_frobenius_distance", f.boolean.frobenius_distance},
                                    {"boolean_rank", f.boolean.leaders.size()},
                                    {"leaders", f.boolean.leaders},
                                    {"followers_per_leader", f.boolean.followers_per_leader},
                                    {"uniform_max_distance", f.uniform_distance}}},
                     {"max_norm_x", f.max_norm_x}};
  json dirs = json::array();
  for (size_t k = 0; k < f.directions.size(); ++k) {
    const auto& e = f.directions[k];
    dirs.push_back({{"eigenvalue", e.eigenvalue},
                    {"is_top", e.is_top},
                    {"left_eigenvector", std::vector<double>(e.left.data(), e.left.data() + e.left.size())},
                    {"level_count", f.levels[k].count()},
                    {"levels", f.levels[k].values},
                    {"membership", f.levels[k].membership}});
  }
  final_json["hyperplanes"] = dirs;
  if (!f.limits_not_examined.empty()) final_json["limits_not_examined"] = f.limits_not_examined;
  if (f.polytope_dim > 0) {
    final_json["polytope"] = {{"eigenspace_dim", f.polytope_dim},
                              {"limits", matrix_json(f.polytope_limits)},
                              {"limit_is_vertex", f.hull.is_vertex},
                              {"limit_distance_to_hull_of_others", f.hull.distance_to_rest},
                              {"token_at_vertex", f.token_at_vertex},
                              {"token_at_zero", f.token_at_zero},
                              {"tokens_elsewhere", f.tokens_elsewhere},
                              {"max_distance_to_initial_hull", f.max_distance_to_initial_hull}};
  }
  if (!f.extreme_tokens.empty()) final_json["extreme_tokens_argmin_argmax"] = f.extreme_tokens;
  out["final"] = final_json;
  const auto& s = diag.series;
  out["series"] = {{"time", s.time},
                   {"clusters", s.clusters},
                   {"rank_P", s.rank_P},
                   {"boolean_distance", s.boolean_distance},
                   {"leaders", s.leaders},
                   {"uniform_distance", s.uniform_distance},
                   {"max_norm_x", s.max_norm_x},
                   {"top_levels", s.top_levels}};
  return out;
}

}  // namespace tdyn::particles
