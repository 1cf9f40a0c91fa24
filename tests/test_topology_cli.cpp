// The model-facing topology analysis (analysis/topology/topology_analysis.h) and `tdyn topology`: correlations through
// the model against a direct computation from saved hooks, the coupling as a pure function on hand-made
// cases, and a CLI run on stories260K.
#include <cmath>
#include <numeric>

#include <nlohmann/json.hpp>

#include "analysis/jacobian/jacobian_sums.h"
#include "analysis/pass/run.h"
#include "analysis/topology/correlation_sums.h"
#include "analysis/topology/topology_analysis.h"
#include "core/npy.h"
#include "model/loader.h"
#include "report/figure.h"
#include "test_util.h"

namespace tdyn {
namespace {

using linalg::Matrix;

using test::kStories;

// Three samples of different lengths from the model's golden token files.
std::vector<Sample> golden_samples() {
  const fs::path dir = test::shared_dir() / "models/stories260K";
  std::vector<int64_t> a = read_npy(dir / "input_tokens_once_upon_a_time_n64.npy").as_int64();
  std::vector<int64_t> b = read_npy(dir / "input_tokens_lily_and_tom_n64.npy").as_int64();
  std::vector<Sample> samples(3);
  samples[0].ids.assign(a.begin(), a.end());
  samples[1].ids.assign(b.begin(), b.begin() + 40);
  samples[2].ids.assign(b.begin() + 20, b.end());
  return samples;
}

TEST(TopologyAnalysis, Boundaries) {
  const auto layers = residual_boundaries(3, BoundarySet::Layers);
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_EQ(layers[0].hook, "blocks.0.hook_resid_pre");
  EXPECT_EQ(layers[2].sublayer, 4);
  EXPECT_EQ(layers[3].hook, "blocks.2.hook_resid_post");
  EXPECT_EQ(layers[3].sublayer, -1);
  const auto sublayers = residual_boundaries(3, BoundarySet::Sublayers);
  ASSERT_EQ(sublayers.size(), 7u);
  EXPECT_EQ(sublayers[1].hook, "blocks.0.hook_resid_mid");
  EXPECT_EQ(sublayers[1].sublayer, 1);
  EXPECT_EQ(parse_boundary_set("sublayers"), BoundarySet::Sublayers);
  EXPECT_THROW(parse_boundary_set("heads"), Error);
}

// The streaming, merged, per-boundary correlation equals a two-pass float64 computation over hooks saved to
// .npy from separate forward passes; the Jacobian-sharing pass and the hooks-only pass agree; and the mean
// Jacobians of the shared pass equal the Jacobian module's own mean_jacobians().
TEST(TopologyAnalysis, CorrelationThroughModelEqualsSavedHooks) {
  TDYN_REQUIRE_SHARED(kStories);
  auto model = load_model(test::shared_dir() / kStories);
  auto transformer = std::make_shared<const Transformer>(model);
  const JacobianModel jacobians(transformer);
  const std::vector<Sample> samples = golden_samples();
  const int64_t n_layers = model->config.n_layers, d = model->config.d_model;
  const auto boundaries = residual_boundaries(n_layers, BoundarySet::Sublayers);

  PassSpec spec;
  spec.boundaries = boundaries;
  spec.chunk = 1;  // each sample's products alone, as forward() makes them (pass/run.h)
  const PassFile shared = run_pass(*transformer, &jacobians, samples, spec, {});
  spec.jacobians = false;
  const PassFile hooks_only = run_pass(*transformer, nullptr, samples, spec, {});
  EXPECT_EQ(shared.n_samples(), 3);
  EXPECT_EQ(shared.n_tokens(), 64 + 40 + 44);
  EXPECT_EQ(shared.n_pairs(), 3);
  EXPECT_THROW(jacobian_sum(hooks_only, boundaries[0].hook), Error);

  // Save the hooks of every sample, then read them back.
  const fs::path dir = test::scratch_dir("topology_hooks");
  for (size_t s = 0; s < samples.size(); ++s) {
    ActivationCache cache("blocks.*.hook_resid_*");
    transformer->forward(samples[s].ids, &cache);
    for (const auto& b : boundaries) write_npy(dir / fmt::format("{}_{}.npy", s, b.hook), cache.at(b.hook));
  }
  for (size_t b = 0; b < boundaries.size(); ++b) {
    std::vector<double> rows;  // [tokens, d]
    for (size_t s = 0; s < samples.size(); ++s) {
      const std::vector<double> x = read_npy(dir / fmt::format("{}_{}.npy", s, boundaries[b].hook)).as_double();
      rows.insert(rows.end(), x.begin(), x.end());
    }
    const int64_t n = static_cast<int64_t>(rows.size()) / d;
    const topology::CorrelationAccumulator sums = correlation_sums(shared, boundaries[b].hook);
    ASSERT_EQ(n, sums.n_rows());
    std::vector<double> mean(d, 0.0), direct(d * d, 0.0);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < d; ++i) mean[i] += rows[t * d + i] / n;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j) direct[i * d + j] += (rows[t * d + i] - mean[i]) * (rows[t * d + j] - mean[j]);
    std::vector<double> r(d * d);
    for (int64_t i = 0; i < d; ++i)
      for (int64_t j = 0; j < d; ++j) r[i * d + j] = direct[i * d + j] / std::sqrt(direct[i * d + i] * direct[j * d + j]);

    const topology::CorrelationMatrix streamed = sums.correlation();
    EXPECT_TRUE(streamed.constant_units.empty());
    test::expect_close(streamed.values, r, 0, 1e-10, "correlation at " + boundaries[b].hook);
    test::expect_close(sums.means(), mean, 1e-10, 1e-12, "means at " + boundaries[b].hook);
    test::expect_close(correlation_sums(hooks_only, boundaries[b].hook).correlation().values, streamed.values, 0, 1e-12,
                       "hooks-only pass vs shared pass at " + boundaries[b].hook);
  }

  MeanJacobianOptions options;
  const MeanJacobians reference = mean_jacobians(jacobians, samples, options);
  for (size_t b = 0; b < boundaries.size(); ++b) {
    if (boundaries[b].sublayer < 0) {
      EXPECT_THROW(mean_jacobian(shared, boundaries[b].hook), Error);  // no map leaves the final boundary
      continue;
    }
    const Matrix& expected = reference.mean[boundaries[b].sublayer];
    EXPECT_LE((mean_jacobian(shared, boundaries[b].hook) - expected).cwiseAbs().maxCoeff(), 1e-10 * (1 + expected.cwiseAbs().maxCoeff()))
        << boundaries[b].hook;
  }
}

// Hand cases with known answers: layer 0's gains rise with the boundary score (ρ = +1), layer 1's fall (ρ = −1),
// layer 2's are unrelated; BH keeps the first two.
TEST(TopologyAnalysis, CouplingHandCase) {
  const int d = 8;
  std::vector<double> score = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8};
  const std::vector<double> unrelated_gain = {4, 8, 1, 5, 2, 7, 3, 6};  // Spearman with 1..8: ρ = 1/7 ... small
  Matrix rising = Matrix::Zero(d, d), falling = Matrix::Zero(d, d), unrelated = Matrix::Zero(d, d);
  for (int i = 0; i < d; ++i) {
    rising(i, i) = std::exp(i);
    unrelated(i, i) = unrelated_gain[i];
  }
  // falling = P diag(g): column i has norm g_i = 9 − i, rows are permuted; strictly upper part makes it non-normal.
  for (int i = 0; i < d; ++i) falling((i + 3) % d, i) = 9 - i;
  std::vector<std::vector<double>> scores = {score, score, score};
  scores[2][7] = std::nan("");  // a constant unit: left out
  CouplingOptions options;
  options.permutations = 2000;
  const CouplingResult c = topology_dynamics_coupling(scores, {rising, falling, unrelated}, options);
  ASSERT_EQ(c.layers.size(), 3u);
  EXPECT_EQ(c.decision_p, "permutation");
  EXPECT_DOUBLE_EQ(c.layers[0].column.test.rho, 1.0);
  EXPECT_EQ(c.layers[0].column.sign(), 1);
  EXPECT_DOUBLE_EQ(c.layers[1].column.test.rho, -1.0);
  EXPECT_EQ(c.layers[1].column.sign(), -1);
  EXPECT_EQ(c.layers[2].n_nodes, 7);
  EXPECT_LT(std::abs(c.layers[2].column.test.rho), 0.5);
  // A perfect ranking of 8 nodes is met by 2 of 8! orders: p = (hits + 1)/(2000 + 1) is near 1/2001.
  EXPECT_LT(c.layers[0].column.test.p_permutation, 0.01);
  EXPECT_LT(c.layers[0].column.test.p_parametric, 1e-20);  // ρ = 1 up to rounding
  EXPECT_TRUE(c.layers[0].column.significant);
  EXPECT_TRUE(c.layers[1].column.significant);
  EXPECT_FALSE(c.layers[2].column.significant);
  EXPECT_EQ(c.n_significant_column, 2);
  // BH by hand: m = 3, adjusted p_(i) = min_{j ≥ i} 3 p_(j) / j.
  const double p0 = c.layers[0].column.test.p_permutation, p1 = c.layers[1].column.test.p_permutation,
               p2 = c.layers[2].column.test.p_permutation;
  EXPECT_NEAR(c.layers[2].column.p_adjusted, std::min(1.0, p2), 1e-15);
  EXPECT_NEAR(std::max(c.layers[0].column.p_adjusted, c.layers[1].column.p_adjusted), std::min(std::max(p0, p1) * 3 / 2, p2), 1e-15);
  // Row gains: layer 0 is diagonal (rows = columns), layer 1's rows are the columns permuted.
  EXPECT_DOUBLE_EQ(c.layers[0].row.test.rho, 1.0);
  EXPECT_NE(c.layers[1].row.test.rho, -1.0);
  EXPECT_NEAR(c.layers[0].log_column_gain[5], 5.0, 1e-14);
  EXPECT_NEAR(c.layers[1].log_row_gain[3], std::log(9.0), 1e-14);  // row (0 + 3) holds column 0's entry 9
  // Operator type: the diagonal maps are symmetric and normal; the permutation-times-diagonal is neither.
  EXPECT_NEAR(c.layers[0].symmetry_index, 0, 1e-15);
  EXPECT_NEAR(c.layers[0].normalized_departure, 0, 1e-12);
  EXPECT_GT(c.layers[1].symmetry_index, 0.5);
  EXPECT_GT(c.layers[1].normalized_departure, 0.05);
  // Both significant layers have |ρ| = 1 ≥ the effect size: coupled. The sign rule over the three layers: ρ falls
  // where the departure from normality rises (the non-normal layer has ρ = −1).
  EXPECT_TRUE(c.layers[0].column.coupled && c.layers[1].column.coupled && !c.layers[2].column.coupled);
  EXPECT_EQ(c.n_coupled_column, 2);
  EXPECT_EQ(c.sign_rule.n, 3);
  EXPECT_LT(c.sign_rule.rho, 0);
  EXPECT_DOUBLE_EQ(c.sign_rule.rho, c.rho_vs_departure);
  EXPECT_TRUE(c.sign_rule.p_permutation > 0 && c.sign_rule.p_permutation <= 1);

  options.permutations = 0;
  const CouplingResult parametric = topology_dynamics_coupling(scores, {rising, falling, unrelated}, options);
  EXPECT_EQ(parametric.decision_p, "parametric");
  EXPECT_TRUE(std::isnan(parametric.layers[0].column.test.p_permutation));
  EXPECT_EQ(parametric.n_significant_column, 2);
  EXPECT_NEAR(parametric.layers[2].column.test.p_parametric,
              topology::correlation_t_test_p_value(parametric.layers[2].column.test.rho, 7), 1e-15);

  EXPECT_THROW(topology_dynamics_coupling({score}, {Matrix::Identity(4, 4)}, options), Error);
  EXPECT_THROW(topology_dynamics_coupling({score, score}, {rising}, options), Error);
  std::vector<double> constant_scores(d, 0.0);
  const CouplingResult flat = topology_dynamics_coupling({constant_scores}, {rising}, options);
  EXPECT_TRUE(std::isnan(flat.layers[0].column.test.rho));  // nothing to rank: no evidence, not an error
  EXPECT_FALSE(flat.layers[0].column.significant);
}

// A significant layer counts as coupled only with |ρ| ≥ min_effect; the sign rule needs 3 layers.
TEST(TopologyAnalysis, CouplingNeedsAnEffectSize) {
  const int d = 8;
  const std::vector<double> score = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8};
  Matrix exact = Matrix::Zero(d, d), one_swap = Matrix::Zero(d, d);
  for (int i = 0; i < d; ++i) exact(i, i) = 1 + i, one_swap(i, i) = 1 + i;
  std::swap(one_swap(3, 3), one_swap(4, 4));  // ρ = 1 − 6·2/(8·63) = 0.976
  CouplingOptions options;
  options.permutations = 4000;
  options.min_effect = 0.99;
  const CouplingResult c = topology_dynamics_coupling({score, score}, {exact, one_swap}, options);
  EXPECT_NEAR(c.layers[1].column.test.rho, 1 - 12.0 / 504, 1e-15);
  EXPECT_TRUE(c.layers[0].column.significant && c.layers[1].column.significant);
  EXPECT_TRUE(c.layers[0].column.coupled);
  EXPECT_FALSE(c.layers[1].column.coupled);
  EXPECT_EQ(c.n_significant_column, 2);
  EXPECT_EQ(c.n_coupled_column, 1);
  EXPECT_EQ(c.sign_rule.n, 2);
  EXPECT_TRUE(std::isnan(c.sign_rule.rho) && std::isnan(c.sign_rule.p_permutation));
  options.min_effect = 1.5;
  EXPECT_THROW(topology_dynamics_coupling({score}, {exact}, options), Error);
}

TEST(TopologyAnalysis, LayoutIsDeterministic) {
  topology::SignedGraph g;
  g.n_nodes = 6;
  g.edges = {{0, 1, 0.9}, {0, 2, 0.8}, {1, 2, 0.7}, {2, 3, -0.5}, {3, 4, 0.9}, {3, 5, 0.6}, {4, 5, 0.8}};
  const auto a = graph_layout(g, 3), b = graph_layout(g, 3);
  ASSERT_EQ(a.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i], b[i]);
    EXPECT_TRUE(std::isfinite(a[i].first) && std::isfinite(a[i].second));
  }
}

nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_file(path)); }

TEST(TopologyCli, Stories260KWithRandomInit) {
  TDYN_REQUIRE_SHARED(kStories);
  TDYN_REQUIRE_SHARED("data/wikitext-2/wiki.test.raw");
  const fs::path out = test::scratch_dir("topology_cli");
  std::string stdout_text, stderr_text;
  const std::string args = fmt::format(
      "topology {} --data {} --samples 6 --max-len 48 --out {} --permutations 300 --gamma-scan 0.02,0.1 "
      "--random-init --save-correlations --save-jacobians",
      (test::shared_dir() / kStories).string(), (test::shared_dir() / "data/wikitext-2/wiki.test.raw").string(), out.string());
  ASSERT_EQ(test::run_cli(args, &stdout_text, &stderr_text), 0) << stderr_text;

  const nlohmann::json j = read_json(out / "results.json");
  EXPECT_EQ(j["command"], "topology");
  EXPECT_EQ(j["model"]["d_model"], 64);
  const nlohmann::json& o = j["options"];
  EXPECT_EQ(o["boundaries"], "sublayers");  // attention and MLP maps both coupled
  EXPECT_EQ(o["graph"]["method"], "top_k");
  EXPECT_EQ(o["graph"]["k"], 10);
  EXPECT_DOUBLE_EQ(o["leiden"]["gamma"].get<double>(), 0.05);
  EXPECT_EQ(o["leiden"]["seed"], 1);
  EXPECT_EQ(o["gamma_scan"].size(), 2u);
  EXPECT_EQ(o["coupling"]["permutations"], 300);
  EXPECT_DOUBLE_EQ(o["coupling"]["fdr_q"].get<double>(), 0.05);
  EXPECT_EQ(o["coupling"]["jacobian_positions"], "last");
  EXPECT_EQ(o["samples"]["samples"], 6);
  EXPECT_EQ(o["random_init"]["seed"], 0);

  const int64_t n_layers = j["model"]["n_layers"];
  const nlohmann::json& r = j["results"];
  EXPECT_EQ(r["samples"], 6);
  ASSERT_EQ(r["boundaries"].size(), static_cast<size_t>(2 * n_layers + 1));
  for (const auto& b : r["boundaries"]) {
    EXPECT_GE(b["communities"].get<int64_t>(), 1);
    EXPECT_GE(b["edges"].get<int64_t>(), 64 * 10 / 2);
    EXPECT_EQ(b["gamma_scan"].size(), 2u);
  }
  EXPECT_EQ(r["boundaries"][1]["hook"], "blocks.0.hook_resid_mid");
  EXPECT_EQ(r["boundaries"][2 * n_layers]["hook"], fmt::format("blocks.{}.hook_resid_post", n_layers - 1));
  ASSERT_EQ(r["coupling"]["layers"].size(), static_cast<size_t>(2 * n_layers));
  EXPECT_EQ(r["coupling"]["layers"][1]["map"], "blocks.0.jac_mlp");
  EXPECT_LE(r["coupling"]["coupled_layers"].get<int64_t>(), r["coupling"]["significant_layers"].get<int64_t>());
  EXPECT_EQ(r["coupling"]["sign_rule"]["layers"], 2 * n_layers);
  EXPECT_TRUE(r["coupling"]["sign_rule"]["p_permutation"].is_number());
  EXPECT_EQ(r["coupling"]["decision_p"], "permutation");
  EXPECT_EQ(r["coupling"]["jacobian_pairs"], 6);
  for (const auto& l : r["coupling"]["layers"]) {
    EXPECT_TRUE(l["column_gain"]["rho"].is_number());
    EXPECT_TRUE(l["operator"]["normalized_departure"].is_number());
  }
  ASSERT_EQ(r["checkpoints"].size(), 2u);
  EXPECT_EQ(r["checkpoints"][0]["label"], "stories260K");
  EXPECT_EQ(r["checkpoints"][1]["label"], "random_init");
  EXPECT_TRUE(r["checkpoints"][1]["coupling"]["significant_layers"].is_number_integer());
  // Each map's coupled flag, for the emergence verdict over the series.
  for (const auto& c : r["checkpoints"]) {
    ASSERT_EQ(c["coupling"]["coupled"].size(), static_cast<size_t>(2 * n_layers));
    EXPECT_EQ(std::count(c["coupling"]["coupled"].begin(), c["coupling"]["coupled"].end(), true), c["coupling"]["coupled_layers"]);
  }

  for (const char* f : {"boundaries.csv", "coupling.csv", "gamma_scan.csv", "graph_layout.csv", "checkpoints.csv",
                        "graph_blocks.0.hook_resid_pre.csv", "communities_vs_depth.gp", "participation_vs_depth.gp",
                        "coupling_vs_depth.gp", "graph.gp", "compare_coupling.gp", "compare_communities.gp",
                        "compare/random_init/results.json", "compare/random_init/coupling.csv", "compare/random_init/model/config.json"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  EXPECT_TRUE(j["files"].contains("membership.npy"));
  const NpyArray membership = read_npy(out / "membership.npy");
  EXPECT_EQ(membership.shape, (Shape{2 * n_layers + 1, 64}));
  EXPECT_EQ(read_npy(out / "mean_jacobians.npy").shape, (Shape{2 * n_layers, 64, 64}));
  const std::vector<double> r0 = read_npy(out / "correlation_blocks.0.hook_resid_pre.npy").as_double();
  ASSERT_EQ(r0.size(), 64u * 64u);
  EXPECT_NEAR(r0[5 * 64 + 5], 1.0, 1e-12);
  EXPECT_NEAR(r0[3 * 64 + 9], r0[9 * 64 + 3], 1e-15);
  const topology::SignedGraph g = topology::read_edge_list_csv(out / "graph_blocks.0.hook_resid_pre.csv", 64);
  EXPECT_EQ(static_cast<int64_t>(g.edges.size()), r["boundaries"][0]["edges"].get<int64_t>());
  if (gnuplot_available()) {
    for (const char* f : {"communities_vs_depth.svg", "participation_vs_depth.svg", "coupling_vs_depth.svg", "graph.svg", "compare_coupling.svg"})
      EXPECT_TRUE(fs::exists(out / f)) << f;
  }
}

TEST(TopologyCli, TopologyOnlyWithThreshold) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path out = test::scratch_dir("topology_cli_threshold");
  std::string stderr_text;
  const std::string args = fmt::format("topology {} --prompt 'Once upon a time there was a little girl named Lily who liked "
                                       "to play outside in the park with her dog.' --out {} --no-coupling --threshold 0.3 "
                                       "--boundaries sublayers -q",
                                       (test::shared_dir() / kStories).string(), out.string());
  ASSERT_EQ(test::run_cli(args, nullptr, &stderr_text), 0) << stderr_text;
  EXPECT_EQ(stderr_text, "");  // --quiet: no progress
  const nlohmann::json j = read_json(out / "results.json");
  EXPECT_EQ(j["options"]["graph"]["method"], "threshold");
  EXPECT_TRUE(j["options"]["coupling"] == false);
  EXPECT_TRUE(j["results"]["coupling"].is_null());
  EXPECT_EQ(j["results"]["boundaries"].size(), 2u * j["model"]["n_layers"].get<size_t>() + 1);
  EXPECT_FALSE(fs::exists(out / "coupling.csv"));

  EXPECT_EQ(test::run_cli(fmt::format("topology {} --out {} --top-k 0", (test::shared_dir() / kStories).string(), out.string())), 2);
  EXPECT_EQ(test::run_cli(fmt::format("topology {} --prompt hi --out {} --positions middle", (test::shared_dir() / kStories).string(),
                                      out.string())), 1);
}

// --ablate: with layer 1's attention output zeroed, resid_mid = resid_pre there in every sample, so the two
// boundaries' correlation matrices are the same bit for bit, and the attention step's mean Jacobian is I (pre-norm).
TEST(TopologyCli, AblatedAttentionOutputLeavesItsStepTheIdentity) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path out = test::scratch_dir("topology_cli_ablate");
  std::string stderr_text;
  const std::string args = fmt::format("topology {} --samples 4 --max-len 32 --out {} --permutations 0 --ablate blocks.1.hook_attn_out "
                                       "--save-correlations --save-jacobians -q",
                                       (test::shared_dir() / kStories).string(), out.string());
  ASSERT_EQ(test::run_cli(args, nullptr, &stderr_text), 0) << stderr_text;
  const nlohmann::json j = read_json(out / "results.json");
  EXPECT_EQ(j["options"]["ablate"], nlohmann::json({"blocks.1.hook_attn_out:zero"}));
  EXPECT_EQ(read_npy(out / "correlation_blocks.1.hook_resid_mid.npy").as_double(),
            read_npy(out / "correlation_blocks.1.hook_resid_pre.npy").as_double());
  EXPECT_NE(read_npy(out / "correlation_blocks.0.hook_resid_mid.npy").as_double(),
            read_npy(out / "correlation_blocks.0.hook_resid_pre.npy").as_double());
  const NpyArray jacobians = read_npy(out / "mean_jacobians.npy");  // [coupling layer = sublayer k, d, d]
  const int64_t d = jacobians.shape[1];
  const std::vector<double> j_bar = jacobians.as_double();
  double worst = 0;
  for (int64_t r = 0; r < d; ++r)
    for (int64_t c = 0; c < d; ++c) worst = std::max(worst, std::abs(j_bar[(2 * d + r) * d + c] - (r == c ? 1.0 : 0.0)));
  EXPECT_LE(worst, 1e-12) << "J̄ of layer 1's attention step";
}

// --normality-from, as tdyn analyze runs topology after jacobian on one pass: the coupled maps' departure, symmetry
// index and complex share read from the jacobian part equal those topology computes alone from the same pass (a
// complex Schur form there, a real one here: to round-off), every other result is the same, and a jacobian run of
// other samples or a directory without one is refused.
TEST(TopologyCli, NormalityFromAJacobianRunOfTheSamePass) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path dir = test::scratch_dir("topology_cli_normality");
  const std::string model = (test::shared_dir() / kStories).string(), inputs = fmt::format("{} --samples 4 --max-len 32", model);
  std::string err;
  ASSERT_EQ(test::run_cli(fmt::format("-q analyze {} --skip power,power-l2,particles --no-init-control --interval-subsets 0 --out {}",
                                      inputs, (dir / "analyze").string()), nullptr, &err), 0) << err;
  const nlohmann::json analyze = read_json(dir / "analyze/results.json");
  const std::string argv = analyze["results"]["parts"]["topology"]["argv"].dump();
  EXPECT_NE(argv.find(fmt::format("\"--normality-from\",\"{}\"", (dir / "analyze/jacobian").string())), std::string::npos) << argv;
  const std::string pass = (dir / "analyze/pass/pass.tdynpass").string();
  ASSERT_EQ(test::run_cli(fmt::format("-q topology {} --from-pass {} --out {}", inputs, pass, (dir / "alone").string()), nullptr, &err), 0)
      << err;
  // Without the layout: no graph_layout.csv, every result the same.
  ASSERT_EQ(test::run_cli(fmt::format("-q topology {} --from-pass {} --no-layout --out {}", inputs, pass, (dir / "no_layout").string()),
                          nullptr, &err), 0) << err;
  EXPECT_TRUE(fs::exists(dir / "alone/graph_layout.csv"));
  EXPECT_FALSE(fs::exists(dir / "no_layout/graph_layout.csv"));
  nlohmann::json laid_out = read_json(dir / "alone/results.json")["results"], not_laid_out = read_json(dir / "no_layout/results.json")["results"];
  laid_out.erase("checkpoints"), not_laid_out.erase("checkpoints");
  EXPECT_EQ(laid_out, not_laid_out);

  nlohmann::json read = read_json(dir / "analyze/topology/results.json")["results"], own = read_json(dir / "alone/results.json")["results"];
  auto& own_layers = own["coupling"]["layers"];
  auto& read_layers = read["coupling"]["layers"];
  ASSERT_EQ(own_layers.size(), read_layers.size());
  ASSERT_GE(own_layers.size(), 2u);
  for (size_t l = 0; l < own_layers.size(); ++l) {
    for (const char* key : {"normalized_departure", "symmetry_index", "complex_fraction"}) {
      const double a = own_layers[l]["operator"][key], b = read_layers[l]["operator"][key];
      EXPECT_NEAR(a, b, 1e-12 + 1e-9 * std::abs(b)) << "layer " << l << " " << key;
    }
    own_layers[l].erase("operator"), read_layers[l].erase("operator");
  }
  own.erase("checkpoints"), read.erase("checkpoints");  // their results directories
  EXPECT_EQ(own, read);  // the sign rule too: the departures' ranks are the same
  EXPECT_EQ(read_json(dir / "analyze/topology/results.json")["options"]["coupling"]["normality_from"], (dir / "analyze/jacobian").string());

  // A jacobian run of other samples: its mean Jacobians are not these.
  ASSERT_EQ(test::run_cli(fmt::format("-q jacobian {} --samples 3 --max-len 32 --out {}", model, (dir / "other").string()), nullptr, &err), 0)
      << err;
  EXPECT_EQ(test::run_cli(fmt::format("-q topology {} --from-pass {} --normality-from {} --out {}", inputs, pass,
                                      (dir / "other").string(), (dir / "refused").string()), nullptr, &err), 1);
  EXPECT_NE(err.find("not the same mean Jacobian"), std::string::npos) << err;
  EXPECT_EQ(test::run_cli(fmt::format("-q topology {} --from-pass {} --normality-from {} --out {}", inputs, pass, dir.string(),
                                      (dir / "refused").string()), nullptr, &err), 1);
  EXPECT_NE(err.find("no results.json there"), std::string::npos) << err;
  fs::create_directories(dir / "corrupt");
  write_file_atomic(dir / "corrupt/results.json", "{\"results\": ");
  EXPECT_EQ(test::run_cli(fmt::format("-q topology {} --from-pass {} --normality-from {} --out {}", inputs, pass,
                                      (dir / "corrupt").string(), (dir / "refused").string()), nullptr, &err), 1);
  EXPECT_NE(err.find("not valid JSON"), std::string::npos) << err;
}

}  // namespace
}  // namespace tdyn
