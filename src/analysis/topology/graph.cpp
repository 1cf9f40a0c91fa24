// Sparsification of correlation matrices into signed graphs, and edge-list CSV I/O (see graph.h).
#include "analysis/topology/graph.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace tdyn::topology {
namespace {

bool usable(double r) { return std::isfinite(r) && r != 0.0; }

// Sorts by (source, target) and drops repeated pairs (an edge chosen by both of its ends).
void sort_and_deduplicate(std::vector<SignedEdge>& edges) {
  auto key_less = [](const SignedEdge& a, const SignedEdge& b) {
    return a.source != b.source ? a.source < b.source : a.target < b.target;
  };
  auto key_equal = [](const SignedEdge& a, const SignedEdge& b) { return a.source == b.source && a.target == b.target; };
  std::sort(edges.begin(), edges.end(), key_less);
  edges.erase(std::unique(edges.begin(), edges.end(), key_equal), edges.end());
}

}  // namespace

void SignedGraph::validate() const {
  if (n_nodes < 0) fail("signed graph: negative node count {}", n_nodes);
  for (size_t e = 0; e < edges.size(); ++e) {
    const SignedEdge& edge = edges[e];
    if (edge.source < 0 || edge.target >= n_nodes || edge.source >= edge.target)
      fail("signed graph: edge {} ({}, {}) must have 0 ≤ source < target < n_nodes = {}", e, edge.source, edge.target,
           n_nodes);
    if (!usable(edge.weight)) fail("signed graph: edge {} ({}, {}) has weight {}", e, edge.source, edge.target, edge.weight);
    if (e > 0) {
      const SignedEdge& previous = edges[e - 1];
      if (previous.source > edge.source || (previous.source == edge.source && previous.target >= edge.target))
        fail("signed graph: edge {} ({}, {}) is a duplicate or out of (source, target) order", e, edge.source,
             edge.target);
    }
  }
}

SignedGraph top_k_graph(const CorrelationMatrix& correlation, int64_t k) {
  if (k < 1) fail("top-k graph: k must be at least 1, got {}", k);
  const int64_t d = correlation.n_units;
  TDYN_CHECK(static_cast<int64_t>(correlation.values.size()) == d * d);

  std::vector<std::vector<SignedEdge>> chosen_per_node(d);
#pragma omp parallel for schedule(dynamic, 32)
  for (int64_t i = 0; i < d; ++i) {
    const double* row = correlation.values.data() + i * d;
    std::vector<int64_t> partners;
    partners.reserve(d);
    for (int64_t j = 0; j < d; ++j)
      if (j != i && usable(row[j])) partners.push_back(j);
    // Strongest first; equal |r| to the lower index so the result does not depend on the sort.
    auto stronger = [row](int64_t a, int64_t b) {
      const double abs_a = std::abs(row[a]), abs_b = std::abs(row[b]);
      return abs_a != abs_b ? abs_a > abs_b : a < b;
    };
    const int64_t keep = std::min<int64_t>(k, partners.size());
    std::nth_element(partners.begin(), partners.begin() + keep, partners.end(), stronger);
    for (int64_t t = 0; t < keep; ++t) {
      const int64_t j = partners[t];
      chosen_per_node[i].push_back({std::min(i, j), std::max(i, j), row[j]});
    }
  }

  SignedGraph graph;
  graph.n_nodes = d;
  for (auto& chosen : chosen_per_node) graph.edges.insert(graph.edges.end(), chosen.begin(), chosen.end());
  sort_and_deduplicate(graph.edges);
  return graph;
}

SignedGraph threshold_graph(const CorrelationMatrix& correlation, double min_abs_r) {
  if (!(min_abs_r > 0)) fail("threshold graph: |r| threshold must be positive, got {}", min_abs_r);
  const int64_t d = correlation.n_units;
  TDYN_CHECK(static_cast<int64_t>(correlation.values.size()) == d * d);
  SignedGraph graph;
  graph.n_nodes = d;
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = i + 1; j < d; ++j) {
      const double r = correlation.at(i, j);
      if (usable(r) && std::abs(r) >= min_abs_r) graph.edges.push_back({i, j, r});
    }
  return graph;
}

void write_edge_list_csv(const fs::path& path, const SignedGraph& graph) {
  std::string text = "source,target,weight\n";
  for (const SignedEdge& edge : graph.edges) text += fmt::format("{},{},{:.17g}\n", edge.source, edge.target, edge.weight);
  write_file_atomic(path, text);
}

SignedGraph read_edge_list_csv(const fs::path& path, int64_t n_nodes) {
  std::istringstream lines(read_file(path));
  std::string line;
  if (!std::getline(lines, line) || line.rfind("source,target,weight", 0) != 0)
    fail("{}: expected the header 'source,target,weight'", path.string());
  SignedGraph graph;
  graph.n_nodes = n_nodes;
  for (int64_t line_number = 2; std::getline(lines, line); ++line_number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    SignedEdge edge;
    const char* cursor = line.data();
    const char* end = line.data() + line.size();
    auto field = [&](auto& value, bool last) {
      auto [next, error] = std::from_chars(cursor, end, value);
      if (error != std::errc() || (last ? next != end : (next == end || *next != ',')))
        fail("{}:{}: expected 'source,target,weight', got '{}'", path.string(), line_number, line);
      cursor = last ? next : next + 1;
    };
    field(edge.source, false);
    field(edge.target, false);
    field(edge.weight, true);
    if (edge.source > edge.target) std::swap(edge.source, edge.target);
    graph.edges.push_back(edge);
  }
  std::sort(graph.edges.begin(), graph.edges.end(), [](const SignedEdge& a, const SignedEdge& b) {
    return a.source != b.source ? a.source < b.source : a.target < b.target;
  });
  try {
    graph.validate();
  } catch (const Error& error) {
    fail("{}: {}", path.string(), error.what());
  }
  return graph;
}

}  // namespace tdyn::topology
