#include "pipeline/analyze.h"

#include <algorithm>
#include <exception>

#include <fmt/ranges.h>

#include "analysis/layer_matrix.h"
#include "analysis/power/pass.h"
#include "core/error.h"
#include "core/files.h"
#include "core/phase_times.h"
#include "core/ranks.h"
#include "report/html_report.h"

namespace tdyn {

const std::vector<std::string>& analyze_parts() {
  static const std::vector<std::string> parts = {"power", "jacobian", "init", "topology", "particles"};
  return parts;
}

const std::vector<std::string>& skippable_parts() {
  static const std::vector<std::string> parts = {"power", "jacobian", "topology", "particles"};  // init: init_control
  return parts;
}

bool AnalyzeResult::failed() const {
  for (const std::string& name : analyze_parts())
    if (results.value(nlohmann::json::json_pointer("/results/parts/" + name + "/status"), "") == "failed") return true;
  return false;
}

namespace {

constexpr uint64_t kInitSeed = 0;

// The loading flags of a command line.
std::vector<std::string> loading_flags(const LoadOptions& load) {
  std::vector<std::string> flags;
  if (load.config.allow_unknown_keys) flags.push_back("--allow-unknown-config-keys");
  if (!load.check_finite) flags.push_back("--no-check-weights");
  return flags;
}

void append(std::vector<std::string>& argv, const std::vector<std::string>& more) { argv.insert(argv.end(), more.begin(), more.end()); }

}  // namespace

std::vector<std::string> AnalyzeOptions::command_line(const fs::path& out_dir) const {
  std::vector<std::string> argv = {program, "--threads", std::to_string(threads)};
  if (quiet) argv.push_back("--quiet");
  append(argv, {"analyze", model_path, "--out", out_dir.string(), "--samples", std::to_string(samples), "--max-len", std::to_string(max_len)});
  append(argv, loading_flags(load));
  if (!data.empty()) append(argv, {"--data", data});
  if (!tokenizer.empty()) append(argv, {"--tokenizer", tokenizer});
  if (resume) argv.push_back("--resume");
  if (!skip.empty()) append(argv, {"--skip", fmt::format("{}", fmt::join(skip, ","))});
  if (!init_control) argv.push_back("--no-init-control");
  append(argv, {"--particles-layer", std::to_string(particles_layer), "--particles-head", std::to_string(particles_head),
                "--particles-tokens", std::to_string(particles_tokens), "--particles-T", fmt::format("{}", particles_t)});
  return argv;
}

namespace {

// One analyze run: its options with absolute paths, the model, the samples and the shared pass, and the results
// directory that records the parts as they run.
class Analysis {
 public:
  Analysis(AnalyzeOptions options, const fs::path& out_dir, ProgressSink& progress, const std::vector<std::string>& argv)
      : o_(std::move(options)), dir_(fs::absolute(out_dir).lexically_normal()), progress_(progress),
        out_(dir_, "analyze", argv.empty() ? o_.command_line(dir_) : argv) {}

  AnalyzeResult run();

 private:
  bool skipped(const std::string& part) const { return o_.skip.count(part) > 0; }
  bool runs_init() const { return o_.init_control && !skipped("jacobian"); }  // init is judged against jacobian
  PassSpec pass_spec(const Model& model, bool probes) const;
  bool draw_samples_and_pass();
  bool init_pass();
  nlohmann::json options_json() const;
  std::vector<std::string> command(const std::string& name) const;
  std::vector<std::string> part_command(const std::string& name) const;
  void run_part(const std::string& name);
  void run_init(nlohmann::json& record);
  void finish();

  AnalyzeOptions o_;
  fs::path dir_;
  ProgressSink& progress_;
  ResultsDir out_;
  AnalysisInputs in_;
  AnalysisInputs init_;     // the random initialisation's model, samples and pass (init_pass)
  std::string init_error_;  // why init_pass could not prepare them
  AnalyzeResult result_;
};

void check_options(AnalyzeOptions& o) {
  for (const std::string& part : o.skip)
    if (std::find(skippable_parts().begin(), skippable_parts().end(), part) == skippable_parts().end())
      fail("skip: unknown part '{}' (parts: {})", part, fmt::join(skippable_parts(), ", "));
  if (o.samples <= 0 || o.max_len <= 0) fail("samples and max_len must be positive (got {} and {})", o.samples, o.max_len);
  if (o.particles_layer < 0 || o.particles_head < 0 || o.particles_tokens <= 0 || !(o.particles_t > 0))
    fail("particles: layer and head must be non-negative, tokens and T positive");
  // Absolute corpus and tokenizer paths, so every part's command line reproduces from any directory.
  if (o.data.empty()) o.data = default_corpus().string();
  o.data = fs::absolute(o.data).lexically_normal().string();
  if (!o.tokenizer.empty()) o.tokenizer = fs::absolute(o.tokenizer).lexically_normal().string();
}

nlohmann::json Analysis::options_json() const {
  std::vector<std::string> skip(o_.skip.begin(), o_.skip.end());
  return {{"data", o_.data}, {"tokenizer", o_.tokenizer.empty() ? "the one shipped with MODEL" : o_.tokenizer},
          {"samples", o_.samples}, {"max_len", o_.max_len}, {"skip", skip},
          {"jacobian", "--surgery (alphas and positions: the jacobian command's defaults)"},
          {"init_control", !o_.init_control ? nlohmann::json(false)
                                            : nlohmann::json{{"seed", kInitSeed}, {"rule", "tdyn init's (the family's published init rule)"},
                                                             {"jacobian", "the jacobian command's defaults, no --surgery"},
                                                             {"topology", "the topology command's defaults, in DIR/init/topology "
                                                                          "(the coupling's control)"}}},
          {"topology", "the topology command's defaults (coupling on)"},
          {"particles", {{"layer", o_.particles_layer}, {"head", o_.particles_head}, {"tokens", o_.particles_tokens},
                         {"T", o_.particles_t}, {"sphere", true}, {"cluster_on", "x"}}},
          {"pass", PassSource{o_.resume, ""}.to_json()}};
}

// What the shared pass sums for the parts that read it: the Jacobians leaving every sublayer (jacobian, topology's
// coupling), the correlations (topology) and, with `probes`, power's token alignments with the dominant
// eigenvectors of F_t (its spectra with its default options).
PassSpec Analysis::pass_spec(const Model& model, bool probes) const {
  PassSpec spec;
  spec.boundaries = residual_boundaries(model.config.n_layers, BoundarySet::Sublayers);
  spec.correlations = !skipped("topology");
  spec.jacobians = !skipped("jacobian") || !skipped("topology");
  if (probes && !skipped("power")) {
    std::vector<LayerSpectrum> spectra;
    for (int64_t l = 0; l < model.config.n_layers; ++l) spectra.push_back(layer_spectrum(layer_matrix(model, l), SpectrumOptions{}));
    spec.probes = token_dynamics_probes(spectra);
  }
  return spec;
}

// The forward pass shared by power, jacobian and topology: every sample runs once here (under MPI, split across the
// ranks; resumable) and the sums go to DIR/pass/pass.tdynpass, which each part reads as its PassSource::from_pass
// (and its command line as --from-pass). A resumed analysis whose pass had finished reuses the file. Returns false
// on an MPI worker rank, whose share is then with rank 0.
bool Analysis::draw_samples_and_pass() {
  SampleOptions samples;
  samples.data = o_.data;
  samples.samples = o_.samples;
  samples.max_len = o_.max_len;
  draw_samples(in_, samples, o_.tokenizer);
  if (in_.samples.empty()) fail("no samples to analyse in {} (check the data)", o_.data);
  const PassSpec spec = pass_spec(*in_.model, true);
  const nlohmann::json model_identity = pass_model_identity(o_.model_path, *in_.model);
  const fs::path file = dir_ / "pass" / "pass.tdynpass";
  nlohmann::json record = {{"file", "pass/pass.tdynpass"}, {"samples", in_.samples.size()}, {"spec", spec.to_json()}};
  bool finished = false;  // a resumed analysis whose pass had finished reuses it
  if (o_.resume && fs::exists(file)) {
    try {
      finished = PassFile::open(file).identity() == pass_identity(model_identity, in_.samples, spec);
    } catch (const Error&) {
    }  // unfinished: the pass continues it; of another run: it says so
  }
  auto transformer = std::make_shared<const Transformer>(in_.model);
  std::unique_ptr<JacobianModel> jacobians;
  if (spec.jacobians) jacobians = std::make_unique<JacobianModel>(transformer);
  try {
    obtain_pass({o_.resume, ""}, *transformer, jacobians.get(), in_.samples, spec, model_identity, file, true,
                "forward pass", progress_);
  } catch (const WorkerShareDone&) {
    return false;
  }
  record["reused"] = finished;
  out_.results()["pass"] = record;
  out_.record_file("pass/pass.tdynpass", "the shared forward pass: Jacobian and correlation sums over the samples (tdyn pass file)");
  in_.pass.from_pass = file.string();
  return true;
}

// The random initialisation (seed kInitSeed) of the model's architecture in DIR/init/model and the shared samples'
// token ids in DIR/init/samples.ids (the initialisation, which has no tokenizer of its own when the source is not a
// Hugging Face checkpoint, runs on exactly the trained model's tokens), then its pass for init's jacobian and
// topology, DIR/init/pass.tdynpass, split across MPI ranks like the trained model's. Rank 0 writes the files; the
// other ranks read them once it has. Returns false on an MPI worker rank; on rank 0 a failure to prepare the
// initialisation goes to init_error_, and the init part reports it.
bool Analysis::init_pass() {
  const fs::path dir = dir_ / "init", checkpoint = dir / "model", ids = dir / "samples.ids";
  if (ranks().root()) {
    try {
      write_init_checkpoint(*in_.model, o_.model_path, checkpoint, kInitSeed);
      std::string text;
      for (const Sample& s : in_.samples) text += fmt::format("{}\n", fmt::join(s.ids, " "));
      write_file_atomic(ids, text);
    } catch (const std::exception& e) {
      init_error_ = e.what();
    }
  }
  // The broadcast is the barrier after which the files are there, and tells every rank whether they are.
  if (broadcast_from_root(init_error_.empty() ? 1.0 : 0.0) != 1.0) return ranks().root();
  SampleOptions samples;
  samples.data = ids.string();
  samples.samples = static_cast<int64_t>(in_.samples.size());
  samples.max_len = o_.max_len;
  samples.min_len = 1;
  try {
    init_ = load_inputs(checkpoint.string(), o_.load, samples, "");
  } catch (const Error& e) {  // on every rank alike: rank 0 reports it, the others have no pass to share
    init_error_ = e.what();
    return ranks().root();
  }
  const PassSpec spec = pass_spec(*init_.model, false);
  auto transformer = std::make_shared<const Transformer>(init_.model);
  const JacobianModel jacobians(transformer);
  const fs::path file = dir / "pass.tdynpass";
  try {
    obtain_pass({o_.resume, ""}, *transformer, &jacobians, init_.samples, spec, pass_model_identity(checkpoint.string(), *init_.model),
                file, true, "the initialisation's forward pass", progress_);
  } catch (const WorkerShareDone&) {
    return false;
  } catch (const Error& e) {  // in one process the init part reports it; under MPI the ranks cannot go on apart
    if (ranks().size > 1) throw;
    init_error_ = e.what();
    return true;
  }
  out_.record_file("init/pass.tdynpass", "the initialisation's forward pass, read by init's jacobian and topology (tdyn pass file)");
  init_.pass.from_pass = file.string();
  return true;
}

// A part's command line: this program with the run's thread count and quietness.
std::vector<std::string> Analysis::command(const std::string& name) const {
  std::vector<std::string> argv = {o_.program, name, "--threads", std::to_string(o_.threads)};
  if (o_.quiet) argv.push_back("--quiet");
  return argv;
}

// The command line that reproduces part `name` (not init) alone, given the pass file.
std::vector<std::string> Analysis::part_command(const std::string& name) const {
  std::vector<std::string> argv = command(name);
  const std::vector<std::string> tokenizer = o_.tokenizer.empty() ? std::vector<std::string>{}
                                                                  : std::vector<std::string>{"--tokenizer", o_.tokenizer};
  if (name == "particles") {
    append(argv, {"--from-model", o_.model_path, "--layer", std::to_string(o_.particles_layer), "--head", std::to_string(o_.particles_head),
                  "--data", o_.data, "--n", std::to_string(o_.particles_tokens), "--T", fmt::format("{}", o_.particles_t)});
  } else {
    append(argv, {o_.model_path, "--data", o_.data, "--samples", std::to_string(o_.samples), "--max-len", std::to_string(o_.max_len)});
  }
  append(argv, loading_flags(o_.load));
  append(argv, tokenizer);
  if (name == "particles") return argv;
  if (name == "jacobian") argv.push_back("--surgery");
  if (name == "topology" && result_.init_topology)
    append(argv, {"--communities-control", (dir_ / "init" / "topology").string(), "--communities-control-independent"});
  append(argv, {"--from-pass", in_.pass.from_pass});
  return argv;
}

// The random initialisation's jacobian and, unless topology is skipped, topology (DIR/init/topology: the coupling's
// control), both on its pass (init_pass).
void Analysis::run_init(nlohmann::json& record) {
  const fs::path dir = dir_ / "init", checkpoint = dir / "model", ids = dir / "samples.ids";
  std::vector<std::string> init_argv = {o_.program, "init", o_.model_path, "--seed", std::to_string(kInitSeed), "--out", checkpoint.string()};
  append(init_argv, loading_flags(o_.load));
  record["init_argv"] = init_argv;
  if (!init_error_.empty()) throw Error(init_error_);
  TDYN_CHECK(init_.model && !init_.pass.from_pass.empty());
  std::vector<std::string> argv = command("jacobian");
  append(argv, {checkpoint.string(), "--data", ids.string(), "--samples", std::to_string(init_.samples.size()), "--max-len",
                std::to_string(o_.max_len), "--min-len", "1"});
  append(argv, loading_flags(o_.load));
  append(argv, {"--from-pass", init_.pass.from_pass, "--out", dir.string()});
  record["argv"] = argv;
  ResultsDir jacobian_out(dir, "jacobian", argv);
  result_.init_jacobian_options.keep_matrices = o_.keep_matrices;
  result_.init_jacobian = jacobian_to(jacobian_out, init_, {}, result_.init_jacobian_options, progress_);
  if (skipped("topology")) return;
  argv[1] = "topology";
  argv.back() = (dir / "topology").string();
  record["topology_argv"] = argv;
  ResultsDir topology_out(dir / "topology", "topology", argv);
  result_.init_topology = topology_to(topology_out, init_, {}, result_.init_topology_options, progress_);
}

// Runs one part and records how it went; a part's error is recorded, and the analysis goes on.
void Analysis::run_part(const std::string& name) {
  nlohmann::json& record = out_.results()["parts"][name];
  const fs::path dir = dir_ / name;
  PhaseTimes times;
  try {
    PhaseClock clock(times, name);
    if (name == "init") {
      run_init(record);
    } else {
      std::vector<std::string> argv = part_command(name);
      append(argv, {"--out", dir.string()});
      record["argv"] = argv;
      ResultsDir part(dir, name, argv);
      if (name == "power") {
        result_.power = power_to(part, in_, result_.power_options, progress_);
      } else if (name == "jacobian") {
        JacobianOptions& options = result_.jacobian_options;
        options.surgery = true;
        options.keep_matrices = o_.keep_matrices;
        result_.jacobian = jacobian_to(part, in_, {}, options, progress_);
      } else if (name == "topology") {
        TopologyOptions& options = result_.topology_options;
        if (result_.init_topology) {
          // The initialisation's communities: an independent draw, whose units are not the trained model's, so the
          // report shows their NMI without judging it (docs/topology.md).
          options.communities_control = (dir_ / "init" / "topology").string();
          options.communities_control_independent = true;
        }
        result_.topology = topology_to(part, in_, {}, options, progress_);
      } else if (name == "particles") {
        particles::ExperimentSpec spec = particles::model_layer_defaults();
        spec.n = o_.particles_tokens;
        spec.t_end = o_.particles_t;
        particles::ParticlesOptions& options = result_.particles_options;
        options.diagnostics.cluster_on = particles::StateVariable::x;  // on the sphere the tokens themselves cluster
        SampleOptions tokens;
        tokens.data = o_.data;
        const ModelHeadOptions head{o_.particles_layer, o_.particles_head, spec.n};
        result_.particles = particles_to(part, o_.model_path, o_.load, head, tokens, o_.tokenizer, spec, options);
      }
    }
    record["status"] = "ok";
  } catch (const std::exception& e) {  // Error, a bad allocation, or a library's own exception
    record["status"] = "failed";
    record["error"] = e.what();
    progress_.note(fmt::format("part {} failed: {}", name, e.what()));
  }
  record["seconds"] = times.at(0).second;
  out_.add_timing(name, times.at(0).second);
}

// The verdicts and the report, once every part ran.
void Analysis::finish() {
  {
    PhaseTimer timer(out_, "report");
    out_.record_file("index.html", "the report");
    out_.write();  // the report reads the parts from this results.json
    out_.results()["verdicts"] = verdicts_json(summarize_claims(load_report_parts(dir_)));
    out_.write();
    write_html_report(dir_);
  }
  out_.write();
  progress_.note("wrote " + (dir_ / "index.html").string());
}

AnalyzeResult Analysis::run() {
  out_.options() = options_json();
  out_.results()["parts"] = nlohmann::json::object();
  out_.results()["order"] = analyze_parts();
  out_.results()["sharing"] = "one forward pass per sample feeds power's token alignments, jacobian's mean Jacobians and topology's "
                              "correlations and coupling (DIR/pass/pass.tdynpass, read with --from-pass); power's shared-weight "
                              "iteration (one sample) and steering sweep (the steered models) run models of their own";
  in_.model_path = o_.model_path;
  in_.load = o_.load;
  in_.model = load_model(o_.model_path, o_.load);
  if (!skipped("particles")) {  // the one option that depends on the model: checked before any pass
    const ModelConfig& c = in_.model->config;
    if (o_.particles_layer >= c.n_layers) fail("--particles-layer {}: the model has layers 0 to {}", o_.particles_layer, c.n_layers - 1);
    if (o_.particles_head >= c.n_heads) fail("--particles-head {}: the model has heads 0 to {}", o_.particles_head, c.n_heads - 1);
  }
  if (!skipped("power") || !skipped("jacobian") || !skipped("topology")) {
    // Every pass runs before any part, so that MPI worker ranks, which only take their shares of the passes, are
    // done with the run before rank 0 analyses.
    bool root = true;
    {
      PhaseTimer timer(out_, "forward_pass");
      root = draw_samples_and_pass();
    }
    if (runs_init()) {
      PhaseTimer timer(out_, "init_forward_pass");
      root = init_pass() && root;
    }
    if (!root) throw WorkerShareDone{};
  }
  out_.model() = {{"path", o_.model_path}, {"family", in_.model->config.family}, {"d_model", in_.model->config.d_model},
                  {"n_layers", in_.model->config.n_layers}};
  const std::vector<std::string>& parts = analyze_parts();
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& name = parts[i];
    out_.results()["parts"][name]["dir"] = name;
    // The init control is judged against the jacobian part; without it there is nothing to control.
    if (skipped(name) || (name == "init" && !runs_init())) {
      out_.results()["parts"][name]["status"] = "skipped";
      // An earlier run's results for the part would read as this run's.
      if (fs::is_regular_file(dir_ / name / "results.json")) fs::remove_all(dir_ / name);
    } else {
      progress_.note(fmt::format("part {} of {}: {}", i + 1, parts.size(), name));
      run_part(name);
    }
    out_.write();  // a later crash still leaves the record of what ran
  }
  finish();
  result_.results = nlohmann::json::parse(read_file(dir_ / "results.json"));
  return std::move(result_);
}

}  // namespace

AnalyzeResult run_analyze(const AnalyzeOptions& options, const fs::path& out_dir, ProgressSink& progress, std::vector<std::string> argv) {
  AnalyzeOptions checked = options;
  check_options(checked);
  return Analysis(std::move(checked), out_dir, progress, argv).run();
}

}  // namespace tdyn
