// The model-facing half of the topology analysis (SPEC §3 "Topology"; the residual-stream paper, "위상 분석" and "위상-역학
// 결합"): a trained model's residual stream at every layer boundary → streaming Pearson correlation of the d
// units over all tokens of all samples → signed sparse graph → signed Leiden CPM communities → boundary nodes
// (participation coefficient) → coupling of boundary score with the Jacobian gain of the sublayer map leaving
// that boundary, tested per layer and corrected with Benjamini–Hochberg across layers.
//
// The model-independent steps live in analysis/topology/ (topology.h); mean Jacobians come from
// analysis/jacobian/means.h. This file adds what needs a model:
//   * residual_boundaries(): which hooks are cut (the input of every layer and the output of the last one);
//   * the pass over the samples lives in analysis/pass/run.h: ONE forward pass per sample feeds both the correlation
//     accumulators (all tokens) and the structured mean Jacobians (selected positions);
//   * analyse_boundary(): graph, communities, γ scan and boundary scores of one correlation matrix;
//   * topology_dynamics_coupling(): a pure function of (boundary scores, J̄) per layer;
//   * graph_layout(): Fruchterman–Reingold node positions (igraph) for drawing one layer's graph.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "analysis/jacobian/jacobian_model.h"
#include "analysis/jacobian/means.h"
#include "analysis/operator_metrics.h"
#include "analysis/samples.h"
#include "analysis/stream_points.h"
#include "analysis/topology/topology.h"

namespace tdyn {

// ---- Graph, communities and boundary nodes of one boundary ----------------------------------------------------

struct GraphOptions {
  // Sparsification (SPEC: "keep the top-k edges per node by |r| with their sign"). The paper gives no k;
  // 10 keeps the graph sparse (degree ≥ 10 of d) at every model size, so that CPM sees structure, not a
  // dense block. threshold > 0 replaces top-k by "all pairs with |r| ≥ threshold".
  int64_t top_k = 10;
  double threshold = 0;
  topology::LeidenOptions leiden;        // γ, seed (core defaults)
  std::vector<double> gamma_scan;        // extra resolutions, each partitioned and compared by NMI
  topology::BoundaryEdges boundary_edges = topology::BoundaryEdges::positive;
};

struct GammaScanEntry {
  double resolution = 0;
  int64_t n_communities = 0;
  double quality = 0;
  double nmi_with_main = 0;  // NMI of this partition with the one at GraphOptions::leiden.resolution
};

struct BoundaryTopology {
  topology::SignedGraph graph;
  int64_t n_positive_edges = 0, n_negative_edges = 0;
  topology::Partition partition;
  std::vector<int64_t> community_sizes;  // by community id (decreasing)
  topology::BoundaryScores scores;
  std::vector<bool> constant_unit;       // units without correlation (no edges; left out of the coupling)
  int64_t n_bridge_nodes = 0;            // the "edges into ≥ 2 other communities" rule
  std::vector<GammaScanEntry> scan;

  // Participation coefficients with NaN for constant units: the boundary scores the coupling reads.
  std::vector<double> boundary_score() const;
};

BoundaryTopology analyse_boundary(const topology::CorrelationMatrix& correlation, const GraphOptions& options);

// ---- Coupling of topology and dynamics (a pure function) -----------------------------------------------------

// A mean Jacobian's normality as the coupling reads it, measured already (by a jacobian run of the same pass).
struct MapNormality {
  double frobenius_norm = 0;    // ‖J̄‖_F: that it is the same map
  double departure = 0;         // ‖N‖_F/‖J̄‖_F of its Schur form
  double symmetry_index = 0;    // ‖J̄ − J̄ᵀ‖_F/‖J̄‖_F
  double complex_fraction = 0;  // share of its eigenvalues off the real axis
};

struct CouplingOptions {
  int64_t permutations = 10000;  // per test; 0: parametric p only
  uint64_t seed = 0;             // layer i's permutations use seed + i
  double fdr_q = 0.05;           // Benjamini–Hochberg level across layers (SPEC)
  // A significant layer counts as coupled only when |ρ| reaches this too: with thousands of units, ρ of a few
  // hundredths are significant and mean nothing (0.1 is the conventional lower edge of a "small" correlation).
  double min_effect = 0.1;
  // Per layer, when a jacobian run of the same pass measured them: each J̄'s normality, instead of its Schur form
  // here (the costliest step at large d). A layer whose ‖J̄‖_F differs from the one given is refused.
  std::vector<MapNormality> known_normality;
};

// One gain variant (column or row norms) tested at one layer.
struct GainTest {
  topology::SpearmanTest test;
  double p_adjusted = 0;  // BH-adjusted p of the p-value used for decisions (see CouplingResult::decision_p)
  bool significant = false;
  bool coupled = false;   // significant and |ρ| ≥ CouplingOptions::min_effect
  int sign() const { return test.rho > 0 ? 1 : (test.rho < 0 ? -1 : 0); }
};

struct LayerCoupling {
  int64_t n_nodes = 0;                 // nodes tested (boundary score not NaN)
  std::vector<double> log_column_gain; // log‖J̄ e_i‖ (d)
  std::vector<double> log_row_gain;    // log‖e_iᵀ J̄‖ (d)
  GainTest column, row;                // Spearman(boundary score, gain): the paper's is `column`
  // Operator type of J̄ (operator_metrics): the paper's sign rule reads amplification (ρ > 0) at
  // near-symmetric layers and attenuation (ρ < 0) at strongly non-normal ones.
  double normalized_departure = 0;     // ‖N‖_F/‖J̄‖_F (Schur form)
  double symmetry_index = 0;           // ‖J̄ − J̄ᵀ‖_F/‖J̄‖_F
  double complex_fraction = 0;         // fraction of complex eigenvalues
};

struct CouplingResult {
  std::vector<LayerCoupling> layers;
  std::string decision_p;            // "permutation" (permutations > 0) or "parametric"
  double fdr_q = 0, min_effect = 0;  // the decision's levels (CouplingOptions)
  int64_t n_significant_column = 0, n_significant_row = 0;
  int64_t n_coupled_column = 0;  // layers whose column coupling is significant with |ρ| ≥ min_effect
  // Across layers: Spearman of the column coupling ρ with each operator-type measure (NaN with < 3 layers).
  double rho_vs_departure = 0, rho_vs_symmetry = 0;
  // The paper's sign rule (near-symmetric layers amplify, ρ > 0; non-normal ones attenuate, ρ < 0) as a test
  // of its own: Spearman over layers of ρ with the normalised departure, with a permutation p-value over the
  // layers (CouplingOptions::permutations, seed − 1; NaN with < 3 layers). The rule predicts a negative ρ.
  topology::SpearmanTest sign_rule;
};

// boundary_scores[i] (d values, NaN = leave the node out) against the gains of mean_jacobians[i] (d × d, rows
// = outputs). Spearman is rank-based, so testing the norms is testing their logarithms; a zero column gets
// log gain −∞ and the lowest rank. Throws Error on mismatched sizes or fewer than 3 usable nodes.
CouplingResult topology_dynamics_coupling(const std::vector<std::vector<double>>& boundary_scores,
                                          const std::vector<linalg::Matrix>& mean_jacobians,
                                          const CouplingOptions& options);
// The same with J̄ of layer i made when needed (read from a pass file one at a time: d × d each).
CouplingResult topology_dynamics_coupling(const std::vector<std::vector<double>>& boundary_scores,
                                          const std::function<linalg::Matrix(size_t)>& mean_jacobian,
                                          const CouplingOptions& options);

// The steps of topology_dynamics_coupling, for callers that spread the layers over MPI ranks
// (analysis/topology/run.cpp). The Error it throws for bad options:
void check_coupling_options(const CouplingOptions& options, size_t n_layers);
// One layer's coupling before the decision across layers: the Spearman tests of its boundary scores against the gains
// of its J̄, and J̄'s normality (options.known_normality[layer] when given, else its Schur form: the costly part at
// large d).
LayerCoupling layer_coupling(const linalg::Matrix& j, const std::vector<double>& score, size_t layer, const CouplingOptions& options);
// The decision across layers from every layer's coupling: Benjamini–Hochberg, the coupled layers, the sign rule.
CouplingResult decide_coupling(std::vector<LayerCoupling> layers, const CouplingOptions& options);

// A layer's coupling as a flat list of numbers (what MPI ranks send each other), and read back exactly.
void append_numbers(std::vector<double>& out, const LayerCoupling& c);
LayerCoupling read_layer_coupling(NumberReader& in);

// ---- Drawing -----------------------------------------------------------------------------------------------

// Fruchterman–Reingold positions (x, y per node) of the positive part of the graph, weights |r|, seeded;
// computed by igraph. Negative edges repel nothing here: they are drawn, not laid out.
std::vector<std::pair<double, double>> graph_layout(const topology::SignedGraph& graph, uint64_t seed,
                                                    int64_t iterations = 500);

}  // namespace tdyn
