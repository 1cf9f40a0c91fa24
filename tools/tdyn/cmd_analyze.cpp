// tdyn analyze MODEL --out DIR: every analysis of the three papers (README.md, "The three papers") on one model,
// then the report (pipeline/analyze.h lays out DIR). The parts run in this process; each part's record in
// DIR/results.json holds the command line that reproduces it alone. Under MPI the shared pass is split across the
// ranks and only rank 0 runs the parts.
#include <omp.h>

#include <iostream>

#include "cli_util.h"
#include "command.h"
#include "pass_args.h"
#include "pipeline/analyze.h"
#include "report/progress.h"

namespace tdyn::cli {
namespace {

struct AnalyzeArgs {
  ModelArgs model;
  PassSource pass;  // --resume only
  std::string out_dir;
  std::vector<std::string> skip, ablate;
  bool no_init_control = false;
  AnalyzeOptions options;
};

int run_analyze(AnalyzeArgs& a) {
  AnalyzeOptions& o = a.options;
  o.model_path = a.model.path;
  o.load = a.model.options();
  o.resume = a.pass.resume;
  o.init_control = !a.no_init_control;
  o.skip = {a.skip.begin(), a.skip.end()};
  o.ablations = Ablation::parse(a.ablate);
  o.program = invocation().empty() ? "tdyn" : invocation()[0];
  o.threads = omp_get_max_threads();  // the parts' command lines carry it: BLAS sums depend on it at the round-off level
  o.quiet = progress_quiet();
  StderrProgress progress("tdyn analyze");
  const AnalyzeResult result = tdyn::run_analyze(o, a.out_dir, progress, invocation());
  if (!result.failed()) return 0;
  // Said even under --quiet: the exit code alone would not tell which part failed or why.
  for (const std::string& part : analyze_parts()) {
    const nlohmann::json& record = result.results["results"]["parts"][part];
    if (record.value("status", "") == "failed")
      std::cerr << "tdyn: error: analyze: the " << part << " part failed: " << record.value("error", "") << "\n";
  }
  std::cerr << "tdyn: the other parts' results are in " << a.out_dir << " (results.json, index.html)\n";
  return kExitInputError;
}

std::function<int()> setup_analyze(CLI::App& app) {
  auto* cmd = app.add_subcommand("analyze", "Every analysis on one model (power, jacobian --surgery, topology, particles from one "
                                            "of its heads) and the HTML report: DIR/index.html");
  auto a = std::make_shared<AnalyzeArgs>();
  AnalyzeOptions& o = a->options;
  a->model.add_to(cmd);
  cmd->add_option("--out", a->out_dir, "Results directory (one subdirectory per part)")->required();
  cmd->add_option("--data", o.data, "Text file of passages (or token ids) for every part (" + default_corpus_help() + ")");
  cmd->add_option("--tokenizer", o.tokenizer, "Tokenizer file for every part (default: the one shipped with MODEL)");
  cmd->add_option("--samples", o.samples, "S: passages shared by every part (200 keeps a run of five parts and the initialisation control short; the "
                  "residual-stream paper averages over 1000, as jacobian and topology do by default)")
      ->capture_default_str()->check(positive_number);
  cmd->add_option("--max-len", o.max_len, "Tokens per sample")->capture_default_str()->check(positive_number);
  add_pass_flags(cmd, a->pass, false);
  cmd->add_option("--skip", a->skip, "Parts to leave out, comma-separated: power,power-l2 (power in the paper's idealisation, --mode attn-only-l2),jacobian,topology,particles")
      ->delimiter(',')->check(CLI::IsMember(skippable_parts()));
  cmd->add_option("--init-seeds", o.init_seeds,
                  "K: random initialisations of each of two kinds, the family's rule (tdyn init --seed S, S < K) and random "
                  "weights at the model's own scales (tdyn init --match-scales), each run through power, power-l2, jacobian "
                  "and topology on the first sample subset's tokens (all samples with --interval-subsets 0) and compared with the model "
                  "on those; their values are the distribution each claim about training is judged against (5: the fewest that "
                  "give a claim beyond all of them a p-value that can survive the correction over every verdict)")
      ->capture_default_str()->check(positive_number);
  cmd->add_option("--interval-subsets", o.interval_subsets,
                  "G: the samples split into G disjoint subsets (sample i into subset i mod G), each through jacobian and "
                  "topology, so that the statistics of mean Jacobians, the surgery and the coupling's sign rule get an "
                  "interval from their spread over the subsets; the first is also the initialisations' samples; and the "
                  "first S/4 and S/2 samples through jacobian give the stability flags (0: none of these, and the "
                  "initialisations run on all samples; each subset costs the jacobian metrics once more)")
      ->capture_default_str()->check(non_negative_number);
  cmd->add_flag("--no-init-control", a->no_init_control,
               "Do not run the random initialisations; a claim about training that holds on the model is then inconclusive, "
               "and the communities get no NMI with the initialisation's")->excludes("--init-seeds");
  add_ablate_option(cmd, a->ablate);
  cmd->add_option("--particles-layer", o.particles_layer, "Layer whose attention head is simulated as particles")
      ->capture_default_str()->check(non_negative_number);
  cmd->add_option("--particles-head", o.particles_head, "That head's index")->capture_default_str()->check(non_negative_number);
  cmd->add_option("--particles-tokens", o.particles_tokens, "Particles: the first n tokens of the first sample")
      ->capture_default_str()->check(positive_number);
  cmd->add_option("--particles-T", o.particles_t, "Particles: final time")->capture_default_str()->check(positive_number);
  return [a] { return run_analyze(*a); };
}

TDYN_REGISTER_COMMAND("analyze", 80, setup_analyze);

}  // namespace
}  // namespace tdyn::cli
