// Tests of the topology core (SPEC §3 "Topology"): streaming correlation against a direct two-pass computation,
// sparsification, signed Leiden CPM on planted partitions and against python3-leidenalg's quality on a stored
// graph, boundary scores, rank statistics, BH-FDR and NMI against hand-computed cases.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "analysis/topology/topology.h"
#include "core/error.h"
#include "test_util.h"

namespace tdyn::topology {
namespace {

using Rows = std::vector<double>;  // (n_rows × d), row-major

// Activations with large, different per-unit offsets and small, correlated fluctuations: the regime where the
// unshifted one-pass formula loses its digits.
Rows correlated_activations(int64_t n_rows, int64_t d, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> offset(-1e4, 1e4), scale(1e-3, 10.0);
  std::vector<double> unit_offset(d), unit_scale(d), mixing(d);
  for (int64_t i = 0; i < d; ++i) {
    unit_offset[i] = offset(generator);
    unit_scale[i] = scale(generator);
    mixing[i] = normal(generator);
  }
  Rows rows(n_rows * d);
  for (int64_t r = 0; r < n_rows; ++r) {
    const double shared = normal(generator);
    for (int64_t i = 0; i < d; ++i)
      rows[r * d + i] = unit_offset[i] + unit_scale[i] * (mixing[i] * shared + normal(generator));
  }
  return rows;
}

// The reference: stored activations, two passes (mean, then centred products) in long double.
std::vector<double> direct_correlation(const Rows& rows, int64_t d) {
  const int64_t n = rows.size() / d;
  std::vector<long double> mean(d, 0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < d; ++i) mean[i] += rows[r * d + i];
  for (auto& m : mean) m /= n;
  std::vector<long double> centred_cross(d * d, 0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < d; ++i)
      for (int64_t j = 0; j < d; ++j)
        centred_cross[i * d + j] += (rows[r * d + i] - mean[i]) * (rows[r * d + j] - mean[j]);
  std::vector<double> r(d * d);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j)
      r[i * d + j] = static_cast<double>(centred_cross[i * d + j] /
                                         std::sqrt(centred_cross[i * d + i] * centred_cross[j * d + j]));
  return r;
}

std::span<const double> row_range(const Rows& rows, int64_t d, int64_t first, int64_t count) {
  return std::span<const double>(rows).subspan(first * d, count * d);
}

TEST(TopologyCorrelation, BatchesOfDifferentSizesAndMergeMatchDirectComputation) {
  const int64_t d = 37, n = 1000;
  const Rows rows = correlated_activations(n, d, 7);
  const std::vector<double> expected = direct_correlation(rows, d);

  // One accumulator fed in uneven batches (1, 6, 300, 193 rows), another over the rest (500 rows in two
  // batches): their shifts differ, so merging exercises the re-centring.
  CorrelationAccumulator first(d), second(d);
  int64_t at = 0;
  for (const int64_t batch : {1, 6, 300, 193}) {
    first.add_rows(row_range(rows, d, at, batch));
    at += batch;
  }
  second.add_rows(row_range(rows, d, at, 123));
  second.add_rows(row_range(rows, d, at + 123, n - at - 123));
  first.merge(second);
  ASSERT_EQ(first.n_rows(), n);

  const CorrelationMatrix merged = first.correlation();
  EXPECT_TRUE(merged.constant_units.empty());
  test::expect_close(merged.values, expected, 0, 1e-10, "merged streaming correlation vs direct");

  CorrelationAccumulator single(d);
  single.add_rows(rows);
  test::expect_close(single.correlation().values, expected, 0, 1e-10, "one-batch correlation vs direct");

  // Means and variances agree too.
  std::vector<double> direct_mean(d, 0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < d; ++i) direct_mean[i] += rows[r * d + i] / n;
  test::expect_close(first.means(), direct_mean, 1e-12, 0, "means");
}

TEST(TopologyCorrelation, ShiftAvoidsCatastrophicCancellation) {
  // Unit 0: mean 1e8, spread 1e-4 (the unshifted one-pass formula returns noise); unit 1 follows it.
  const int64_t d = 2, n = 2000;
  std::mt19937_64 generator(3);
  std::normal_distribution<double> normal;
  Rows rows(n * d);
  for (int64_t r = 0; r < n; ++r) {
    const double z = normal(generator);
    rows[r * d + 0] = 1e8 + 1e-4 * z;
    rows[r * d + 1] = 0.5 * z + 0.5 * normal(generator);
  }
  CorrelationAccumulator accumulator(d);
  for (int64_t at = 0; at < n; at += 250) accumulator.add_rows(row_range(rows, d, at, 250));
  const std::vector<double> expected = direct_correlation(rows, d);
  EXPECT_TRUE(accumulator.correlation().constant_units.empty());
  // The data are only stored to ~1e-8 relative to 1e8, so the fluctuations carry ~8 significant digits.
  EXPECT_NEAR(accumulator.correlation().at(0, 1), expected[1], 1e-6);
}

TEST(TopologyCorrelation, FloatRowsMatchDoubleRows) {
  const int64_t d = 16, n = 300;
  Rows rows = correlated_activations(n, d, 11);
  std::vector<float> rows_float(rows.begin(), rows.end());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = rows_float[i];  // same values in both precisions
  CorrelationAccumulator from_float(d), from_double(d);
  from_float.add_rows(rows_float);
  from_double.add_rows(rows);
  test::expect_close(from_float.correlation().values, from_double.correlation().values, 0, 1e-12, "float vs double");
}

TEST(TopologyCorrelation, ConstantUnitIsReportedAndGetsNoEdges) {
  const int64_t d = 6, n = 200;
  Rows rows = correlated_activations(n, d, 5);
  for (int64_t r = 0; r < n; ++r) rows[r * d + 2] = 0.1;  // unit 2 never moves
  CorrelationAccumulator accumulator(d);
  accumulator.add_rows(row_range(rows, d, 0, 3));
  accumulator.add_rows(row_range(rows, d, 3, n - 3));
  const CorrelationMatrix correlation = accumulator.correlation();
  ASSERT_EQ(correlation.constant_units, std::vector<int64_t>{2});
  for (int64_t j = 0; j < d; ++j) {
    EXPECT_TRUE(std::isnan(correlation.at(2, j)));
    EXPECT_TRUE(std::isnan(correlation.at(j, 2)));
  }
  EXPECT_EQ(correlation.at(0, 0), 1.0);
  const SignedGraph graph = top_k_graph(correlation, 3);
  for (const SignedEdge& edge : graph.edges) {
    EXPECT_NE(edge.source, 2);
    EXPECT_NE(edge.target, 2);
  }
}

TEST(TopologyCorrelation, BufferRoundTripResumesExactly) {
  const int64_t d = 9, n = 400;
  const Rows rows = correlated_activations(n, d, 13);
  CorrelationAccumulator uninterrupted(d), before_checkpoint(d);
  uninterrupted.add_rows(rows);
  before_checkpoint.add_rows(row_range(rows, d, 0, 150));
  const std::vector<double> buffer = before_checkpoint.to_buffer();
  EXPECT_EQ(buffer.size(), static_cast<size_t>(3 + 2 * d + d * (d + 1) / 2));
  CorrelationAccumulator resumed = CorrelationAccumulator::from_buffer(buffer);
  EXPECT_EQ(resumed.n_rows(), 150);
  EXPECT_EQ(resumed.to_buffer(), buffer);
  resumed.add_rows(row_range(rows, d, 150, n - 150));
  test::expect_close(resumed.correlation().values, uninterrupted.correlation().values, 0, 1e-12, "resumed");

  std::vector<double> truncated(buffer.begin(), buffer.end() - 1);
  EXPECT_THROW(CorrelationAccumulator::from_buffer(truncated), Error);
  std::vector<double> wrong_version = buffer;
  wrong_version[0] = 2;
  EXPECT_THROW(CorrelationAccumulator::from_buffer(wrong_version), Error);
  CorrelationAccumulator other_width(d + 1);
  EXPECT_THROW(resumed.merge(other_width), Error);
  EXPECT_THROW(resumed.add_rows(std::span<const double>(rows).first(d + 1)), Error);
}

CorrelationMatrix dense(int64_t n, std::vector<double> values) { return {n, std::move(values), {}}; }

TEST(TopologyGraph, TopKKeepsSignAndUnionsBothEnds) {
  // Node 3's strongest partner is 0 (|−0.9|); node 0's top-1 is 3 too. Node 1's top-1 is 2 (0.8), node 2's is 1.
  const CorrelationMatrix r = dense(4, {1.0, 0.1, 0.2, -0.9,  //
                                        0.1, 1.0, 0.8, 0.3,   //
                                        0.2, 0.8, 1.0, 0.7,   //
                                        -0.9, 0.3, 0.7, 1.0});
  const SignedGraph top1 = top_k_graph(r, 1);
  ASSERT_EQ(top1.edges.size(), 2u);
  EXPECT_EQ(top1.edges[0].source, 0);
  EXPECT_EQ(top1.edges[0].target, 3);
  EXPECT_EQ(top1.edges[0].weight, -0.9);
  EXPECT_EQ(top1.edges[1].source, 1);
  EXPECT_EQ(top1.edges[1].target, 2);
  // k = 2: 0→{3, 2}, 1→{2, 3}, 2→{1, 3}, 3→{0, 2}: union {(0,2), (0,3), (1,2), (1,3), (2,3)}.
  const SignedGraph top2 = top_k_graph(r, 2);
  ASSERT_EQ(top2.edges.size(), 5u);
  EXPECT_NO_THROW(top2.validate());
  const SignedGraph strong = threshold_graph(r, 0.75);
  ASSERT_EQ(strong.edges.size(), 2u);
  EXPECT_THROW(top_k_graph(r, 0), Error);
}

TEST(TopologyGraph, EdgeListCsvRoundTrip) {
  const fs::path dir = test::scratch_dir("topology_csv");
  SignedGraph graph{5, {{0, 1, 0.5}, {0, 4, -0.25}, {2, 3, 1e-7}}};
  write_edge_list_csv(dir / "g.csv", graph);
  const SignedGraph back = read_edge_list_csv(dir / "g.csv", 5);
  ASSERT_EQ(back.edges.size(), 3u);
  for (size_t e = 0; e < 3; ++e) {
    EXPECT_EQ(back.edges[e].source, graph.edges[e].source);
    EXPECT_EQ(back.edges[e].target, graph.edges[e].target);
    EXPECT_EQ(back.edges[e].weight, graph.edges[e].weight);
  }
  EXPECT_THROW(read_edge_list_csv(dir / "g.csv", 4), Error);  // node 4 out of range
  write_file_atomic(dir / "bad.csv", "source,target,weight\n0,1,x\n");
  EXPECT_THROW(read_edge_list_csv(dir / "bad.csv", 5), Error);
}

// Groups of equal size; within a group an edge with probability p_in and weight U(0.3, 1), across groups with
// probability p_out and weight −U(0.3, 1); each edge's sign flipped with probability `flip` (noise).
SignedGraph planted_signed_graph(int64_t n_groups, int64_t group_size, double p_in, double p_out, double flip,
                                 uint64_t seed, std::vector<int64_t>* truth) {
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<double> uniform(0, 1), magnitude(0.3, 1.0);
  SignedGraph graph;
  graph.n_nodes = n_groups * group_size;
  truth->resize(graph.n_nodes);
  for (int64_t i = 0; i < graph.n_nodes; ++i) (*truth)[i] = i / group_size;
  for (int64_t i = 0; i < graph.n_nodes; ++i)
    for (int64_t j = i + 1; j < graph.n_nodes; ++j) {
      const bool same = (*truth)[i] == (*truth)[j];
      if (uniform(generator) >= (same ? p_in : p_out)) continue;
      double weight = (same ? 1 : -1) * magnitude(generator);
      if (uniform(generator) < flip) weight = -weight;
      graph.edges.push_back({i, j, weight});
    }
  return graph;
}

TEST(TopologyLeiden, RecoversPlantedSignedPartition) {
  for (const uint64_t seed : {1, 2, 3}) {
    std::vector<int64_t> truth;
    const SignedGraph graph = planted_signed_graph(4, 30, 0.4, 0.15, 0.05, seed, &truth);
    LeidenOptions options;
    options.resolution = 0.05;
    options.seed = seed;
    const Partition partition = signed_leiden(graph, options);
    const double nmi = normalized_mutual_information(partition.membership, truth);
    std::printf("planted 4 x 30 (seed %d): NMI %.4f, %lld communities, Q %.3f (truth Q %.3f), %lld igraph passes\n",
                static_cast<int>(seed), nmi, static_cast<long long>(partition.n_communities), partition.quality,
                signed_cpm_quality(graph, truth, options.resolution), static_cast<long long>(partition.passes));
    EXPECT_GE(nmi, 0.95) << "seed " << seed;
    EXPECT_NEAR(partition.quality, signed_cpm_quality(graph, partition.membership, options.resolution), 1e-9);
    EXPECT_GE(partition.quality, signed_cpm_quality(graph, truth, options.resolution) - 1e-9);
  }
}

TEST(TopologyLeiden, SameSeedSameCommunities) {
  std::vector<int64_t> truth;
  const SignedGraph graph = planted_signed_graph(3, 20, 0.3, 0.2, 0.15, 9, &truth);
  const Partition a = signed_leiden(graph, {.resolution = 0.05, .seed = 4});
  const Partition b = signed_leiden(graph, {.resolution = 0.05, .seed = 4});
  EXPECT_EQ(a.membership, b.membership);
  EXPECT_EQ(a.quality, b.quality);
}

TEST(TopologyLeiden, QualityOfHandGraph) {
  // Q = Σ_{i≠j} (w_ij − γ) δ: internal edges (0,1,+1), (2,3,+1); three communities with one pair each.
  const SignedGraph graph{6, {{0, 1, 1.0}, {0, 2, 1.0}, {0, 4, 2.0}, {1, 2, -0.5}, {1, 5, -0.3}, {2, 3, 1.0}, {3, 4, -1.0}}};
  const std::vector<int64_t> membership{0, 0, 1, 1, 2, 2};
  EXPECT_NEAR(signed_cpm_quality(graph, membership, 0.1), 2 * (2.0 - 0.1 * 3), 1e-12);
  // Negative edges inside a community cost their full weight (the negative layer has γ = 0).
  EXPECT_NEAR(signed_cpm_quality(graph, std::vector<int64_t>{0, 0, 0, 1, 1, 1}, 0.0), 2 * (1.0 + 1.0 - 0.5 - 1.0), 1e-12);
  EXPECT_THROW(signed_cpm_quality(graph, std::vector<int64_t>{0, 1}, 0.1), Error);
}

TEST(TopologyLeiden, GammaScanSplitsMoreAtHigherResolution) {
  std::vector<int64_t> truth;
  const SignedGraph graph = planted_signed_graph(4, 30, 0.3, 0.2, 0.1, 5, &truth);
  const std::vector<double> gammas{0.0, 0.05, 0.5, 2.0};
  const std::vector<GammaScanPoint> scan = gamma_scan(graph, gammas);
  ASSERT_EQ(scan.size(), gammas.size());
  for (const GammaScanPoint& point : scan) {
    std::printf("gamma %.2f: %lld communities, Q %.3f\n", point.resolution, static_cast<long long>(point.n_communities),
                point.quality);
    EXPECT_NEAR(point.quality, signed_cpm_quality(graph, point.membership, point.resolution), 1e-9);
  }
  EXPECT_LT(scan[1].n_communities, scan[3].n_communities);
  EXPECT_EQ(scan[3].n_communities, graph.n_nodes);  // γ above every weight: singletons
}

TEST(TopologyLeiden, ReachesLeidenalgQualityOnStoredGraph) {
  const fs::path dir = test::source_dir() / "tests" / "data" / "topology";
  const nlohmann::json reference = nlohmann::json::parse(read_file(dir / "leidenalg_reference.json"));
  const int64_t n_nodes = reference["n_nodes"];
  const SignedGraph graph = read_edge_list_csv(dir / "signed_graph.csv", n_nodes);
  for (const auto& expected : reference["results"]) {
    const double gamma = expected["resolution"];
    const std::vector<int64_t> leidenalg_membership = expected["membership"];
    // Same formula on leidenalg's partition: the stored value and leidenalg's own number agree with ours.
    const double leidenalg_quality = signed_cpm_quality(graph, leidenalg_membership, gamma);
    EXPECT_NEAR(leidenalg_quality, expected["quality"].get<double>(), 1e-9);
    EXPECT_NEAR(leidenalg_quality, expected["leidenalg_quality"].get<double>(), 1e-9);

    const Partition ours = signed_leiden(graph, {.resolution = gamma, .seed = 1});
    const double relative_gap = (leidenalg_quality - ours.quality) / std::abs(leidenalg_quality);
    std::printf("gamma %.2f: tdyn Q %.6f (%lld communities), leidenalg Q %.6f (%d communities), gap %.4f %%, NMI %.4f\n",
                gamma, ours.quality, static_cast<long long>(ours.n_communities), leidenalg_quality,
                expected["n_communities"].get<int>(), 100 * relative_gap,
                normalized_mutual_information(ours.membership, leidenalg_membership));
    EXPECT_LE(relative_gap, 0.005) << "gamma " << gamma;
  }
}

TEST(TopologyBoundary, ParticipationAndRuleOnHandGraph) {
  const SignedGraph graph{6, {{0, 1, 1.0}, {0, 2, 1.0}, {0, 4, 2.0}, {1, 2, -0.5}, {1, 5, -0.3}, {2, 3, 1.0}, {3, 4, -1.0}}};
  const std::vector<int64_t> membership{0, 0, 1, 1, 2, 2};
  const BoundaryScores scores = boundary_scores(graph, membership);
  // Node 0: positive weight 1 into c0, 1 into c1, 2 into c2: P = 1 − (1 + 1 + 4)/16. Node 2: 1 into c0, 1 into c1.
  // Node 5 has no positive edge: k = 0, P = 0 by definition.
  test::expect_close(scores.participation, std::vector<double>{0.625, 0, 0.5, 0, 0, 0}, 0, 1e-15, "participation");
  test::expect_close(scores.positive_strength, std::vector<double>{4, 1, 2, 1, 2, 0}, 0, 0, "k_i");
  EXPECT_EQ(scores.n_other_communities, (std::vector<int64_t>{2, 0, 1, 0, 1, 0}));
  EXPECT_EQ(scores.bridges_communities, (std::vector<bool>{true, false, false, false, false, false}));
  const BoundaryScores any_sign = boundary_scores(graph, membership, BoundaryEdges::all);
  EXPECT_EQ(any_sign.n_other_communities, (std::vector<int64_t>{2, 2, 1, 1, 2, 1}));
  EXPECT_EQ(any_sign.bridges_communities, (std::vector<bool>{true, true, false, false, true, false}));
}

TEST(TopologyStatistics, AverageRanksAndSpearmanWithTies) {
  const std::vector<double> x{1, 2, 2, 3, 4, 4, 4, 5}, y{2, 1, 3, 3, 5, 4, 6, 6};
  EXPECT_EQ(average_ranks(x), (std::vector<double>{1, 2.5, 2.5, 4, 6, 6, 6, 8}));
  EXPECT_EQ(average_ranks(y), (std::vector<double>{2, 1, 3.5, 3.5, 6, 5, 7.5, 7.5}));
  // Pearson of those ranks by hand (r̄ = 4.5, n r̄² = 162): Σ rx ry − 162 = 36.25, Σ rx² − 162 = 39.5,
  // Σ ry² − 162 = 41.
  const double expected = 36.25 / std::sqrt(39.5 * 41.0);
  EXPECT_NEAR(spearman_correlation(x, y), expected, 1e-14);
  EXPECT_NEAR(expected, 0.9007775105401477, 1e-14);  // scipy.stats.spearmanr
  EXPECT_NEAR(spearman_correlation(x, std::vector<double>{8, 7, 7, 6, 5, 5, 5, 1}), -1.0, 1e-14);
  EXPECT_TRUE(std::isnan(spearman_correlation(x, std::vector<double>(8, 3.0))));
  EXPECT_THROW(spearman_correlation(x, std::vector<double>(7, 1.0)), Error);
}

TEST(TopologyStatistics, ParametricPValue) {
  // r = 0.5, n = 10: t = 0.5 sqrt(8 / 0.75) = 1.63299, two-sided Student t(8): 0.14111328125 (exact, even dof).
  EXPECT_NEAR(correlation_t_test_p_value(0.5, 10), 0.14111328125, 1e-12);
  EXPECT_NEAR(correlation_t_test_p_value(-0.5, 10), 0.14111328125, 1e-12);
  EXPECT_NEAR(correlation_t_test_p_value(0.9007775105401477, 8), 0.0022640090646742633, 1e-12);  // scipy
  EXPECT_EQ(correlation_t_test_p_value(1.0, 10), 0.0);
  EXPECT_NEAR(correlation_t_test_p_value(0.0, 10), 1.0, 1e-15);
}

TEST(TopologyStatistics, PermutationPValueIsUniformUnderNullAndTinyForMonotoneData) {
  std::mt19937_64 generator(2026);
  std::normal_distribution<double> normal;
  const int n_datasets = 400, n = 25, n_permutations = 199;
  int below_005 = 0, below_050 = 0;
  double sum = 0;
  for (int t = 0; t < n_datasets; ++t) {
    std::vector<double> x(n), y(n);
    for (int i = 0; i < n; ++i) {
      x[i] = normal(generator);
      y[i] = normal(generator);
    }
    const double p = spearman_permutation_p_value(x, y, n_permutations, 1000 + t);
    below_005 += p <= 0.05;
    below_050 += p <= 0.5;
    sum += p;
  }
  std::printf("null: P(p <= 0.05) = %.3f, P(p <= 0.5) = %.3f, mean p = %.3f\n", double(below_005) / n_datasets,
              double(below_050) / n_datasets, sum / n_datasets);
  EXPECT_NEAR(double(below_005) / n_datasets, 0.05, 0.035);
  EXPECT_NEAR(double(below_050) / n_datasets, 0.5, 0.08);
  EXPECT_NEAR(sum / n_datasets, 0.5, 0.05);

  std::vector<double> x(50), y(50);
  for (int i = 0; i < 50; ++i) {
    x[i] = i;
    y[i] = std::exp(0.1 * i);  // monotone, not linear
  }
  EXPECT_DOUBLE_EQ(spearman_permutation_p_value(x, y, 999, 1), 1.0 / 1000);
  const SpearmanTest test = spearman_test(x, y, 999, 1);
  EXPECT_NEAR(test.rho, 1.0, 1e-14);
  EXPECT_EQ(test.p_parametric, 0.0);
  EXPECT_EQ(spearman_permutation_p_value(x, y, 999, 1), spearman_permutation_p_value(x, y, 999, 1));
}

TEST(TopologyStatistics, BenjaminiHochbergHandCases) {
  // m = 6, sorted p: 0.005, 0.01, 0.03, 0.04, 0.045, 0.5; m p / rank: 0.03, 0.03, 0.06, 0.06, 0.054, 0.5; running
  // minimum from the top: 0.03, 0.03, 0.054, 0.054, 0.054, 0.5. Step-up: largest k with p_(k) ≤ k·0.05/6 is 2.
  const std::vector<double> p{0.01, 0.04, 0.03, 0.005, 0.5, 0.045};
  const FdrResult fdr = benjamini_hochberg(p, 0.05);
  test::expect_close(fdr.adjusted_p_values, std::vector<double>{0.03, 0.054, 0.054, 0.03, 0.5, 0.054}, 1e-14, 0,
                     "BH adjusted");
  EXPECT_EQ(fdr.rejected, (std::vector<bool>{true, false, false, true, false, false}));
  EXPECT_EQ(fdr.n_rejected, 2);
  // Step-up rejects everything when the largest p passes its own threshold.
  const FdrResult all = benjamini_hochberg(std::vector<double>{0.04, 0.01, 0.03, 0.02}, 0.05);
  test::expect_close(all.adjusted_p_values, std::vector<double>{0.04, 0.04, 0.04, 0.04}, 1e-14, 0, "BH all");
  EXPECT_EQ(all.n_rejected, 4);
  EXPECT_EQ(benjamini_hochberg(std::vector<double>{}, 0.05).n_rejected, 0);
  EXPECT_THROW(benjamini_hochberg(std::vector<double>{0.5, 1.5}, 0.05), Error);
  EXPECT_THROW(benjamini_hochberg(std::vector<double>{0.5}, 0.0), Error);
}

TEST(TopologyPartition, NormalizedMutualInformation) {
  const std::vector<int64_t> a{0, 0, 1, 1}, relabelled{7, 7, 3, 3}, b{0, 0, 0, 1};
  EXPECT_NEAR(normalized_mutual_information(a, relabelled), 1.0, 1e-15);
  // H(a) = ln 2, H(b) = −(¾ ln ¾ + ¼ ln ¼), I = ½ ln(4/3) + ¼ ln(2/3) + ¼ ln 2.
  const double h_a = std::log(2.0), h_b = -(0.75 * std::log(0.75) + 0.25 * std::log(0.25));
  const double mutual = 0.5 * std::log(4.0 / 3) + 0.25 * std::log(2.0 / 3) + 0.25 * std::log(2.0);
  EXPECT_NEAR(normalized_mutual_information(a, b), 2 * mutual / (h_a + h_b), 1e-14);
  EXPECT_NEAR(normalized_mutual_information(std::vector<int64_t>{0, 0, 1, 1}, std::vector<int64_t>{0, 1, 0, 1}), 0.0,
              1e-15);
  EXPECT_THROW(normalized_mutual_information(a, std::vector<int64_t>{0}), Error);
  std::vector<int64_t> membership{5, 9, 9, 5, 9, 2};
  EXPECT_EQ(canonical_membership(membership), 3);
  EXPECT_EQ(membership, (std::vector<int64_t>{1, 0, 0, 1, 0, 2}));
}

// The shuffled-unit null against its exact value on 4 units: of the 6 arrangements of {0, 0, 1, 1}, two (a and its
// complement) have NMI 1 with a, the other four NMI 0, so the null mean is 1/3 and P(null ≥ 1) = 1/3.
TEST(TopologyPartition, CommunitySimilarityNullOnFourUnits) {
  const std::vector<std::vector<int64_t>> a = {{0, 0, 1, 1}};
  const CommunitySimilarity c = community_similarity(a, a, 20000, 3);
  EXPECT_NEAR(c.nmi[0], 1.0, 1e-15);
  EXPECT_NEAR(c.null_mean[0], 1.0 / 3, 0.01);  // 3 standard errors of the Monte Carlo mean
  EXPECT_NEAR(c.p_value[0], 1.0 / 3, 0.01);
  EXPECT_NEAR(c.p_value_mean, c.p_value[0], 1e-15);  // one boundary: the mean is that boundary
  EXPECT_THROW(community_similarity(a, {{0, 1, 1}}, 10, 0), Error);
  EXPECT_THROW(community_similarity(a, {}, 10, 0), Error);
}

// The same communities relabelled are found far above the null; communities drawn independently of the model's are not.
TEST(TopologyPartition, CommunitySimilarityPlantedAndIndependent) {
  std::mt19937_64 rng(11);
  std::vector<std::vector<int64_t>> model, same, independent;
  for (int b = 0; b < 3; ++b) {
    std::vector<int64_t> m(64), r(64);
    for (int i = 0; i < 64; ++i) m[i] = (i * 7 + b) % 4, r[i] = static_cast<int64_t>(rng() % 4);
    std::vector<int64_t> relabelled = m;
    for (auto& v : relabelled) v = 10 + (3 - v);
    model.push_back(m), same.push_back(relabelled), independent.push_back(r);
  }
  const CommunitySimilarity planted = community_similarity(model, same, 999, 0);
  EXPECT_NEAR(planted.mean_nmi, 1.0, 1e-12);
  EXPECT_NEAR(planted.p_value_mean, 1.0 / 1000, 1e-15);
  EXPECT_LT(planted.mean_null, 0.2);
  const CommunitySimilarity unrelated = community_similarity(model, independent, 999, 0);
  EXPECT_GT(unrelated.p_value_mean, 0.05);
  EXPECT_NEAR(unrelated.mean_nmi, unrelated.mean_null, 0.05);
}

}  // namespace
}  // namespace tdyn::topology
