// Participation coefficients and the multi-community rule (see boundary.h).
#include "analysis/topology/boundary.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace tdyn::topology {

BoundaryScores boundary_scores(const SignedGraph& graph, std::span<const int64_t> membership, BoundaryEdges rule_edges) {
  const int64_t n = graph.n_nodes;
  if (static_cast<int64_t>(membership.size()) != n)
    fail("boundary scores: membership has {} entries for {} nodes", membership.size(), n);

  // Per node: positive weight into each community, and the set of other communities touched.
  std::vector<std::unordered_map<int64_t, double>> weight_into(n);
  std::vector<std::unordered_set<int64_t>> other_communities(n);
  for (const SignedEdge& edge : graph.edges) {
    const int64_t u = edge.source, v = edge.target;
    if (edge.weight > 0) {
      weight_into[u][membership[v]] += edge.weight;
      weight_into[v][membership[u]] += edge.weight;
    }
    if ((edge.weight > 0 || rule_edges == BoundaryEdges::all) && membership[u] != membership[v]) {
      other_communities[u].insert(membership[v]);
      other_communities[v].insert(membership[u]);
    }
  }

  BoundaryScores scores;
  scores.participation.assign(n, 0.0);
  scores.positive_strength.assign(n, 0.0);
  scores.n_other_communities.assign(n, 0);
  scores.bridges_communities.assign(n, false);
  for (int64_t i = 0; i < n; ++i) {
    double strength = 0;
    for (const auto& [community, weight] : weight_into[i]) strength += weight;
    scores.positive_strength[i] = strength;
    if (strength > 0) {
      double concentration = 0;
      for (const auto& [community, weight] : weight_into[i]) concentration += (weight / strength) * (weight / strength);
      scores.participation[i] = std::max(0.0, 1.0 - concentration);
    }
    scores.n_other_communities[i] = static_cast<int64_t>(other_communities[i].size());
    scores.bridges_communities[i] = scores.n_other_communities[i] >= 2;
  }
  return scores;
}

}  // namespace tdyn::topology
