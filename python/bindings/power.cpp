// tdyn.power runs what `tdyn power` runs (analysis/power/run.h): the spectra of the layer matrices, the token
// dynamics over samples, the shared-weight iteration and the rank-1 steering, and returns what it writes.
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <pybind11/complex.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "analysis/power/run.h"
#include "convert.h"
#include "py_model.h"
#include "py_progress.h"
#include "py_samples.h"
#include "result_dicts.h"
#include "pipeline/parts.h"
#include "report/power_output.h"

namespace tdyn::python {
namespace {

py::array numpy_of(const PowerArray& a) {
  return std::visit([&](const auto& values) -> py::array {
    using T = typename std::decay_t<decltype(values)>::value_type;
    py::array_t<T> out(a.shape);
    std::copy(values.begin(), values.end(), out.mutable_data());
    return out;
  }, a.values);
}

py::dict power_run(const py::object& model, const py::object& ids, const std::optional<std::string>& data,
                   const std::optional<std::string>& prompt, int64_t samples, int64_t max_len, int64_t min_len,
                   uint64_t sample_seed, const std::optional<std::string>& tokenizer, const std::string& mode, bool residual,
                   std::optional<int64_t> iterate_layer, bool iterate, int64_t iterate_sample, int64_t iterations,
                   bool steer, const std::string& steer_direction, uint64_t steer_seed, const std::vector<double>& steer_scales,
                   int64_t steer_samples, int64_t steer_control_draws, bool save_matrices, const std::vector<std::string>& ablate,
                   const std::optional<py::function>& progress, const std::optional<std::string>& out) {
  AnalysisInputs in = given_model(model);
  const PySamples sample_args = py_samples(ids, data, prompt, samples, max_len, min_len, sample_seed, tokenizer);
  PowerOptions options;
  options.dynamics = {parse_dynamics_mode(mode), residual};
  options.iterate_layer = iterate_layer.value_or(-1);
  options.iterate = iterate, options.iterate_sample = iterate_sample, options.iteration.steps = iterations;
  options.steer = steer, options.steer_direction = steer_direction, options.steer_seed = steer_seed;
  options.steering.scales = steer_scales, options.steer_samples = steer_samples;
  options.steering.control_draws = steer_control_draws;
  options.save_matrices = save_matrices;
  options.ablations = Ablation::parse(ablate);
  if (iterations < 1 || steer_samples < 1) fail("iterations and steer_samples must be >= 1");
  if (steer_control_draws < 0) fail("steer_control_draws must be >= 0 (got {})", steer_control_draws);

  CallbackProgress sink(progress);
  PowerResult r;
  {
    py::gil_scoped_release release;
    draw_samples(in, sample_args.options, tokenizer.value_or(""));
    std::optional<ResultsDir> dir;
    if (out) dir.emplace(*out, "power", std::vector<std::string>{"tdyn.power"});
    r = power_to(dir ? &*dir : nullptr, in, options, sink);
  }
  sink.rethrow();
  return power_dict(r, options);
}

}  // namespace

py::dict power_dict(const PowerResult& r, const PowerOptions& options) {
  py::dict result;
  result["results"] = to_python(results_json(r));
  result["options"] = to_python(options_json(r, options));
  result["model"] = to_python(r.model);
  for (const PowerArray& a : power_arrays(r, options.save_matrices)) result[a.name.c_str()] = numpy_of(a);
  return result;
}

void bind_power(py::module_& m) {
  const SteeringOptions steering;
  m.def("power", &power_run, py::arg("model"), py::arg("ids") = py::none(), py::kw_only(), py::arg("data") = py::none(),
        py::arg("prompt") = py::none(), py::arg("samples") = 200, py::arg("max_len") = 128, py::arg("min_len") = 8,
        py::arg("sample_seed") = 0, py::arg("tokenizer") = py::none(), py::arg("mode") = "full", py::arg("residual") = true,
        py::arg("iterate_layer") = py::none(), py::arg("iterate") = true, py::arg("iterate_sample") = 0,
        py::arg("iterations") = IterationOptions{}.steps, py::arg("steer") = true, py::arg("steer_direction") = "random",
        py::arg("steer_seed") = 0, py::arg("steer_scales") = steering.scales, py::arg("steer_samples") = 8,
        py::arg("steer_control_draws") = steering.control_draws, py::arg("save_matrices") = false,
        py::arg("ablate") = std::vector<std::string>{}, py::arg("progress") = py::none(),
        py::arg("out") = py::none(),
        R"doc(Runs what `tdyn power` runs and returns what it writes.

model: a tdyn.Model or a checkpoint path. The samples, as tdyn.jacobian and tdyn.topology take them: ids (a
list of token-id lists, or one list: one sample), else drawn as the CLI draws them from data (a text file of
passages, a .npy or .ids file; default the WikiText-2 test split) or prompt (one text), with samples, max_len,
min_len, sample_seed; tokenizer: a tokenizer file (default the model's). mode 'full',
'attn-only' or 'attn-only-l2'; residual. The iteration of layer iterate_layer (default: the shared layer of a
shared-weight model, else none; iterate=False skips it) for `iterations` steps on sample iterate_sample. The
steering sweep (steer=False skips it) along steer_direction ('random' seeded by steer_seed, 'token:ID',
'token:TEXT' or a .npy path) at steer_scales times |lambda1| of the last layer, on the first steer_samples
samples; steer_control_draws: the verdict's control, as many perturbations of the same norm along random
directions orthogonal to u at the largest scale. ablate: zero ablations as --ablate takes them, e.g.
['blocks.3.attn.hook_z:heads=5']: the analysis of the model with those parts set to 0 (its layer matrices, token
dynamics, iteration and steering). progress: None (silent) or a callable that gets each progress line. out: also write the CLI's results
directory there.

Returns a dict: results, options and model (results.json's sections), and the arrays of the .npy files:
eigenvalues [layer, k] (complex), dominant_eigenvectors_F and dominant_eigenvectors_I_plus_F [layer, d]
(complex), layer_matrix_bias, alignment_before and alignment_after [layer, token] (float32),
alignment_histogram, cross_layer_alignment [layer, layer], iteration_alignment and iteration_plane (when
iterated), steering_direction (when steered), layer_matrices [layer, d, d] (with save_matrices).)doc");
}

}  // namespace tdyn::python
