// Diagnostics of particle trajectories against the predictions of Geshkovski et al. (2023).
#include "analysis/particles/diagnostics.h"

#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>
#include <Eigen/Eigenvalues>
#include <Eigen/QR>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_number.h"

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

// Theorem 2.1's test on the tokens projected on the top eigenspace (n × k): cluster them into limits; a token
// passes when its limit is a vertex of the hull of the limits, or 0.
struct PolytopeTest {
  Clusters limits;
  HullVertices hull;
  std::vector<bool> at_vertex, at_zero;
  int elsewhere = 0;  // tokens neither at a vertex nor at 0
};
PolytopeTest polytope_test(const Matrix& projected, double cluster_tol, double hull_tol) {
  PolytopeTest out;
  out.limits = find_clusters(projected, cluster_tol);
  out.hull = hull_vertices(out.limits.centres, hull_tol);
  for (int c : out.limits.membership) {
    const bool at_zero = out.limits.centres.row(c).norm() <= hull_tol;
    out.at_vertex.push_back(out.hull.is_vertex[c]);
    out.at_zero.push_back(at_zero);
    if (!out.hull.is_vertex[c] && !at_zero) ++out.elsewhere;
  }
  return out;
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

namespace {

// The pattern of every verdict: a prediction that fails at T differs; one that holds at T but already held for
// the initial tokens says nothing about the dynamics and is only shown; otherwise it passes.
void judge(ClaimVerdict& v, bool holds_at_end, bool holds_initially) {
  if (!holds_at_end) {
    v.verdict = "differs";
  } else if (holds_initially) {
    v.verdict = "shown";
    v.note += std::string(v.note.empty() ? "" : "; ") + "the prediction already holds for the initial tokens, so it says "
                                                        "nothing about the dynamics";
  } else {
    v.verdict = "pass";
  }
}

void not_judged(ClaimVerdict& v, const std::string& why) {
  v.rule = "shown, not judged" + (why.empty() ? "" : ": " + why);
  v.verdict = "shown";
}

// Symmetric W with k ≥ 2 positive eigenvalues, all simple, at least one negative and none at 0 (the
// codimension-k picture of §4). With no negative eigenvalue (a PSD W, the lowrank preset) only the top direction
// is judged (Theorem 3.1): the small positive eigenvalues' levels merge on far longer time scales.
bool codimension_k(const Assumptions& a, const std::vector<EigenDirection>& directions) {
  if (!a.value_symmetric || a.value_eigenvalues.empty()) return false;
  double scale = 1;
  for (auto l : a.value_eigenvalues) scale = std::max(scale, std::abs(l));
  const double separation = 1e-8 * scale;  // as simple_positive_directions
  size_t positive = 0;
  for (auto l : a.value_eigenvalues) {
    if (std::abs(l.real()) <= separation) return false;
    if (l.real() > 0) ++positive;
  }
  return positive >= 2 && positive < a.value_eigenvalues.size() && directions.size() == positive;
}

std::string qk_note(const Assumptions& a) {
  return a.qk_symmetric && a.qk_min_eigenvalue > 0
             ? ""
             : "QᵀK is not symmetric positive definite, which the theorem assumes (the paper's experiments show the same "
               "picture without it)";
}

// The tolerance within which values of φ*(z) along e are one level: level_tol of the largest |φ*(x_i(0))|.
double level_tolerance(const Trajectory& trajectory, const EigenDirection& e, const DiagnosticOptions& options) {
  return options.level_tol * std::max((trajectory.x.front() * e.left).cwiseAbs().maxCoeff(), 1e-300);
}

// The levels of φ*(z) along direction e among the initial tokens: the verdicts' control.
int64_t initial_levels(const Trajectory& tr, const EigenDirection& e, const DiagnosticOptions& o) {
  return find_levels(levels_of(tr, 0, e), level_tolerance(tr, e, o)).count();
}

// Where no theorem applies: the clusters at T against those at t = 0, shown.
ClaimVerdict clusters_shown(const ParticleDiagnostics& d, const DiagnosticOptions& o, const std::string& statement) {
  ClaimVerdict v;
  v.theorem = "none";
  v.statement = statement;
  v.measure = "clusters of " + to_string(o.cluster_on);
  v.value = d.final.clusters.count();
  v.control = d.series.clusters.front();
  not_judged(v, "");
  return v;
}

ClaimVerdict sphere_verdict(const Trajectory& tr, const ParticleDiagnostics& d, const DiagnosticOptions& o) {
  // On the sphere z = R(t)⁻¹x only shrinks to 0 (or blows up), so the tokens themselves are counted, whatever
  // --cluster-on says.
  const double tol = o.cluster_tol * d.final.scale;
  ClaimVerdict v;
  v.theorem = "sphere";
  v.statement = "On the unit sphere (the LayerNorm idealisation) the tokens themselves gather into a few clusters.";
  v.measure = "clusters of the tokens x (single linkage within cluster_tol · max‖x_i(0)‖)";
  v.value = find_clusters(tr.x.back(), tol).count();
  v.control = find_clusters(tr.x.front(), tol).count();
  if (!d.assumptions.value_is_identity || !d.assumptions.qk_symmetric || !(d.assumptions.qk_min_eigenvalue > 0)) {
    // The paper proves clustering on the sphere for V = I and a symmetric positive definite QᵀK; a head with
    // its own Q, K, V (a real model's) is outside every theorem, so its count is shown, not judged.
    not_judged(v, "the clustering on the sphere is proved for V = I and a symmetric positive definite QᵀK; this head's "
                  "V or QᵀK is not of that form");
  } else {
    const int64_t n = tr.x.front().rows();
    v.rule = "pass when x has at most n/2 clusters at T and more than n/2 at t = 0";
    judge(v, 2 * v.value <= n, 2 * v.control <= n);
  }
  return v;
}

ClaimVerdict collapse_verdict(const FinalDiagnostics& f) {
  ClaimVerdict v;
  v.theorem = "collapse";
  v.statement = "V = −I: the tokens collapse to one point cluster at the origin and P tends to the uniform matrix 1/n.";
  v.measure = "max‖x_i(T)‖ / max‖x_i(0)‖";
  v.value = f.max_norm_x / f.scale;
  v.control = 1;
  v.note = fmt::format("max|P(T) − 1/n| = {:.3g}", f.uniform_distance);
  v.rule = "pass when the largest token norm has fallen below 0.1 of its initial value and max|P(T) − 1/n| < 0.05";
  judge(v, v.value <= 0.1 && f.uniform_distance < 0.05, false);
  return v;
}

ClaimVerdict polytope_verdict(const Trajectory& tr, const ParticleDiagnostics& d) {
  const FinalDiagnostics& f = d.final;
  const bool whole = f.polytope_dim == tr.x.front().cols();
  ClaimVerdict v;
  v.theorem = "polytope";
  v.statement = whole ? "Theorem 2.1 (V = λI, QᵀK ≻ 0): every rescaled token z_i converges to a vertex of the convex polytope "
                        "spanned by the limits, or to 0."
                      : fmt::format("Theorem 2.1 in product form (top eigenvalue of V repeated {} times): the rescaled tokens "
                                    "projected on its eigenspace converge to vertices of the polytope of their limits, or to 0.",
                                    f.polytope_dim);
  v.measure = "tokens whose limit is neither a vertex of the hull of the limits nor 0";
  v.value = f.tokens_elsewhere;
  v.control = f.tokens_elsewhere_initially;
  v.rule = "pass when no token is elsewhere at T (results.final.polytope.tokens_elsewhere = 0) and some are at t = 0";
  v.note = qk_note(d.assumptions);
  judge(v, f.tokens_elsewhere == 0, f.tokens_elsewhere_initially == 0);
  return v;
}

ClaimVerdict codimension_verdict(const Trajectory& tr, const ParticleDiagnostics& d, const DiagnosticOptions& o) {
  const FinalDiagnostics& f = d.final;
  ClaimVerdict v;
  v.theorem = "codim-k";
  v.statement = fmt::format("V symmetric with {} simple positive eigenvalues and the rest negative: each positive direction φ_j "
                            "has at most 3 levels of φ_j*(z), so the tokens end on intersections of hyperplanes of "
                            "codimension {}.",
                            f.directions.size(), f.directions.size());
  v.measure = "the largest number of levels of φ_j*(z) over the positive directions";
  v.value = v.control = 0;
  for (size_t k = 0; k < f.directions.size(); ++k) {
    v.value = std::max<double>(v.value, f.levels[k].count());
    v.control = std::max<double>(v.control, initial_levels(tr, f.directions[k], o));
  }
  v.rule = "pass when every positive direction has at most 3 levels at T (results.final.hyperplanes[j].level_count) and "
           "some direction has more at t = 0";
  v.note = qk_note(d.assumptions);
  judge(v, v.value <= 3, v.control <= 3);
  return v;
}

ClaimVerdict hyperplanes_verdict(const Trajectory& tr, const ParticleDiagnostics& d, const DiagnosticOptions& o,
                                 const EigenDirection& top) {
  const FinalDiagnostics& f = d.final;
  ClaimVerdict v;
  v.theorem = "hyperplanes";
  v.statement = "Theorem 3.1 (simple positive top eigenvalue λ1 of V): φ1*(z) takes at most 3 values, so the tokens end on at "
                "most 3 parallel hyperplanes.";
  v.measure = fmt::format("levels of φ1*(z) (λ1 = {:.4g})", top.eigenvalue);
  v.value = f.levels[static_cast<size_t>(&top - f.directions.data())].count();
  v.control = initial_levels(tr, top, o);
  v.rule = "pass when the top direction has at most 3 levels at T (results.final.hyperplanes[is_top].level_count) and more "
           "at t = 0";
  v.note = qk_note(d.assumptions);
  judge(v, v.value <= 3, v.control <= 3);
  return v;
}

// The theorem that applies to this V (and sphere, feed-forward term) decides the rule.
ClaimVerdict clustering_verdict(const ParticleSystem& system, const Trajectory& tr, const ParticleDiagnostics& d,
                                const DiagnosticOptions& o) {
  ClaimVerdict v;
  if (system.ffn)
    v = clusters_shown(d, o, "With a feed-forward term no theorem of the paper applies (its experiments show clusters persisting).");
  else if (system.project_to_sphere)
    v = sphere_verdict(tr, d, o);
  else if (d.assumptions.value_is_minus_identity)
    v = collapse_verdict(d.final);
  else if (d.final.polytope_dim > 0)
    v = polytope_verdict(tr, d);
  else if (codimension_k(d.assumptions, d.final.directions))
    v = codimension_verdict(tr, d, o);
  else if (const EigenDirection* top = top_direction(d.final.directions))
    v = hyperplanes_verdict(tr, d, o, *top);
  else
    v = clusters_shown(d, o, "No theorem of the paper covers this V (no simple positive top eigenvalue, no repeated one of a "
                             "symmetric V, not −I).");
  v.claim = "clusters";
  return v;
}

// P(t) → a 0/1 matrix with a few leaders: proved for d = 1 and V > 0, seen in the paper's experiments beyond.
// A near-uniform P is also within 1/n of a 0/1 matrix (the zero matrix), so a leader is required too.
ClaimVerdict boolean_verdict(const ParticleSystem& system, const ParticleDiagnostics& d, const BooleanFit& initial) {
  const FinalDiagnostics& f = d.final;
  ClaimVerdict v;
  v.claim = "boolean";
  v.theorem = "boolean";
  v.statement = "The attention matrix P(t) becomes Boolean: 0/1 rows pointing at a few leaders.";
  v.measure = "max|P − B| to the nearest 0/1 matrix B";
  v.value = f.boolean.max_distance;
  v.control = d.series.boolean_distance.front();
  v.rule = "pass when max|P(T) − B| < 0.05 with at least one leader (results.final.attention.boolean_max_distance, boolean_rank), "
           "and not already at t = 0";
  v.note = fmt::format("{} leaders, rank P(T) = {}", f.boolean.leaders.size(), f.rank_P);
  if (d.assumptions.value_is_minus_identity && !system.project_to_sphere) {
    not_judged(v, "for V = −I the paper predicts P → 1/n instead (the clusters claim)");
    return v;
  }
  judge(v, f.boolean.max_distance < 0.05 && !f.boolean.leaders.empty(), initial.max_distance < 0.05 && !initial.leaders.empty());
  return v;
}

// The one-dimensional theorem (d = 1, V > 0, QᵀK > 0): P(t) tends to a Boolean matrix whose leaders (non-zero
// columns) are extreme tokens of the sequence, argmin or argmax (the order on the line is kept), and whose rank is
// at most 3. Outside it the two measures are shown, not judged.
bool one_dimensional_theorem(const ParticleSystem& system, const Trajectory& tr) {
  return tr.x.front().cols() == 1 && system.head.value_map()(0, 0) > 0 && !system.project_to_sphere && !system.ffn;
}

// Leaders of P(X) that are not argmin/argmax of X(0) (1-D only).
int leaders_not_extreme(const BooleanFit& fit, const Matrix& x0) {
  Eigen::Index lo, hi;
  x0.col(0).minCoeff(&lo);
  x0.col(0).maxCoeff(&hi);
  int count = 0;
  for (int j : fit.leaders) count += j != lo && j != hi;
  return count;
}

ClaimVerdict leaders_verdict(const ParticleSystem& system, const Trajectory& tr, const ParticleDiagnostics& d,
                             const BooleanFit& initial) {
  const FinalDiagnostics& f = d.final;
  ClaimVerdict v;
  v.claim = "leaders";
  v.theorem = "one-dimensional";
  v.statement = "The leaders of the Boolean limit of P(t) are extreme tokens of the sequence (d = 1).";
  v.measure = "leaders of P (tokens attended with weight > 1/2) that are neither argmin nor argmax of x(0)";
  v.note = fmt::format("{} leaders at T, {} at t = 0", f.boolean.leaders.size(), initial.leaders.size());
  if (tr.x.front().cols() == 1) {  // extreme tokens exist on a line only; elsewhere value and control stay NaN
    v.value = leaders_not_extreme(f.boolean, tr.x.front());
    v.control = leaders_not_extreme(initial, tr.x.front());
  }
  if (!one_dimensional_theorem(system, tr)) {
    not_judged(v, "the theorem is for d = 1, V > 0");
    return v;
  }
  v.rule = "pass when P(T) has at least one leader and every leader is an extreme token, and not already at t = 0";
  judge(v, !f.boolean.leaders.empty() && v.value == 0, !initial.leaders.empty() && v.control == 0);
  return v;
}

ClaimVerdict rank_verdict(const ParticleSystem& system, const Trajectory& tr, const ParticleDiagnostics& d,
                          const Matrix& P0, const DiagnosticOptions& o) {
  ClaimVerdict v;
  v.claim = "rank";
  v.theorem = "one-dimensional";
  v.statement = "The attention matrix P(t) tends to low rank: at most 3 (d = 1).";
  v.measure = "numerical rank of P (singular values above rank_tol · σ_max)";
  v.value = d.final.rank_P;
  v.control = numerical_rank(singular_values(P0), o.rank_tol);
  if (!one_dimensional_theorem(system, tr)) {
    not_judged(v, "the rank bound is proved for d = 1, V > 0");
    return v;
  }
  v.rule = "pass when rank P(T) ≤ 3 and rank P(0) > 3";
  judge(v, v.value <= 3, v.control <= 3);
  return v;
}

const Matrix& cluster_points(const Trajectory& trajectory, const DiagnosticOptions& options, size_t k) {
  return options.cluster_on == StateVariable::z ? trajectory.z[k] : trajectory.x[k];
}

// The series at every options.every-th time and the last; P_last gets P at the last time.
DiagnosticSeries diagnostic_series(const ParticleSystem& system, const Trajectory& trajectory, const DiagnosticOptions& options,
                                   const EigenDirection* top, double scale, Matrix& P_last) {
  const int64_t n = trajectory.x.front().rows();
  const size_t last = trajectory.times.size() - 1;
  DiagnosticSeries s;
  for (size_t k = 0; k <= last; ++k) {
    if (k % options.every != 0 && k != last) continue;
    const Matrix P = attention_matrix(system.head, trajectory.x[k]);
    const BooleanFit boolean = nearest_boolean(P);
    s.time.push_back(trajectory.times[k]);
    s.clusters.push_back(find_clusters(cluster_points(trajectory, options, k), options.cluster_tol * scale).count());
    s.rank_P.push_back(numerical_rank(singular_values(P), options.rank_tol));
    s.boolean_distance.push_back(boolean.max_distance);
    s.leaders.push_back(static_cast<int>(boolean.leaders.size()));
    s.uniform_distance.push_back((P.array() - 1.0 / n).abs().maxCoeff());
    s.max_norm_x.push_back(max_row_norm(trajectory.x[k]));
    if (top) s.top_levels.push_back(find_levels(levels_of(trajectory, k, *top), level_tolerance(trajectory, *top, options)).count());
    if (k == last) P_last = P;
  }
  return s;
}

// Theorem 2.1: each z_i converges to 0 or to a vertex of the polytope spanned by the limits, on the top eigenspace
// of W (`basis`, d × k).
void test_polytope(FinalDiagnostics& f, const Trajectory& trajectory, const Matrix& W, const Matrix& basis, const DiagnosticOptions& options) {
  const Matrix& x0 = trajectory.x.front();
  const double top_eigenvalue = (basis.transpose() * W * basis).trace() / f.polytope_dim;
  const Matrix projected = trajectory.x.back() * basis / trajectory.rescale_factor(top_eigenvalue, f.time);  // Πz (n × k)
  PolytopeTest test = polytope_test(projected, options.cluster_tol * f.scale, options.hull_tol * f.scale);
  f.polytope_limits = std::move(test.limits.centres);
  f.hull = std::move(test.hull);
  f.token_at_vertex = std::move(test.at_vertex);
  f.token_at_zero = std::move(test.at_zero);
  f.tokens_elsewhere = test.elsewhere;
  // The control: the same test on the initial tokens (z(0) = x(0)), most of which lie inside their hull.
  f.tokens_elsewhere_initially = polytope_test(x0 * basis, options.cluster_tol * f.scale, options.hull_tol * f.scale).elsewhere;
  // On the top eigenspace d/dt Πz_i = λ1 Σ_j P_ij (Πz_j − Πz_i) points into the hull of the Πz_j, so that
  // hull only shrinks.
  const Matrix projected0 = x0 * basis;
  for (Eigen::Index i = 0; i < projected.rows(); ++i)
    f.max_distance_to_initial_hull = std::max(f.max_distance_to_initial_hull, distance_to_hull(projected0, projected.row(i).transpose()));
}

}  // namespace

ParticleDiagnostics diagnose(const ParticleSystem& system, const Trajectory& trajectory, const DiagnosticOptions& options) {
  TDYN_CHECK(!trajectory.times.empty());
  if (options.every < 1) fail("--diagnose-every must be at least 1, got {}", options.every);
  ParticleDiagnostics out;
  out.assumptions = check_assumptions(system.head);
  const Matrix W = system.head.value_map();
  const auto& x0 = trajectory.x.front();
  const int64_t d = x0.cols();
  const double scale = std::max(max_row_norm(x0), 1e-300);
  // Theorems 2.1 and 3.1 describe the limits of z = e^{-tV} x for the unnormalised dynamics. On the sphere the
  // tokens stay bounded, so z → 0 whenever V has a positive eigenvalue and any count of its levels or vertices
  // would pass without saying anything.
  const bool examine_limits = !system.project_to_sphere;
  const auto directions = examine_limits ? simple_positive_directions(W) : std::vector<EigenDirection>{};
  Matrix P_last;
  out.series = diagnostic_series(system, trajectory, options, top_direction(directions), scale, P_last);

  FinalDiagnostics& f = out.final;
  const size_t last = trajectory.times.size() - 1;
  const Matrix& x = trajectory.x[last];
  f.time = trajectory.times[last];
  f.scale = scale;
  f.clusters = find_clusters(cluster_points(trajectory, options, last), options.cluster_tol * scale);
  f.singular_values_P = singular_values(P_last);
  f.rank_P = numerical_rank(f.singular_values_P, options.rank_tol);
  f.boolean = nearest_boolean(P_last);
  f.uniform_distance = out.series.uniform_distance.back();
  f.max_norm_x = out.series.max_norm_x.back();
  f.directions = directions;
  for (const auto& e : directions) f.levels.push_back(find_levels(levels_of(trajectory, last, e), level_tolerance(trajectory, e, options)));

  if (!examine_limits)
    f.limits_not_examined = "the tokens move on the unit sphere: the polytope and hyperplane theorems are about the limits "
                            "of the rescaled tokens of the unnormalised dynamics, which do not apply here";
  const Matrix basis = examine_limits ? polytope_basis(W) : Matrix(d, 0);  // (d × k)
  f.polytope_dim = static_cast<int>(basis.cols());
  if (f.polytope_dim > 0) test_polytope(f, trajectory, W, basis, options);
  if (d == 1) {
    Eigen::Index lo, hi;
    x.col(0).minCoeff(&lo);
    x.col(0).maxCoeff(&hi);
    f.extreme_tokens = {static_cast<int>(lo), static_cast<int>(hi)};
  }
  // The controls of the attention claims: P at t = 0.
  const Matrix P0 = attention_matrix(system.head, trajectory.x.front());
  const BooleanFit initial = nearest_boolean(P0);
  out.verdicts = {clustering_verdict(system, trajectory, out, options), boolean_verdict(system, out, initial),
                  leaders_verdict(system, trajectory, out, initial), rank_verdict(system, trajectory, out, P0, options)};
  return out;
}

nlohmann::json ClaimVerdict::to_json() const {
  return {{"paper", "004"}, {"claim", claim}, {"theorem", theorem}, {"statement", statement}, {"measure", measure}, {"value", value},
          {"control", control}, {"rule", rule}, {"verdict", verdict}, {"note", note}};
}

ClaimVerdict ClaimVerdict::from_json(const nlohmann::json& j) {
  ClaimVerdict v;
  v.claim = string_at(j, "claim"), v.theorem = string_at(j, "theorem"), v.statement = string_at(j, "statement");
  v.measure = string_at(j, "measure"), v.value = number_at(j, "value"), v.control = number_at(j, "control");
  v.rule = string_at(j, "rule"), v.verdict = string_at(j, "verdict"), v.note = string_at(j, "note");
  return v;
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
                              {"tokens_elsewhere_initially", f.tokens_elsewhere_initially},
                              {"max_distance_to_initial_hull", f.max_distance_to_initial_hull}};
  }
  if (!f.extreme_tokens.empty()) final_json["extreme_tokens_argmin_argmax"] = f.extreme_tokens;
  out["final"] = final_json;
  // The report reads these as they are (docs/report.md): the rule is decided here, beside the numbers.
  json verdicts = json::array();
  for (const auto& v : diag.verdicts) verdicts.push_back(v.to_json());
  out["verdicts"] = verdicts;
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
