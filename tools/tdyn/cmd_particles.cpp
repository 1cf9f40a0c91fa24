// tdyn particles: simulate self-attention as an interacting particle system (Geshkovski et al. 2023, SPEC §4)
// and write trajectories, attention matrices, diagnostics and figures to a results directory (SPEC §5).
// The system is a preset with generated matrices, or (--from-model) one head or the whole attention of a real
// layer with the model's own tokens (analysis/particles/bridge.h).
#include <algorithm>
#include <memory>

#include "cli_util.h"
#include "command.h"
#include "pipeline/parts.h"
#include "report/particles_output.h"

namespace tdyn::cli {
namespace {

using namespace tdyn::particles;

struct ParticlesArgs {
  std::string out_dir;
  std::string preset_name = "polytope";
  ExperimentSpec spec;  // overrides; applied on top of the preset for the flags that were given
  SimulationOptions sim;
  DiagnosticOptions diag;
  std::string integrator = "euler", variable = "x", cluster_on = "z";
  std::vector<double> attention_times;
  ParticlesOptions perturbed;  // its perturbed_runs, perturbation and perturbation_seed
  std::map<std::string, CLI::Option*> given;
  // --from-model: the checkpoint, the layer and head, and where the tokens come from.
  std::string from_model;
  bool allow_unknown_config_keys = false, check_weights = true;
  int64_t layer = 0, head = -1;  // head -1: the whole layer
  SampleArgs tokens;             // --data | --prompt | --ids, --tokenizer; the first sample only
};

bool given(const ParticlesArgs& a, const std::string& flag) { return a.given.at(flag)->count() > 0; }

// Copies a flag's value into the preset's spec only when the user gave it.
template <typename T>
void override_if_given(const ParticlesArgs& a, const std::string& flag, T& field, const T& value) {
  if (given(a, flag)) field = value;
}

// The preset (or a real layer's defaults) supplies every default; the flags the user gave override it.
ExperimentSpec resolved_spec(const ParticlesArgs& a) {
  ExperimentSpec spec = a.from_model.empty() ? preset(a.preset_name) : model_layer_defaults();
  const ExperimentSpec& o = a.spec;
  override_if_given(a, "--n", spec.n, o.n);
  override_if_given(a, "--d", spec.d, o.d);
  override_if_given(a, "--d-head", spec.d_head, o.d_head);
  override_if_given(a, "--T", spec.t_end, o.t_end);
  override_if_given(a, "--dt", spec.dt, o.dt);
  override_if_given(a, "--seed", spec.seed, o.seed);
  override_if_given(a, "--init", spec.initial, o.initial);
  override_if_given(a, "--query", spec.query, o.query);
  override_if_given(a, "--key", spec.key, o.key);
  override_if_given(a, "--value", spec.value, o.value);
  override_if_given(a, "--output", spec.output, o.output);
  override_if_given(a, "--ffn", spec.ffn, o.ffn);
  override_if_given(a, "--ffn-hidden", spec.d_ff, o.d_ff);
  override_if_given(a, "--ffn-in", spec.ffn_in, o.ffn_in);
  override_if_given(a, "--ffn-out", spec.ffn_out, o.ffn_out);
  override_if_given(a, "--ffn-b-in", spec.ffn_b_in, o.ffn_b_in);
  override_if_given(a, "--ffn-b-out", spec.ffn_b_out, o.ffn_b_out);
  override_if_given(a, "--sphere", spec.sphere, o.sphere);
  return spec;
}

ParticlesOptions resolved_options(const ParticlesArgs& a, const ExperimentSpec& spec) {
  ParticlesOptions options = a.perturbed;
  options.simulation = a.sim, options.diagnostics = a.diag, options.attention_times = a.attention_times;
  options.simulation.integrator = parse_integrator(a.integrator);
  options.simulation.variable = parse_state_variable(a.variable);
  // On the sphere the tokens themselves cluster; z = e^{-tW} x rescales the unnormalised system only (on the
  // sphere it shrinks to 0, and its cluster count falls whatever the dynamics do).
  options.diagnostics.cluster_on = parse_state_variable(spec.sphere && !given(a, "--cluster-on") ? "x" : a.cluster_on);
  return options;
}

void print_summary(const ParticlesArgs& a, const ParticlesResult& r, const ParticlesOptions& options, const fs::path& results) {
  const auto& f = r.diagnostics.final;
  const std::string name = a.from_model.empty() ? r.spec.preset
                                                : fmt::format("{} layer {} {}", a.from_model, a.layer, a.head < 0 ? "(all heads)" : fmt::format("head {}", a.head));
  fmt::print("{}: n = {}, d = {}, T = {}, {} ({} steps)\n", name, r.experiment.x0.rows(), r.experiment.x0.cols(), r.spec.t_end,
             to_string(options.simulation.integrator), r.trajectory.steps);
  fmt::print("  clusters of {} at T: {}; rank P(T) = {}; distance to 0/1 = {:.3g}; leaders = {}\n", to_string(options.diagnostics.cluster_on),
             f.clusters.count(), f.rank_P, f.boolean.max_distance, fmt::join(f.boolean.leaders, " "));
  for (size_t k = 0; k < std::min<size_t>(f.directions.size(), 3); ++k)
    fmt::print("  lambda = {:.6g}{}: {} levels of phi*(z)\n", f.directions[k].eigenvalue, f.directions[k].is_top ? " (top)" : "",
               f.levels[k].count());
  if (f.polytope_dim > 0)
    fmt::print("  polytope in the top eigenspace (dim {}): {} limits, {} tokens at a hull vertex or 0, {} elsewhere\n",
               f.polytope_dim, f.polytope_limits.rows(), r.experiment.x0.rows() - f.tokens_elsewhere, f.tokens_elsewhere);
  for (const auto& v : r.diagnostics.verdicts)
    fmt::print("  {} ({}): {} = {:.4g} at T, {:.4g} at t = 0 -> {}\n", v.claim, v.theorem, v.measure, v.value, v.control, v.verdict);
  fmt::print("  max |x_i(T)| = {:.3g}; max |P - 1/n| = {:.3g}\n  results: {}\n", f.max_norm_x, f.uniform_distance, results.string());
}

int run(const ParticlesArgs& a) {
  const ExperimentSpec spec = resolved_spec(a);
  const ParticlesOptions options = resolved_options(a, spec);
  step_count(spec.t_end, spec.dt);  // validates T and dt before any work
  ResultsDir out(a.out_dir, "particles", invocation());
  ParticlesResult result;
  if (a.from_model.empty()) {
    result = run_particles(spec, options);
    write_particles(out, result, options);
  } else {
    LoadOptions load;
    load.config.allow_unknown_keys = a.allow_unknown_config_keys;
    load.check_finite = a.check_weights;
    // --init: the tokens it makes; else the first sample of --data, --prompt or --ids (default: the first passage drawn).
    const std::optional<SampleOptions> tokens = given(a, "--init") ? std::nullopt : std::optional(a.tokens.options);
    result = particles_to(&out, a.from_model, *load_model(a.from_model, load), load, {a.layer, a.head, spec.n}, tokens,
                          a.tokens.tokenizer, spec, options);
  }
  print_summary(a, result, options, out.file("results.json"));
  return 0;
}

// The preset and the flags that override its spec; returns --preset, which --from-model excludes.
CLI::Option* add_experiment_options(CLI::App* cmd, ParticlesArgs& a) {
  auto& s = a.spec;
  auto add = [&](const std::string& flag, auto& field, const std::string& help) {
    a.given[flag] = cmd->add_option(flag, field, help);
  };
  auto* preset_option =
      cmd->add_option("--preset", a.preset_name,
                      "Experiment of the paper to start from: " + preset_list() +
                          ". polytope: V = I, Q = K = I, n = 20, d = 2, T = 5 (Theorem 2.1); hyperplanes: the paper's 2x2 V "
                          "(Theorem 3.1); codim-k: symmetric V with mixed signs (d = 3); polytope-x-subspace: V = I but "
                          "V[d-1,d-1] = -0.5; leaders: d = 1, V = MM^T, Q^T K = NN^T; lowrank: n = 40, d = 80; high-dim: "
                          "n = d = 128, sparse symmetric V; collapse: V = -I")
          ->capture_default_str();
  add("--n", s.n, "Number of tokens n (default from the preset; 20 in the paper's low-dimensional figures; with --from-model the "
                  "first n tokens of the sample, default 32)");
  add("--d", s.d, "Token dimension d (default from the preset)");
  add("--d-head", s.d_head, "Rows of Q and K (they need not be square); 0 = d");
  add("--T", s.t_end, "Final time T (the paper runs T = 5 to 10; default 20 with --from-model)");
  add("--dt", s.dt, "Time step; the paper's discrete transformer uses 0.1. For dopri5 it is the output grid spacing");
  add("--seed", s.seed, "Seed of every random generator (initial tokens and matrices use separate streams; with --from-model the random "
                        "unit tokens of a model whose embeddings are narrower than d_model)");
  add("--init", s.initial, "Initial tokens: uniform:a (U[-a,a]^d; the paper's choice is uniform:5), gaussian:s, sphere, or an (n, d) .npy");
  add("--query", s.query, "Q (d_head x d): identity, gaussian[:s], diag:..., or .npy (see docs/particles.md for all generators)");
  add("--key", s.key, "K (d_head x d): same (K = Q, so Q^T K is positive semi-definite as the theorems assume), or any Q spec");
  add("--value", s.value,
      "V (d x d, or d_value x d with --output): identity, minus-identity, psd[:s] (M M^T scaled to spectral radius s), hyperplanes, identity-last:c, "
      "sym-mixed:k, sparse-sym[:density], gaussian[:s], diag:a,b,..., or .npy");
  add("--output", s.output, "Optional output matrix O (d x d_value): the tokens move by W = O V; a .npy file or generator");
  add("--ffn", s.ffn, "Feed-forward term added to the velocity, W_out s(W_in x + b_in) + b_out: none, relu or tanh (the paper's MLP experiments)");
  add("--ffn-hidden", s.d_ff, "FFN hidden width; 0 = d");
  add("--ffn-in", s.ffn_in, "FFN W_in (hidden x d): generator or .npy");
  add("--ffn-out", s.ffn_out, "FFN W_out (d x hidden): generator or .npy");
  add("--ffn-b-in", s.ffn_b_in, "FFN bias b_in (hidden) as .npy; default none");
  add("--ffn-b-out", s.ffn_b_out, "FFN bias b_out (d) as .npy; default none");
  a.given["--sphere"] = cmd->add_flag("--sphere,!--no-sphere", s.sphere,
                                       "Keep tokens on the unit sphere (LayerNorm idealisation): tangent projection of the "
                                       "velocity and renormalisation after each step (on by default with --from-model; "
                                       "--no-sphere turns it off)");
  return preset_option;
}

void add_integration_options(CLI::App* cmd, ParticlesArgs& a) {
  cmd->add_option("--integrator", a.integrator,
                  "euler (P frozen per step: the discrete transformer x^{k+1} = x^k + dt sum_j P_ij V x_j the authors ran), "
                  "rk4 (classic, P re-evaluated per stage), or dopri5 (adaptive Dormand-Prince 5(4))")
      ->capture_default_str();
  cmd->add_option("--integrate", a.variable, "Variables the integrator advances: x, or z = e^{-tV} x (the rescaled system)")
      ->capture_default_str();
  cmd->add_option("--atol", a.sim.abs_tol, "dopri5 absolute tolerance")->capture_default_str();
  cmd->add_option("--rtol", a.sim.rel_tol, "dopri5 relative tolerance")->capture_default_str();
  cmd->add_option("--save-every", a.sim.save_every, "Keep every k-th step in x.npy/z.npy (the last one always)")->capture_default_str();
  cmd->add_option("--diagnose-every", a.diag.every, "Diagnose every k-th saved time (the last one always)")->capture_default_str();
  a.given["--cluster-on"] =
      cmd->add_option("--cluster-on", a.cluster_on, "Cluster the rescaled tokens z (where the theorems' limits live) or x (default with --sphere and --from-model: "
                                                     "on the sphere the tokens themselves cluster)")
          ->capture_default_str();
  cmd->add_option("--cluster-tol", a.diag.cluster_tol, "Clustering distance, relative to max_i |x_i(0)| (single linkage)")->capture_default_str();
  cmd->add_option("--level-tol", a.diag.level_tol, "Tolerance for distinct values of phi*(z), relative to max_i |phi*(x_i(0))|")->capture_default_str();
  cmd->add_option("--hull-tol", a.diag.hull_tol, "A limit is a hull vertex when farther than this (relative to max_i |x_i(0)|) from the hull of the others")
      ->capture_default_str();
  cmd->add_option("--rank-tol", a.diag.rank_tol, "Numerical rank of P: singular values above rank_tol * sigma_max")->capture_default_str();
  cmd->add_option("--attention-times", a.attention_times, "Times at which to save P and draw heatmaps (nearest saved time); default 0, T/2, T")
      ->delimiter(',');
  cmd->add_option("--perturbed-runs", a.perturbed.perturbed_runs,
                  "The 'locations' verdict: runs from the initial tokens each moved by --perturbation x max_i |x_i(0)| in a "
                  "random direction, whose clusters at T are compared with this run's (0: none)")
      ->capture_default_str()->check(non_negative_number);
  cmd->add_option("--perturbation", a.perturbed.perturbation, "Size of those moves, relative to max_i |x_i(0)|")
      ->capture_default_str()->check(positive_number);
  cmd->add_option("--perturbation-seed", a.perturbed.perturbation_seed, "Seed of the first perturbed run (run j: seed + j)")
      ->capture_default_str();

}

// A real layer instead of a preset.
void add_model_options(CLI::App* cmd, ParticlesArgs& a, CLI::Option* preset_option) {
  auto* from_model = cmd->add_option("--from-model", a.from_model,
                                     "MODEL: a Hugging Face directory, .gguf or llama2.c .bin; simulate its layer --layer (head --head, "
                                     "or the whole layer)");
  auto* unknown_keys = cmd->add_flag("--allow-unknown-config-keys", a.allow_unknown_config_keys,
                                     "With --from-model: warn about config.json keys tdyn does not know instead of refusing the model");
  auto [check, no_check] = add_check_weights_flags(cmd, a.check_weights, "With --from-model: check every weight for NaN/Inf at load",
                                                  "With --from-model: skip that check");
  auto* layer = cmd->add_option("--layer", a.layer, "With --from-model: the layer (0-based)")->capture_default_str()->check(non_negative_number);
  auto* head = cmd->add_option("--head", a.head,
                               "With --from-model: one head (0-based); default: the whole layer, its heads stacked into one (scores "
                               "summed over heads, one softmax; W = O V = the layer matrix F times the norm gain)")
                   ->check(non_negative_number);
  SampleOptions& t = a.tokens.options;
  auto* data = cmd->add_option("--data", t.data,
                               "With --from-model: the tokens' source, a text file of passages (" + default_corpus_help() +
                                   "), a .npy of ids or a .ids file; the first sample drawn is used");
  auto* prompt = cmd->add_option("--prompt", t.prompt, "With --from-model: the tokens as text (the model's tokenizer, special tokens added)");
  auto* ids = cmd->add_option("--ids", t.ids, "With --from-model: the tokens as comma-separated ids")->delimiter(',')->check(token_id);
  auto* tokenizer = cmd->add_option("--tokenizer", a.tokens.tokenizer, "With --from-model: tokenizer file (default: the one shipped with MODEL)");
  data->excludes(prompt)->excludes(ids);
  prompt->excludes(ids);
  for (auto* source : {data, prompt, ids, tokenizer}) source->excludes(a.given.at("--init"));  // --init replaces the model's tokens
  for (auto* option : {unknown_keys, check, no_check, layer, head, data, prompt, ids, tokenizer}) option->needs(from_model);
  // The model supplies the matrices and the width.
  for (const char* flag : {"--query", "--key", "--value", "--output", "--d", "--d-head"}) from_model->excludes(a.given.at(flag));
  from_model->excludes(preset_option);
}

std::function<int()> setup_particles(CLI::App& app) {
  auto a = std::make_shared<ParticlesArgs>();
  auto* cmd = app.add_subcommand(
      "particles",
      "Simulate self-attention as interacting particles (Geshkovski, Letrouit, Polyanskiy, Rigollet 2023):\n"
      "  dx_i/dt = sum_j P_ij V x_j,  P_ij = softmax_j <Q x_i, K x_j>  (log-sum-exp, float64),\n"
      "and track clusters, polytope vertices, hyperplanes (levels of phi1*(z)), rank and Boolean-ness of P, leaders.\n"
      "A preset sets every default; any flag given overrides it. Matrices are generators or .npy files.\n"
      "--from-model MODEL --layer L [--head H] simulates a real layer instead: Q, K, V, O of head H (or of the whole\n"
      "layer, its heads stacked: scores summed over heads, W = O V = the layer matrix F) with the pre-attention norm\n"
      "gain sqrt(d) g and the attention scale folded in, starting from the unit token embeddings of the first --n\n"
      "tokens of --prompt/--ids/--data (default: the first WikiText-2 passage drawn). Defaults then: --sphere,\n"
      "--T 20, --cluster-on x, n = 32. RoPE, the causal mask and the MLP are left out (docs/particles.md).");
  cmd->add_option("--out", a->out_dir, "Results directory (created; results.json, .npy, .csv, figures)")->required();
  CLI::Option* preset_option = add_experiment_options(cmd, *a);
  add_integration_options(cmd, *a);
  add_model_options(cmd, *a, preset_option);
  return [a] { return run(*a); };
}

}  // namespace

TDYN_REGISTER_COMMAND("particles", 40, setup_particles);

}  // namespace tdyn::cli
