// tdyn topology MODEL --out DIR: activation-graph communities, boundary nodes and their coupling to the Jacobian
// gains (the residual-stream paper, SPEC §3 "Topology"), for one checkpoint and optionally others (--compare) and a random
// initialisation of the same architecture (--random-init), the paper's training-vs-architecture comparison.
// The analysis is analysis/topology/run.h, its files report/topology_output.h; this file parses and calls them.
//
// Layout of DIR: the first MODEL's results at the top (results.json, tables, arrays, figures) plus the
// comparison of all checkpoints (checkpoints.csv, compare_*.svg); every further checkpoint in
// DIR/compare/LABEL/ as a complete results directory of its own.
#include <algorithm>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "analysis/topology/run.h"
#include "cli_util.h"
#include "command.h"
#include "model/init.h"
#include "pass_args.h"
#include "report/progress.h"
#include "report/results.h"
#include "report/topology_output.h"

namespace tdyn::cli {
namespace {

struct TopologyArgs {
  ModelArgs model;
  SampleArgs samples;
  PassArgs pass;
  std::string out_dir;
  std::vector<std::string> compare;
  bool random_init = false;
  uint64_t init_seed = 0;
  std::string boundaries = "sublayers";
  bool no_coupling = false;
  std::string gamma_scan;  // parsed by parse_double_list: CLI11's vector parsing would also take "", "+0.1" and "nan"
  TopologyOptions options;
};

// results.json's options that are the command's, not the analysis's: samples, pass and further checkpoints.
nlohmann::json command_options_json(const TopologyArgs& a) {
  nlohmann::json samples = a.samples.options.to_json();
  if (a.samples.options.data.empty() && a.samples.options.prompt.empty() && a.samples.options.ids.empty())
    samples["data"] = default_corpus().string();
  return {{"samples", samples},
          {"tokenizer", a.samples.tokenizer.empty() ? "the one shipped with MODEL" : a.samples.tokenizer},
          {"pass", pass_options_json(a.pass)},
          {"compare", a.compare},
          {"random_init", a.random_init ? nlohmann::json{{"seed", a.init_seed}, {"rule", "Hugging Face _init_weights: N(0, 0.02), norms 1"}}
                                        : nlohmann::json(false)}};
}

// One checkpoint: its pass (run here, or --from-pass), its analysis with `options`, and its results in `out`
// (whose options record all of the command's, a.options).
TopologyCheckpoint analyse_checkpoint(const TopologyArgs& a, const TopologyOptions& options, const std::shared_ptr<const Model>& model,
                                      const std::string& path, const std::string& label, const std::vector<Sample>& samples,
                                      ResultsDir& out) {
  check_sample_ids(samples, model->config, path);
  auto transformer = std::make_shared<const Transformer>(model);
  std::unique_ptr<JacobianModel> jacobians;
  if (options.coupling) jacobians = std::make_unique<JacobianModel>(transformer);
  std::optional<PassFile> pass;
  {
    PhaseTimer timer(out, jacobians ? "forward_correlations_and_jacobians" : "forward_correlations");
    pass = obtain_pass(a.pass, *transformer, jacobians.get(), samples, topology_pass_spec(model->config.n_layers, options),
                       pass_model_identity(path, *model), out.file("pass.tdynpass"), false, fmt::format("topology {}: samples", label));
  }
  StderrProgress progress("tdyn");
  const TopologyResult result = run_topology(*model, path, label, *pass, options, progress);
  out.options() = command_options_json(a);
  write_topology(out, result, a.options);
  return checkpoint_summary(result, out.path());
}

// The architecture of `model` as a Hugging Face config for write_random_init: Llama from its config, any other
// family from the config.json of its directory.
nlohmann::json random_init_config(const Model& model, const fs::path& path) {
  if (model.config.family == "llama") return llama_hf_config_json(model.config);
  if (fs::is_directory(path) && fs::exists(path / "config.json")) return nlohmann::json::parse(read_file(path / "config.json"));
  fail("--random-init: {} is a {} checkpoint without a config.json directory; give a Hugging Face directory", path.string(),
       model.config.family);
}

int run(TopologyArgs& a) {
  a.options.boundaries = parse_boundary_set(a.boundaries);
  a.options.coupling = !a.no_coupling;
  if (!a.gamma_scan.empty()) a.options.graph.gamma_scan = parse_double_list(a.gamma_scan, "--gamma-scan");
  PositionSpec::parse(a.options.positions);  // fail early on a bad --positions
  require_single_rank(!a.compare.empty() || a.random_init, "topology with --compare or --random-init");
  auto model = a.model.load();
  const std::vector<Sample> samples = a.samples.load(a.model.path, model->config.d_vocab);
  ResultsDir out(a.out_dir, "topology", invocation());
  std::vector<std::string> labels;
  std::vector<TopologyCheckpoint> checkpoints;
  checkpoints.push_back(analyse_checkpoint(a, a.options, model, a.model.path, checkpoint_label(a.model.path, &labels), samples, out));
  TopologyOptions further = a.options;  // the communities of the first checkpoint only are compared with the control's
  further.communities_control.clear();
  for (const std::string& path : a.compare) {
    const std::string label = checkpoint_label(path, &labels);
    ResultsDir sub(out.file("compare") / label, "topology", invocation());
    checkpoints.push_back(analyse_checkpoint(a, further, load_model(path, a.model.options()), path, label, samples, sub));
  }
  if (a.random_init) {
    const std::string label = checkpoint_label("random_init", &labels);
    ResultsDir sub(out.file("compare") / label, "topology", invocation());
    const fs::path model_dir = sub.file("model");
    write_random_init(random_init_config(*model, a.model.path), model_dir, a.init_seed);
    sub.record_file("model/config.json", "random initialisation of MODEL's architecture: configuration");
    sub.record_file("model/model.safetensors", fmt::format("random initialisation: weights (seed {})", a.init_seed));
    checkpoints.push_back(analyse_checkpoint(a, further, load_model(model_dir), model_dir.string(), label, samples, sub));
  }
  write_topology_comparison(out, checkpoints);
  return 0;
}

void add_graph_options(CLI::App* cmd, TopologyArgs& a) {
  GraphOptions& g = a.options.graph;
  cmd->add_option("--boundaries", a.boundaries, "layers: input of every layer + output of the last; sublayers: also the "
                                                "pre-MLP stream (hook_resid_mid)")
      ->capture_default_str()->check(CLI::IsMember({"layers", "sublayers"}));
  auto* top_k = cmd->add_option("--top-k", g.top_k, "Keep the k strongest edges (|r|, sign kept) of every unit")
                    ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--threshold", g.threshold, "Instead of --top-k: keep every pair with |r| >= this")
      ->check(CLI::Range(0.0, 1.0))->excludes(top_k);
  cmd->add_option("--gamma", g.leiden.resolution, "CPM resolution of the positive layer")->capture_default_str();
  cmd->add_option("--leiden-seed", g.leiden.seed, "Seed of igraph's Leiden (and of the graph layout)")->capture_default_str();
  cmd->add_option("--gamma-scan", a.gamma_scan, "Comma-separated resolutions also partitioned at every boundary (gamma_scan.csv)");
  cmd->add_option("--draw-boundary", a.options.draw_boundary, "Boundary index whose graph is drawn (default: the middle one)");
}

void add_coupling_options(CLI::App* cmd, TopologyArgs& a) {
  CouplingOptions& c = a.options.coupling_test;
  cmd->add_flag("--no-coupling", a.no_coupling, "Topology only: no mean Jacobians, no coupling statistics");
  cmd->add_option("--positions", a.options.positions, "Positions averaged in the mean Jacobians: last, all, or a list like 5,23,-1")
      ->capture_default_str();
  cmd->add_option("--permutations", c.permutations, "Permutations of each Spearman permutation test (0: parametric p only)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--permutation-seed", c.seed, "Seed of the permutation tests (layer i: seed + i)")->capture_default_str();
  cmd->add_option("--min-effect", c.min_effect,
                  "|rho| a BH-significant layer must also reach to count as coupled (with thousands of units tiny rho are significant)")
      ->capture_default_str()->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--fdr-q", c.fdr_q, "Benjamini-Hochberg level across layers")->capture_default_str()->check(CLI::Range(1e-12, 1.0 - 1e-12));
  cmd->add_flag("--save-correlations", a.options.keep_correlations, "Write every correlation matrix as correlation_HOOK.npy [d, d]");
  cmd->add_flag("--save-jacobians", a.options.keep_jacobians, "Write the mean Jacobians used by the coupling as mean_jacobians.npy");
}

void add_checkpoint_options(CLI::App* cmd, TopologyArgs& a) {
  cmd->add_option("--compare", a.compare,
                  "Further checkpoints analysed the same way on the same samples (DIR/compare/LABEL; comma-separated "
                  "or repeated; CACHE@REVISION for the steps of a training run)")
      ->delimiter(',');
  cmd->add_flag("--random-init", a.random_init, "Also analyse a random initialisation of MODEL's architecture (the step-0 null model)");
  cmd->add_option("--init-seed", a.init_seed, "Seed of --random-init")->capture_default_str();
  cmd->add_option("--communities-control", a.options.communities_control,
                  "A topology results directory of the same architecture on the same samples (e.g. the same run's step-0 "
                  "checkpoint): NMI of the communities per boundary against its, with a shuffled-unit null "
                  "(results.community_similarity)");
  cmd->add_flag("--communities-control-independent", a.options.communities_control_independent,
                "The --communities-control model is an independent random draw (tdyn init), so its units are not this model's: "
                "recorded so that the report shows the NMI without judging it");
  cmd->add_option("--communities-permutations", a.options.communities_permutations, "Shuffles of the --communities-control null")
      ->capture_default_str()->check(CLI::PositiveNumber);
}

std::function<int()> setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("topology", "Activation-graph topology (\"Dynamics of the Transformer Residual Stream: Coupling Spectral Geometry to Network "
                                             "Topology\"): per residual boundary, Pearson correlation "
                                             "graph, signed Leiden CPM communities, boundary nodes, and their coupling with "
                                             "the Jacobian gains (Spearman, BH across layers); --compare / --random-init for "
                                             "training vs architecture");
  auto a = std::make_shared<TopologyArgs>();
  a->model.add_to(cmd);
  a->samples.add_to(cmd, 1000);
  a->pass.add_to(cmd);
  cmd->add_option("--out", a->out_dir, "Results directory")->required();
  add_checkpoint_options(cmd, *a);
  add_graph_options(cmd, *a);
  add_coupling_options(cmd, *a);
  return [a] { return run(*a); };
}

}  // namespace

TDYN_REGISTER_COMMAND("topology", 60, setup);

}  // namespace tdyn::cli
