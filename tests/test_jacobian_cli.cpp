// tdyn jacobian / tdyn init end to end on stories260K, and the surgery identity dep(J_α) = |α| dep(J̄) on a real
// mean Jacobian.
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "analysis/jacobian/means.h"
#include "core/npy.h"
#include "model/loader.h"
#include "pipeline/parts.h"
#include "random_matrix.h"
#include "test_util.h"

namespace tdyn {
namespace {

using test::kStories;

TEST(JacobianSurgery, DepartureScalesWithAlphaOnARealMeanJacobian) {
  TDYN_REQUIRE_SHARED(kStories);
  JacobianModel model(std::make_shared<Transformer>(load_model(test::shared_dir() / kStories)));
  std::vector<Sample> samples(3);
  for (int s = 0; s < 3; ++s)
    for (int i = 0; i < 12 + s; ++i) samples[s].ids.push_back(1 + (i * 37 + s * 11) % 500);
  MeanJacobianOptions opts;
  opts.positions = PositionSpec::parse("all");
  const MeanJacobians mj = mean_jacobians(model, samples, opts);
  for (int64_t k : {0, 5, 9}) {
    const linalg::Matrix& j = mj.mean[k];
    const linalg::ComplexSchur schur = linalg::complex_schur(j);
    const double dep = schur.strictly_upper().norm();
    ASSERT_GT(dep, 1e-3 * j.norm()) << "the test needs a non-normal J̄";
    for (double alpha : {0.0, 0.3, 1.0, -0.7}) {
      const linalg::ComplexMatrix ja = schur_surgery(schur, alpha);
      // dep² in the identity form ‖J_α‖_F² − Σ|λ|², compared on the scale of ‖J‖_F² (cancellation).
      const double dep2 = ja.squaredNorm() - schur.eigenvalues().squaredNorm();
      EXPECT_NEAR(dep2, alpha * alpha * dep * dep, 1e-11 * j.squaredNorm()) << "depth " << k << " alpha " << alpha;
    }
    EXPECT_LE((schur_surgery(schur, 1.0) - j.cast<linalg::Complex>()).norm(), 1e-12 * j.norm());
    // The control has the same Frobenius norm of N at α = 1.
    const linalg::ComplexMatrix control = schur_surgery_control(schur, 1.0, 5);
    EXPECT_NEAR(std::sqrt(control.squaredNorm() - schur.eigenvalues().squaredNorm()), dep, 1e-6 * j.norm());
  }
  const std::vector<SurgeryPoint> sweep = schur_surgery_sweep(mj.mean, {{0, 0.5, 1}, 1});
  ASSERT_EQ(sweep.size(), 3u);
  for (const auto& p : sweep)
    for (double r : p.departure_ratio) EXPECT_NEAR(r, p.alpha, 1e-5);
  // At α = 1 the surgery's product is the cumulative product C_K itself; at α = 0 the control drops its N as the
  // surgery drops N, so the two agree.
  const linalg::Vector sigma = linalg::singular_values(cumulative_products(mj.mean).back());
  EXPECT_NEAR(sweep[2].surgery.back().roy_vetterli, effective_ranks(sigma).roy_vetterli, 1e-9 * effective_ranks(sigma).roy_vetterli);
  EXPECT_EQ(sweep[0].control.back().roy_vetterli, sweep[0].surgery.back().roy_vetterli);
  // Ranked at the full depth only (what the verdict reads), the full-depth ranks are the same and the others NaN.
  SurgeryOptions full_depth{{0, 0.5, 1}, 1};
  full_depth.full_depth_only = true;
  const std::vector<SurgeryPoint> last_only = schur_surgery_sweep(mj.mean, full_depth);
  for (size_t a = 0; a < sweep.size(); ++a) {
    ASSERT_EQ(last_only[a].surgery.size(), sweep[a].surgery.size());
    EXPECT_EQ(last_only[a].surgery.back().roy_vetterli, sweep[a].surgery.back().roy_vetterli) << "alpha " << sweep[a].alpha;
    EXPECT_EQ(last_only[a].control.back().stable_rank, sweep[a].control.back().stable_rank) << "alpha " << sweep[a].alpha;
    EXPECT_TRUE(std::isnan(last_only[a].surgery.front().roy_vetterli));
    EXPECT_EQ(last_only[a].to_json(), sweep[a].to_json());
  }
}

// The sweep split over processes as MPI ranks split it: three shares, each running its own tasks on every depth,
// give from their numbers the points one sweep gives, at every depth and with the further control draws.
TEST(JacobianCli, SurgerySweepSharesGiveTheWholeSweepsPoints) {
  std::vector<linalg::Matrix> means;
  for (uint64_t k = 0; k < 4; ++k) means.push_back(0.4 * test::random_gaussian(12, 12, 30 + k));
  for (bool full_depth_only : {false, true}) {
    SurgeryOptions options{{0, 0.5, 1}, 7};
    options.control_draws = 4;  // tasks: 2 controls, 3 further draws, 3 surgeries: every share has every kind
    options.full_depth_only = full_depth_only;
    SurgerySweep whole(options);
    std::vector<SurgerySweep> shares;
    for (int64_t i = 0; i < 3; ++i) shares.emplace_back(options, false, TaskShare{i, 3});
    for (const linalg::Matrix& mean : means) {
      const linalg::ComplexSchur schur = linalg::complex_schur(mean);
      whole.add(mean, schur);
      for (SurgerySweep& share : shares) share.add(mean, schur);
    }
    std::vector<std::vector<double>> numbers;
    for (const SurgerySweep& share : shares) numbers.push_back(share.share_numbers());
    const std::vector<SurgeryPoint> expected = whole.points(), got = shares[0].points_from_shares(numbers);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t a = 0; a < got.size(); ++a) {
      EXPECT_EQ(got[a].to_json(), expected[a].to_json()) << "alpha " << expected[a].alpha;
      EXPECT_EQ(got[a].departure_ratio, expected[a].departure_ratio);
      ASSERT_EQ(got[a].surgery.size(), means.size());
      for (size_t k = 0; k + 1 < means.size(); ++k)
        EXPECT_EQ(std::isnan(got[a].control[k].stable_rank) ? -1 : got[a].control[k].stable_rank,
                  std::isnan(expected[a].control[k].stable_rank) ? -1 : expected[a].control[k].stable_rank);
    }
    EXPECT_EQ(got[2].control_draws.size(), 4u);
  }
}

// The bottleneck's Haar null: Q J̄ Qᵀ has J̄'s singular values, so every draw's C_1 has the model's effective ranks
// exactly (up to round-off), while at the last depth the draws differ from the model and from each other. And the
// surgery's random-N draws at α = 1: the first is the control itself, the others new.
TEST(JacobianCli, HaarNullKeepsEachDepthsSpectrumAndSurgeryDrawsTheirOwnN) {
  TDYN_REQUIRE_SHARED(kStories);
  // jacobian on 4 samples of stories260K with surgery at α = 0 and 1 and 3 random-N draws, and `flags`, into `dir`.
  auto jacobian = [](const std::string& flags, const fs::path& dir) {
    std::string err;
    const int status = test::run_cli(fmt::format("--quiet jacobian {} --samples 4 --max-len 16 --surgery --alphas 0,1 "
                                                 "--surgery-control-draws 3 {} --out {}",
                                                 (test::shared_dir() / kStories).string(), flags, dir.string()),
                                     nullptr, &err);
    EXPECT_EQ(status, 0) << err;
    return nlohmann::json::parse(read_file(dir / "results.json"));
  };
  const fs::path dir = test::scratch_dir("jacobian_haar");
  const nlohmann::json r = jacobian("--haar-null 3", dir);
  EXPECT_EQ(r["options"]["haar_null_draws"], 3);
  const nlohmann::json& m = r["results"]["models"][0];
  const nlohmann::json& draws = m["haar_null"];
  ASSERT_EQ(draws.size(), 3u);
  const double first = m["depths"][0]["cumulative"]["effective_rank"]["roy_vetterli"];
  const double last = m["depths"].back()["cumulative"]["effective_rank"]["roy_vetterli"];
  std::set<double> lasts;
  for (const nlohmann::json& d : draws) {
    ASSERT_EQ(d["depths"].size(), 2u);
    EXPECT_EQ(d["depths"][1]["depth"], m["depths"].size());
    EXPECT_NEAR(d["depths"][0]["cumulative"]["effective_rank"]["roy_vetterli"].get<double>(), first, 1e-9 * first);
    const double null_last = d["depths"][1]["cumulative"]["effective_rank"]["roy_vetterli"];
    EXPECT_GT(std::abs(null_last - last), 1e-6 * last);
    lasts.insert(null_last);
  }
  EXPECT_EQ(lasts.size(), 3u) << "each draw rotates with its own Q";

  const nlohmann::json& at1 = m["surgery"][1];
  ASSERT_EQ(at1["alpha"], 1.0);
  const nlohmann::json& controls = at1["full_depth_control_draws"];
  ASSERT_EQ(controls.size(), 3u);
  EXPECT_EQ(controls[0]["roy_vetterli"], at1["full_depth_control"]["roy_vetterli"]);
  EXPECT_NE(controls[1]["roy_vetterli"], controls[0]["roy_vetterli"]);
  EXPECT_NE(controls[2]["roy_vetterli"], controls[1]["roy_vetterli"]);
  EXPECT_FALSE(m["surgery"][0].contains("full_depth_control_draws")) << "only at alpha = 1";

  // --surgery-full-depth-only: the same full-depth numbers, and NaN ranks at the other depths of surgery.csv;
  // --cumulative-ends-only: the same metrics of C_1 and C_K, none of the depths between.
  const fs::path full_depth = test::scratch_dir("jacobian_surgery_full_depth");
  const nlohmann::json f = jacobian("--surgery-full-depth-only --cumulative-ends-only", full_depth);
  EXPECT_EQ(f["options"]["surgery_full_depth_only"], true);
  EXPECT_EQ(f["results"]["models"][0]["surgery"], m["surgery"]);
  const std::string csv = read_file(full_depth / "surgery.csv");
  EXPECT_NE(csv.find("nan"), std::string::npos) << csv.substr(0, 400);
  const nlohmann::json& depths = f["results"]["models"][0]["depths"];
  EXPECT_EQ(depths.front()["cumulative"], m["depths"].front()["cumulative"]);
  EXPECT_EQ(depths.back()["cumulative"], m["depths"].back()["cumulative"]);
  EXPECT_EQ(depths.front()["mean"], m["depths"].front()["mean"]);
  for (size_t k = 1; k + 1 < depths.size(); ++k) EXPECT_TRUE(depths[k]["cumulative"].is_null()) << "depth " << k + 1;
  const NpyArray sigma = read_npy(full_depth / "cumulative.singular_values.npy");
  EXPECT_TRUE(std::isnan(sigma.as_double()[sigma.shape[1]])) << "depth 2 not computed";
  EXPECT_FALSE(std::isnan(sigma.as_double().back()));

  // --verdict-metrics-only: what the verdicts and compare read is the same (to the round-off of singular values
  // computed without vectors); the ends' eigenvalue metrics and every self-alignment are not computed.
  const fs::path verdicts_dir = test::scratch_dir("jacobian_verdict_metrics");
  const nlohmann::json v = jacobian("--surgery-full-depth-only --verdict-metrics-only", verdicts_dir);
  EXPECT_EQ(v["options"]["verdict_metrics_only"], true);
  EXPECT_TRUE(v["options"]["alignment_ks_used"].empty());
  EXPECT_EQ(v["results"]["models"][0]["surgery"], m["surgery"]);
  const auto near = [](const nlohmann::json& a, const nlohmann::json& b, const char* what) {
    EXPECT_NEAR(a.get<double>(), b.get<double>(), 1e-12 * std::abs(b.get<double>())) << what;
  };
  const nlohmann::json& vd = v["results"]["models"][0]["depths"];
  ASSERT_EQ(vd.size(), m["depths"].size());
  for (size_t k = 0; k < vd.size(); ++k) {
    const nlohmann::json &got = vd[k]["mean"], &full = m["depths"][k]["mean"];
    for (const char* key : {"henrici_departure", "complex_fraction", "expanding_fraction", "symmetry_index", "spectral_radius", "frobenius_norm"})
      EXPECT_EQ(got[key], full[key]) << "depth " << k + 1 << ": " << key << " comes from the same Schur form";
    EXPECT_TRUE(got["self_alignment"].empty());
    near(got["effective_rank"]["roy_vetterli"], full["effective_rank"]["roy_vetterli"], "mean's effective rank");
    if (k > 0 && k + 1 < vd.size()) EXPECT_TRUE(vd[k]["cumulative"].is_null()) << "depth " << k + 1;
  }
  for (const nlohmann::json* end : {&vd.front(), &vd.back()}) {
    const nlohmann::json& c = (*end)["cumulative"];
    const nlohmann::json& full = m["depths"][(*end)["depth"].get<size_t>() - 1]["cumulative"];
    near(c["effective_rank"]["roy_vetterli"], full["effective_rank"]["roy_vetterli"], "C_k's effective rank");
    near(c["spectral_norm"], full["spectral_norm"], "C_k's spectral norm");
    for (const char* key : {"spectral_radius", "complex_fraction", "expanding_fraction"}) EXPECT_TRUE(c[key].is_null()) << key;
    EXPECT_TRUE(c["henrici_departure"]["schur_normalized"].is_null());
  }
  const std::string ends = read_file(verdicts_dir / "cumulative.eigenvalues.npy");
  double last_real = 0;  // complex128 [depth, d]: the last eigenvalue's real part is the file's last 16 bytes' first 8
  std::memcpy(&last_real, ends.data() + ends.size() - 16, sizeof last_real);
  EXPECT_TRUE(std::isnan(last_real)) << "no Schur form of C_K";
  EXPECT_FALSE(std::isnan(read_npy(verdicts_dir / "cumulative.singular_values.npy").as_double().back()));
  EXPECT_EQ(read_file(verdicts_dir / "metrics_mean.csv").find("alignment"), std::string::npos);
}

// tdyn init --match-scales: every kind of tensor of the initialisation has the source's mean and spread (up to the
// sampling error of its count), here the GPT-2 fixture's, whose norm scales are N(1, 0.1) and whose c_proj is as
// large as every other matrix, unlike the family's rule.
TEST(InitCli, MatchScalesDrawsEachKindAtTheSourcesMoments) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2/config.json");
  const fs::path source = test::shared_dir() / "fixtures/gpt2", dir = test::scratch_dir("init_match_scales");
  std::string err;
  ASSERT_EQ(test::run_cli(fmt::format("init {} --seed 4 --match-scales --out {}", source.string(), dir.string()), nullptr, &err), 0) << err;
  const TensorMoments want = tensor_moments(*load_model(source)), got = tensor_moments(*load_model(dir));
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [key, m] : want) {
    ASSERT_TRUE(got.count(key)) << static_cast<int>(key.first);
    const Moments& g = got.at(key);
    // Five standard errors of a sample of that many values: of its spread σ/√(2n), of its mean σ/√n.
    ASSERT_EQ(g.count, m.count);
    const double n = static_cast<double>(m.count);
    EXPECT_NEAR(g.std, m.std, 5 * m.std / std::sqrt(2 * n) + 1e-12) << "role " << static_cast<int>(key.first) << (key.second == Part::Bias ? " bias" : "");
    EXPECT_NEAR(g.mean, m.mean, 5 * m.std / std::sqrt(n) + 1e-12) << "role " << static_cast<int>(key.first);
  }
  const nlohmann::json provenance = nlohmann::json::parse(read_file(dir / "tdyn_init.json"));
  EXPECT_EQ(provenance["matched_moments"].size(), want.size());
  EXPECT_EQ(test::run_cli(fmt::format("init {} --match-scales --initializer-range 0.1 --out {}", source.string(), dir.string()), nullptr, &err), 2)
      << "the two ways to set the scale exclude each other";
}

TEST(JacobianCli, Stories260KWithInitCompareSurgeryAndPerSample) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path dir = test::scratch_dir("jacobian_cli");
  const std::string model = (test::shared_dir() / kStories).string();
  const fs::path init = dir / "init";
  std::string out, err;
  ASSERT_EQ(test::run_cli(fmt::format("init {} --seed 3 --out {}", model, init.string()), &out, &err), 0) << err;
  ASSERT_TRUE(fs::exists(init / "config.json"));
  ASSERT_TRUE(fs::exists(init / "model.safetensors"));
  // The init loads and runs.
  ASSERT_EQ(test::run_cli(fmt::format("run {} --ids 1,2,3 --max-new-tokens 2", init.string()), &out, &err), 0) << err;

  const fs::path res = dir / "res";
  ASSERT_EQ(test::run_cli(fmt::format("jacobian {} --compare {} --samples 3 --max-len 24 --out {} --surgery --alphas 0,1 "
                                      "--save-per-sample --cumulative both --quiet",
                                      model, init.string(), res.string()),
                          &out, &err),
            0)
      << err;
  EXPECT_EQ(err, "") << "--quiet after the subcommand silences the progress, as before it";
  const nlohmann::json r = nlohmann::json::parse(read_file(res / "results.json"));
  EXPECT_EQ(r["command"], "jacobian");
  EXPECT_EQ(r["options"]["positions"], "last");
  EXPECT_EQ(r["options"]["mean"], "structured");
  EXPECT_EQ(r["options"]["samples"]["samples"], 3);
  ASSERT_EQ(r["results"]["models"].size(), 2u);
  for (const auto& m : r["results"]["models"]) {
    EXPECT_EQ(m["samples"], 3);
    ASSERT_EQ(m["depths"].size(), 10u);  // 5 layers × (attention, MLP)
    EXPECT_TRUE(m["depths"][0]["mean"].contains("henrici_departure"));
    EXPECT_TRUE(m["depths"][9]["cumulative"]["effective_rank"].contains("roy_vetterli"));
    EXPECT_TRUE(m["depths"][9].contains("mean_of_products"));
    ASSERT_EQ(m["surgery"].size(), 2u);
    EXPECT_LT(m["surgery"][1]["max_abs_departure_ratio_minus_alpha"].get<double>(), 1e-8);
  }
  for (const char* f : {"mean_jacobians.npy", "cumulative_products.npy", "mean.eigenvalues.npy", "cumulative.singular_values.npy",
                        "compare1.mean_jacobians.npy", "mean_of_products.npy", "metrics_mean.csv", "metrics_cumulative.csv",
                        "surgery.csv", "cumulative_effective_rank.dat", "cumulative_effective_rank.gp", "surgery.gp",
                        "metric_henrici_normalized.dat", "eigenvalues_depth1.dat"})
    EXPECT_TRUE(fs::exists(res / f)) << f;
  // d = 64: self-alignment at k = 100 ≥ d would be 1 for every matrix, so it is neither computed nor plotted, and a
  // note says so; k = 1 and 10 are.
  EXPECT_EQ(r["options"]["alignment_ks"], nlohmann::json({1, 10, 100}));
  EXPECT_EQ(r["options"]["alignment_ks_used"], nlohmann::json({1, 10}));
  ASSERT_TRUE(r["results"]["notes"].is_array());
  bool noted = false;
  for (const auto& n : r["results"]["notes"]) noted |= n.get<std::string>().find("k = 100 skipped") != std::string::npos;
  EXPECT_TRUE(noted) << r["results"]["notes"].dump();
  EXPECT_EQ(r["results"]["models"][0]["depths"][0]["mean"]["self_alignment"].size(), 2u);
  EXPECT_TRUE(fs::exists(res / "metric_alignment_k10.dat"));
  EXPECT_FALSE(fs::exists(res / "metric_alignment_k100.dat"));
  EXPECT_FALSE(r["files"].contains("metric_alignment_k100.dat"));
  const std::string csv = read_file(res / "metrics_mean.csv");
  const std::string header = csv.substr(0, csv.find('\n'));
  EXPECT_NE(header.find("alignment_k10,"), std::string::npos) << header;
  EXPECT_EQ(header.find("alignment_k100"), std::string::npos) << header;
  // Per-sample files carry the sample's last position.
  bool found = false;
  for (const auto& e : fs::directory_iterator(res / "per_sample"))
    found |= e.path().filename().string().ends_with(".blocks.4.jac_mlp.npy");
  EXPECT_TRUE(found);
  // Bad usage is an error, not a crash.
  EXPECT_NE(test::run_cli(fmt::format("jacobian {} --samples 2 --out {} --positions x --quiet", model, (dir / "bad").string()),
                          &out, &err),
            0);
}

// --ablate: the pass's mean Jacobians of the ablated model equal the plain mean of its per-sample Jacobians (whose
// states come from JacobianModel::run, not the pass's stacked layers); the layers before the ablated one are the
// model's own, bit for bit, and the ablated sublayer's mean moves.
TEST(JacobianCli, AblatedHeadInThePassAndPerSample) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path dir = test::scratch_dir("jacobian_ablate");
  const std::string model = (test::shared_dir() / kStories).string();
  auto run = [&](const std::string& name, const std::string& args) {
    std::string out, err;
    const int status = test::run_cli(fmt::format("--quiet jacobian {} --samples 3 --max-len 24 --out {} {}", model,
                                                 (dir / name).string(), args), &out, &err);
    EXPECT_EQ(status, 0) << args << ": " << err;
    return read_npy(dir / name / "mean_jacobians.npy");
  };
  const std::string ablate = "--ablate 'blocks.1.attn.hook_z:heads=0,3'";
  const NpyArray full = run("full", ""), pass = run("pass", ablate), plain = run("plain", ablate + " --mean plain");
  const int64_t d = full.shape[1], per_depth = d * d;
  const std::vector<double> f = full.as_double(), p = pass.as_double(), q = plain.as_double();
  ASSERT_EQ(p.size(), f.size());
  EXPECT_TRUE(std::equal(f.begin(), f.begin() + 2 * per_depth, p.begin())) << "layer 0 is not ablated";
  double moved = 0, scale = 0;
  for (int64_t i = 2 * per_depth; i < 3 * per_depth; ++i) moved = std::max(moved, std::abs(p[i] - f[i])), scale = std::max(scale, std::abs(f[i]));
  EXPECT_GT(moved, 1e-3 * scale) << "the ablated heads' sublayer";
  test::expect_close(p, q, 1e-5, 1e-6, "pass vs per-sample Jacobians of the ablated model");
  const nlohmann::json r = nlohmann::json::parse(read_file(dir / "pass" / "results.json"));
  EXPECT_EQ(r["options"]["ablate"], nlohmann::json({"blocks.1.attn.hook_z:zero:heads=0,3"}));

  for (const auto& [args, error] : std::vector<std::pair<std::string, std::string>>{
           {"--ablate blocks.0.hook_resid_post", "blocks.0.hook_resid_post is a residual-stream boundary"},
           {"--ablate blocks.0.mlp.hook_post:mean", "the analyses run zero ablations only"},
           {"--ablate 'blocks.0.attn.hook_z:heads=99'", "head 99 is out of range"},
           {"--ablate blocks.0.hook_pattern", "'blocks.0.hook_pattern' matches no writable hook"}}) {
    std::string out, err;
    EXPECT_NE(test::run_cli(fmt::format("--quiet jacobian {} --samples 3 --max-len 24 --out {} {}", model, (dir / "bad").string(), args),
                            &out, &err), 0) << args;
    EXPECT_NE(err.find(error), std::string::npos) << args << ": " << err;
  }
}

// Each --ids is one sample, in the order given: the same analysis as a .ids file of those lines, and results.json
// records them as given (one sample as one list, several as a list of lists).
TEST(JacobianCli, RepeatedIdsAreSamplesInTheirOrder) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path dir = test::scratch_dir("jacobian_ids");
  const std::string model = (test::shared_dir() / kStories).string();
  auto run = [&](const std::string& name, const std::string& input) {
    std::string out, err;
    EXPECT_EQ(test::run_cli(fmt::format("--quiet jacobian {} {} --out {}", model, input, (dir / name).string()), &out, &err), 0)
        << input << ": " << err;
    return nlohmann::json::parse(read_file(dir / name / "results.json"))["options"]["samples"]["ids"];
  };
  std::ofstream(dir / "samples.ids") << "1 5 9 2 7\n3 4 5\n";
  EXPECT_EQ(run("repeated", "--ids 1,5,9,2,7 --ids 3,4,5"), nlohmann::json({{1, 5, 9, 2, 7}, {3, 4, 5}}));
  EXPECT_EQ(run("file", "--data " + (dir / "samples.ids").string()), nlohmann::json::array());
  EXPECT_EQ(run("one", "--ids 1,5,9,2,7"), nlohmann::json({1, 5, 9, 2, 7}));
  const std::vector<double> repeated = read_npy(dir / "repeated" / "mean_jacobians.npy").as_double();
  EXPECT_EQ(repeated, read_npy(dir / "file" / "mean_jacobians.npy").as_double());
  EXPECT_NE(repeated, read_npy(dir / "one" / "mean_jacobians.npy").as_double());
}

}  // namespace
}  // namespace tdyn
