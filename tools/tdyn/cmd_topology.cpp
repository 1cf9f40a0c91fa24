// tdyn topology MODEL --out DIR: activation-graph communities, boundary nodes and their coupling to the Jacobian
// gains (the residual-stream paper, SPEC §3 "Topology"), for one checkpoint and optionally others (--compare) and a random
// initialisation of the same architecture (--random-init), the paper's training-vs-architecture comparison.
// topology_to (pipeline/parts.h) runs and writes it; this file parses the flags.
//
// Layout of DIR: the first MODEL's results at the top (results.json, tables, arrays, figures) plus the
// comparison of all checkpoints (checkpoints.csv, compare_*.svg); every further checkpoint in
// DIR/compare/LABEL/ as a complete results directory of its own.
#include <optional>

#include "cli_util.h"
#include "command.h"
#include "pass_args.h"
#include "pipeline/parts.h"
#include "report/progress.h"

namespace tdyn::cli {
namespace {

struct TopologyArgs {
  ModelArgs model;
  SampleArgs samples;
  PassSource pass;
  std::string out_dir;
  std::vector<std::string> compare;
  bool random_init = false;
  uint64_t init_seed = 0;
  std::string boundaries = "sublayers";
  bool no_coupling = false, no_layout = false;
  std::vector<std::string> ablate;
  TopologyOptions options;
};

int run(TopologyArgs& a) {
  a.options.boundaries = parse_boundary_set(a.boundaries);
  a.options.coupling = !a.no_coupling;
  a.options.layout = !a.no_layout;
  a.options.ablations = Ablation::parse(a.ablate);
  a.options.ranks_share_coupling = true;  // every MPI rank runs this command
  PositionSpec::parse(a.options.positions);  // fail early on a bad --positions
  check_topology_ranks(!a.compare.empty() || a.random_init);
  const AnalysisInputs in = load_inputs(a.model.path, a.model.options(), a.samples.options, a.samples.tokenizer, a.pass);
  TopologyComparisons comparisons{load_checkpoints(a.compare, in.load), std::nullopt};
  if (a.random_init) comparisons.random_init = a.init_seed;
  ResultsDir out(a.out_dir, "topology", invocation());
  StderrProgress progress("tdyn topology");
  topology_to(&out, in, comparisons, a.options, progress);
  return 0;
}

void add_graph_options(CLI::App* cmd, TopologyArgs& a) {
  GraphOptions& g = a.options.graph;
  cmd->add_option("--boundaries", a.boundaries, "layers: input of every layer + output of the last; sublayers: also the "
                                                "pre-MLP stream (hook_resid_mid)")
      ->capture_default_str()->check(CLI::IsMember({"layers", "sublayers"}));
  auto* top_k = cmd->add_option("--top-k", g.top_k, "Keep the k strongest edges (|r|, sign kept) of every unit")
                    ->capture_default_str()->check(positive_number);
  cmd->add_option("--threshold", g.threshold, "Instead of --top-k: keep every pair with |r| >= this")
      ->check(CLI::Range(0.0, 1.0))->excludes(top_k);
  cmd->add_option("--gamma", g.leiden.resolution, "CPM resolution of the positive layer")->capture_default_str();
  cmd->add_option("--leiden-seed", g.leiden.seed, "Seed of igraph's Leiden (and of the graph layout)")->capture_default_str();
  cmd->add_option("--gamma-scan", g.gamma_scan, "Comma-separated resolutions also partitioned at every boundary (gamma_scan.csv)")
      ->delimiter(',')->check(finite_number);
  cmd->add_option("--draw-boundary", a.options.draw_boundary, "Boundary index whose graph is drawn (default: the middle one)");
  cmd->add_flag("--no-layout", a.no_layout,
                "Do not lay out that graph (no graph_layout.csv or graph figure): for runs whose figures no one draws");
}

void add_coupling_options(CLI::App* cmd, TopologyArgs& a) {
  CouplingOptions& c = a.options.coupling_test;
  cmd->add_flag("--no-coupling", a.no_coupling, "Topology only: no mean Jacobians, no coupling statistics");
  add_ablate_option(cmd, a.ablate);
  cmd->add_option("--positions", a.options.positions, "Positions averaged in the mean Jacobians: last, all, or a list like 5,23,-1")
      ->capture_default_str();
  cmd->add_option("--permutations", c.permutations, "Permutations of each Spearman permutation test (0: parametric p only)")
      ->capture_default_str()->check(non_negative_number);
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
  cmd->add_option("--normality-from", a.options.normality_from,
                  "A jacobian results directory of the same pass (same samples, positions and ablations; tdyn analyze passes "
                  "its jacobian part's): each coupled map's departure, symmetry index and complex share are read from it "
                  "instead of computed again (a Schur form per map, the costliest step at large d_model)")
      ->type_name("DIR");
  cmd->add_option("--communities-control", a.options.communities_control,
                  "A topology results directory of the same architecture on the same samples (e.g. the same run's step-0 "
                  "checkpoint): NMI of the communities per boundary against its, with a shuffled-unit null "
                  "(results.community_similarity)");
  cmd->add_flag("--communities-control-independent", a.options.communities_control_independent,
                "The --communities-control model is an independent random draw (tdyn init), so its units are not this model's: "
                "recorded so that the report shows the NMI without judging it");
  cmd->add_option("--communities-permutations", a.options.communities_permutations, "Shuffles of the --communities-control null")
      ->capture_default_str()->check(positive_number);
}

std::function<int()> setup_topology(CLI::App& app) {
  auto* cmd = app.add_subcommand("topology", "Activation-graph topology (\"Dynamics of the Transformer Residual Stream: Coupling Spectral Geometry to Network "
                                             "Topology\"): per residual boundary, Pearson correlation "
                                             "graph, signed Leiden CPM communities, boundary nodes, and their coupling with "
                                             "the Jacobian gains (Spearman, BH across layers); --compare / --random-init for "
                                             "training vs architecture");
  auto a = std::make_shared<TopologyArgs>();
  a->model.add_to(cmd);
  a->samples.add_to(cmd, 1000, "the residual-stream paper's S, its Jacobians' average over 1000 WikiText-2 passages");
  add_pass_flags(cmd, a->pass);
  cmd->add_option("--out", a->out_dir, "Results directory")->required();
  add_checkpoint_options(cmd, *a);
  add_graph_options(cmd, *a);
  add_coupling_options(cmd, *a);
  return [a] { return run(*a); };
}

}  // namespace

TDYN_REGISTER_COMMAND("topology", 60, setup_topology);

}  // namespace tdyn::cli
