#include "pipeline/analyze.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>

#include <fmt/ranges.h>
#include <omp.h>

#include "analysis/layer_matrix.h"
#include "analysis/power/pass.h"
#include "core/error.h"
#include "core/files.h"
#include "core/phase_times.h"
#include "core/ranks.h"
#include "kernels/serial_blas.h"
#include "report/compare.h"
#include "report/html_report.h"

namespace tdyn {

const std::vector<std::string>& analyze_parts() {
  static const std::vector<std::string> parts = {"power", "power-l2", "jacobian", "init", "topology", "particles"};
  return parts;
}

const std::vector<std::string>& skippable_parts() {
  static const std::vector<std::string> parts = {"power", "power-l2", "jacobian", "topology", "particles"};  // init: init_control
  return parts;
}

bool AnalyzeResult::failed() const {
  for (const std::string& name : analyze_parts())
    if (results.value(nlohmann::json::json_pointer("/results/parts/" + name + "/status"), "") == "failed") return true;
  return false;
}

namespace {

// The draws of the bottleneck's Haar null in the jacobian part: as many as the initialisations of a kind.
constexpr int64_t kHaarNullDraws = 5;

// Bytes (as float32) up to which every initialisation stays loaded between its pass and its parts.
constexpr double kInitModelsKept = 4.0 * (1 << 30);

// Runs of a control's parts side by side, one thread each, may hold this many bytes of float64 matrices at once.
// A run's metrics hold about kMatricesPerRun d × d matrices (one operator's decompositions and its surgery's
// products, the depth chains).
constexpr double kSideBySideBytes = 4.0 * (1 << 30);
constexpr double kMatricesPerRun = 24;

// The loading flags of a command line.
std::vector<std::string> loading_flags(const LoadOptions& load) {
  std::vector<std::string> flags;
  if (load.config.allow_unknown_keys) flags.push_back("--allow-unknown-config-keys");
  if (!load.check_finite) flags.push_back("--no-check-weights");
  return flags;
}

void append(std::vector<std::string>& argv, const std::vector<std::string>& more) { argv.insert(argv.end(), more.begin(), more.end()); }

// The --ablate flags of a command line.
std::vector<std::string> ablate_flags(const std::vector<Ablation>& ablations) {
  std::vector<std::string> flags;
  for (const Ablation& a : ablations) append(flags, {"--ablate", a.to_string()});
  return flags;
}

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
  else if (init_seeds != AnalyzeOptions{}.init_seeds) append(argv, {"--init-seeds", std::to_string(init_seeds)});
  if (interval_subsets != AnalyzeOptions{}.interval_subsets) append(argv, {"--interval-subsets", std::to_string(interval_subsets)});
  append(argv, ablate_flags(ablations));
  append(argv, {"--particles-layer", std::to_string(particles_layer), "--particles-head", std::to_string(particles_head),
                "--particles-tokens", std::to_string(particles_tokens), "--particles-T", fmt::format("{}", particles_t)});
  return argv;
}

namespace {

fs::path subset_dir(const fs::path& dir, size_t g) { return dir / "subsets" / fmt::format("subset-{}", g); }

// The options of a control's parts (and of the model's parts on the controls' samples, which they are compared
// with): power without steering or iteration (power-l2 likewise, in the paper's idealisation), jacobian with
// surgery at α = 0 and 1 and one random-N draw.
PowerOptions control_power_options(DynamicsMode mode = DynamicsMode::Full) {
  PowerOptions options;
  options.steer = false, options.iterate = false;  // the control's claims are the token dynamics'
  options.dynamics.mode = mode;
  return options;
}

JacobianOptions control_jacobian_options(bool keep_matrices) {
  JacobianOptions options;
  options.keep_matrices = keep_matrices;
  options.surgery = true;
  options.surgery_options.alphas = {0, 1};
  options.surgery_options.control_draws = 1;
  options.surgery_options.full_depth_only = true;
  return options;
}
const std::vector<std::string> kControlPowerFlags = {"--no-steer", "--no-iterate"};
const std::vector<std::string> kControlJacobianFlags = {"--surgery", "--alphas", "0,1", "--surgery-control-draws", "1", "--surgery-full-depth-only"};

// power-l2: power in the paper's idealisation, every sample moved through the attention sublayers alone with L2
// normalisation (docs/power.md), so the analogy is judged where the paper's theory lives. Its tokens are not the
// shared pass's, so it reads the samples themselves.
const std::vector<std::string> kIdealisedFlags = {"--mode", "attn-only-l2"};
bool idealised(const std::string& part) { return part == "power-l2"; }
std::string command_of(const std::string& part) { return idealised(part) ? "power" : part; }
AnalysisInputs without_pass(AnalysisInputs in) {
  in.pass = {};
  return in;
}

// The samples' token ids, one sample a line: what a part reads with --data when it must see exactly these tokens (an
// initialisation without a tokenizer of its own, a subset of the samples).
void write_token_ids(const fs::path& file, const std::vector<Sample>& samples) {
  std::string text;
  for (const Sample& s : samples) text += fmt::format("{}\n", fmt::join(s.ids, " "));
  fs::create_directories(file.parent_path());
  write_file_atomic(file, text);
}

// One random initialisation of the control: its directory (DIR/init/seed-S for the family's rule, DIR/init/scaled-S
// for random weights at the model's own scales, tensor kind by tensor kind), its model, samples and pass.
struct InitSeed {
  uint64_t seed = 0;
  bool scaled = false;  // every kind of tensor at the model's own mean and spread (Analysis::moments_)
  fs::path dir;
  AnalysisInputs in;
  std::string error;  // why its model or pass could not be prepared; the init part reports it
  std::shared_ptr<const std::vector<LayerSpectrum>> spectra;  // its F_t's (model_spectra)
};

// One analyze run: its options with absolute paths, the model, the samples and the shared pass, and the results
// directory that records the parts as they run.
class Analysis {
 public:
  Analysis(AnalyzeOptions options, const fs::path& out_dir, ProgressSink& progress, const std::vector<std::string>& argv,
           std::shared_ptr<const Model> model)
      : o_(std::move(options)), dir_(fs::absolute(out_dir).lexically_normal()), progress_(progress),
        out_(dir_, "analyze", argv.empty() ? o_.command_line(dir_) : argv) {
    in_.model = std::move(model);
  }

  AnalyzeResult run();

 private:
  bool skipped(const std::string& part) const { return o_.skip.count(part) > 0; }
  // The init control is judged against power, power-l2, jacobian and topology; with all skipped it controls nothing.
  bool runs_init() const {
    return o_.init_control && (!skipped("power") || !skipped("power-l2") || !skipped("jacobian") || !skipped("topology"));
  }
  ZeroedParts zeroed(const Transformer& transformer) const { return ZeroedParts(transformer, o_.ablations); }
  std::shared_ptr<const std::vector<LayerSpectrum>> model_spectra(const Transformer& transformer) const;
  PassSpec pass_spec(const Transformer& transformer, const std::vector<LayerSpectrum>& spectra) const;
  bool draw_samples_and_pass();
  bool init_passes();
  bool subset_passes();
  void run_subsets(nlohmann::json& record);
  JacobianOptions model_jacobian_options() const;
  JacobianOptions controlled_jacobian_options(bool figures, bool first) const;
  void share_jacobian_metrics();
  void side_by_side_or_in_turn(int64_t n, const std::string& what, const std::function<void(int64_t, ProgressSink&)>& task);
  bool init_pass(InitSeed& seed);
  // The controls' samples and their token ids: the first subset's when the subsets run, else all samples.
  const std::vector<Sample>& control_samples() const { return controls_on_subset_ ? control_subset_ : in_.samples; }
  fs::path control_ids() const { return controls_on_subset_ ? subset_dir(dir_, 0) / "samples.ids" : dir_ / "init" / "samples.ids"; }
  nlohmann::json run_init_seed(InitSeed& seed, bool first, ProgressSink& progress, std::string& error);
  void run_controlled_parts(const std::string& checkpoint, const fs::path& dir, const AnalysisInputs& in, ProgressSink& progress,
                            const std::shared_ptr<const std::vector<LayerSpectrum>>& spectra, const std::vector<std::string>& names,
                            bool figures, nlohmann::json& record, bool first);
  nlohmann::json options_json() const;
  std::vector<uint64_t> init_seed_list() const;
  std::vector<std::string> command(const std::string& name, int threads) const;
  std::vector<std::string> command(const std::string& name) const { return command(name, o_.threads); }
  std::vector<std::string> part_command(const std::string& name) const;
  void run_part(const std::string& name);
  void side_by_side();
  void run_init(nlohmann::json& record);
  void finish();

  AnalyzeOptions o_;
  fs::path dir_;
  ProgressSink& progress_;
  ResultsDir out_;
  AnalysisInputs in_;
  std::vector<InitSeed> init_;  // the random initialisations, one per seed (init_passes)
  // Every initialisation stays loaded (and on disk) from its pass to its parts, instead of being written and read
  // again for them, when all of them fit kInitModelsKept.
  bool keep_init_models_ = false;
  bool one_thread_each_ = false;  // runs side by side are under way (side_by_side_or_in_turn)
  std::shared_ptr<const std::vector<LayerSpectrum>> spectra_;  // the model's F_t's (model_spectra)
  TensorMoments moments_;       // the model's, for its scale-matched initialisations (read once: a pass over the weights)
  // Disjoint subsets of the samples (sample i in subset i mod G), each through jacobian: the spread of a
  // statistic of mean Jacobians over them is its interval (subset_passes). The first is also the controls'
  // samples, and runs power and topology as well, so that each claim compares the model with its controls on the
  // same tokens in the same number (a statistic of mean Jacobians depends on how many samples are averaged).
  std::vector<AnalysisInputs> subsets_;
  std::vector<AnalysisInputs> nested_;  // the first ⌈S/4⌉ and ⌈S/2⌉ samples through jacobian (the stability flags)
  bool controls_on_subset_ = false;
  std::vector<Sample> control_subset_;  // the first subset's samples, when the controls run on them
  AnalyzeResult result_;
};

void check_options(AnalyzeOptions& o) {
  for (const std::string& part : o.skip)
    if (std::find(skippable_parts().begin(), skippable_parts().end(), part) == skippable_parts().end())
      fail("skip: unknown part '{}' (parts: {})", part, fmt::join(skippable_parts(), ", "));
  if (o.interval_subsets == 1 || o.interval_subsets < 0)
    fail("interval_subsets must be 0 (none) or at least 2 (got {})", o.interval_subsets);
  if (o.init_control && o.init_seeds < 1) fail("init_seeds must be at least 1 (got {}); to run no control, --no-init-control", o.init_seeds);
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
          {"jacobian", "--surgery --haar-null 5 (alphas and positions: the jacobian command's defaults)"},
          {"interval_subsets", o_.interval_subsets},
          {"init_control", !o_.init_control ? nlohmann::json(false)
                                            : nlohmann::json{{"seeds", init_seed_list()}, {"rule", "tdyn init's (the family's published init rule)"},
                                                             {"power", "the power command's defaults, no steering and no iteration, in "
                                                                       "DIR/init/seed-S/power"},
                                                             {"jacobian", "the jacobian command's defaults with --surgery --alphas 0,1 "
                                                                          "--surgery-control-draws 1 --surgery-full-depth-only, in "
                                                                          "DIR/init/seed-S/jacobian"},
                                                             {"power-l2", "power --mode attn-only-l2 without steering or iteration, in "
                                                                          "DIR/init/seed-S/power-l2"},
                                                             {"topology", "the topology command's defaults, in DIR/init/seed-S/topology"}}},
          {"power-l2", "power --mode attn-only-l2 --no-steer --no-iterate on the same samples (the paper's idealisation: "
                       "attention sublayers only, L2 normalisation); it runs the samples itself, not from the shared pass"},
          {"topology", "the topology command's defaults (coupling on)"},
          {"particles", {{"layer", o_.particles_layer}, {"head", o_.particles_head}, {"tokens", o_.particles_tokens},
                         {"T", o_.particles_t}, {"sphere", true}, {"cluster_on", "x"}}},
          {"pass", PassSource{o_.resume, ""}.to_json()},
          {"ablate", to_json(o_.ablations)}};
}

std::vector<uint64_t> Analysis::init_seed_list() const {
  std::vector<uint64_t> seeds;
  for (int64_t s = 0; s < o_.init_seeds; ++s) seeds.push_back(static_cast<uint64_t>(s));
  return seeds;
}

// The spectra of the model's F_t (of the ablated model, with ablations) with the default options, measured once per
// model: its pass probes the dominant eigenvectors' alignments and its power parts read them (power-l2 too: they do
// not depend on the dynamics' mode). Empty when both power parts are skipped.
std::shared_ptr<const std::vector<LayerSpectrum>> Analysis::model_spectra(const Transformer& transformer) const {
  if (skipped("power") && skipped("power-l2")) return std::make_shared<std::vector<LayerSpectrum>>();
  return std::make_shared<std::vector<LayerSpectrum>>(layer_spectra(layer_matrices(transformer.model(), zeroed(transformer))));
}

// What a pass sums for the parts that read it: the Jacobians leaving every sublayer (jacobian, topology's
// coupling), the correlations (topology) and power's token alignments with the dominant eigenvectors of the
// model's F_t (`spectra`, from model_spectra); of the ablated model, with ablations.
PassSpec Analysis::pass_spec(const Transformer& transformer, const std::vector<LayerSpectrum>& spectra) const {
  PassSpec spec;
  spec.boundaries = residual_boundaries(transformer.config().n_layers, BoundarySet::Sublayers);
  spec.zeroed = zeroed(transformer);
  spec.correlations = !skipped("topology");
  spec.jacobians = !skipped("jacobian") || !skipped("topology");
  if (!skipped("power")) spec.probes = token_dynamics_probes(spectra);
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
  auto transformer = std::make_shared<const Transformer>(in_.model);
  spectra_ = model_spectra(*transformer);
  const PassSpec spec = pass_spec(*transformer, *spectra_);
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
  std::unique_ptr<JacobianModel> jacobians;
  if (spec.jacobians) jacobians = std::make_unique<JacobianModel>(transformer, spec.zeroed);
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

// The random initialisations of the control: the token ids of the controls' samples (control_ids: an
// initialisation, which has no tokenizer of its own when the source is not a Hugging Face checkpoint, runs on
// exactly the trained model's tokens), then for every seed its model and pass (init_pass). Returns false on an MPI
// worker rank.
bool Analysis::init_passes() {
  const fs::path dir = dir_ / "init";
  std::string error;
  if (ranks().root()) {
    try {
      // A directory of the earlier layout (one seed: DIR/init/results.json, DIR/init/topology) would read as this run's.
      for (const char* stale : {"results.json", "topology", "model", "pass.tdynpass", "samples.ids"}) fs::remove_all(dir / stale);
      if (!controls_on_subset_) write_token_ids(control_ids(), in_.samples);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (ranks().root() && error.empty()) {
    try {
      moments_ = tensor_moments(*in_.model);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  for (uint64_t seed : init_seed_list()) init_.push_back({seed, false, dir / fmt::format("seed-{}", seed), {}, error, {}});
  for (uint64_t seed : init_seed_list()) init_.push_back({seed, true, dir / fmt::format("scaled-{}", seed), {}, error, {}});
  const double float32_bytes = 4.0 * static_cast<double>(in_.model->parameter_count()) * static_cast<double>(init_.size());
  keep_init_models_ = float32_bytes <= kInitModelsKept;
  bool root = true;
  for (InitSeed& seed : init_) root = init_pass(seed) && root;
  return root;
}

// One seed's random initialisation of the model's architecture in DIR/init/seed-S/model and its pass for the
// seed's power, jacobian and topology, DIR/init/seed-S/pass.tdynpass, split across MPI ranks like the trained
// model's. Rank 0 writes the files; the other ranks read them once it has. Returns false on an MPI worker rank; on
// rank 0 a failure to prepare the initialisation goes to seed.error, and the init part reports it.
bool Analysis::init_pass(InitSeed& seed) {
  const fs::path checkpoint = seed.dir / "model", ids = control_ids();
  if (ranks().root() && seed.error.empty()) {
    try {
      write_init_checkpoint(*in_.model, o_.model_path, checkpoint, seed.seed, 0, seed.scaled ? &moments_ : nullptr);
    } catch (const std::exception& e) {
      seed.error = e.what();
    }
  }
  // The broadcast is the barrier after which the files are there, and tells every rank whether they are.
  if (broadcast_from_root(seed.error.empty() ? 1.0 : 0.0) != 1.0) {
    if (seed.error.empty()) seed.error = "rank 0 could not prepare this initialisation";  // a worker: it skips the seed
    return ranks().root();
  }
  SampleOptions samples;
  samples.data = ids.string();
  samples.samples = static_cast<int64_t>(control_samples().size());
  samples.max_len = o_.max_len;
  samples.min_len = 1;
  try {
    seed.in = load_inputs(checkpoint.string(), o_.load, samples, "");
  } catch (const Error& e) {  // on every rank alike: rank 0 reports it, the others have no pass to share
    seed.error = e.what();
    return ranks().root();
  }
  auto transformer = std::make_shared<const Transformer>(seed.in.model);
  seed.spectra = model_spectra(*transformer);
  const PassSpec spec = pass_spec(*transformer, *seed.spectra);
  std::unique_ptr<JacobianModel> jacobians;
  if (spec.jacobians) jacobians = std::make_unique<JacobianModel>(transformer, spec.zeroed);
  const fs::path file = seed.dir / "pass.tdynpass";
  try {
    obtain_pass({o_.resume, ""}, *transformer, jacobians.get(), seed.in.samples, spec,
                pass_model_identity(checkpoint.string(), *seed.in.model), file, true,
                fmt::format("the initialisation's forward pass (seed {})", seed.seed), progress_);
  } catch (const WorkerShareDone&) {
    return false;
  } catch (const Error& e) {  // in one process the init part reports it; under MPI the ranks cannot go on apart
    if (ranks().size > 1) throw;
    seed.error = e.what();
    return true;
  }
  out_.record_file(fs::relative(file, dir_).generic_string(),
                   fmt::format("the forward pass of the initialisation of seed {}, read by its power, jacobian and topology "
                               "(tdyn pass file)",
                               seed.seed));
  seed.in.pass.from_pass = file.string();
  // Every rank has read the checkpoint (the pass ran on all of them). When the initialisations are large, only one
  // need be on disk and in memory at a time beside the first: run_init writes the others again when their parts run.
  if (&seed != &init_.front() && !keep_init_models_) {
    seed.in.model = nullptr;
    if (ranks().root()) fs::remove_all(checkpoint);
  }
  return true;
}

// The samples split into --interval-subsets G disjoint subsets, sample i into subset i mod G (each spans the corpus
// as the whole does), each with its token ids in DIR/subsets/subset-g/samples.ids and its own pass of the Jacobian
// sums, split across MPI ranks like the others; likewise the nested first ⌈S/4⌉ and ⌈S/2⌉ samples in
// DIR/nested/{quarter,half}. With the init control, the first subset is the controls' samples:
// its pass also sums what power and topology read. Returns false on an MPI worker rank.
bool Analysis::subset_passes() {
  const size_t G = static_cast<size_t>(o_.interval_subsets);
  const bool runs = G > 0 && !skipped("jacobian") && in_.samples.size() >= 2 * G;
  if (ranks().root() && !(o_.resume && runs)) fs::remove_all(dir_ / "nested");
  // An earlier run's subsets would read as this run's; a resumed run keeps the pass files it can continue.
  if (ranks().root() && fs::is_directory(dir_ / "subsets")) {
    std::vector<fs::path> stale;
    for (const auto& entry : fs::directory_iterator(dir_ / "subsets")) {
      bool ours = false;  // one of this run's subsets
      for (size_t g = 0; g < G; ++g) ours = ours || entry.path() == subset_dir(dir_, g);
      if (!(o_.resume && runs && ours)) stale.push_back(entry.path());
    }
    for (const fs::path& p : stale) fs::remove_all(p);
  }
  if (!runs) return true;
  std::vector<std::vector<Sample>> samples(G);
  for (size_t i = 0; i < in_.samples.size(); ++i) samples[i % G].push_back(in_.samples[i]);
  controls_on_subset_ = runs_init();
  if (controls_on_subset_) control_subset_ = samples[0];
  // Then the nested first ⌈S/4⌉ and ⌈S/2⌉ samples: the statistics' stability in sample count.
  std::vector<fs::path> dirs;
  for (size_t g = 0; g < G; ++g) dirs.push_back(subset_dir(dir_, g));
  for (const auto& [name, fraction] : {std::pair{"quarter", 4}, std::pair{"half", 2}}) {
    const size_t n = (in_.samples.size() + fraction - 1) / fraction;
    samples.emplace_back(in_.samples.begin(), in_.samples.begin() + static_cast<std::ptrdiff_t>(n));
    dirs.push_back(dir_ / "nested" / name);
  }
  if (ranks().root())
    for (size_t i = 0; i < dirs.size(); ++i) write_token_ids(dirs[i] / "samples.ids", samples[i]);
  broadcast_from_root(1.0);  // the barrier after which the files are there
  auto transformer = std::make_shared<const Transformer>(in_.model);
  const PassSpec full = pass_spec(*transformer, *spectra_);
  const JacobianModel jacobians(transformer, full.zeroed);
  PassSpec jacobians_only = full, subset_spec = full;  // the subsets run jacobian and topology, the nested sets jacobian
  jacobians_only.correlations = false, jacobians_only.probes.clear();
  subset_spec.probes.clear();
  bool root = true;
  for (size_t g = 0; g < dirs.size(); ++g) {
    const bool nested = g >= G;
    const PassSpec& spec = g == 0 && controls_on_subset_ ? full : nested ? jacobians_only : subset_spec;
    AnalysisInputs sub;
    sub.model_path = o_.model_path, sub.load = o_.load, sub.model = in_.model;
    sub.sample_options.data = (dirs[g] / "samples.ids").string();
    sub.sample_options.samples = static_cast<int64_t>(samples[g].size());
    sub.sample_options.max_len = o_.max_len, sub.sample_options.min_len = 1;
    sub.samples = std::move(samples[g]);
    const fs::path file = dirs[g] / "pass.tdynpass";
    const std::string what = nested ? fmt::format("the first {} samples", sub.samples.size())
                                    : fmt::format("sample subset {} of {}", g + 1, G);
    try {
      obtain_pass({o_.resume, ""}, *transformer, &jacobians, sub.samples, spec, pass_model_identity(o_.model_path, *in_.model), file,
                  true, "the forward pass of " + what, progress_);
      out_.record_file(fs::relative(file, dir_).generic_string(),
                       g == 0 && controls_on_subset_
                           ? "the sums of sample subset 0 (tdyn pass file), the controls' samples: read by its power, jacobian and topology"
                           : fmt::format("the Jacobian sums of {} (tdyn pass file), read by its jacobian", what));
      sub.pass.from_pass = file.string();
    } catch (const WorkerShareDone&) {
      root = false;  // the set is still recorded: the worker takes its share of its jacobian's metrics
    }
    (nested ? nested_ : subsets_).push_back(std::move(sub));
  }
  return root;
}

// The options of the model's own jacobian part.
JacobianOptions Analysis::model_jacobian_options() const {
  JacobianOptions options;
  options.surgery = true;
  options.haar_null_draws = kHaarNullDraws;
  options.keep_matrices = o_.keep_matrices;
  options.ablations = o_.ablations;
  options.ranks_share_metrics = true;  // under MPI the worker ranks take their shares (share_jacobian_metrics)
  return options;
}

// The jacobian options of a control or a sample set (run_controlled_parts): a run whose figures are drawn shows the
// cumulative ranks at every depth; the others serve only the verdicts. `first`: the first initialisation's.
JacobianOptions Analysis::controlled_jacobian_options(bool figures, bool first) const {
  JacobianOptions options = control_jacobian_options(first && o_.keep_matrices);
  options.ablations = o_.ablations;
  options.verdict_metrics_only = !figures;
  options.ranks_share_metrics = true;
  return options;
}

// An MPI worker rank, once its shares of the passes are done, takes its share of the depths' metrics (Schur forms,
// SVDs, the surgery's products) of every jacobian run rank 0 makes, in rank 0's order: the model's, its sample
// subsets' and nested sets' (run_subsets), then the initialisations' (run_init). Rank 0 sends the operators, so a
// worker needs only the architecture, the model's (an initialisation has the same) and the options. The other
// parts run on rank 0 alone and exchange nothing.
void Analysis::share_jacobian_metrics() {
  if (skipped("jacobian")) return;
  auto share = [&](const std::vector<Sample>& samples, const JacobianOptions& options) {
    AnalysisInputs in;
    in.model_path = o_.model_path, in.model = in_.model, in.samples = samples;
    take_jacobian_metrics_share(in, options);
  };
  for (const std::string& part : analyze_parts()) {
    if (part == "jacobian") {
      share(in_.samples, model_jacobian_options());
      for (const AnalysisInputs& sub : subsets_) share(sub.samples, controlled_jacobian_options(false, false));
      for (const AnalysisInputs& sub : nested_) share(sub.samples, controlled_jacobian_options(false, false));
    } else if (part == "init" && runs_init()) {
      for (size_t s = 0; s < init_.size(); ++s)
        if (init_[s].error.empty()) share(control_samples(), controlled_jacobian_options(s == 0, s == 0));
    }
  }
}

// Runs task(0, ·), ..., task(n − 1, ·): side by side, one per thread on serial BLAS with silent progress, as many
// at once as there are threads and their matrices (d × d) fit kSideBySideBytes; else one after another, each on
// every thread with `progress`. Small runs gain less from their own threads than from running side by side: a LAPACK
// decomposition's QR sweeps keep few threads busy (docs/performance.md).
// Under MPI the runs that would go side by side go one at a time, each still on one thread (so that they compute
// what one process computes), their jacobian metrics shared with the worker ranks. `what` names the runs in a note.
void Analysis::side_by_side_or_in_turn(int64_t n, const std::string& what, const std::function<void(int64_t, ProgressSink&)>& task) {
  const double d = static_cast<double>(in_.model->config.d_model);
  const int threads = omp_get_max_threads();
  const int at_once = static_cast<int>(std::clamp<double>(std::floor(kSideBySideBytes / (kMatricesPerRun * sizeof(double) * d * d)), 1, threads));
  if (at_once < 2 || n < 2) {
    for (int64_t i = 0; i < n; ++i) task(i, progress_);
    return;
  }
  progress_.note(fmt::format("{}: {}", what, ranks().size > 1 ? "one at a time on one thread each, their metrics shared with the other ranks"
                                                              : fmt::format("{} side by side", at_once)));
  one_thread_each_ = true;
  try {
    if (ranks().size > 1) {
      omp_set_num_threads(1);
      SerialBlas serial_blas;
      for (int64_t i = 0; i < n; ++i) task(i, silent_progress());
    } else {
      omp_set_num_threads(at_once);
      parallel_tasks(n, [&](int64_t i) {
        omp_set_num_threads(1);  // this thread's own parallel regions, for the rest of the region
        task(i, silent_progress());
      });
    }
  } catch (...) {
    omp_set_num_threads(threads);
    one_thread_each_ = false;
    throw;
  }
  omp_set_num_threads(threads);
  one_thread_each_ = false;
}

// The jacobian and topology of every sample subset, with the controls' options, into DIR/subsets/subset-g, and the
// jacobian of the nested first ⌈S/4⌉ and ⌈S/2⌉ samples into DIR/nested/{quarter,half}: the verdicts' intervals of
// the statistics of mean Jacobians, of the surgery and of the coupling's sign rule, and their stability flags.
// Recorded in the jacobian part's record. They run side by side, one per thread, as the initialisations after the
// first do (run_init), when their metrics' matrices fit (kSideBySideBytes).
void Analysis::run_subsets(nlohmann::json& record) {
  struct Run {
    const AnalysisInputs* in;
    fs::path dir;
    std::vector<std::string> parts;
    nlohmann::json record;
  };
  std::vector<Run> runs;
  for (size_t g = 0; g < subsets_.size(); ++g)
    runs.push_back({&subsets_[g], subset_dir(dir_, g), {"jacobian", "topology"},
                    {{"dir", fs::relative(subset_dir(dir_, g), dir_).generic_string()}, {"samples", subsets_[g].samples.size()}}});
  for (const AnalysisInputs& nested : nested_) {
    const fs::path dir = fs::path(nested.sample_options.data).parent_path();
    runs.push_back({&nested, dir, {"jacobian"}, {{"dir", fs::relative(dir, dir_).generic_string()}, {"samples", nested.samples.size()}}});
  }
  auto run = [&](int64_t i, ProgressSink& progress) {
    Run& r = runs[static_cast<size_t>(i)];
    run_controlled_parts(o_.model_path, r.dir, *r.in, progress, spectra_, r.parts, false, r.record, false);
  };
  side_by_side_or_in_turn(static_cast<int64_t>(runs.size()), "the sample subsets' and nested sets' parts", run);
  record["subsets"] = nlohmann::json::array();
  record["nested"] = nlohmann::json::array();
  for (size_t i = 0; i < runs.size(); ++i) record[i < subsets_.size() ? "subsets" : "nested"].push_back(std::move(runs[i].record));
}

// A part's command line: this program with the run's thread count and quietness.
std::vector<std::string> Analysis::command(const std::string& name, int threads) const {
  std::vector<std::string> argv = {o_.program, name, "--threads", std::to_string(threads)};
  if (o_.quiet) argv.push_back("--quiet");
  return argv;
}

// The command line that reproduces part `name` (not init) alone, given the pass file.
std::vector<std::string> Analysis::part_command(const std::string& name) const {
  std::vector<std::string> argv = command(command_of(name));
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
  append(argv, ablate_flags(o_.ablations));
  if (idealised(name)) {
    append(argv, kControlPowerFlags);
    append(argv, kIdealisedFlags);
    return argv;
  }
  if (name == "jacobian") append(argv, {"--surgery", "--haar-null", std::to_string(kHaarNullDraws)});
  if (name == "topology" && result_.init_topology)
    append(argv, {"--communities-control", (init_.front().dir / "topology").string(), "--communities-control-independent"});
  if (name == "topology" && result_.jacobian) append(argv, {"--normality-from", (dir_ / "jacobian").string()});
  append(argv, {"--from-pass", in_.pass.from_pass});
  return argv;
}

// The parts `names` as a control runs them (power without steering or iteration, jacobian with surgery at α = 0
// and 1 and one random-N draw, topology), each part not skipped, for `checkpoint` on the inputs `in` (its samples'
// token ids and its pass) into dir/PART; their command lines go to record["argv"]. With `first`, their results are
// also AnalyzeResult's init_*.
void Analysis::run_controlled_parts(const std::string& checkpoint, const fs::path& dir, const AnalysisInputs& in, ProgressSink& progress,
                                    const std::shared_ptr<const std::vector<LayerSpectrum>>& spectra,
                                    const std::vector<std::string>& names, bool figures, nlohmann::json& record, bool first) {
  TDYN_CHECK(in.model && !in.pass.from_pass.empty());
  for (const std::string& part : names) {
    if (skipped(part)) continue;
    // Runs side by side (side_by_side_or_in_turn) run their parts on one thread each, and say so: a float32 forward
    // pass (power-l2's) rounds differently on another number of threads.
    std::vector<std::string> argv = command(command_of(part), one_thread_each_ ? 1 : o_.threads);
    append(argv, {checkpoint, "--data", in.sample_options.data, "--samples", std::to_string(in.samples.size()), "--max-len",
                  std::to_string(o_.max_len), "--min-len", "1"});
    append(argv, loading_flags(o_.load));
    append(argv, ablate_flags(o_.ablations));
    if (part == "power" || idealised(part)) append(argv, kControlPowerFlags);
    if (idealised(part)) append(argv, kIdealisedFlags);
    if (part == "jacobian") append(argv, kControlJacobianFlags);
    if (part == "jacobian" && !figures) argv.push_back("--verdict-metrics-only");
    if (part == "topology" && !figures) argv.push_back("--no-layout");
    if (!idealised(part)) append(argv, {"--from-pass", in.pass.from_pass});
    // The jacobian part just ran on the same pass: topology reads the maps' normality from it.
    const bool normality_known = part == "topology" && !skipped("jacobian") &&
                                 std::find(names.begin(), names.end(), "jacobian") != names.end();
    if (normality_known) append(argv, {"--normality-from", (dir / "jacobian").string()});
    append(argv, {"--out", (dir / part).string()});
    record["argv"][part] = argv;
    ResultsDir out(dir / part, command_of(part), argv);
    // Only the verdicts read these parts' numbers, and the report draws only the first initialisation's.
    if (!figures) out.without_figures("the report shows none of this run's figures; its command line draws them");
    if (part == "power" || idealised(part)) {
      PowerOptions options = control_power_options(idealised(part) ? DynamicsMode::AttnOnlyL2 : DynamicsMode::Full);
      options.ablations = o_.ablations;
      options.spectra = spectra;
      PowerResult r = power_to(&out, idealised(part) ? without_pass(in) : in, options, progress);
      if (first && part == "power") result_.init_power = std::move(r), result_.init_power_options = options;
    } else if (part == "jacobian") {
      const JacobianOptions options = controlled_jacobian_options(figures, first);
      JacobianResult r = jacobian_to(&out, in, {}, options, progress);
      if (first) result_.init_jacobian = std::move(r), result_.init_jacobian_options = options;
    } else if (part == "topology") {
      TopologyOptions options;
      options.ablations = o_.ablations;
      if (normality_known) options.normality_from = (dir / "jacobian").string();
      options.layout = figures;
      TopologyResult r = std::move(topology_to(&out, in, {}, options, progress).front());
      if (first) result_.init_topology = std::move(r), result_.init_topology_options = options;
    }
  }
}

// The init control: the model's own power and power-l2 on the controls' samples (when they are the first subset:
// its jacobian and topology ran with the subsets), then every seed of the random initialisations through power,
// power-l2, jacobian and topology (run_controlled_parts), each on its own pass. A seed that fails is recorded and
// the others still run; the part fails when any seed did.
void Analysis::run_init(nlohmann::json& record) {
  if (controls_on_subset_ && !subsets_.empty()) {
    nlohmann::json model = {{"dir", fs::relative(subset_dir(dir_, 0), dir_).generic_string()},
                            {"samples", subsets_.front().samples.size()},
                            {"what", "the model on the controls' samples with their options: what each claim compares them with"}};
    run_controlled_parts(o_.model_path, subset_dir(dir_, 0), subsets_.front(), progress_, spectra_, {"power", "power-l2"}, false, model, false);
    record["model"] = model;
  }
  subsets_.clear();  // their models and samples are no longer needed
  record["samples"] = control_samples().size();
  record["seeds"] = nlohmann::json::array();
  std::vector<nlohmann::json> seed_records(init_.size());
  std::vector<std::string> errors(init_.size());
  // The first seed runs alone on every thread: its parts draw the figures and are AnalyzeResult's init_*. The
  // others run side by side when their models are all in memory (else each is drawn again in its turn: init_pass).
  const size_t n = init_.size();
  if (n > 0) seed_records[0] = run_init_seed(init_[0], true, progress_, errors[0]);
  auto seed = [&](int64_t i, ProgressSink& progress) {
    const size_t s = static_cast<size_t>(i) + 1;
    seed_records[s] = run_init_seed(init_[s], false, progress, errors[s]);
  };
  const int64_t others = static_cast<int64_t>(n) - 1;
  if (keep_init_models_) side_by_side_or_in_turn(others, "the other initialisations' parts", seed);
  else for (int64_t i = 0; i < others; ++i) seed(i, progress_);
  std::vector<std::string> failed;
  for (size_t s = 0; s < n; ++s) {
    record["seeds"].push_back(std::move(seed_records[s]));
    if (!errors[s].empty()) failed.push_back(fmt::format("seed {}: {}", init_[s].seed, errors[s]));
  }
  if (!failed.empty()) throw Error(fmt::format("{}", fmt::join(failed, "; ")));
}

// One seed of the init control: its parts (run_controlled_parts) into its directory, and its record; a failure is
// recorded there and in `error`.
nlohmann::json Analysis::run_init_seed(InitSeed& seed, bool first, ProgressSink& progress, std::string& error) {
  nlohmann::json seed_record = {{"seed", seed.seed}, {"dir", fs::relative(seed.dir, dir_).generic_string()},
                                {"weights", seed.scaled ? "each kind of tensor at the model's own mean and spread" : "the family's rule"}};
  const fs::path checkpoint = seed.dir / "model";
  std::vector<std::string> init_argv = {o_.program, "init", o_.model_path, "--seed", std::to_string(seed.seed), "--out", checkpoint.string()};
  if (seed.scaled) init_argv.push_back("--match-scales");
  append(init_argv, loading_flags(o_.load));
  seed_record["init_argv"] = init_argv;
  try {
    if (!seed.error.empty()) throw Error(seed.error);
    if (!seed.in.model) {  // its checkpoint was removed after its pass (init_pass): the same draw again
      write_init_checkpoint(*in_.model, o_.model_path, checkpoint, seed.seed, 0, seed.scaled ? &moments_ : nullptr);
      seed.in.model = load_model(checkpoint.string(), o_.load);
    }
    run_controlled_parts(checkpoint.string(), seed.dir, seed.in, progress, seed.spectra, {"power", "power-l2", "jacobian", "topology"}, first,
                         seed_record, first);
    seed_record["status"] = "ok";
  } catch (const std::exception& e) {
    // Under MPI the worker ranks wait for this seed's jacobian metrics: the run ends on every rank. A seed that rank 0
    // could not prepare (seed.error) they skip too.
    if (ranks().size > 1 && seed.error.empty()) throw;
    seed_record["status"] = "failed";
    seed_record["error"] = e.what();
    error = e.what();
  }
  seed.in = {};  // its model and samples are no longer needed
  // A checkpoint is as large as the model: only the first initialisation's stays; init_argv reproduces any other exactly.
  if (!first) {
    fs::remove_all(checkpoint);
    seed_record["model"] = "removed after its parts ran; init_argv writes it again";
  }
  return seed_record;
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
      ResultsDir part(dir, command_of(name), argv);
      if (name == "power") {
        result_.power_options.ablations = o_.ablations;
        result_.power_options.spectra = spectra_;
        result_.power = power_to(&part, in_, result_.power_options, progress_);
      } else if (idealised(name)) {
        result_.power_l2_options = control_power_options(DynamicsMode::AttnOnlyL2);
        result_.power_l2_options.ablations = o_.ablations;
        result_.power_l2_options.spectra = spectra_;
        result_.power_l2 = power_to(&part, without_pass(in_), result_.power_l2_options, progress_);
      } else if (name == "jacobian") {
        result_.jacobian_options = model_jacobian_options();
        result_.jacobian = jacobian_to(&part, in_, {}, result_.jacobian_options, progress_);
        run_subsets(record);
      } else if (name == "topology") {
        TopologyOptions& options = result_.topology_options;
        options.ablations = o_.ablations;
        if (result_.jacobian) options.normality_from = (dir_ / "jacobian").string();  // the same pass's J̄, measured there
        if (result_.init_topology) {
          // The initialisation's communities: an independent draw, whose units are not the trained model's, so the
          // report shows their NMI without judging it (docs/topology.md).
          options.communities_control = (init_.front().dir / "topology").string();
          options.communities_control_independent = true;
        }
        result_.topology = std::move(topology_to(&part, in_, {}, options, progress_).front());
      } else if (name == "particles") {
        particles::ExperimentSpec spec = particles::model_layer_defaults();
        spec.n = o_.particles_tokens;
        spec.t_end = o_.particles_t;
        particles::ParticlesOptions& options = result_.particles_options;
        options.diagnostics.cluster_on = particles::StateVariable::x;  // on the sphere the tokens themselves cluster
        SampleOptions tokens;
        tokens.data = o_.data;
        const ModelHeadOptions head{o_.particles_layer, o_.particles_head, spec.n};
        result_.particles = particles_to(&part, o_.model_path, *in_.model, o_.load, head, tokens, o_.tokenizer, spec, options);
      }
    }
    record["status"] = "ok";
  } catch (const std::exception& e) {  // Error, a bad allocation, or a library's own exception
    // Under MPI the worker ranks take shares of these parts' jacobian metrics (share_jacobian_metrics): a failure
    // there ends the run on every rank, as it does in `tdyn jacobian`.
    if (ranks().size > 1 && (name == "jacobian" || name == "init")) throw;
    record["status"] = "failed";
    record["error"] = e.what();
    progress_.note(fmt::format("part {} failed: {}", name, e.what()));
  }
  record["seconds"] = times.at(0).second;
  out_.add_timing(name, times.at(0).second);
}

// DIR/side-by-side: the model's per-depth numbers beside its first initialisation's (the family's rule, seed 0) in
// one figure each, attention and MLP sublayers on separate axes, as `tdyn compare DIR` draws them; the report shows
// it first. The analysis stands without it: a failure is noted, not raised.
void Analysis::side_by_side() {
  const fs::path out = dir_ / "side-by-side";
  try {
    write_comparison(compare_runs({{dir_, ""}}, out), out, {"tdyn", "compare", dir_.string(), "--out", out.string()});
    out_.record_file("side-by-side/index.html", "the model beside its initialisation, per depth (tdyn compare)");
  } catch (const Error& e) {
    progress_.note(fmt::format("the side-by-side figures failed: {}", e.what()));
  }
}

// The verdicts and the report, once every part ran.
void Analysis::finish() {
  {
    PhaseTimer timer(out_, "report");
    out_.record_file("index.html", "the report");
    out_.write();  // the report reads the parts from this results.json
    out_.results()["verdicts"] = verdicts_json(summarize_claims(load_report_parts(dir_)));
    out_.write();
    side_by_side();
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
  if (!in_.model) in_.model = load_model(o_.model_path, o_.load);
  const ZeroedParts ablated = zeroed(Transformer(in_.model));  // the ablations' errors before any pass
  if (!skipped("particles")) {  // the options that depend on the model: checked before any pass
    const ModelConfig& c = in_.model->config;
    if (o_.particles_layer >= c.n_layers) fail("--particles-layer {}: the model has layers 0 to {}", o_.particles_layer, c.n_layers - 1);
    if (o_.particles_head >= c.n_heads) fail("--particles-head {}: the model has heads 0 to {}", o_.particles_head, c.n_heads - 1);
    if (ablated.layer(o_.particles_layer).head(o_.particles_head))
      fail("--particles-head {} of layer {} is ablated: its particles would not move; choose another head, or --skip particles",
           o_.particles_head, o_.particles_layer);
  }
  if (!skipped("power") || !skipped("power-l2") || !skipped("jacobian") || !skipped("topology")) {
    // Every pass runs before any part, so that MPI worker ranks, which only take their shares of the passes, are
    // done with the run before rank 0 analyses.
    bool root = true;
    {
      PhaseTimer timer(out_, "forward_pass");
      root = draw_samples_and_pass();
    }
    {
      PhaseTimer timer(out_, "subset_forward_passes");
      root = subset_passes() && root;
    }
    if (runs_init()) {
      PhaseTimer timer(out_, "init_forward_pass");
      root = init_passes() && root;
    }
    if (!root) {
      share_jacobian_metrics();
      throw WorkerShareDone{};
    }
    if (runs_init())
      out_.options()["init_control"]["samples"] = controls_on_subset_ ? "the first sample subset's (DIR/subsets/subset-0), compared "
                                                                        "with the model's parts there"
                                                                      : "all of them (DIR/init/samples.ids)";
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

AnalyzeResult run_analyze(const AnalyzeOptions& options, const fs::path& out_dir, ProgressSink& progress, std::vector<std::string> argv,
                          std::shared_ptr<const Model> model) {
  AnalyzeOptions checked = options;
  check_options(checked);
  return Analysis(std::move(checked), out_dir, progress, argv, std::move(model)).run();
}

}  // namespace tdyn
