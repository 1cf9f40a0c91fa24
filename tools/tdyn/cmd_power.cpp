// tdyn power MODEL --out DIR: the analysis of the power-method paper (Li & Altafini, SPEC §2) — layer matrices
// F_t = O_t V_t and their spectra, token alignment with the dominant eigenvectors over real text, shared-weight
// iteration of one layer, and rank-1 steering of the last layer — run and written to a results directory (SPEC §5)
// by power_to (pipeline/parts.h).
#include "cli_util.h"
#include "command.h"
#include "pass_args.h"
#include "pipeline/parts.h"
#include "report/progress.h"

namespace tdyn::cli {
namespace {

struct PowerArgs {
  ModelArgs model;
  SampleArgs samples;
  std::string from_pass, out_dir, mode = "full";
  bool no_residual = false, no_iterate = false, no_steer = false;
  std::vector<std::string> ablate;
  PowerOptions options;
};

int run_power(PowerArgs& a) {
  StderrProgress progress("tdyn power");
  a.options.dynamics = {parse_dynamics_mode(a.mode), !a.no_residual};
  a.options.iterate = !a.no_iterate;
  a.options.steer = !a.no_steer;
  a.options.ablations = Ablation::parse(a.ablate);
  const AnalysisInputs in = load_inputs(a.model.path, a.model.options(), a.samples.options, a.samples.tokenizer, {false, a.from_pass});
  ResultsDir out(a.out_dir, "power", invocation());
  power_to(&out, in, a.options, progress);
  progress.note("wrote " + out.file("results.json").string());
  return 0;
}

void add_spectrum_options(CLI::App* cmd, PowerArgs& a) {
  SpectrumOptions& s = a.options.spectrum;
  cmd->add_option("--full-spectrum-max-d", s.full_spectrum_max_d, "Every eigenvalue (dgeev) up to this d_model; "
                  "above it the top-k by Arnoldi (Spectra)")->capture_default_str()->check(positive_number);
  cmd->add_option("--top-eigs", s.top_k, "k for the Arnoldi top-k above --full-spectrum-max-d")->capture_default_str()->check(positive_number);
  cmd->add_option("--arnoldi-restarts", s.arnoldi.max_restarts, "Arnoldi restarts before the top-k falls back "
                  "to dgeev")->capture_default_str()->check(positive_number);
  cmd->add_flag("--save-matrices", a.options.save_matrices, "Also write every F_t as layer_matrices.npy [layer, d, d] (float64)");
}

void add_iteration_options(CLI::App* cmd, PowerArgs& a) {
  IterationOptions& it = a.options.iteration;
  cmd->add_option("--iterate-layer", a.options.iterate_layer, "Iterate this layer (default: the shared layer of a shared-weight model)");
  cmd->add_flag("--no-iterate", a.no_iterate, "Skip the iteration even for shared-weight models");
  cmd->add_option("--iterations", it.steps, "Steps of the shared-weight iteration")->capture_default_str()->check(positive_number);
  cmd->add_option("--iterate-sample", a.options.iterate_sample, "Which loaded sample's tokens to iterate")
      ->capture_default_str()->check(non_negative_number);
  cmd->add_option("--threshold", it.threshold, "Alignment at which a token counts as in a subspace (regime classification)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--eigenvectors", it.eigenvectors, "Eigenvectors v_k searched for consensus/bipartite states")
      ->capture_default_str()->check(positive_number);
  cmd->add_option("--perturbation", it.perturbation, "Relative size of the perturbation in the bipartite instability test")
      ->capture_default_str()->check(non_negative_number);
  cmd->add_option("--bipartite-steps", it.bipartite_steps, "Steps of the bipartite test (0: --iterations)")
      ->capture_default_str()->check(non_negative_number);
  cmd->add_option("--seed", it.seed, "Seed of the bipartite perturbation")->capture_default_str();
}

void add_steering_options(CLI::App* cmd, PowerArgs& a) {
  PowerOptions& o = a.options;
  cmd->add_option("--steer", o.steer_direction, "Steering direction u: random, token:ID, token:TEXT (one token), or a .npy of "
                  "d_model values")->capture_default_str();
  cmd->add_option("--steer-seed", o.steer_seed, "Seed of the random steering direction")->capture_default_str();
  cmd->add_option("--steer-scales", o.steering.scales, "Scales c/|lambda1(F_L)| of the steering sweep (comma-separated)")
      ->delimiter(',')->default_str("0,1,10,100,1000,10000,100000");
  cmd->add_option("--steer-samples", o.steer_samples, "Samples run through each steered model")->capture_default_str()->check(positive_number);
  cmd->add_option("--steer-control-draws", o.steering.control_draws,
                  "The steering verdict's control: rank-1 perturbations at the largest scale along random directions "
                  "orthogonal to u, each as large (Frobenius norm) as u's; 0: none")
      ->capture_default_str()->check(non_negative_number);
  cmd->add_option("--top-k", o.steering.top_k, "Tokens listed per output distribution")->capture_default_str()->check(positive_number);
  cmd->add_flag("--no-steer", a.no_steer, "Skip the steering sweep");
}

std::function<int()> setup_power(CLI::App& app) {
  auto* cmd = app.add_subcommand("power", "Power-method analysis (Li & Altafini, \"Analogies between Transformer Layers and Power Method\"): layer matrices F = O V, their spectra, token "
                                          "alignment over real text, shared-weight iteration, rank-1 steering");
  auto a = std::make_shared<PowerArgs>();
  a->model.add_to(cmd);
  a->samples.add_to(cmd, 200, "the power-method paper states no count; its statistics average over every token of every passage");
  auto* text = cmd->add_option("--text", a->samples.options.data, "Alias of --data: a text file (passages) or an id file");
  text->excludes(cmd->get_option("--data"))->excludes(cmd->get_option("--prompt"))->excludes(cmd->get_option("--ids"));
  cmd->add_option("--out", a->out_dir, "Results directory")->required();
  cmd->add_option("--from-pass", a->from_pass,
                  "Take the token alignments from this pass file (written by tdyn analyze as DIR/pass/pass.tdynpass) instead of "
                  "running the samples; same model, samples and --mode full");
  cmd->add_option("--mode", a->mode, "Token dynamics: full (the real model), attn-only (FFN removed), attn-only-l2 (FFN "
                                     "removed, norms replaced by x/|x|: the paper's idealisation)")
      ->capture_default_str()->check(CLI::IsMember({"full", "attn-only", "attn-only-l2"}));
  cmd->add_flag("--no-residual", a->no_residual, "Drop the residual: Attn(x) instead of x + Attn(x)");
  add_ablate_option(cmd, a->ablate);
  add_spectrum_options(cmd, *a);
  add_iteration_options(cmd, *a);
  add_steering_options(cmd, *a);
  return [a] { return run_power(*a); };
}

TDYN_REGISTER_COMMAND("power", 30, setup_power);

}  // namespace
}  // namespace tdyn::cli
