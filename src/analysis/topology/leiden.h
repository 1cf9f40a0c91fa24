// Signed Leiden CPM communities of a signed graph (SPEC §3 "Topology"; the paper partitions each layer's
// activation graph with a positive layer at resolution γ and a negative layer at resolution 0, weight −1).
//
// Objective. With w⁺ = max(w, 0), w⁻ = max(−w, 0) and the Constant Potts Model summed over ordered pairs
// i ≠ j (SPEC's Σ_ij without the constant diagonal, which is what leidenalg's CPMVertexPartition.quality()
// returns for graphs without self-loops),
//     Q_CPM(G; γ) = Σ_{i≠j} (w_ij − γ) δ(σ_i, σ_j),
// the signed objective is Q = Q_CPM(G⁺; γ) − Q_CPM(G⁻; 0) = Σ_{i≠j} (w_ij − γ) δ(σ_i, σ_j), because
// w⁺ − w⁻ = w and the negative layer has no resolution term. Up to the factor 2 this is igraph's single-graph
// CPM, Σ_{i<j} (A_ij − γ n_i n_j) δ(σ_i, σ_j), with A = the signed weights, node weights n_i = 1 and
// resolution γ: the signed weights go to igraph unchanged, no reweighting, because the negative layer has γ = 0.
//
// igraph 0.10.2 may stop after one pass with n_iterations = −1 and reports a wrong quality for signed
// weights, so we call it repeatedly with start = true, measure Q ourselves and stop when it no longer rises.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "analysis/topology/graph.h"

namespace tdyn::topology {

struct LeidenOptions {
  // γ of the positive layer. The paper gives no value; communities at γ have internal mean weight above γ,
  // so it is a density scale. Scan it with gamma_scan.
  double resolution = 0.05;
  uint64_t seed = 1;        // igraph's RNG is seeded with this before every run: results are reproducible
  double beta = 0.01;       // randomness of the refinement step (igraph and leidenalg default)
  int64_t max_passes = 64;  // upper bound on the repeated start = true calls
};

struct Partition {
  std::vector<int64_t> membership;  // community of each node, numbered 0.. by decreasing size (ties: lowest node)
  int64_t n_communities = 0;
  double quality = 0;               // signed CPM quality Q (see above), computed by signed_cpm_quality
  int64_t passes = 0;               // igraph calls made
};

// Q = Σ_{i≠j} (w_ij − γ) δ(σ_i, σ_j) for a membership of any labels (see the header comment).
double signed_cpm_quality(const SignedGraph& graph, std::span<const int64_t> membership, double resolution);

// Maximises Q with igraph's Leiden, deterministic for a given seed. Throws Error on an invalid graph or options.
Partition signed_leiden(const SignedGraph& graph, const LeidenOptions& options = {});

struct GammaScanPoint {
  double resolution = 0;
  int64_t n_communities = 0;
  double quality = 0;
  std::vector<int64_t> membership;
};

// signed_leiden at every γ in `resolutions` (other options from `options`), in the given order.
std::vector<GammaScanPoint> gamma_scan(const SignedGraph& graph, std::span<const double> resolutions,
                                       const LeidenOptions& options = {});

// Relabels communities 0.. by decreasing size (ties: the community of the lowest node first); returns the count.
int64_t canonical_membership(std::vector<int64_t>& membership);

// Normalised mutual information 2 I(A; B) / (H(A) + H(B)) of two partitions of the same nodes (labels are
// arbitrary integers); 1 when both are a single community. Throws Error on different lengths or no nodes.
double normalized_mutual_information(std::span<const int64_t> a, std::span<const int64_t> b);

}  // namespace tdyn::topology
