// Signed Leiden CPM through igraph's single-graph Leiden (see leiden.h for why the signed weights can be
// passed to igraph unchanged).
#include "analysis/topology/leiden.h"

#include <igraph/igraph.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include "core/error.h"

namespace tdyn::topology {
namespace {

// igraph 0.10.2 is built without thread safety: its RNG and error handler are process globals. Every
// igraph call of this file runs under this lock.
std::mutex igraph_mutex;

// Leiden iterations per igraph call; signed_leiden stops when a whole call no longer raises the quality.
constexpr igraph_integer_t kIterationsPerPass = 2;

void check_igraph(igraph_error_t code, const char* what) {
  if (code != IGRAPH_SUCCESS) fail("igraph {} failed: {}", what, igraph_strerror(code));
}

// igraph's default error handler aborts the process; while alive, errors come back as codes (the "ignore"
// handler also frees igraph's own temporaries) and check_igraph turns them into Error.
class IgraphErrorsAsCodes {
 public:
  IgraphErrorsAsCodes() : previous_(igraph_set_error_handler(igraph_error_handler_ignore)) {}
  ~IgraphErrorsAsCodes() { igraph_set_error_handler(previous_); }
  IgraphErrorsAsCodes(const IgraphErrorsAsCodes&) = delete;
  IgraphErrorsAsCodes& operator=(const IgraphErrorsAsCodes&) = delete;

 private:
  igraph_error_handler_t* previous_;
};

// Owners of igraph objects, so that they are destroyed on every path, exceptions included.
struct IgraphRealVector {
  igraph_vector_t v;
  explicit IgraphRealVector(int64_t size) { check_igraph(igraph_vector_init(&v, size), "vector allocation"); }
  ~IgraphRealVector() { igraph_vector_destroy(&v); }
  IgraphRealVector(const IgraphRealVector&) = delete;
  IgraphRealVector& operator=(const IgraphRealVector&) = delete;
};

struct IgraphIntVector {
  igraph_vector_int_t v;
  explicit IgraphIntVector(int64_t size) { check_igraph(igraph_vector_int_init(&v, size), "vector allocation"); }
  ~IgraphIntVector() { igraph_vector_int_destroy(&v); }
  IgraphIntVector(const IgraphIntVector&) = delete;
  IgraphIntVector& operator=(const IgraphIntVector&) = delete;
};

struct IgraphGraph {
  igraph_t g;
  IgraphGraph(const IgraphIntVector& edge_ends, int64_t n_nodes) {
    check_igraph(igraph_create(&g, &edge_ends.v, n_nodes, IGRAPH_UNDIRECTED), "graph creation");
  }
  ~IgraphGraph() { igraph_destroy(&g); }
  IgraphGraph(const IgraphGraph&) = delete;
  IgraphGraph& operator=(const IgraphGraph&) = delete;
};

// Labels → 0..k−1 in order of first appearance.
std::vector<int64_t> compact_labels(std::span<const int64_t> labels, int64_t* n_labels) {
  std::unordered_map<int64_t, int64_t> index_of;
  std::vector<int64_t> compact(labels.size());
  for (size_t i = 0; i < labels.size(); ++i)
    compact[i] = index_of.try_emplace(labels[i], static_cast<int64_t>(index_of.size())).first->second;
  *n_labels = static_cast<int64_t>(index_of.size());
  return compact;
}

void validate_options(const LeidenOptions& options) {
  if (!std::isfinite(options.resolution)) fail("Leiden: resolution γ must be finite, got {}", options.resolution);
  if (!(options.beta > 0 && std::isfinite(options.beta))) fail("Leiden: beta must be positive, got {}", options.beta);
  if (options.max_passes < 1) fail("Leiden: max_passes must be at least 1, got {}", options.max_passes);
}

}  // namespace

double signed_cpm_quality(const SignedGraph& graph, std::span<const int64_t> membership, double resolution) {
  if (static_cast<int64_t>(membership.size()) != graph.n_nodes)
    fail("CPM quality: membership has {} entries for {} nodes", membership.size(), graph.n_nodes);
  // 2 (Σ_{i<j, same community} w_ij − γ Σ_c n_c (n_c − 1) / 2): each unordered pair counted in both orders.
  double internal_weight = 0;
  for (const SignedEdge& edge : graph.edges)
    if (membership[edge.source] == membership[edge.target]) internal_weight += edge.weight;
  int64_t n_labels = 0;
  const std::vector<int64_t> community = compact_labels(membership, &n_labels);
  std::vector<double> size(n_labels, 0.0);
  for (const int64_t c : community) size[c] += 1;
  double internal_pairs = 0;
  for (const double n_c : size) internal_pairs += n_c * (n_c - 1) / 2;
  return 2 * (internal_weight - resolution * internal_pairs);
}

int64_t canonical_membership(std::vector<int64_t>& membership) {
  int64_t n_labels = 0;
  std::vector<int64_t> community = compact_labels(membership, &n_labels);  // numbered by first node already
  std::vector<int64_t> size(n_labels, 0);
  for (const int64_t c : community) ++size[c];
  std::vector<int64_t> order(n_labels);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return size[a] > size[b]; });
  std::vector<int64_t> rank(n_labels);
  for (int64_t r = 0; r < n_labels; ++r) rank[order[r]] = r;
  for (size_t i = 0; i < membership.size(); ++i) membership[i] = rank[community[i]];
  return n_labels;
}

Partition signed_leiden(const SignedGraph& graph, const LeidenOptions& options) {
  graph.validate();
  validate_options(options);
  const int64_t n = graph.n_nodes;
  const int64_t m = static_cast<int64_t>(graph.edges.size());
  Partition best;
  if (n == 0) return best;

  std::lock_guard<std::mutex> lock(igraph_mutex);
  IgraphErrorsAsCodes errors_as_codes;

  IgraphIntVector edge_ends(2 * m);
  IgraphRealVector edge_weights(m);
  for (int64_t e = 0; e < m; ++e) {
    VECTOR(edge_ends.v)[2 * e] = graph.edges[e].source;
    VECTOR(edge_ends.v)[2 * e + 1] = graph.edges[e].target;
    VECTOR(edge_weights.v)[e] = graph.edges[e].weight;  // signed: w⁺ − w⁻ (leiden.h)
  }
  IgraphGraph igraph(edge_ends, n);
  IgraphRealVector node_weights(n);
  igraph_vector_fill(&node_weights.v, 1.0);  // n_i = 1: CPM counts node pairs
  IgraphIntVector membership(n);

  igraph_rng_seed(igraph_rng_default(), options.seed);
  best.quality = -std::numeric_limits<double>::infinity();
  std::vector<int64_t> current(n);
  for (int64_t pass = 0; pass < options.max_passes; ++pass) {
    igraph_integer_t n_clusters = 0;
    // Pass 0 starts from singletons; later passes continue from the previous membership (start = true), the
    // workaround for 0.10.2 stopping early. Each call runs a fixed number of iterations: with n_iterations = −1
    // igraph iterates until the membership stops changing, which never happens on some signed graphs (measured:
    // an endless loop on a planted 4 × 30 graph). igraph's quality output is not used (wrong for signed weights).
    check_igraph(igraph_community_leiden(&igraph.g, &edge_weights.v, &node_weights.v, options.resolution, options.beta,
                                         /*start=*/pass > 0, kIterationsPerPass, &membership.v, &n_clusters,
                                         /*quality=*/nullptr),
                 "community_leiden");
    for (int64_t i = 0; i < n; ++i) current[i] = VECTOR(membership.v)[i];
    const double quality = signed_cpm_quality(graph, current, options.resolution);
    best.passes = pass + 1;
    const double tolerance = 1e-12 * std::max(1.0, std::abs(quality));
    if (!(quality > best.quality + tolerance)) break;
    best.quality = quality;
    best.membership = current;
  }
  best.n_communities = canonical_membership(best.membership);
  return best;
}

std::vector<GammaScanPoint> gamma_scan(const SignedGraph& graph, std::span<const double> resolutions,
                                       const LeidenOptions& options) {
  std::vector<GammaScanPoint> scan;
  scan.reserve(resolutions.size());
  for (const double resolution : resolutions) {
    LeidenOptions at_resolution = options;
    at_resolution.resolution = resolution;
    Partition partition = signed_leiden(graph, at_resolution);
    scan.push_back({resolution, partition.n_communities, partition.quality, std::move(partition.membership)});
  }
  return scan;
}

double normalized_mutual_information(std::span<const int64_t> a, std::span<const int64_t> b) {
  if (a.size() != b.size()) fail("NMI: partitions of {} and {} nodes", a.size(), b.size());
  if (a.empty()) fail("NMI: partitions have no nodes");
  int64_t n_a = 0, n_b = 0;
  const std::vector<int64_t> label_a = compact_labels(a, &n_a), label_b = compact_labels(b, &n_b);
  const double n = static_cast<double>(a.size());
  std::vector<double> count_a(n_a, 0.0), count_b(n_b, 0.0);
  std::map<std::pair<int64_t, int64_t>, double> joint_count;
  for (size_t i = 0; i < a.size(); ++i) {
    count_a[label_a[i]] += 1;
    count_b[label_b[i]] += 1;
    joint_count[{label_a[i], label_b[i]}] += 1;
  }
  auto entropy = [n](const std::vector<double>& counts) {
    double h = 0;
    for (const double c : counts) h -= c / n * std::log(c / n);
    return h;
  };
  const double h_a = entropy(count_a), h_b = entropy(count_b);
  if (h_a + h_b == 0) return 1.0;  // both a single community: identical
  double mutual_information = 0;
  for (const auto& [labels, count] : joint_count)
    mutual_information += count / n * std::log(count * n / (count_a[labels.first] * count_b[labels.second]));
  return std::clamp(2 * mutual_information / (h_a + h_b), 0.0, 1.0);
}

}  // namespace tdyn::topology
