// tdyn.jacobian runs what `tdyn jacobian` runs (analysis/jacobian/run.h) and returns what it writes: the
// sections of results.json and the arrays of its .npy files.
#include <complex>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/complex.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "analysis/jacobian/run.h"
#include "convert.h"
#include "py_model.h"
#include "py_progress.h"
#include "py_samples.h"
#include "result_dicts.h"
#include "pipeline/parts.h"
#include "report/jacobian_output.h"

namespace tdyn::python {
namespace {

// Eigenvalues (complex) and singular values [K, d] of the metrics per depth, as PREFIX{stem}.*.npy.
void add_spectra(py::dict& arrays, const std::string& stem, const std::vector<OperatorMetrics>& ms) {
  const int64_t K = static_cast<int64_t>(ms.size()), d = K ? ms.front().d : 0;
  py::array_t<std::complex<double>> eig({K, d});
  py::array_t<double> sv({K, d});
  auto e = eig.mutable_unchecked<2>();
  auto s = sv.mutable_unchecked<2>();
  for (int64_t k = 0; k < K; ++k)
    for (int64_t i = 0; i < d; ++i) {  // NaN where not computed (cumulative_ends_only, verdict_metrics_only)
      e(k, i) = i < ms[k].eigenvalues.size() ? ms[k].eigenvalues[i] : std::complex<double>(NAN, NAN);
      s(k, i) = i < ms[k].singular_values.size() ? ms[k].singular_values[i] : NAN;
    }
  arrays[py::str(stem + ".eigenvalues")] = eig;
  arrays[py::str(stem + ".singular_values")] = sv;
}

py::dict jacobian_run(const py::object& model, const py::object& ids, const std::optional<std::string>& data,
                      const std::optional<std::string>& prompt, int64_t samples, int64_t max_len, int64_t min_len,
                      uint64_t sample_seed, const std::optional<std::string>& tokenizer, const std::vector<py::object>& compare,
                      const std::string& positions, const std::string& mean, const std::string& cumulative,
                      const std::vector<linalg::Index>& alignment_ks, bool cumulative_ends_only, bool verdict_metrics_only,
                      bool surgery,
                      const std::vector<double>& alphas, uint64_t surgery_seed, const std::vector<int64_t>& eig_depths,
                      bool save_per_sample, const std::vector<std::string>& ablate, const std::optional<py::function>& progress,
                      const std::optional<std::string>& out) {
  if (mean != "structured" && mean != "plain") fail("mean: expected 'structured' or 'plain', got '{}'", mean);
  if (cumulative != "product-of-means" && cumulative != "both")
    fail("cumulative: expected 'product-of-means' or 'both', got '{}'", cumulative);
  if (save_per_sample && !out) fail("save_per_sample writes files: give out, the results directory");
  JacobianOptions options;
  options.positions = PositionSpec::parse(positions);
  options.structured = mean == "structured";
  options.mean_of_products = cumulative == "both";
  options.save_per_sample = save_per_sample;
  options.metrics.alignment_ks = alignment_ks;
  options.cumulative_ends_only = cumulative_ends_only, options.verdict_metrics_only = verdict_metrics_only;
  options.surgery = surgery;
  options.surgery_options = {alphas, surgery_seed};
  options.eig_depths = eig_depths;
  options.keep_matrices = true;
  options.ablations = Ablation::parse(ablate);
  const PySamples sample_args = py_samples(ids, data, prompt, samples, max_len, min_len, sample_seed, tokenizer);
  AnalysisInputs in = given_model(model);
  std::vector<JacobianCheckpoint> compared;
  for (const py::object& c : compare) {
    const AnalysisInputs checkpoint = given_model(c);
    compared.push_back({checkpoint.model_path, checkpoint.model});
  }

  CallbackProgress sink(progress);
  JacobianResult r;
  {
    py::gil_scoped_release release;
    draw_samples(in, sample_args.options, tokenizer.value_or(""));
    std::optional<ResultsDir> dir;
    if (out) dir.emplace(*out, "jacobian", std::vector<std::string>{"tdyn.jacobian"});
    r = jacobian_to(dir ? &*dir : nullptr, in, compared, options, sink);
  }
  sink.rethrow();
  return jacobian_dict(r, options);
}

}  // namespace

py::dict jacobian_dict(const JacobianResult& r, const JacobianOptions& options) {
  py::dict result;
  result["results"] = to_python(results_json(r));
  result["options"] = to_python(options_json(r, options));
  result["model"] = to_python(r.model);
  result["samples.source_index"] = py::array_t<int64_t>(static_cast<int64_t>(r.source_indices.size()), r.source_indices.data());
  for (const CheckpointJacobians& m : r.models) {
    if (options.keep_matrices) {
      result[py::str(m.prefix + "mean_jacobians")] = stacked_matrices(m.mean);
      result[py::str(m.prefix + "cumulative_products")] = stacked_matrices(m.cumulative);
    }
    if (options.mean_of_products) result[py::str(m.prefix + "mean_of_products")] = stacked_matrices(m.mean_of_products);
    add_spectra(result, m.prefix + "mean", m.mean_metrics);
    add_spectra(result, m.prefix + "cumulative", m.cumulative_metrics);
  }
  return result;
}

void bind_jacobian(py::module_& m) {
  const SurgeryOptions surgery_defaults;
  m.def("jacobian", &jacobian_run, py::arg("model"), py::arg("ids") = py::none(), py::kw_only(), py::arg("data") = py::none(),
        py::arg("prompt") = py::none(), py::arg("samples") = 1000, py::arg("max_len") = 128, py::arg("min_len") = 8,
        py::arg("sample_seed") = 0, py::arg("tokenizer") = py::none(), py::arg("compare") = std::vector<py::object>{},
        py::arg("positions") = "last", py::arg("mean") = "structured",
        py::arg("cumulative") = "product-of-means", py::arg("alignment_ks") = OperatorMetricsOptions{}.alignment_ks,
        py::arg("cumulative_ends_only") = false, py::arg("verdict_metrics_only") = false, py::arg("surgery") = false,
        py::arg("alphas") = surgery_defaults.alphas, py::arg("surgery_seed") = surgery_defaults.seed,
        py::arg("eig_depths") = std::vector<int64_t>{}, py::arg("save_per_sample") = false,
        py::arg("ablate") = std::vector<std::string>{}, py::arg("progress") = py::none(),
        py::arg("out") = py::none(),
        R"doc(Runs what `tdyn jacobian` runs and returns what it writes.

model: a tdyn.Model or a checkpoint path. The samples, as tdyn.power and tdyn.topology take them: ids (a list
of token-id lists, sample i with source index i, or one list: one sample), else drawn as the CLI draws them
from data (a text file of passages, a .npy or .ids file; default the WikiText-2 test split) or prompt (one
text), with samples, max_len, min_len, sample_seed; tokenizer: a tokenizer file (default the model's).
compare: further checkpoints of the same architecture (Models or paths), run on the same samples.
positions 'last', 'all' or '5,23,-1'; mean 'structured' (through the shared sample pass) or 'plain';
cumulative 'product-of-means' or 'both' (also the mean of per-sample products); alignment_ks,
cumulative_ends_only, verdict_metrics_only, surgery, alphas, surgery_seed, eig_depths (1-based; default first,
middle, last) as the CLI's flags. ablate: zero
ablations as --ablate takes them, e.g. ['blocks.3.attn.hook_z:heads=5']: the Jacobians of the model with those
parts set to 0. progress: None
(silent) or a callable taking a line. out: also write the CLI's results directory there (save_per_sample
needs it).

Returns a dict: results, options and model (results.json's sections; options without how the model and
samples were given), and the arrays of the .npy files by file name less '.npy': samples.source_index,
mean_jacobians and cumulative_products [depth, d, d], mean_of_products, mean.eigenvalues (complex) and
mean.singular_values [depth, d], cumulative.eigenvalues, cumulative.singular_values; a compared checkpoint's
arrays under its prefix 'compare{i}.'.)doc");
}

}  // namespace tdyn::python
