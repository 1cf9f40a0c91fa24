// One particle experiment from start to end, as `tdyn particles` and tdyn.particles run it: a preset's system
// (presets.h) or a real layer's (bridge.h) is simulated (dynamics.h) and diagnosed (diagnostics.h), and the
// attention matrices are kept at the requested times. report/particles_output.h writes the result as
// results.json, .npy, .csv and figures.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/particles/bridge.h"
#include "analysis/particles/diagnostics.h"
#include "analysis/particles/presets.h"
#include "core/phase_times.h"

namespace tdyn::particles {

struct ParticlesOptions {
  SimulationOptions simulation;  // its t_end and dt are the spec's
  DiagnosticOptions diagnostics;
  std::vector<double> attention_times;  // P is kept at the saved times nearest these; empty: 0, T/2 and T
  // The "locations" verdict: the run repeated from initial tokens each moved by `perturbation` × max_i ‖x_i(0)‖
  // in a random direction (back onto the sphere there), seeded by perturbation_seed + j; 0 runs: none.
  int64_t perturbed_runs = 3;
  double perturbation = 0.05;
  uint64_t perturbation_seed = 0;
};

// One run from perturbed initial tokens: where its clusters ended against the unperturbed run's.
struct PerturbedRun {
  uint64_t seed = 0;
  int clusters = 0;  // at T, of the clustered variable
  // Mean over the unperturbed run's cluster centres of the distance to the nearest centre of this run, in units of
  // the perturbation (perturbation × max_i ‖x_i(0)‖): about 1 when the clusters move with the tokens, → 0 when the
  // dynamics forget where they started.
  double displacement = 0;
};

// What was simulated, and everything measured on it.
struct ParticlesResult {
  ExperimentSpec spec;
  nlohmann::json model;      // results.json's "model": the preset, or the checkpoint layer and how it was taken
  bool model_tokens = false;  // x0 holds a checkpoint's token embeddings (not made by spec.initial)
  Experiment experiment;
  Trajectory trajectory;
  ParticleDiagnostics diagnostics;
  std::vector<size_t> attention_indices;  // indices into trajectory.times at which P is kept
  std::vector<Matrix> attention;          // P (n × n) at those times
  std::vector<PerturbedRun> perturbed;    // ParticlesOptions::perturbed_runs
  PhaseTimes timings;
};

// The defaults for a real layer: on the sphere (the folded norm gain assumes unit tokens), 32 tokens, and long
// enough to cluster (a real head of stories260K clusters between T = 10 and 15; 5 is too short).
ExperimentSpec model_layer_defaults();

// A preset or custom spec's system, built (presets.h) and run.
ParticlesResult run_particles(const ExperimentSpec& spec, const ParticlesOptions& options);

// A real layer of `model` (loaded from `path`, which results.json records): its head `head.head`, or the whole
// layer, with `spec.n` tokens on the sphere when spec.sphere. The initial tokens are the unit embeddings of
// `ids`, or, when `ids` is null, made by spec.initial; spec.ffn adds a generated feed-forward term.
ParticlesResult run_particles(const Model& model, const std::string& path, const ModelHeadOptions& head,
                              const std::vector<int32_t>* ids, const ExperimentSpec& spec, const ParticlesOptions& options);

// results.json's "options" of a run: the spec as built, the integrator and diagnostic settings.
nlohmann::json options_json(const ParticlesResult& result, const ParticlesOptions& options);

// results.json's "results": the diagnostics (diagnostics.h) and how the integration went.
nlohmann::json results_json(const ParticlesResult& result);

}  // namespace tdyn::particles
