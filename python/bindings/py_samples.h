// The samples of tdyn.power, tdyn.jacobian and tdyn.topology, given the same way to each: `ids` (a list of token-id
// lists, one per sample, or one list of ids: a single sample), else drawn as the CLI draws them from `data` (a text
// file of passages, a .npy or .ids file; default the WikiText-2 test split) or `prompt` (one text), with
// `samples`, `max_len`, `min_len` and `sample_seed`, tokenized with the file `tokenizer` or the model's own.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "analysis/samples.h"

namespace tdyn::python {

namespace py = pybind11;

// The samples as the CLI's --data, --prompt or --ids would give them (ids: every sample whole, options.samples and
// options.max_len raised to cover them where they do not), so that they load and are recorded as the CLI's are.
struct PySamples {
  SampleOptions options;
  std::optional<std::string> tokenizer;  // a tokenizer file; none: the model's own
};

// Reads the arguments (with the GIL held); throws Error on ids that are neither a list of ints nor a list of lists.
PySamples py_samples(const py::object& ids, const std::optional<std::string>& data, const std::optional<std::string>& prompt,
                     int64_t samples, int64_t max_len, int64_t min_len, uint64_t sample_seed,
                     const std::optional<std::string>& tokenizer);

}  // namespace tdyn::python
