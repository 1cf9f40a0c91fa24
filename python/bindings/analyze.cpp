// tdyn.analyze runs what `tdyn analyze` runs (pipeline/analyze.h): every analysis of the three papers on one model
// into a results directory with the report, and returns each part's result as its own function returns it.
#include <omp.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "convert.h"
#include "pipeline/analyze.h"
#include "py_model.h"
#include "py_progress.h"
#include "result_dicts.h"

namespace tdyn::python {
namespace {

py::dict analyze_run(const py::object& model, const std::string& out, const std::optional<std::string>& data,
                     const std::optional<std::string>& tokenizer, int64_t samples, int64_t max_len, const std::vector<std::string>& skip,
                     bool init_control, int64_t init_seeds, int64_t interval_subsets, int64_t particles_layer, int64_t particles_head, int64_t particles_tokens, double particles_t,
                     const std::vector<std::string>& ablate, const std::optional<py::function>& progress) {
  const AnalysisInputs given = given_model(model);
  AnalyzeOptions o;
  o.model_path = given.model_path;
  o.load = given.load;
  o.data = data.value_or("");
  o.tokenizer = tokenizer.value_or("");
  o.samples = samples, o.max_len = max_len;
  o.skip = {skip.begin(), skip.end()};
  o.init_control = init_control;
  o.init_seeds = init_seeds;
  o.interval_subsets = interval_subsets;
  o.particles_layer = particles_layer, o.particles_head = particles_head;
  o.particles_tokens = particles_tokens, o.particles_t = particles_t;
  o.ablations = Ablation::parse(ablate);
  o.threads = omp_get_max_threads();
  o.quiet = true;
  o.keep_matrices = true;
  CallbackProgress sink(progress);
  AnalyzeResult r;
  {
    py::gil_scoped_release release;
    r = run_analyze(o, out, sink, {}, given.model);
  }
  sink.rethrow();
  py::dict result;
  result["results"] = to_python(r.results);
  result["dir"] = fs::absolute(out).lexically_normal().string();
  result["power"] = r.power ? py::object(power_dict(*r.power, r.power_options)) : py::none();
  result["power_l2"] = r.power_l2 ? py::object(power_dict(*r.power_l2, r.power_l2_options)) : py::none();
  result["init_power"] = r.init_power ? py::object(power_dict(*r.init_power, r.init_power_options)) : py::none();
  result["jacobian"] = r.jacobian ? py::object(jacobian_dict(*r.jacobian, r.jacobian_options)) : py::none();
  result["init_jacobian"] = r.init_jacobian ? py::object(jacobian_dict(*r.init_jacobian, r.init_jacobian_options)) : py::none();
  result["topology"] = r.topology ? py::object(topology_dict(*r.topology, r.topology_options)) : py::none();
  result["init_topology"] = r.init_topology ? py::object(topology_dict(*r.init_topology, r.init_topology_options)) : py::none();
  result["particles"] = r.particles ? py::object(particles_dict(*r.particles, r.particles_options)) : py::none();
  return result;
}

}  // namespace

void bind_analyze(py::module_& m) {
  const AnalyzeOptions defaults;
  m.def("analyze", &analyze_run, py::arg("model"), py::kw_only(), py::arg("out"), py::arg("data") = py::none(),
        py::arg("tokenizer") = py::none(), py::arg("samples") = defaults.samples, py::arg("max_len") = defaults.max_len,
        py::arg("skip") = std::vector<std::string>{}, py::arg("init_control") = defaults.init_control,
        py::arg("init_seeds") = defaults.init_seeds, py::arg("interval_subsets") = defaults.interval_subsets,
        py::arg("particles_layer") = defaults.particles_layer, py::arg("particles_head") = defaults.particles_head,
        py::arg("particles_tokens") = defaults.particles_tokens, py::arg("particles_T") = defaults.particles_t,
        py::arg("ablate") = std::vector<std::string>{}, py::arg("progress") = py::none(),
        R"doc(Runs what `tdyn analyze` runs: every analysis of the three papers on one model, into the results directory
`out` with the report (out/index.html), and returns a dict.

model: a tdyn.Model (analysed as loaded, with the options it was loaded with) or a checkpoint path. data: a text
file of passages or token ids (default the WikiText-2 test split);
tokenizer: a tokenizer file (default the model's); samples, max_len: the shared samples. skip: parts to leave
out, of 'power', 'power-l2' (power in the paper's idealisation), 'jacobian', 'topology', 'particles'.
init_control: run random initialisations of the architecture through power, power-l2, jacobian and topology as
the controls of the claims about training; init_seeds: how
many (seeds 0 .. init_seeds - 1). interval_subsets: the disjoint sample subsets behind the intervals of the
Jacobian statistics (0: none). particles_layer, particles_head, particles_tokens,
particles_T: the head simulated as particles. ablate: zero ablations as --ablate takes them (e.g.
['blocks.3.attn.hook_z:heads=5']): every part and control of the model with those parts set to 0. progress: None (silent) or a callable that gets each progress
line.

The dict: 'results' is out/results.json (parts, their status and command lines, the verdicts), 'dir' the
directory, and 'power', 'power_l2', 'jacobian', 'topology', 'particles' and, of the control's first seed, 'init_power',
'init_jacobian' and 'init_topology' what
tdyn.power, tdyn.jacobian, tdyn.topology and tdyn.particles return for that part (None when it was skipped or
failed; results.parts.PART.error says why). A failed part does not raise: check results['parts'].)doc");
}

}  // namespace tdyn::python
