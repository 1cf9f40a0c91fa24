// tdyn analyze MODEL --out DIR: every analysis of the three papers on one model, then the report.
//   DIR/power      seed 000: layer matrices, spectra, token alignment (tdyn power)
//   DIR/jacobian   seed 003: mean Jacobians, cumulative products, metrics, Schur surgery (tdyn jacobian --surgery)
//   DIR/topology   seed 003: correlation graphs, signed Leiden, coupling with the Jacobian gains (tdyn topology)
//   DIR/particles  seed 004: one attention head of the model simulated as interacting particles (tdyn particles)
//   DIR/index.html the report; DIR/results.json which parts ran, their command lines, status and timings.
//
// Each part runs as a child process of this same executable (/proc/self/exe) with an argv built here. Why not in
// process: every subcommand records the process's own command line in its results.json, and that line must
// reproduce the part on its own; a child also confines a failing or crashing part, so the others and the report
// still complete, and returns its memory when it ends. Nothing is shared between parts yet: each loads the
// model (memory-mapped, so cheap) and runs its own forward passes over the same samples (same --data,
// --samples and sample seed, so the same passages). Sharing those passes is a later optimisation.

#include <chrono>
#include <cmath>
#include <iostream>
#include <numeric>
#include <random>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "analysis/layer_matrix.h"
#include "cli_util.h"
#include "command.h"
#include "core/npy.h"
#include "report/html_report.h"
#include "report/progress.h"
#include "report/results.h"


namespace tdyn::cli {
namespace {

const std::vector<std::string> kParts = {"power", "jacobian", "topology", "particles"};

struct AnalyzeArgs {
  ModelArgs model;
  std::string data, out_dir, skip;
  int64_t samples = 200, max_len = 128;
  int64_t head_layer = 0, head = 0, particles_tokens = 32;
  double particles_t = 20;  // a real head on the sphere clusters between T = 10 and 15 on stories260K; 5 is too short
};

// The real-model bridge of seed 004: head `h` of layer `l` as the paper's (Q, K, V, O), β = the model's attention
// scale absorbed in Q, the pre-attention norm folded in (below), and the first n tokens of the first sample's
// embeddings, normalised to unit length, as the initial particles. RoPE, the causal mask and the MLP are left
// out, as in the paper's model.
std::vector<std::string> write_bridge(const AnalyzeArgs& a, const Model& model, const fs::path& dir, nlohmann::json* record) {
  const ModelConfig& c = model.config;
  if (a.head_layer >= c.n_layers) fail("--particles-layer {}: the model has {} layers", a.head_layer, c.n_layers);
  if (a.head >= c.n_heads) fail("--particles-head {}: the model has {} heads", a.head, c.n_heads);
  const LayerWeights& w = model.weights.layers.at(a.head_layer);
  if (!w.q || !w.k) fail("layer {} has no query/key projection of its own", a.head_layer);
  const int64_t d = c.d_model, dh = c.layer(a.head_layer).d_head, kv = a.head / (c.n_heads / c.n_kv_heads);
  // The head sees RMSNorm/LayerNorm output g ⊙ sqrt(d) x̂ for a unit token x̂ (ignoring any norm bias), so the
  // particles live on the unit sphere and the diagonal map sqrt(d) g is folded into Q, K and V; without it the
  // scores are d times too small and P stays near uniform.
  const double beta = c.attn_scale > 0 ? c.attn_scale : 1.0 / std::sqrt(static_cast<double>(dh));
  std::vector<double> gain(d, std::sqrt(static_cast<double>(d)));
  if (w.attn_norm.w)
    for (int64_t i = 0; i < d; ++i) gain[i] *= w.attn_norm.w[i];
  std::vector<double> q(dh * d), k(dh * d), v(dh * d), o(d * dh);
  const linalg::Matrix values = expanded_value_matrix(model, a.head_layer), outputs = output_matrix(model, a.head_layer);
  for (int64_t r = 0; r < dh; ++r)
    for (int64_t i = 0; i < d; ++i) {
      q[r * d + i] = beta * w.q.at(a.head * dh + r, i) * gain[i];
      k[r * d + i] = w.k.at(kv * dh + r, i) * gain[i];
      v[r * d + i] = values(a.head * dh + r, i) * gain[i];
      o[i * dh + r] = outputs(i, a.head * dh + r);
    }

  SampleArgs one;
  one.options.data = a.data;
  one.options.samples = 1;
  one.options.min_len = 1;
  std::vector<int32_t> ids = one.load(a.model.path, c.d_vocab).at(0).ids;
  const int64_t n = std::min<int64_t>(a.particles_tokens, ids.size());
  // ALBERT's factorised embeddings are narrower than d_model; there the particles start from random unit vectors.
  const bool embeddings_fit = model.weights.embed && (c.d_embed == 0 || c.d_embed == d);
  std::mt19937_64 rng(0);
  std::normal_distribution<double> gaussian;
  std::vector<double> x0(n * d);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = embeddings_fit ? model.weights.embed + static_cast<int64_t>(ids[t]) * d : nullptr;
    for (int64_t i = 0; i < d; ++i) x0[t * d + i] = row ? row[i] : gaussian(rng);
    const double norm = std::sqrt(std::max(std::inner_product(&x0[t * d], &x0[t * d] + d, &x0[t * d], 0.0), 1e-30));
    for (int64_t i = 0; i < d; ++i) x0[t * d + i] /= norm;
  }
  fs::create_directories(dir);
  write_npy(dir / "Q.npy", q.data(), {dh, d});
  write_npy(dir / "K.npy", k.data(), {dh, d});
  write_npy(dir / "V.npy", v.data(), {dh, d});
  write_npy(dir / "O.npy", o.data(), {d, dh});
  write_npy(dir / "x0.npy", x0.data(), {n, d});
  *record = {{"layer", a.head_layer}, {"head", a.head}, {"kv_head", kv}, {"beta", beta},
             {"norm_gain", "sqrt(d_model) times the pre-attention norm weight, folded into Q, K, V"}, {"tokens", n},
             {"initial_tokens", embeddings_fit ? "unit-length embedding rows of the first tokens of the first sample"
                                               : "random unit vectors (seed 0): the embeddings are narrower than d_model"},
             {"left_out", "RoPE, QK-norm, the causal mask, the MLP, norm biases and the residual stream's own norm growth"}, {"files", dir.string()}};
  return {"--query", (dir / "Q.npy").string(), "--key", (dir / "K.npy").string(), "--value", (dir / "V.npy").string(),
          "--output", (dir / "O.npy").string(), "--init", (dir / "x0.npy").string(), "--n", std::to_string(n), "--d",
          std::to_string(d), "--d-head", std::to_string(dh), "--T", fmt::format("{}", a.particles_t), "--sphere",
          // On the sphere the tokens themselves cluster; z = e^{-tW} x rescales the unnormalised system only.
          "--cluster-on", "x"};
}

int run_analyze(AnalyzeArgs& a) {
  std::set<std::string> skip;
  for (size_t start = 0; start < a.skip.size();) {
    const size_t comma = std::min(a.skip.find(',', start), a.skip.size());
    const std::string part = a.skip.substr(start, comma - start);
    if (std::find(kParts.begin(), kParts.end(), part) == kParts.end())
      throw CLI::ValidationError("--skip", fmt::format("unknown part '{}' (parts: {})", part, fmt::join(kParts, ", ")));
    skip.insert(part);
    start = comma + 1;
  }
  // An absolute corpus path, so every part's command line reproduces from any directory.
  if (a.data.empty()) a.data = default_corpus().string();
  a.data = fs::absolute(a.data).lexically_normal().string();
  const fs::path out_dir = fs::absolute(a.out_dir).lexically_normal();
  auto model = a.model.load();

  ResultsDir out(out_dir, "analyze", invocation());
  out.model() = {{"path", a.model.path}, {"family", model->config.family}, {"d_model", model->config.d_model},
                 {"n_layers", model->config.n_layers}};
  out.options() = {{"data", a.data}, {"samples", a.samples}, {"max_len", a.max_len}, {"skip", std::vector<std::string>(skip.begin(), skip.end())},
                   {"jacobian", "--surgery (alphas and positions: the jacobian command's defaults)"},
                   {"topology", "the topology command's defaults (coupling on)"},
                   {"particles", {{"layer", a.head_layer}, {"head", a.head}, {"tokens", a.particles_tokens}, {"T", a.particles_t},
                                  {"sphere", true}, {"cluster_on", "x"}}}};
  nlohmann::json& parts = out.results()["parts"];
  out.results()["order"] = kParts;
  out.results()["sharing"] = "nothing shared: each part loads the memory-mapped model and runs its own forward passes over the same "
                             "samples (same --data, --samples, --max-len, sample seed)";

  const std::string self = invocation().empty() ? "tdyn" : invocation()[0];
  const std::vector<std::string> common = {"--data", a.data, "--samples", std::to_string(a.samples), "--max-len", std::to_string(a.max_len)};
  Progress progress("analyze", static_cast<int64_t>(kParts.size()), "part");
  for (const std::string& name : kParts) {
    const fs::path dir = out_dir / name;
    nlohmann::json& record = parts[name];
    record["dir"] = name;
    if (skip.count(name)) {
      record["status"] = "skipped";
      progress.advance();
      continue;
    }
    std::vector<std::string> argv = {self, name};
    if (progress_quiet()) argv.push_back("--quiet");
    if (name == "particles") {
      try {
        nlohmann::json bridge;
        std::vector<std::string> extra = write_bridge(a, *model, out_dir / "particles_bridge", &bridge);
        argv.insert(argv.end(), extra.begin(), extra.end());
        record["bridge"] = bridge;
      } catch (const Error& e) {
        record["status"] = "failed", record["error"] = e.what();
        progress.advance();
        continue;
      }
    } else {
      argv.push_back(a.model.path);
      argv.insert(argv.end(), common.begin(), common.end());
      if (name == "jacobian") argv.push_back("--surgery");
    }
    argv.insert(argv.end(), {"--out", dir.string()});
    record["argv"] = argv;
    const auto start = std::chrono::steady_clock::now();
    const int code = run_self(argv);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    record["exit_code"] = code;
    record["seconds"] = seconds;
    record["status"] = code == 0 ? "ok" : "failed";
    if (code != 0) record["error"] = fmt::format("exit code {} (its messages are on stderr above)", code);
    out.add_timing(name, seconds);
    out.write();  // a later crash still leaves the record of what ran
    progress.advance();
  }
  progress.finish();
  {
    PhaseTimer timer(out, "report");
    out.record_file("index.html", "the report");
    out.write();
    write_html_report(out_dir);
  }
  out.write();
  if (!progress_quiet()) std::cerr << "tdyn analyze: wrote " << (out_dir / "index.html").string() << "\n";
  for (const std::string& name : kParts)
    if (parts[name]["status"] == "failed") return kExitInputError;
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("analyze", "Every analysis on one model (power, jacobian --surgery, topology, particles from one "
                                            "of its heads) and the HTML report: DIR/index.html");
  auto a = std::make_shared<AnalyzeArgs>();
  a->model.add_to(cmd);
  cmd->add_option("--out", a->out_dir, "Results directory (one subdirectory per part)")->required();
  cmd->add_option("--data", a->data, "Text file of passages (or token ids) for every part (default: the WikiText-2 test split)");
  cmd->add_option("--samples", a->samples, "S: passages per part (the papers use 1000; 200 keeps a laptop run short)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--max-len", a->max_len, "Tokens per sample")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--skip", a->skip, "Parts to leave out, comma-separated: power,jacobian,topology,particles");
  cmd->add_option("--particles-layer", a->head_layer, "Layer whose attention head is simulated as particles")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--particles-head", a->head, "That head's index")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--particles-tokens", a->particles_tokens, "Particles: the first n tokens of the first sample")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--particles-T", a->particles_t, "Particles: final time")->capture_default_str()->check(CLI::PositiveNumber);
  return [a] { return run_analyze(*a); };
}

TDYN_REGISTER_COMMAND("analyze", 80, setup);

}  // namespace
}  // namespace tdyn::cli
