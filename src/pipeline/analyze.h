// Every analysis of the three papers on one model, then the report: what `tdyn analyze` and tdyn.analyze run.
//   DIR/pass       the forward pass over the samples that power, jacobian and topology share (pass.tdynpass):
//                  one pass per sample feeds power's token alignments, jacobian's mean Jacobians and topology's
//                  correlations and coupling; under MPI it is split across ranks, and it resumes
//   DIR/power      the power-method paper: layer matrices, spectra, token alignment (power_to)
//   DIR/jacobian   the residual-stream paper: mean Jacobians, cumulative products, metrics, Schur surgery
//   DIR/init       the controls of the claims about training: the same architecture's random initialisation at
//                  several seeds (DIR/init/seed-S/model), each through power, jacobian and topology
//                  (DIR/init/seed-S/{power,jacobian,topology}) on the same token ids (DIR/init/samples.ids)
//   DIR/subsets    the samples split into disjoint subsets, each through jacobian (DIR/subsets/subset-g): the
//                  intervals of the verdicts' statistics of mean Jacobians
//   DIR/topology   the residual-stream paper: correlation graphs, signed Leiden, coupling with the Jacobian gains,
//                  and the NMI of its communities with the initialisation's
//   DIR/particles  the clustering paper: one attention head of the model simulated as interacting particles
//   DIR/index.html the report; DIR/results.json which parts ran, the command line that reproduces each alone (given
//                  the pass file), their status and timings, and the report's verdicts ("verdicts").
// The parts run one after the other in this process, on the model loaded once. A part that fails is recorded as
// failed with its error, and the others and the report still complete.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/parts.h"

namespace tdyn {

struct AnalyzeOptions {
  std::string model_path;
  LoadOptions load;
  std::string data;       // text file of passages or token ids; "" = the default corpus (WikiText-2 test)
  std::string tokenizer;  // "" = the model's own
  int64_t samples = 200, max_len = 128;
  bool resume = false;              // continue an interrupted shared pass in DIR/pass
  std::set<std::string> skip;       // of analyze_parts(): power, jacobian, topology, particles
  bool init_control = true;         // the random-initialisation control
  int64_t init_seeds = 5;           // its seeds 0 .. init_seeds − 1: the control's distribution
  // G disjoint subsets of the samples, each through jacobian, for the intervals of the statistics of mean
  // Jacobians (0: none; at least 2 samples per subset, else none)
  int64_t interval_subsets = 5;
  int64_t particles_layer = 0, particles_head = 0, particles_tokens = 32;
  double particles_t = 20;  // a real head on the sphere clusters between T = 10 and 15 on stories260K; 5 is too short
  std::string program = "tdyn";  // argv[0] of the parts' command lines
  int threads = 1;               // the thread count the parts' command lines carry (BLAS sums depend on it)
  bool quiet = false;            // the parts' command lines carry --quiet
  bool keep_matrices = false;    // the jacobian results keep every J̄_k and C_k (JacobianOptions::keep_matrices)
  // Zero ablations (model/ablation.h): every pass, part and control is of the model (and of the initialisations)
  // with these parts set to 0. The particles part simulates one head on its own, which they leave as it is unless
  // they zero that head itself (refused).
  std::vector<Ablation> ablations;

  // The `tdyn analyze` command line of these options writing to `out_dir`.
  std::vector<std::string> command_line(const fs::path& out_dir) const;
};

// The parts, in the order they run (init: the random-initialisation control).
const std::vector<std::string>& analyze_parts();
// The parts AnalyzeOptions::skip may name.
const std::vector<std::string>& skippable_parts();

// What the parts that ran computed, with the options they ran with (empty when skipped or failed).
struct AnalyzeResult {
  nlohmann::json results;  // DIR/results.json
  std::optional<PowerResult> power, init_power;  // init_*: the control's first seed
  std::optional<PowerResult> power_l2;           // power in the paper's idealisation (--mode attn-only-l2)
  std::optional<JacobianResult> jacobian, init_jacobian;
  std::optional<TopologyResult> topology, init_topology;
  std::optional<particles::ParticlesResult> particles;
  PowerOptions power_options, init_power_options, power_l2_options;
  JacobianOptions jacobian_options, init_jacobian_options;
  TopologyOptions topology_options, init_topology_options;
  particles::ParticlesOptions particles_options;
  bool failed() const;  // a part failed
};

// Runs every part not skipped into `out_dir` and writes the report; `argv` is the run's own command line for
// results.json (command_line(out_dir) when empty); `model`: options.model_path already loaded with options.load
// (null: loaded here). Throws Error on bad options, or when the model, the samples or the shared pass fail (no part
// has run then); throws WorkerShareDone on an MPI worker rank once its share of the pass is done.
AnalyzeResult run_analyze(const AnalyzeOptions& options, const fs::path& out_dir, ProgressSink& progress,
                          std::vector<std::string> argv = {}, std::shared_ptr<const Model> model = nullptr);

}  // namespace tdyn
