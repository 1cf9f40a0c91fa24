#include "pipeline/inputs.h"

#include "core/error.h"

namespace tdyn {

void draw_samples(AnalysisInputs& in, const SampleOptions& options, const std::string& tokenizer) {
  in.sample_options = options;
  in.tokenizer = tokenizer;
  in.samples = timed(in.timings, "load_samples",
                     [&] { return load_samples_for_model(options, in.model_path, in.model->config.d_vocab, tokenizer); });
}

AnalysisInputs load_inputs(const std::string& model_path, const LoadOptions& load, const SampleOptions& samples,
                           const std::string& tokenizer, const PassSource& pass) {
  AnalysisInputs in{model_path, load, load_model(model_path, load), {}, {}, {}, {}, pass};
  draw_samples(in, samples, tokenizer);
  return in;
}

std::unique_ptr<Tokenizer> tokenizer_if_any(const std::string& model_path, const std::string& tokenizer) {
  if (!tokenizer.empty()) return load_tokenizer(tokenizer);
  try {
    return load_tokenizer_for_model(model_path);
  } catch (const Error&) {
    return nullptr;  // a checkpoint without one: the steering names no pieces
  }
}

nlohmann::json sample_options_json(const SampleOptions& options) {
  nlohmann::json json = options.to_json();
  if (options.data.empty() && options.prompt.empty() && options.ids.empty()) json["data"] = default_corpus().string();
  return json;
}

}  // namespace tdyn
