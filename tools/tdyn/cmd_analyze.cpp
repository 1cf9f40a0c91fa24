// tdyn analyze MODEL --out DIR: every analysis of the three papers (README.md, "The three papers") on one model,
// then the report.
//   DIR/power      the power-method paper: layer matrices, spectra, token alignment (tdyn power)
//   DIR/jacobian   the residual-stream paper: mean Jacobians, cumulative products, metrics, Schur surgery
//                  (tdyn jacobian --surgery)
//   DIR/init       the residual-stream paper's control: the same architecture's random initialisation (tdyn init, in
//                  DIR/init/model) through tdyn jacobian and tdyn topology (DIR/init/topology) on the same token ids
//                  (DIR/init/samples.ids); off with --no-init-control
//   DIR/topology   the residual-stream paper: correlation graphs, signed Leiden, coupling with the Jacobian gains
//                  (tdyn topology), and the NMI of its communities with the initialisation's
//                  (--communities-control DIR/init/topology)
//   DIR/particles  the clustering paper: one attention head of the model simulated as interacting particles
//                  (tdyn particles --from-model)
//   DIR/pass       the forward pass over the samples that power, jacobian and topology share (pass.tdynpass)
//   DIR/index.html the report; DIR/results.json which parts ran, their command lines, status and timings, and the
//                  report's verdicts ("verdicts").
//
// The shared pass runs here, in this process, so that it can be split across MPI ranks and resumed; it is
// the loop over samples that the parts have in common. Each part then runs as a child process
// of this same executable (/proc/self/exe) with an argv built here. Why not in process: every subcommand
// records the process's own command line in its results.json, and that line must reproduce the part (given the
// pass file); a child also confines a failing or crashing part, so the others and the report still complete,
// and returns its memory when it ends. Under MPI only rank 0 gets past the pass and runs the parts.

#include <omp.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "analysis/layer_matrix.h"
#include "analysis/power/pass.h"
#include "analysis/sample_pass.h"
#include "cli_util.h"
#include "command.h"
#include "core/ranks.h"
#include "core/text.h"
#include "pass_args.h"
#include "report/html_report.h"
#include "report/progress.h"
#include "report/results.h"


namespace tdyn::cli {
namespace {

const std::vector<std::string> kParts = {"power", "jacobian", "init", "topology", "particles"};
const std::vector<std::string> kSkippable = {"power", "jacobian", "topology", "particles"};  // init: --no-init-control
constexpr uint64_t kInitSeed = 0;

struct AnalyzeArgs {
  ModelArgs model;
  PassArgs pass;
  std::string data, tokenizer, out_dir, skip;
  int64_t samples = 200, max_len = 128;
  int64_t head_layer = 0, head = 0, particles_tokens = 32;
  double particles_t = 20;  // a real head on the sphere clusters between T = 10 and 15 on stories260K; 5 is too short
  bool no_init_control = false;
};

// The samples as one line of token ids each, so that the random initialisation (which has no tokenizer of its own
// when the source is not a Hugging Face checkpoint) runs on exactly the trained model's tokens.
void write_ids_file(const std::vector<Sample>& samples, const fs::path& file) {
  std::string text;
  for (const Sample& s : samples) text += fmt::format("{}\n", fmt::join(s.ids, " "));
  write_file_atomic(file, text);
}

// The forward pass shared by power, jacobian and topology: every sample runs once here (under MPI, split across the
// ranks; resumable with --resume) and the sums go to DIR/pass/pass.tdynpass, which the parts read with
// --from-pass. A resumed analysis whose pass had finished reuses the file.
fs::path shared_pass(const AnalyzeArgs& a, const std::shared_ptr<const Model>& model, const std::vector<Sample>& samples,
                     const fs::path& dir, const std::set<std::string>& skip, nlohmann::json* record) {
  PassSpec spec;
  spec.boundaries = residual_boundaries(model->config.n_layers, BoundarySet::Sublayers);
  spec.correlations = !skip.count("topology");
  spec.jacobians = !skip.count("jacobian") || !skip.count("topology");
  if (!skip.count("power")) {
    // Power's token alignments with the dominant eigenvectors of F_t: its spectra with its default options.
    std::vector<LayerSpectrum> spectra;
    for (int64_t l = 0; l < model->config.n_layers; ++l) spectra.push_back(layer_spectrum(layer_matrix(*model, l), SpectrumOptions{}));
    spec.probes = token_dynamics_probes(spectra);
  }
  const nlohmann::json model_identity = pass_model_identity(a.model.path, *model);
  const fs::path file = dir / "pass.tdynpass";
  *record = {{"file", "pass/pass.tdynpass"}, {"samples", samples.size()}, {"spec", spec.to_json()}};
  bool finished = false;  // a resumed analysis whose pass had finished reuses it
  if (a.pass.resume && fs::exists(file)) {
    try {
      finished = PassFile::open(file).identity() == pass_identity(model_identity, samples, spec);
    } catch (const Error&) {
    }  // unfinished: the pass continues it; of another run: it says so
  }
  fs::create_directories(dir);
  auto transformer = std::make_shared<const Transformer>(model);
  std::unique_ptr<JacobianModel> jacobians;
  if (spec.jacobians) jacobians = std::make_unique<JacobianModel>(transformer);
  obtain_pass(a.pass, *transformer, jacobians.get(), samples, spec, model_identity, file, true, "analyze: forward pass");
  (*record)["reused"] = finished;
  return file;
}

std::set<std::string> parts_to_skip(const std::string& list) {
  std::set<std::string> skip;
  for (const std::string& part : split_list(list)) {
    if (part.empty()) continue;  // "" (nothing skipped) or a trailing comma
    if (std::find(kSkippable.begin(), kSkippable.end(), part) == kSkippable.end())
      throw CLI::ValidationError("--skip", fmt::format("unknown part '{}' (parts: {})", part, fmt::join(kSkippable, ", ")));
    skip.insert(part);
  }
  return skip;
}

nlohmann::json analyze_options_json(const AnalyzeArgs& a, const std::set<std::string>& skip) {
  return {{"data", a.data}, {"tokenizer", a.tokenizer.empty() ? "the one shipped with MODEL" : a.tokenizer},
          {"samples", a.samples}, {"max_len", a.max_len}, {"skip", std::vector<std::string>(skip.begin(), skip.end())},
          {"jacobian", "--surgery (alphas and positions: the jacobian command's defaults)"},
          {"init_control", a.no_init_control ? nlohmann::json(false)
                                             : nlohmann::json{{"seed", kInitSeed}, {"rule", "tdyn init's (the family's published init rule)"},
                                                              {"jacobian", "the jacobian command's defaults, no --surgery"},
                                                              {"topology", "the topology command's defaults, in DIR/init/topology "
                                                                           "(the coupling's control)"}}},
          {"topology", "the topology command's defaults (coupling on)"},
          {"particles", {{"layer", a.head_layer}, {"head", a.head}, {"tokens", a.particles_tokens}, {"T", a.particles_t},
                         {"sphere", true}, {"cluster_on", "x"}}},
          {"pass", pass_options_json(a.pass)}};
}

// How the parts are launched: this executable with the run's thread count (BLAS results depend on it at the
// round-off level), the model's loading flags, --tokenizer for the parts that tokenize text, and the samples.
struct PartLauncher {
  std::string self;
  std::vector<std::string> loading, tokenizer, samples;
  fs::path pass_file;

  std::vector<std::string> command(const std::string& name) const {
    std::vector<std::string> argv = {self, name, "--threads", std::to_string(omp_get_max_threads())};
    if (progress_quiet()) argv.push_back("--quiet");
    return argv;
  }
  void add(std::vector<std::string>& argv, const std::vector<std::string>& flags) const {
    argv.insert(argv.end(), flags.begin(), flags.end());
  }
};

PartLauncher part_launcher(const AnalyzeArgs& a) {
  PartLauncher l;
  l.self = invocation().empty() ? "tdyn" : invocation()[0];
  if (a.model.allow_unknown_config_keys) l.loading.push_back("--allow-unknown-config-keys");
  if (a.model.no_check_weights) l.loading.push_back("--no-check-weights");
  if (!a.tokenizer.empty()) l.tokenizer = {"--tokenizer", a.tokenizer};
  l.samples = {"--data", a.data, "--samples", std::to_string(a.samples), "--max-len", std::to_string(a.max_len)};
  return l;
}

// The random initialisation (tdyn init) and its Jacobians' command on the shared samples' token ids; an empty
// command when init failed (the record says so).
std::vector<std::string> init_command(const AnalyzeArgs& a, const PartLauncher& l, const std::vector<Sample>& samples,
                                      const fs::path& dir, nlohmann::json& record) {
  const fs::path checkpoint = dir / "model", ids = dir / "samples.ids";
  std::vector<std::string> init_argv = {l.self, "init", a.model.path, "--seed", std::to_string(kInitSeed), "--out", checkpoint.string()};
  l.add(init_argv, l.loading);
  record["init_argv"] = init_argv;
  const int code = run_self(init_argv);
  if (code != 0) {
    record["exit_code"] = code;
    record["status"] = "failed";
    record["error"] = fmt::format("tdyn init: exit code {} (its messages are on stderr above)", code);
    return {};
  }
  write_ids_file(samples, ids);
  std::vector<std::string> argv = l.command("jacobian");
  argv.insert(argv.end(), {checkpoint.string(), "--data", ids.string(), "--samples", std::to_string(samples.size()), "--max-len",
                           std::to_string(a.max_len), "--min-len", "1"});
  l.add(argv, l.loading);
  return argv;
}

// The command of part `name` (not init), writing to `dir`.
std::vector<std::string> part_command(const AnalyzeArgs& a, const PartLauncher& l, const std::string& name, const fs::path& out_dir,
                                      const nlohmann::json& parts) {
  std::vector<std::string> argv = l.command(name);
  if (name == "particles") {
    // One head of the model as interacting particles, from the first tokens of the first passage.
    argv.insert(argv.end(), {"--from-model", a.model.path, "--layer", std::to_string(a.head_layer), "--head", std::to_string(a.head),
                             "--data", a.data, "--n", std::to_string(a.particles_tokens), "--T", fmt::format("{}", a.particles_t)});
    l.add(argv, l.loading);
    l.add(argv, l.tokenizer);
    return argv;
  }
  argv.push_back(a.model.path);
  l.add(argv, l.samples);
  l.add(argv, l.loading);
  l.add(argv, l.tokenizer);
  if (name == "jacobian") argv.push_back("--surgery");
  // The initialisation's communities (its topology ran before this part): an independent draw, whose units are
  // not the trained model's, so the report shows their NMI without judging it (docs/topology.md).
  if (name == "topology" && parts["init"].value("status", "") == "ok" && fs::exists(out_dir / "init" / "topology" / "membership.npy"))
    argv.insert(argv.end(), {"--communities-control", (out_dir / "init" / "topology").string(), "--communities-control-independent"});
  argv.insert(argv.end(), {"--from-pass", l.pass_file.string()});
  return argv;
}

// Runs one part (and, for init, the coupling's control: topology of the same initialisation on the same token
// ids, in DIR/init/topology) and records how it went.
void run_part(const AnalyzeArgs& a, const PartLauncher& l, const std::string& name, const std::vector<Sample>& samples,
              const std::set<std::string>& skip, const fs::path& out_dir, ResultsDir& out) {
  nlohmann::json& parts = out.results()["parts"];
  nlohmann::json& record = parts[name];
  const fs::path dir = out_dir / name;
  std::vector<std::string> argv = name == "init" ? init_command(a, l, samples, dir, record) : part_command(a, l, name, out_dir, parts);
  if (argv.empty()) return;  // init failed
  argv.insert(argv.end(), {"--out", dir.string()});
  record["argv"] = argv;
  const auto start = std::chrono::steady_clock::now();
  int code = run_self(argv);
  if (code == 0 && name == "init" && !skip.count("topology")) {
    std::vector<std::string> topology_argv = argv;
    topology_argv[1] = "topology";
    topology_argv.back() = (dir / "topology").string();
    record["topology_argv"] = topology_argv;
    code = run_self(topology_argv);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  record["exit_code"] = code;
  record["seconds"] = seconds;
  record["status"] = code == 0 ? "ok" : "failed";
  if (code != 0) record["error"] = fmt::format("exit code {} (its messages are on stderr above)", code);
  out.add_timing(name, seconds);
}

// The verdicts and the report, once every part ran; the exit code says whether one failed.
int finish_analyze(ResultsDir& out, const fs::path& out_dir) {
  {
    PhaseTimer timer(out, "report");
    out.record_file("index.html", "the report");
    out.write();  // the report reads the parts from this results.json
    out.results()["verdicts"] = verdicts_json(summarize_claims(load_report_parts(out_dir)));
    out.write();
    write_html_report(out_dir);
  }
  out.write();
  if (!progress_quiet()) std::cerr << "tdyn analyze: wrote " << (out_dir / "index.html").string() << "\n";
  for (const std::string& name : kParts)
    if (out.results()["parts"][name]["status"] == "failed") return kExitInputError;
  return 0;
}

int run_analyze(AnalyzeArgs& a) {
  const std::set<std::string> skip = parts_to_skip(a.skip);
  // Absolute corpus and tokenizer paths, so every part's command line reproduces from any directory.
  if (a.data.empty()) a.data = default_corpus().string();
  a.data = fs::absolute(a.data).lexically_normal().string();
  if (!a.tokenizer.empty()) a.tokenizer = fs::absolute(a.tokenizer).lexically_normal().string();
  const fs::path out_dir = fs::absolute(a.out_dir).lexically_normal();
  auto model = a.model.load();

  ResultsDir out(out_dir, "analyze", invocation());
  out.model() = {{"path", a.model.path}, {"family", model->config.family}, {"d_model", model->config.d_model},
                 {"n_layers", model->config.n_layers}};
  out.options() = analyze_options_json(a, skip);
  out.results()["parts"] = nlohmann::json::object();
  out.results()["order"] = kParts;
  out.results()["sharing"] = "one forward pass per sample feeds power's token alignments, jacobian's mean Jacobians and topology's "
                             "correlations and coupling (DIR/pass/pass.tdynpass, read with --from-pass); power's shared-weight "
                             "iteration (one sample) and steering sweep (the steered models) run models of their own";
  PartLauncher launcher = part_launcher(a);
  std::vector<Sample> samples;
  if (!skip.count("power") || !skip.count("jacobian") || !skip.count("topology")) {
    PhaseTimer timer(out, "forward_pass");
    SampleArgs samples_args;
    samples_args.options.data = a.data;
    samples_args.options.samples = a.samples;
    samples_args.options.max_len = a.max_len;
    samples_args.tokenizer = a.tokenizer;
    samples = samples_args.load(a.model.path, model->config.d_vocab);
    if (samples.empty()) fail("no samples to analyse in {} (check --data)", a.data);
    nlohmann::json record;
    launcher.pass_file = shared_pass(a, model, samples, out_dir / "pass", skip, &record);
    out.results()["pass"] = record;
    out.record_file("pass/pass.tdynpass", "the shared forward pass: Jacobian and correlation sums over the samples (tdyn pass file)");
  }
  if (!ranks().root()) return 0;  // unreachable: worker ranks end once the pass is done (obtain_pass)
  Progress progress("analyze", static_cast<int64_t>(kParts.size()), "part");
  for (const std::string& name : kParts) {
    out.results()["parts"][name]["dir"] = name;
    // The init control is judged against the jacobian part; without it there is nothing to control.
    if (skip.count(name) || (name == "init" && (a.no_init_control || skip.count("jacobian")))) out.results()["parts"][name]["status"] = "skipped";
    else run_part(a, launcher, name, samples, skip, out_dir, out);
    out.write();  // a later crash still leaves the record of what ran
    progress.advance();
  }
  progress.finish();
  return finish_analyze(out, out_dir);
}

std::function<int()> setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("analyze", "Every analysis on one model (power, jacobian --surgery, topology, particles from one "
                                            "of its heads) and the HTML report: DIR/index.html");
  auto a = std::make_shared<AnalyzeArgs>();
  a->model.add_to(cmd);
  cmd->add_option("--out", a->out_dir, "Results directory (one subdirectory per part)")->required();
  cmd->add_option("--data", a->data, "Text file of passages (or token ids) for every part (default: the WikiText-2 test split)");
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file for every part (default: the one shipped with MODEL)");
  cmd->add_option("--samples", a->samples, "S: passages per part (the papers use 1000; 200 keeps a laptop run short)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--max-len", a->max_len, "Tokens per sample")->capture_default_str()->check(CLI::PositiveNumber);
  a->pass.add_to(cmd, false);
  cmd->add_option("--skip", a->skip, "Parts to leave out, comma-separated: power,jacobian,topology,particles");
  cmd->add_flag("--no-init-control", a->no_init_control,
               "Do not run the random initialisation (tdyn init, seed 0) through jacobian and topology on the same samples; "
               "the bottleneck and coupling verdicts then have no control and say not computed, and the communities get no NMI "
               "with the initialisation's");
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
