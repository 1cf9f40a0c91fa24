// What the theorems of Geshkovski et al. (2023) predict about a particle trajectory, measured:
//  - clusters of the rescaled tokens z_i (count, centres, membership) over time;
//  - V = I, QᵀK ≻ 0 (Theorem 2.1): the limits lie at vertices of the convex polytope they span (or at 0);
//  - simple positive top eigenvalue λ1 of V (Theorem 3.1): φ1*(z_i) takes at most 3 values in the limit, so
//    the tokens sit on at most 3 parallel hyperplanes; the same count for every simple positive eigenvalue
//    (intersections of such hyperplanes give the codimension-k pictures of §4);
//  - d = 1 (the paper's Boolean-limit theorem, "leaders"): P(t) tends to a Boolean matrix of rank ≤ 3 whose non-zero columns
//    are the extreme tokens; in general the numerical rank of P(t) and its distance to the nearest 0/1 matrix;
//  - V = −I: x → 0 and P → the uniform matrix 1/n.
// All tolerances are relative to the scale of the initial tokens so that they do not depend on units.
#pragma once

#include <cmath>
#include <complex>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/particles/dynamics.h"

namespace tdyn::particles {

// Single-linkage clusters: two points share a cluster when a chain of points, each within `tolerance` of the
// next, joins them. Centres are the cluster means (count × d); clusters are numbered by their first point.
struct Clusters {
  std::vector<int> membership;  // (n)
  Matrix centres;               // (count × d)
  std::vector<int> sizes;       // (count)
  int count() const { return static_cast<int>(sizes.size()); }
};
Clusters find_clusters(const Matrix& points, double tolerance);

// One-dimensional clusters of values (same rule as find_clusters); levels ascending.
struct Levels {
  std::vector<double> values;   // level centres, ascending
  std::vector<int> membership;  // (n) index into values
  int count() const { return static_cast<int>(values.size()); }
};
Levels find_levels(const std::vector<double>& values, double tolerance);

// Euclidean distance from p to the convex hull of the rows of `points` (Wolfe's minimum-norm-point algorithm,
// exact up to rounding). Infinity when there are no points.
double distance_to_hull(const Matrix& points, const Vector& p);

// For each row: its distance to the convex hull of the other rows; a row is a vertex when that is > tolerance.
struct HullVertices {
  std::vector<double> distance_to_rest;
  std::vector<bool> is_vertex;
};
HullVertices hull_vertices(const Matrix& points, double tolerance);

// Singular values of M, descending (LAPACK dgesdd).
Vector singular_values(const Matrix& M);
// Number of singular values above relative_tolerance · σ_max.
int numerical_rank(const Vector& singular_values, double relative_tolerance);

// Nearest 0/1 matrix (entrywise rounding) and the leaders: the tokens that some token attends to with weight
// > 1/2, i.e. the non-zero columns of the rounded matrix. Each rounded row has at most one 1 (the row sums to
// one), so the rank of the rounded matrix equals the number of leaders.
struct BooleanFit {
  double max_distance = 0;        // max_ij |P_ij − B_ij|
  double frobenius_distance = 0;  // ‖P − B‖_F
  std::vector<int> leaders;       // ascending token indices
  std::vector<int> followers_per_leader;
};
BooleanFit nearest_boolean(const Matrix& P);

// Simple, real, positive eigenvalues λ of W (descending) with their left eigenvectors φ (φᵀW = λφᵀ, ‖φ‖ = 1):
// the linear forms φ*(z) of Theorem 3.1. `is_top` marks the one that is also the top eigenvalue by real part.
struct EigenDirection {
  double eigenvalue = 0;
  Vector left;  // (d)
  bool is_top = false;
};
std::vector<EigenDirection> simple_positive_directions(const Matrix& W);

// Orthonormal basis (d × k) of the top eigenspace of a symmetric W when its top eigenvalue is positive and
// repeated k ≥ 2 times or k = d (W = I: all of ℝ^d); an empty matrix otherwise.
Matrix polytope_basis(const Matrix& W);

struct DiagnosticOptions {
  StateVariable cluster_on = StateVariable::z;  // cluster the rescaled tokens (the paper's limits) or x
  double cluster_tol = 1e-2;  // × max_i ‖x_i(0)‖
  double level_tol = 1e-2;    // × max_i |φ*(x_i(0))|
  double hull_tol = 1e-2;     // × max_i ‖x_i(0)‖: vertex test and "limit is 0"
  double rank_tol = 1e-6;     // relative to σ_max(P)
  int every = 1;              // diagnose every k-th saved time (the last one always)
};

// Time series, one entry per diagnosed time.
struct DiagnosticSeries {
  std::vector<double> time;
  std::vector<int> clusters;
  std::vector<int> rank_P;
  std::vector<double> boolean_distance;  // max-entry distance of P to the nearest 0/1 matrix
  std::vector<int> leaders;
  std::vector<double> uniform_distance;  // max_ij |P_ij − 1/n|
  std::vector<double> max_norm_x;        // max_i ‖x_i‖
  std::vector<int> top_levels;           // distinct φ1*(z) values (empty when λ1 is not simple, real, positive)
};

struct FinalDiagnostics {
  double time = 0;
  double scale = 0;  // max_i ‖x_i(0)‖: the unit of the tolerances
  Clusters clusters;
  Vector singular_values_P;
  int rank_P = 0;
  BooleanFit boolean;
  double uniform_distance = 0, max_norm_x = 0;
  std::vector<EigenDirection> directions;
  std::vector<Levels> levels;  // per direction, of φ*(z_i(T))
  // Polytope test (Theorem 2.1 for V = I; its product form for a symmetric V whose top eigenvalue λ1 > 0 is
  // repeated k ≥ 2 times, or k = d): the rescaled tokens projected on the top eigenspace (k coordinates) are
  // clustered; each limit should be a vertex of the hull of the limits, or 0. polytope_dim = k, 0 = not run.
  int polytope_dim = 0;
  Matrix polytope_limits;  // cluster centres in eigenspace coordinates (count × k)
  HullVertices hull;
  std::vector<bool> token_at_vertex, token_at_zero;
  int tokens_elsewhere = 0;  // neither at a vertex nor at 0 (Theorem 2.1 predicts none)
  int tokens_elsewhere_initially = 0;  // the same count for the initial tokens (the control)
  double max_distance_to_initial_hull = 0;  // the projected hull only shrinks: Πz_i(T) ∈ conv{Πx_j(0)}
  // d = 1 only: the extreme tokens (argmin, argmax of x(T)), the only possible leaders.
  std::vector<int> extreme_tokens;
  // Why the limits of the rescaled tokens (polytope, hyperplanes) were not examined; empty when they were.
  std::string limits_not_examined;
};

// Facts about the weights that decide which theorem applies (recorded beside the results).
struct Assumptions {
  bool value_is_identity = false, value_is_minus_identity = false, value_symmetric = false;
  bool qk_symmetric = false;
  double qk_min_eigenvalue = 0;  // of the symmetric part of QᵀK; > 0 means QᵀK ≻ 0 on its symmetric part
  std::vector<std::complex<double>> value_eigenvalues;  // of W, by descending real part
};
Assumptions check_assumptions(const AttentionHead& head);

// One claim of the paper judged on this run. Which statement applies is read off the run the way the paper's
// theorems are stated, first match wins:
//   sphere       tokens kept on the unit sphere (the LayerNorm idealisation, §6): the tokens x themselves
//                cluster (the rescaled z only shrink to 0 there, so counting their clusters proves nothing);
//   collapse     W = −I (§6): x → 0, one point cluster at the origin, and P → 1/n;
//   polytope     symmetric W whose top eigenvalue λ1 > 0 is repeated k ≥ 2 times or W = λ1 I (Theorem 2.1, and
//                its product form polytope × subspace): every limit of Πz is a vertex of their hull, or 0;
//   codim-k      symmetric W with 2 ≤ k < d positive eigenvalues, all simple, the others negative (§4): each
//                positive direction φ_j has at most 3 levels of φ_j*(z), so the tokens end on intersections of
//                hyperplanes of codimension k;
//   hyperplanes  a simple, real, positive top eigenvalue (Theorem 3.1): at most 3 levels of φ1*(z);
//   none         otherwise, and whenever a feed-forward term is added: no theorem of the paper applies.
// The control is the same measure on the initial tokens: a prediction that already holds at t = 0 says nothing
// about the dynamics, so it is "shown", never passed.
struct ClaimVerdict {
  std::string claim;      // stable id: "clusters" (the theorem for this V), "boolean" (P(t) → a 0/1 matrix),
                          //   "leaders" (its leaders are extreme tokens, d = 1), "rank" (rank P(t) ≤ 3, d = 1)
  std::string theorem;    // sphere, collapse, polytope, codim-k, hyperplanes, boolean, one-dimensional, none
  std::string statement;  // the prediction for this run, in words
  std::string measure;    // what value and control are
  double value = NAN;     // the measure at T
  double control = NAN;   // the same measure at t = 0
  std::string rule;       // how the verdict follows from value (and control)
  std::string verdict;    // "pass", "differs" or "shown"
  std::string note;       // why "shown", or what else was measured

  // results.json's entry (under paper "004"), which the report shows as written.
  nlohmann::json to_json() const;
  static ClaimVerdict from_json(const nlohmann::json& j);  // throws Error naming a key absent or of the wrong type
};

struct ParticleDiagnostics {
  DiagnosticSeries series;
  FinalDiagnostics final;
  Assumptions assumptions;
  std::vector<ClaimVerdict> verdicts;  // clusters, boolean, leaders, rank
};

ParticleDiagnostics diagnose(const ParticleSystem& system, const Trajectory& trajectory, const DiagnosticOptions& options);

nlohmann::json to_json(const ParticleDiagnostics& diagnostics);

}  // namespace tdyn::particles
