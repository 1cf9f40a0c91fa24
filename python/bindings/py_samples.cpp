#include "py_samples.h"

#include <pybind11/stl.h>

#include "core/error.h"

namespace tdyn::python {

std::vector<Sample> PySamples::load(const Model& model, const Tokenizer* loaded) const {
  std::vector<Sample> samples;
  if (ids) {
    for (const auto& sample : *ids) samples.push_back({sample, static_cast<int64_t>(samples.size())});
  } else if (loaded) {
    samples = load_samples(options, loaded, model.config.d_vocab);
  } else {
    samples = load_samples_for_model(options, model.path, model.config.d_vocab, tokenizer.value_or(""));
  }
  if (samples.empty()) fail("no samples to analyse (ids is empty, or no passage of data is at least min_len tokens long)");
  return samples;
}

PySamples py_samples(const py::object& ids, const std::optional<std::string>& data, const std::optional<std::string>& prompt,
                     int64_t samples, int64_t max_len, int64_t min_len, uint64_t sample_seed,
                     const std::optional<std::string>& tokenizer) {
  if (!ids.is_none() && (data || prompt)) fail("give the samples one way: ids, data or prompt");
  if (data && prompt) fail("give the samples one way: ids, data or prompt");
  PySamples s;
  s.tokenizer = tokenizer;
  SampleOptions& o = s.options;
  if (data) o.data = *data;
  else if (prompt) o.prompt = *prompt;
  else if (ids.is_none()) o.data = default_corpus().string();
  o.samples = samples, o.max_len = max_len, o.min_len = min_len, o.seed = sample_seed;
  if (ids.is_none()) return s;
  try {
    s.ids = ids.cast<std::vector<std::vector<int32_t>>>();
  } catch (const py::cast_error&) {
    try {
      s.ids = std::vector<std::vector<int32_t>>{ids.cast<std::vector<int32_t>>()};
    } catch (const py::cast_error&) {
      fail("ids: expected a list of token ids (one sample) or a list of such lists, got {}",
           py::str(py::type::of(ids).attr("__name__")).cast<std::string>());
    }
  }
  return s;
}

}  // namespace tdyn::python
