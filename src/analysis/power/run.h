// The power-method analysis from start to end, as `tdyn power` and tdyn.power run it: the spectra of every layer
// matrix (spectra.h), the token dynamics over the samples (token_dynamics.h, or from a shared pass: pass.h), the
// tests across layers (layers.h), the shared-weight iteration of one layer (iteration.h) and the rank-1 steering
// of the last layer (steering.h). report/power_output.h writes the result as results.json, .npy, .csv and
// figures.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/power/iteration.h"
#include "analysis/power/layers.h"
#include "analysis/power/steering.h"
#include "analysis/power/token_dynamics.h"
#include "analysis/pass/run.h"
#include "core/phase_times.h"
#include "core/progress.h"
#include "model/ablation.h"
#include "tokenizer/tokenizer.h"

namespace tdyn {

struct PowerOptions {
  // Zero ablations (model/ablation.h): every part of the analysis is of the model with these parts set to 0 (its
  // layer matrices, token dynamics, iteration and steering).
  std::vector<Ablation> ablations;
  SpectrumOptions spectrum;
  // The spectra of this model's F_t with `spectrum` (of the ablated model, with `ablations`) when they were measured
  // already (analyze measures them once per model, for its pass's probes and its power parts); null: measured here.
  std::shared_ptr<const std::vector<LayerSpectrum>> spectra;
  DynamicsOptions dynamics;     // mode and residual of the token dynamics and of the iteration
  bool save_matrices = false;   // keep every F_t for the writer (layer_matrices.npy)
  // The layer iterated: negative for the default, the shared layer of a shared-weight model (ALBERT) and none
  // otherwise; `iterate` false skips the iteration whatever the model.
  int64_t iterate_layer = -1;
  bool iterate = true;
  int64_t iterate_sample = 0;   // which sample's tokens are iterated
  IterationOptions iteration;   // its layer and dynamics are set from the fields above
  // The steering direction u: "random" (seeded by steer_seed), "token:ID" or "token:TEXT" (one token, which
  // needs a tokenizer), or a .npy file of d_model values. `steer` false skips the sweep.
  bool steer = true;
  std::string steer_direction = "random";
  uint64_t steer_seed = 0;
  int64_t steer_samples = 8;    // the first samples, run through every steered model
  SteeringOptions steering;
};

struct PowerResult {
  nlohmann::json model;                 // results.json's "model"
  std::vector<LayerMatrix> matrices;    // F_t and c_t of every layer
  std::vector<LayerSpectrum> spectra;
  TokenDynamics dynamics;
  bool shared_weights = false;          // one stored layer serves every layer
  CrossLayerAlignment cross_layer;
  GammaGapTest gamma_gap;
  int64_t iterate_layer = -1;           // the layer iterated; -1: none
  std::optional<IterationResult> iteration;
  std::optional<SteeringResult> steering;
  std::string steering_description;     // how u was chosen
  int64_t steering_samples = 0;         // samples the sweep ran
  std::map<int32_t, std::string> pieces;  // text of the tokens the sweep names ("" without a tokenizer)
  std::vector<std::string> notes;       // the spectra's fallbacks, "layer t: ..."
  PhaseTimes timings;
};

// The pass holding the probes of `spec` (tdyn analyze's shared pass): the token dynamics are then read from it
// instead of from a pass of their own. Only in the full mode with the residual (the other modes run the samples
// through their idealised layers, token_dynamics.h).
using PowerPassSource = std::function<PassFile(const PassSpec& spec)>;

// Runs the analysis of `model` (loaded from `path`, which results.json records) on `samples`. `tokenizer` (may be
// null) names the tokens of the steering results and reads a "token:TEXT" direction.
PowerResult run_power(std::shared_ptr<const Model> model, const std::string& path, const std::vector<Sample>& samples,
                      const PowerOptions& options, ProgressSink& progress, const Tokenizer* tokenizer = nullptr,
                      const PowerPassSource& pass = {});

// results.json's "options" of a run: every setting used, defaults included.
nlohmann::json options_json(const PowerResult& result, const PowerOptions& options);

// results.json's "results": per layer spectra and dynamics, the tests across layers, the iteration and the
// steering sweep.
nlohmann::json results_json(const PowerResult& result);

}  // namespace tdyn
