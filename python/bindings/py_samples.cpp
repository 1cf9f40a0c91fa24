#include "py_samples.h"

#include <algorithm>

#include <pybind11/stl.h>

#include "core/error.h"

namespace tdyn::python {

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
    o.ids = ids.cast<std::vector<std::vector<int32_t>>>();
  } catch (const py::cast_error&) {
    try {
      o.ids = {ids.cast<std::vector<int32_t>>()};
    } catch (const py::cast_error&) {
      fail("ids: expected a list of token ids (one sample) or a list of such lists, got {}",
           py::str(py::type::of(ids).attr("__name__")).cast<std::string>());
    }
  }
  if (o.ids.empty()) fail("no samples to analyse (ids is empty)");
  // Every sample given is analysed whole: samples and max_len, which bound what is drawn from data, cover them.
  o.samples = std::max<int64_t>(o.samples, static_cast<int64_t>(o.ids.size()));
  for (const std::vector<int32_t>& sample : o.ids) o.max_len = std::max<int64_t>(o.max_len, static_cast<int64_t>(sample.size()));
  return s;
}

}  // namespace tdyn::python
