// Boundaries, per-boundary topology, the topology–dynamics coupling
// and graph layout; see topology_analysis.h.
#include "analysis/topology/topology_analysis.h"

#include <igraph/igraph.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>

#include "core/error.h"
#include "kernels/serial_blas.h"

namespace tdyn {

using linalg::Matrix;
using topology::CorrelationAccumulator;

// ---- One boundary ------------------------------------------------------------------------------------------------

std::vector<double> BoundaryTopology::boundary_score() const {
  std::vector<double> score = scores.participation;
  for (size_t i = 0; i < score.size(); ++i)
    if (constant_unit[i]) score[i] = std::numeric_limits<double>::quiet_NaN();
  return score;
}

BoundaryTopology analyse_boundary(const topology::CorrelationMatrix& correlation, const GraphOptions& options) {
  BoundaryTopology t;
  t.graph = options.threshold > 0 ? topology::threshold_graph(correlation, options.threshold)
                                  : topology::top_k_graph(correlation, options.top_k);
  for (const auto& e : t.graph.edges) (e.weight > 0 ? t.n_positive_edges : t.n_negative_edges)++;
  t.partition = topology::signed_leiden(t.graph, options.leiden);
  t.community_sizes.assign(t.partition.n_communities, 0);
  for (int64_t c : t.partition.membership) ++t.community_sizes[c];
  t.scores = topology::boundary_scores(t.graph, t.partition.membership, options.boundary_edges);
  t.n_bridge_nodes = std::count(t.scores.bridges_communities.begin(), t.scores.bridges_communities.end(), true);
  t.constant_unit.assign(correlation.n_units, false);
  for (int64_t u : correlation.constant_units) t.constant_unit[u] = true;
  for (const auto& point : topology::gamma_scan(t.graph, options.gamma_scan, options.leiden))
    t.scan.push_back({point.resolution, point.n_communities, point.quality,
                      correlation.n_units > 0 ? topology::normalized_mutual_information(point.membership, t.partition.membership) : 1.0});
  return t;
}

// ---- Coupling -------------------------------------------------------------------------------------------------

namespace {

// p for the BH decision; a NaN p (constant boundary scores or gains: no ranking to test) counts as no evidence.
double decision_p_value(const topology::SpearmanTest& test, bool permutation) {
  const double p = permutation ? test.p_permutation : test.p_parametric;
  return std::isnan(p) ? 1.0 : p;
}

double rank_correlation_or_nan(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<double> a, b;
  for (size_t i = 0; i < x.size(); ++i)
    if (std::isfinite(x[i]) && std::isfinite(y[i])) a.push_back(x[i]), b.push_back(y[i]);
  if (a.size() < 3) return std::numeric_limits<double>::quiet_NaN();
  return topology::spearman_correlation(a, b);
}

// Spearman over layers of ρ with the departure from normality, layers with a NaN left out; its permutations
// use seed − 1 so that they never share a stream with a layer's (seed + i).
topology::SpearmanTest sign_rule_test(const std::vector<double>& rho, const std::vector<double>& departure, const CouplingOptions& options) {
  std::vector<double> a, b;
  for (size_t i = 0; i < rho.size(); ++i)
    if (std::isfinite(rho[i]) && std::isfinite(departure[i])) a.push_back(rho[i]), b.push_back(departure[i]);
  topology::SpearmanTest t;
  t.n = static_cast<int64_t>(a.size());
  if (a.size() < 3) {
    t.rho = t.p_parametric = t.p_permutation = std::numeric_limits<double>::quiet_NaN();
    return t;
  }
  return topology::spearman_test(a, b, options.permutations, options.seed - 1);
}

}  // namespace

LayerCoupling layer_coupling(const Matrix& j, const std::vector<double>& score, size_t layer, const CouplingOptions& options) {
  const int64_t d = static_cast<int64_t>(score.size());
  if (j.rows() != d || j.cols() != d)
    fail("coupling: layer {} has {} boundary scores but a {} × {} mean Jacobian", layer, d, j.rows(), j.cols());
  LayerCoupling c;
  const linalg::Vector column_norm = j.colwise().norm().transpose(), row_norm = j.rowwise().norm();
  std::vector<double> x, column_gain, row_gain;
  for (int64_t i = 0; i < d; ++i) {
    c.log_column_gain.push_back(std::log(column_norm[i]));
    c.log_row_gain.push_back(std::log(row_norm[i]));
    if (std::isnan(score[i])) continue;
    x.push_back(score[i]);
    column_gain.push_back(column_norm[i]);  // ranks of ‖·‖ = ranks of log‖·‖
    row_gain.push_back(row_norm[i]);
  }
  c.n_nodes = static_cast<int64_t>(x.size());
  if (c.n_nodes < 3) fail("coupling: layer {} has {} nodes with a boundary score; needs at least 3", layer, c.n_nodes);
  const uint64_t seed = options.seed + layer;
  c.column.test = topology::spearman_test(x, column_gain, options.permutations, seed);
  c.row.test = topology::spearman_test(x, row_gain, options.permutations, seed);
  if (!options.known_normality.empty()) {
    const MapNormality& known = options.known_normality.at(layer);
    const double norm = j.norm();
    if (!(std::abs(norm - known.frobenius_norm) <= 1e-12 * known.frobenius_norm))
      fail("coupling: layer {}'s mean Jacobian has Frobenius norm {} here, {} where its normality was measured: not the same "
           "mean Jacobian (another pass, positions or ablation)", layer, norm, known.frobenius_norm);
    c.normalized_departure = known.departure;
    c.symmetry_index = known.symmetry_index;
    c.complex_fraction = known.complex_fraction;
    return c;
  }
  // Only the Schur form's departure, the symmetry index and the complex share are read: no singular vectors.
  const OperatorMetrics metrics = operator_metrics(j, {.alignment_ks = {}});
  c.normalized_departure = metrics.departure.schur_normalized;
  c.symmetry_index = metrics.symmetry_index;
  c.complex_fraction = metrics.complex_fraction;
  return c;
}

namespace {

void append_numbers(std::vector<double>& out, const topology::SpearmanTest& t) {
  out.insert(out.end(), {static_cast<double>(t.n), t.rho, t.p_parametric, t.p_permutation});
}

topology::SpearmanTest read_spearman_test(NumberReader& in) {
  topology::SpearmanTest t;
  t.n = in.index(), t.rho = in.next(), t.p_parametric = in.next(), t.p_permutation = in.next();
  return t;
}

}  // namespace

// The tests and normality first, then the gains, each list after its length. The decision's fields (p_adjusted,
// significant, coupled) are decide_coupling's, not sent.
void append_numbers(std::vector<double>& out, const LayerCoupling& c) {
  out.push_back(static_cast<double>(c.n_nodes));
  append_numbers(out, c.column.test), append_numbers(out, c.row.test);
  out.insert(out.end(), {c.normalized_departure, c.symmetry_index, c.complex_fraction});
  for (const std::vector<double>* gains : {&c.log_column_gain, &c.log_row_gain}) {
    out.push_back(static_cast<double>(gains->size()));
    out.insert(out.end(), gains->begin(), gains->end());
  }
}

LayerCoupling read_layer_coupling(NumberReader& in) {
  LayerCoupling c;
  c.n_nodes = in.index();
  c.column.test = read_spearman_test(in), c.row.test = read_spearman_test(in);
  c.normalized_departure = in.next(), c.symmetry_index = in.next(), c.complex_fraction = in.next();
  for (std::vector<double>* gains : {&c.log_column_gain, &c.log_row_gain}) {
    gains->resize(static_cast<size_t>(in.index()));
    for (double& g : *gains) g = in.next();
  }
  return c;
}

CouplingResult topology_dynamics_coupling(const std::vector<std::vector<double>>& boundary_scores,
                                          const std::vector<Matrix>& mean_jacobians, const CouplingOptions& options) {
  if (boundary_scores.size() != mean_jacobians.size())
    fail("coupling: {} layers of boundary scores but {} mean Jacobians", boundary_scores.size(), mean_jacobians.size());
  return topology_dynamics_coupling(boundary_scores, [&](size_t layer) { return mean_jacobians[layer]; }, options);
}

void check_coupling_options(const CouplingOptions& options, size_t n_layers) {
  if (options.permutations < 0) fail("coupling: permutations must be ≥ 0, got {}", options.permutations);
  if (!(options.min_effect >= 0 && options.min_effect < 1)) fail("coupling: min_effect must be in [0, 1), got {}", options.min_effect);
  if (!options.known_normality.empty() && options.known_normality.size() != n_layers)
    fail("coupling: normality of {} maps given for {} layers", options.known_normality.size(), n_layers);
}

CouplingResult topology_dynamics_coupling(const std::vector<std::vector<double>>& boundary_scores,
                                          const std::function<Matrix(size_t)>& mean_jacobian, const CouplingOptions& options) {
  check_coupling_options(options, boundary_scores.size());
  // Each layer's J̄ is read in order (from a pass file, say); the layers' tests and metrics run in parallel, a batch
  // of layers at a time (their J̄ in memory), one per thread.
  const auto n_layers = static_cast<int64_t>(boundary_scores.size());
  std::vector<LayerCoupling> layers(boundary_scores.size());
  const int64_t d = boundary_scores.empty() ? 0 : static_cast<int64_t>(boundary_scores.front().size());
  const int64_t batch = operators_in_flight(d, 5, n_layers);
  for (int64_t first = 0; first < n_layers; first += batch) {
    std::vector<Matrix> batch_jacobians;
    for (int64_t layer = first; layer < std::min(n_layers, first + batch); ++layer) batch_jacobians.push_back(mean_jacobian(static_cast<size_t>(layer)));
    parallel_tasks(static_cast<int64_t>(batch_jacobians.size()), [&](int64_t i) {
      const auto layer = static_cast<size_t>(first + i);
      layers[layer] = layer_coupling(batch_jacobians[static_cast<size_t>(i)], boundary_scores[layer], layer, options);
    });
  }
  return decide_coupling(std::move(layers), options);
}

CouplingResult decide_coupling(std::vector<LayerCoupling> layers, const CouplingOptions& options) {
  const bool permutation = options.permutations > 0;
  CouplingResult result;
  result.decision_p = permutation ? "permutation" : "parametric";
  result.fdr_q = options.fdr_q, result.min_effect = options.min_effect;
  result.layers = std::move(layers);
  std::vector<double> p_column, p_row;
  for (const LayerCoupling& c : result.layers) {
    p_column.push_back(decision_p_value(c.column.test, permutation));
    p_row.push_back(decision_p_value(c.row.test, permutation));
  }
  if (result.layers.empty()) return result;
  const topology::FdrResult column_fdr = topology::benjamini_hochberg(p_column, options.fdr_q),
                            row_fdr = topology::benjamini_hochberg(p_row, options.fdr_q);
  std::vector<double> rho, departure, symmetry;
  for (size_t layer = 0; layer < result.layers.size(); ++layer) {
    LayerCoupling& c = result.layers[layer];
    c.column.p_adjusted = column_fdr.adjusted_p_values[layer];
    c.column.significant = column_fdr.rejected[layer];
    c.row.p_adjusted = row_fdr.adjusted_p_values[layer];
    c.row.significant = row_fdr.rejected[layer];
    c.column.coupled = c.column.significant && std::abs(c.column.test.rho) >= options.min_effect;
    c.row.coupled = c.row.significant && std::abs(c.row.test.rho) >= options.min_effect;
    result.n_coupled_column += c.column.coupled;
    rho.push_back(c.column.test.rho);
    departure.push_back(c.normalized_departure);
    symmetry.push_back(c.symmetry_index);
  }
  result.n_significant_column = column_fdr.n_rejected;
  result.n_significant_row = row_fdr.n_rejected;
  result.sign_rule = sign_rule_test(rho, departure, options);
  result.rho_vs_departure = result.sign_rule.rho;  // the same rank correlation, without its test
  result.rho_vs_symmetry = rank_correlation_or_nan(rho, symmetry);
  return result;
}

// ---- Layout --------------------------------------------------------------------------------------------------

namespace {

// igraph 0.10.2 keeps its RNG and error handler in process globals; layouts are serialised here. (The Leiden
// calls of analysis/topology hold their own lock: do not lay out and partition from two threads at once.)
std::mutex layout_mutex;

void check_igraph(igraph_error_t code, const char* what) {
  if (code != IGRAPH_SUCCESS) fail("igraph {} failed: {}", what, igraph_strerror(code));
}

// Owns every igraph object of one layout call, and makes igraph return error codes instead of aborting.
struct IgraphLayoutCall {
  igraph_error_handler_t* previous_handler = igraph_set_error_handler(igraph_error_handler_ignore);
  igraph_vector_int_t edge_ends{};
  igraph_vector_t weights{};
  igraph_matrix_t positions{};
  igraph_t graph{};
  bool has_ends = false, has_weights = false, has_positions = false, has_graph = false;
  ~IgraphLayoutCall() {
    if (has_graph) igraph_destroy(&graph);
    if (has_positions) igraph_matrix_destroy(&positions);
    if (has_weights) igraph_vector_destroy(&weights);
    if (has_ends) igraph_vector_int_destroy(&edge_ends);
    igraph_set_error_handler(previous_handler);
  }
};

}  // namespace

std::vector<std::pair<double, double>> graph_layout(const topology::SignedGraph& graph, uint64_t seed, int64_t iterations) {
  graph.validate();
  std::vector<const topology::SignedEdge*> positive;
  for (const auto& e : graph.edges)
    if (e.weight > 0) positive.push_back(&e);
  const int64_t m = static_cast<int64_t>(positive.size());

  std::lock_guard<std::mutex> lock(layout_mutex);
  IgraphLayoutCall call;
  check_igraph(igraph_vector_int_init(&call.edge_ends, 2 * m), "vector allocation");
  call.has_ends = true;
  check_igraph(igraph_vector_init(&call.weights, m), "vector allocation");
  call.has_weights = true;
  for (int64_t e = 0; e < m; ++e) {
    VECTOR(call.edge_ends)[2 * e] = positive[e]->source;
    VECTOR(call.edge_ends)[2 * e + 1] = positive[e]->target;
    VECTOR(call.weights)[e] = positive[e]->weight;
  }
  check_igraph(igraph_create(&call.graph, &call.edge_ends, graph.n_nodes, IGRAPH_UNDIRECTED), "graph creation");
  call.has_graph = true;
  check_igraph(igraph_matrix_init(&call.positions, graph.n_nodes, 2), "matrix allocation");
  call.has_positions = true;
  igraph_rng_seed(igraph_rng_default(), seed);
  check_igraph(igraph_layout_fruchterman_reingold(&call.graph, &call.positions, /*use_seed=*/false, iterations,
                                                  /*start_temp=*/std::sqrt(static_cast<double>(graph.n_nodes)) / 10,
                                                  IGRAPH_LAYOUT_AUTOGRID, &call.weights, nullptr, nullptr, nullptr, nullptr),
               "Fruchterman–Reingold layout");
  std::vector<std::pair<double, double>> xy(graph.n_nodes);
  for (int64_t i = 0; i < graph.n_nodes; ++i) xy[i] = {MATRIX(call.positions, i, 0), MATRIX(call.positions, i, 1)};
  return xy;
}

}  // namespace tdyn
