// The HTML report: built from a synthetic analyze directory (hand-written results.json files and tiny SVGs), then
// checked structurally — sections, captions, verdicts, escaping of hostile strings, relative figure paths that
// exist, "not computed" for missing keys. Rendering in a browser is tests/report_renders_in_chromium.py's job.
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "report/html_report.h"
#include "test_util.h"

namespace tdyn {
namespace {

using json = nlohmann::json;

const char* kSvg = R"(<svg xmlns="http://www.w3.org/2000/svg" width="320" height="200"><rect width="320" height="200" fill="#eef"/>)"
                   R"(<circle cx="160" cy="100" r="60" fill="#36c"/></svg>)";

void write_part(const fs::path& dir, const std::string& command, json results, json options, const std::vector<std::string>& figures,
                json argv = nullptr) {
  fs::create_directories(dir);
  json files = json::object();
  for (const auto& f : figures) {
    write_file_atomic(dir / (f + ".svg"), kSvg);
    write_file_atomic(dir / (f + ".dat"), "0 0\n1 1\n");
    write_file_atomic(dir / (f + ".gp"), "plot 'x.dat'\n");
    for (const char* ext : {".svg", ".dat", ".gp"}) files[f + ext] = "figure: " + f;
  }
  files["layers.csv"] = "a table";
  json j = {{"schema_version", 1}, {"tool", "tdyn"}, {"tool_version", "0.1.0"}, {"command", command},
            {"argv", argv.is_null() ? json{"tdyn", command, "model.bin", "--out", dir.string()} : argv},
            {"model", {{"path", "model.bin"}, {"family", "llama"}}}, {"options", options}, {"timings", {{"total", 1.5}}},
            {"files", files}, {"results", results}};
  write_file_atomic(dir / "results.json", j.dump(2));
}

json power_results() {
  json layers = json::array();
  for (int t = 0; t < 4; ++t)
    layers.push_back({{"layer", t},
                      {"F", {{"complex_pair", t == 1}, {"modulus_ratio", 0.5}}},
                      {"dynamics_F", {{"gamma", 0.4}, {"baseline", 0.1}, {"rho", 0.7}, {"p_value", 0.001}}}});
  return {{"layers", layers}};
}

json jacobian_results() {
  json depths = json::array();
  const double rank[] = {60, 30, 12, 5};
  for (int k = 0; k < 4; ++k)
    depths.push_back({{"depth", k + 1},
                      {"mean", {{"henrici_departure", {{"schur_normalized", 0.4 - 0.1 * k}}}, {"symmetry_index", 0.8 - 0.2 * k},
                                {"complex_fraction", 0.5}}},
                      {"cumulative", {{"effective_rank", {{"roy_vetterli", rank[k]}}}}}});
  json surgery = json::array({{{"alpha", 0.0}, {"full_depth_surgery", {{"roy_vetterli", 40}}}, {"full_depth_control", {{"roy_vetterli", 6}}}},
                              {{"alpha", 1.0}, {"full_depth_surgery", {{"roy_vetterli", 5}}}, {"full_depth_control", {{"roy_vetterli", 5}}}}});
  return {{"models", json::array({{{"depths", depths}, {"surgery", surgery}}})}};
}

// An analyze directory: power and jacobian complete, topology with its coupling key missing, particles skipped.
fs::path synthetic_analyze_dir(const std::string& name) {
  const fs::path dir = test::scratch_dir(name);
  write_part(dir / "power", "power", power_results(), {{"mode", "full"}}, {"eigenvalues", "gamma_rho"},
             json{"tdyn", "power", "model.bin", "--prompt", "<script>alert(1)</script>", "--out", (dir / "power").string()});
  write_part(dir / "jacobian", "jacobian", jacobian_results(), {{"surgery", true}, {"note", "<img src=x onerror=alert(2)>"}},
             {"cumulative_effective_rank", "surgery", "metric_henrici_normalized", "eigenvalues_depth1", "mystery_plot"});
  write_part(dir / "topology", "topology", {{"boundaries", json::array({{{"communities", 3}}, {{"communities", 5}}})}}, json::object(),
             {"communities_vs_depth"});
  json top = {{"schema_version", 1}, {"command", "analyze"}, {"argv", {"tdyn", "analyze", "model.bin", "--out", dir.string()}},
              {"model", {{"path", "model.bin"}}}, {"options", {{"samples", 20}}}, {"timings", {{"total", 9.0}}}, {"files", json::object()},
              {"results", {{"order", {"power", "jacobian", "topology", "particles"}},
                           {"parts", {{"power", {{"dir", "power"}, {"status", "ok"}, {"seconds", 1.0}}},
                                      {"jacobian", {{"dir", "jacobian"}, {"status", "ok"}, {"seconds", 2.0}}},
                                      {"topology", {{"dir", "topology"}, {"status", "ok"}, {"seconds", 3.0}}},
                                      {"particles", {{"dir", "particles"}, {"status", "skipped"}}}}}}}};
  write_file_atomic(dir / "results.json", top.dump(2));
  return dir;
}

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos; pos = haystack.find(needle, pos + needle.size())) ++n;
  return n;
}

TEST(Report, EscapeAndShellQuoting) {
  EXPECT_EQ(html_escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(shell_command(json{"tdyn", "power", "a b", "it's", "--out=x/y"}), "tdyn power 'a b' 'it'\\''s' --out=x/y");
  EXPECT_NE(figure_caption("eigenvalues").find("unit circle"), std::string::npos);
  EXPECT_NE(figure_caption("compare1_cumulative_effective_rank").find("bottleneck"), std::string::npos);
  EXPECT_EQ(figure_caption("mystery_plot"), "");
  // The particle figures draw x on the sphere and z otherwise; their captions cover both.
  EXPECT_NE(figure_caption("trajectories").find("x_i(t) on the unit sphere"), std::string::npos);
  EXPECT_NE(figure_caption("clusters").find("of x or of z"), std::string::npos);
  EXPECT_NE(figure_caption("phi1_histogram").find("relative to their mean"), std::string::npos);
}

TEST(Report, SyntheticAnalyzeDirectory) {
  const fs::path dir = synthetic_analyze_dir("report_synthetic");
  const fs::path index = write_html_report(dir);
  ASSERT_TRUE(fs::exists(index));
  const std::string html = read_file(index);

  // Sections: the summary, one per paper, one per part (the skipped one says so).
  for (const char* s : {"id=\"summary\"", "Seed 000", "Seed 003", "Seed 004", "id=\"part-power\"", "id=\"part-jacobian\"",
                        "id=\"part-topology\"", "id=\"part-particles\"", "skipped (--skip)", "<details>"})
    EXPECT_NE(html.find(s), std::string::npos) << "missing " << s;

  // Verdicts from the synthetic numbers: every seed 000/003 rule passes except the missing coupling.
  const auto papers = summarize_claims(load_report_parts(dir));
  ASSERT_EQ(papers.size(), 3u);
  EXPECT_EQ(papers[0].checks[0].verdict, Verdict::kPass);
  EXPECT_EQ(papers[0].checks[1].verdict, Verdict::kPass);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(papers[1].checks[i].verdict, Verdict::kPass) << papers[1].checks[i].claim;
  EXPECT_EQ(papers[1].checks[3].verdict, Verdict::kNotComputed);  // topology without "coupling"
  for (const auto& c : papers[2].checks) EXPECT_EQ(c.verdict, Verdict::kNotComputed);  // particles skipped
  EXPECT_GE(count(html, "not computed"), 4u);

  // Hostile strings from files are escaped, never executed.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img src=x"), std::string::npos);
  EXPECT_NE(html.find("&#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39;"), std::string::npos);  // shell-quoted, then escaped

  // Every figure appears once with a relative path that exists; known figures have captions.
  std::regex img("<img src=\"([^\"]+)\"");
  std::set<std::string> sources;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), img); it != std::sregex_iterator(); ++it) {
    const std::string src = (*it)[1];
    EXPECT_FALSE(fs::path(src).is_absolute()) << src;
    EXPECT_EQ(src.find(':'), std::string::npos) << src;  // no URL scheme: nothing leaves the directory
    EXPECT_TRUE(fs::exists(dir / src)) << src;
    sources.insert(src);
  }
  EXPECT_EQ(sources.size(), 8u);
  EXPECT_TRUE(sources.count("jacobian/surgery.svg"));
  EXPECT_NE(html.find("bottleneck"), std::string::npos);
  EXPECT_NE(html.find("random baseline"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);  // self-contained: no network references
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

TEST(Report, SingleResultsDirectoryAndMissingKeys) {
  const fs::path dir = test::scratch_dir("report_single");
  write_part(dir, "power", json{{"layers", json::array({{{"layer", 0}}})}}, json::object(), {});  // no dynamics keys
  const std::string html = render_html_report(dir);
  EXPECT_NE(html.find("id=\"part-main\""), std::string::npos);
  const auto papers = summarize_claims(load_report_parts(dir));
  for (const auto& paper : papers)
    for (const auto& c : paper.checks) EXPECT_EQ(c.verdict, c.verdict == Verdict::kInfo ? Verdict::kInfo : Verdict::kNotComputed) << c.claim;
  // A corrupt results.json is reported, not thrown.
  write_file_atomic(dir / "results.json", "{ not json");
  EXPECT_NO_THROW(render_html_report(dir));
}

// Seed 004's verdicts are decided by the particles analysis (results.verdicts); the report shows each as written,
// "differs" included, and an older results.json without them as "not computed".
TEST(Report, ParticlesVerdictsAreShownAsWritten) {
  const fs::path dir = test::scratch_dir("report_particles_verdicts");
  auto verdict = [](const char* claim, const char* outcome, double value) {
    return json{{"paper", "004"}, {"claim", claim}, {"theorem", "hyperplanes"}, {"statement", std::string("statement of ") + claim},
                {"measure", "levels"}, {"value", value}, {"control", 20}, {"rule", std::string("rule of ") + claim},
                {"verdict", outcome}, {"note", ""}};
  };
  json results = {{"final", {{"time", 5}}},
                  {"verdicts", {verdict("clusters", "pass", 2), verdict("boolean", "differs", 0.4), verdict("leaders", "shown", 0)}}};
  write_part(dir, "particles", results, json{{"n", 20}}, {});
  auto papers = summarize_claims(load_report_parts(dir));
  ASSERT_EQ(papers.size(), 3u);
  const auto& checks = papers[2].checks;
  ASSERT_EQ(checks.size(), 4u);
  EXPECT_EQ(checks[0].verdict, Verdict::kPass);
  EXPECT_EQ(checks[0].claim, "statement of clusters");
  EXPECT_EQ(checks[0].rule, "rule of clusters");
  EXPECT_NE(checks[0].observed.find("levels = 2 at T = 5, 20 at t = 0"), std::string::npos) << checks[0].observed;
  EXPECT_EQ(checks[1].verdict, Verdict::kDiffers);
  EXPECT_EQ(checks[2].verdict, Verdict::kInfo);
  EXPECT_EQ(checks[3].verdict, Verdict::kNotComputed);  // no "rank" verdict written

  write_part(dir, "particles", json{{"final", {{"time", 5}, {"clusters", {{"count", 3}}}}}}, json{{"n", 20}}, {});
  papers = summarize_claims(load_report_parts(dir));
  for (const auto& c : papers[2].checks) EXPECT_EQ(c.verdict, Verdict::kNotComputed) << c.claim;
}

}  // namespace
}  // namespace tdyn
