// What an analysis run starts from: a checkpoint, the samples drawn for it, and where its shared sample pass comes
// from. `tdyn power|jacobian|topology` load these from their flags, `tdyn analyze` and tdyn.analyze once for
// every part.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "analysis/pass/source.h"
#include "analysis/samples.h"
#include "core/phase_times.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace tdyn {

struct AnalysisInputs {
  std::string model_path;  // as the user gave it; results.json records it
  LoadOptions load;        // how the model was loaded, and how further checkpoints are (comparisons)
  std::shared_ptr<const Model> model;
  SampleOptions sample_options;  // as given: data "" means the default corpus
  std::string tokenizer;         // "" = the model's own
  std::vector<Sample> samples;
  PhaseTimes timings;  // "load_samples": drawing and tokenizing them
  PassSource pass;
};

// Draws the samples of `options` for in.model (load_samples_for_model), timed as "load_samples".
void draw_samples(AnalysisInputs& in, const SampleOptions& options, const std::string& tokenizer);

// Loads the model and draws its samples.
AnalysisInputs load_inputs(const std::string& model_path, const LoadOptions& load, const SampleOptions& samples,
                           const std::string& tokenizer, const PassSource& pass = {});

// The tokenizer `tokenizer` names (its load errors propagate: it was asked for), else the model's own when it has one
// that loads, else none: what the power analysis names the steering's pieces with.
std::unique_ptr<Tokenizer> tokenizer_if_any(const std::string& model_path, const std::string& tokenizer);

// The sample options as results.json records them: the default corpus named when no input was given.
nlohmann::json sample_options_json(const SampleOptions& options);

}  // namespace tdyn
