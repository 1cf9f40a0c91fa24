// tdyn jacobian MODEL [--compare MODEL2 ...] --out DIR [...]: mean sublayer Jacobians over samples, their
// cumulative products, operator metrics per depth, optional Schur surgery, and figures (SPEC §3, §5), run and
// written by jacobian_to (pipeline/parts.h).
#include "cli_util.h"
#include "command.h"
#include "core/error.h"
#include "model/ablation.h"
#include "pass_args.h"
#include "pipeline/parts.h"
#include "report/progress.h"

namespace tdyn::cli {
namespace {

struct JacobianArgs {
  ModelArgs model;
  SampleArgs samples;
  PassSource pass;
  std::vector<std::string> compare;
  std::string out, positions = "last", mean = "structured", cumulative = "product-of-means";
  std::vector<std::string> ablate;
  JacobianOptions options;
};

// The flags as the library's options (--positions, --mean and --cumulative parsed; the typed lists set already).
JacobianOptions resolved_options(const JacobianArgs& a) {
  JacobianOptions o = a.options;
  o.positions = PositionSpec::parse(a.positions);
  o.structured = a.mean == "structured";
  o.mean_of_products = a.cumulative != "product-of-means";
  o.ranks_share_metrics = true;  // every rank runs this command
  o.ablations = Ablation::parse(a.ablate);
  return o;
}

int run(const JacobianArgs& a) {
  const JacobianOptions options = resolved_options(a);
  if (!options.uses_pass() && (a.pass.resume || !a.pass.from_pass.empty()))
    fail("--resume and --from-pass need the structured mean without --cumulative both and --save-per-sample");
  check_jacobian_ranks(!a.compare.empty(), options);
  const AnalysisInputs in = load_inputs(a.model.path, a.model.options(), a.samples.options, a.samples.tokenizer, a.pass);
  ResultsDir out(a.out, "jacobian", invocation());
  StderrProgress progress("tdyn jacobian");
  jacobian_to(&out, in, load_checkpoints(a.compare, in.load), options, progress);
  progress.note(fmt::format("wrote {}", out.file("results.json").string()));
  return 0;
}

std::function<int()> setup_jacobian(CLI::App& app) {
  auto* cmd = app.add_subcommand("jacobian", "Mean sublayer Jacobians, cumulative products, spectral metrics and Schur surgery (\"Dynamics of the "
                                             "Transformer Residual Stream: Coupling Spectral Geometry to Network Topology\")");
  auto a = std::make_shared<JacobianArgs>();
  a->model.add_to(cmd);
  a->samples.add_to(cmd, 1000, "the residual-stream paper's S, its Jacobians' average over 1000 WikiText-2 passages");
  add_pass_flags(cmd, a->pass);
  cmd->add_option("--out", a->out, "Results directory")->required();
  cmd->add_option("--positions", a->positions, "Token positions per sample: last, all, or a list such as 5,23,-1")
      ->capture_default_str();
  cmd->add_option("--mean", a->mean, "structured (mean at forward-pass cost) or plain (sum of per-sample Jacobians)")
      ->capture_default_str()->check(CLI::IsMember({"structured", "plain"}));
  cmd->add_option("--cumulative", a->cumulative,
                  "product-of-means (C_k = J̄_k ⋯ J̄_1), or both (also the mean of per-sample products)")
      ->capture_default_str()->check(CLI::IsMember({"product-of-means", "both"}));
  cmd->add_flag("--save-per-sample", a->options.save_per_sample,
                "Write every per-sample, per-position Jacobian to per_sample/sample{s}.pos{p}.blocks.{l}.jac_{attn,mlp}.npy");
  cmd->add_option("--compare", a->compare,
                  "Further checkpoints of the same architecture, run on the same samples (comma-separated or "
                  "repeated; CACHE@REVISION for the steps of a training run)")
      ->delimiter(',');
  add_ablate_option(cmd, a->ablate);
  cmd->add_flag("--surgery", a->options.surgery, "Schur surgery: J_alpha = Q(Lambda + alpha N)Q* and the random-N control");
  cmd->add_option("--alphas", a->options.surgery_options.alphas, "Surgery alpha values (comma-separated)")
      ->capture_default_str()->delimiter(',')->allow_extra_args(false)->check(finite_number);
  cmd->add_option("--surgery-seed", a->options.surgery_options.seed, "Seed of the control's random N (sublayer k uses seed + k)")
      ->capture_default_str();
  cmd->add_option("--haar-null", a->options.haar_null_draws,
                  "Draws of the bottleneck's structure-preserving null: the cumulative products with every mean Jacobian's "
                  "bases Haar-rotated (Q J Q^T, a new Q per depth), spectra and scale kept (0: none)")
      ->capture_default_str()->check(non_negative_number);
  cmd->add_option("--haar-null-seed", a->options.haar_null_seed, "Seed of the Haar null's rotations")->capture_default_str();
  cmd->add_option("--surgery-control-draws", a->options.surgery_options.control_draws,
                  "Independent random-N controls at alpha = 1: the distribution the surgery verdict judges the model's "
                  "full-depth effective rank against (each costs one more complex product per depth)")
      ->capture_default_str()->check(positive_number);
  cmd->add_flag("--surgery-full-depth-only", a->options.surgery_options.full_depth_only,
                "Surgery's effective ranks at the full depth only, what its verdict reads (surgery.csv's other depths NaN): "
                "two complex SVDs per alpha and depth fewer");
  cmd->add_flag("--cumulative-ends-only", a->options.cumulative_ends_only,
                "Metrics of the cumulative products C_k at the first and last depth only, what the bottleneck verdict reads "
                "(the others null in results.json, NaN in the tables and arrays): two eigen- and SVD decompositions per "
                "depth fewer");
  cmd->add_flag("--verdict-metrics-only", a->options.verdict_metrics_only,
                "Only what analyze's verdicts and tdyn compare read (analyze's sample subsets and unplotted controls): "
                "--cumulative-ends-only with those two products' singular values alone (their eigenvalue metrics null), "
                "and the mean Jacobians without self-alignment (no singular vectors)");
  cmd->add_option("--eig-depths", a->options.eig_depths,
                  "Depths (1-based, comma-separated) whose eigenvalues are plotted (default first, middle, last)")
      ->delimiter(',')->allow_extra_args(false);
  cmd->add_option("--alignment-k", a->options.metrics.alignment_ks,
                  "k values (comma-separated) of the top-k singular-subspace self-alignment")
      ->capture_default_str()->delimiter(',')->allow_extra_args(false);
  return [a] { return run(*a); };
}

TDYN_REGISTER_COMMAND("jacobian", 35, setup_jacobian);

}  // namespace
}  // namespace tdyn::cli
