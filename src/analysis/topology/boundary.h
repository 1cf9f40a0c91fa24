// Boundary nodes of a community partition (SPEC §3 "Topology"): units that connect several communities of the
// activation graph, the nodes whose Jacobian gain the paper couples to topology.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "analysis/topology/graph.h"

namespace tdyn::topology {

// Which edges the "edges into ≥ 2 other communities" rule looks at. Positive edges by default: the signed
// objective puts negative edges between communities on purpose, so a negative edge across is no bridge.
enum class BoundaryEdges { positive, all };

struct BoundaryScores {
  // Participation coefficient P_i = 1 − Σ_c (k_ic / k_i)² over positive edges, weighted: k_ic is the summed
  // weight of i's positive edges into community c (its own included), k_i = Σ_c k_ic. A node without positive
  // edges (k_i = 0) has P_i = 0 by definition: it connects nothing.
  std::vector<double> participation;
  std::vector<double> positive_strength;     // k_i
  std::vector<int64_t> n_other_communities;  // distinct communities other than its own reached by an edge
  std::vector<bool> bridges_communities;     // the rule: n_other_communities ≥ 2
};

// Throws Error when membership does not have one entry per node.
BoundaryScores boundary_scores(const SignedGraph& graph, std::span<const int64_t> membership,
                               BoundaryEdges rule_edges = BoundaryEdges::positive);

}  // namespace tdyn::topology
