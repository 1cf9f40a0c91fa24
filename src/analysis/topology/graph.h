// Signed activation graphs: sparsifying a correlation matrix into a signed, weighted, undirected graph
// (SPEC §3 "Topology": keep the top-k edges per node by |r| with their sign), and reading / writing such
// graphs as edge-list CSV.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/topology/correlation.h"
#include "core/files.h"

namespace tdyn::topology {

// An undirected edge stored once, with source < target; the weight is the signed correlation r.
struct SignedEdge {
  int64_t source = 0;
  int64_t target = 0;
  double weight = 0;
};

struct SignedGraph {
  int64_t n_nodes = 0;
  std::vector<SignedEdge> edges;  // sorted by (source, target), no duplicates, no self-loops

  // Throws Error naming the first bad edge: end out of range, self-loop, source ≥ target, duplicate, or a
  // weight that is zero or not finite.
  void validate() const;
};

// The union over nodes of each node's k strongest edges by |r| (sign kept), undirected, no self-loops: an
// edge is kept when it is in the top k of either end, so degrees are ≥ k (for nodes with enough partners)
// and may exceed it. Ties in |r| go to the lower node index, so the graph is deterministic. Constant units
// (NaN rows) and exact zeros get no edges. Throws Error unless k ≥ 1.
SignedGraph top_k_graph(const CorrelationMatrix& correlation, int64_t k);

// All pairs with |r| ≥ min_abs_r (> 0), sign kept.
SignedGraph threshold_graph(const CorrelationMatrix& correlation, double min_abs_r);

// Edge-list CSV with header "source,target,weight" (0-based node ids). The node count is not implied by the
// edges (isolated nodes), so the reader takes it from the caller. Throws Error naming the file and line.
void write_edge_list_csv(const fs::path& path, const SignedGraph& graph);
SignedGraph read_edge_list_csv(const fs::path& path, int64_t n_nodes);

}  // namespace tdyn::topology
