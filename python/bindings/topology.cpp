// tdyn.topology runs what `tdyn topology` runs for one checkpoint (analysis/topology/run.h): the sample pass,
// then per residual boundary the correlation graph, its communities and boundary nodes, and their coupling with
// the Jacobian gains; it returns what the CLI writes.
#include <optional>
#include <string>
#include <vector>

#include <pybind11/eigen.h>
#include <pybind11/stl.h>

#include "analysis/topology/run.h"
#include "convert.h"
#include "py_model.h"
#include "py_progress.h"
#include "py_samples.h"
#include "pipeline/parts.h"
#include "result_dicts.h"
#include "report/topology_output.h"

namespace tdyn::python {
namespace {

// [rows, d] of the per-boundary (or per-layer) vectors `field` of `items`.
template <typename T, typename Items, typename Field>
py::array_t<T> stacked(const Items& items, int64_t d, Field field) {
  py::array_t<T> out({static_cast<int64_t>(items.size()), d});
  T* p = out.mutable_data();
  for (const auto& item : items) p = std::copy(field(item).begin(), field(item).end(), p);
  return out;
}

// [k, d, d] of the correlation matrices (stored row-major).
py::array_t<double> cube(const std::vector<topology::CorrelationMatrix>& matrices, int64_t d) {
  py::array_t<double> out({static_cast<int64_t>(matrices.size()), d, d});
  double* p = out.mutable_data();
  for (const auto& m : matrices) p = std::copy(m.values.begin(), m.values.end(), p);
  return out;
}

py::dict topology_run(const py::object& model, const PySamples& sample_args, const std::string& boundaries, bool coupling,
                      TopologyOptions options, const std::vector<py::object>& compare, std::optional<uint64_t> random_init,
                      const std::optional<std::string>& label, const std::optional<py::function>& progress,
                      const std::optional<std::string>& out) {
  options.boundaries = parse_boundary_set(boundaries);
  options.coupling = coupling;
  AnalysisInputs in = given_model(model);
  TopologyComparisons comparisons{{}, random_init};
  for (const py::object& c : compare) {
    const AnalysisInputs checkpoint = given_model(c);
    comparisons.compare.push_back({checkpoint.model_path, checkpoint.model});
  }
  CallbackProgress sink(progress);
  std::vector<TopologyResult> results;
  {
    py::gil_scoped_release release;
    draw_samples(in, sample_args.options, sample_args.tokenizer.value_or(""));
    std::optional<ResultsDir> dir;
    if (out) dir.emplace(*out, "topology", std::vector<std::string>{"tdyn.topology"});
    results = topology_to(dir ? &*dir : nullptr, in, comparisons, options, sink, label.value_or(""));
  }
  sink.rethrow();
  py::dict first = topology_dict(results.front(), options);
  py::list others;
  for (size_t i = 1; i < results.size(); ++i) others.append(topology_dict(results[i], compared_options(options)));
  first["compare"] = others;
  return first;
}

}  // namespace

py::dict topology_dict(const TopologyResult& r, const TopologyOptions& options) {
  const int64_t d = r.model.at("d_model").get<int64_t>();
  py::dict result;
  result["results"] = to_python(results_json(r));
  result["options"] = to_python(options_json(r, options));
  result["model"] = to_python(r.model);
  result["membership"] = stacked<int64_t>(r.topology, d, [](const BoundaryTopology& t) -> const auto& { return t.partition.membership; });
  result["participation"] = stacked<double>(r.topology, d, [](const BoundaryTopology& t) -> const auto& { return t.scores.participation; });
  result["n_other_communities"] =
      stacked<int64_t>(r.topology, d, [](const BoundaryTopology& t) -> const auto& { return t.scores.n_other_communities; });
  result["log_column_gain"] = stacked<double>(r.coupling.layers, d, [](const LayerCoupling& l) -> const auto& { return l.log_column_gain; });
  result["log_row_gain"] = stacked<double>(r.coupling.layers, d, [](const LayerCoupling& l) -> const auto& { return l.log_row_gain; });
  result["correlations"] = options.keep_correlations ? py::object(cube(r.correlations, d)) : py::none();
  result["mean_jacobians"] = options.keep_jacobians ? py::object(stacked_matrices(r.mean_jacobians)) : py::none();
  py::array_t<double> layout({static_cast<int64_t>(r.layout.size()), int64_t{2}});
  for (size_t i = 0; i < r.layout.size(); ++i) layout.mutable_at(i, 0) = r.layout[i].first, layout.mutable_at(i, 1) = r.layout[i].second;
  result["layout"] = layout;
  return result;
}

void bind_topology(py::module_& m) {
  m.def(
      "topology",
      [](const py::object& model, const py::object& ids, const std::optional<std::string>& data,
         const std::optional<std::string>& prompt, int64_t samples, int64_t max_len, int64_t min_len, uint64_t sample_seed,
         const std::optional<std::string>& tokenizer, const std::string& boundaries, int64_t top_k, double threshold, double gamma,
         uint64_t leiden_seed, const std::vector<double>& gamma_scan, bool coupling, const std::string& positions,
         int64_t permutations, uint64_t permutation_seed, double min_effect, double fdr_q, bool keep_correlations,
         bool keep_jacobians, int64_t draw_boundary, const std::optional<std::string>& communities_control,
         bool communities_control_independent, int64_t communities_permutations, const std::vector<std::string>& ablate,
         const std::vector<py::object>& compare, std::optional<uint64_t> random_init, const std::optional<std::string>& label,
         const std::optional<py::function>& progress, const std::optional<std::string>& out) {
        const PySamples sample_args = py_samples(ids, data, prompt, samples, max_len, min_len, sample_seed, tokenizer);
        TopologyOptions o;
        o.graph.top_k = top_k, o.graph.threshold = threshold, o.graph.gamma_scan = gamma_scan;
        o.graph.leiden.resolution = gamma, o.graph.leiden.seed = leiden_seed;
        o.positions = positions;
        o.coupling_test = {permutations, permutation_seed, fdr_q, min_effect};
        o.keep_correlations = keep_correlations, o.keep_jacobians = keep_jacobians, o.draw_boundary = draw_boundary;
        o.communities_control = communities_control.value_or("");
        o.communities_control_independent = communities_control_independent;
        o.communities_permutations = communities_permutations;
        o.ablations = Ablation::parse(ablate);
        return topology_run(model, sample_args, boundaries, coupling, o, compare, random_init, label, progress, out);
      },
      py::arg("model"), py::arg("ids") = py::none(), py::kw_only(), py::arg("data") = py::none(), py::arg("prompt") = py::none(),
      py::arg("samples") = 1000, py::arg("max_len") = 128, py::arg("min_len") = 8, py::arg("sample_seed") = 0,
      py::arg("tokenizer") = py::none(), py::arg("boundaries") = "sublayers", py::arg("top_k") = GraphOptions{}.top_k,
      py::arg("threshold") = 0.0, py::arg("gamma") = topology::LeidenOptions{}.resolution,
      py::arg("leiden_seed") = topology::LeidenOptions{}.seed, py::arg("gamma_scan") = std::vector<double>{},
      py::arg("coupling") = true, py::arg("positions") = "last", py::arg("permutations") = CouplingOptions{}.permutations,
      py::arg("permutation_seed") = 0, py::arg("min_effect") = CouplingOptions{}.min_effect,
      py::arg("fdr_q") = CouplingOptions{}.fdr_q, py::arg("keep_correlations") = false, py::arg("keep_jacobians") = false,
      py::arg("draw_boundary") = -1, py::arg("communities_control") = py::none(),
      py::arg("communities_control_independent") = false, py::arg("communities_permutations") = 1000,
      py::arg("ablate") = std::vector<std::string>{}, py::arg("compare") = std::vector<py::object>{},
      py::arg("random_init") = py::none(), py::arg("label") = py::none(), py::arg("progress") = py::none(), py::arg("out") = py::none(),
      R"doc(Runs what `tdyn topology` runs for one checkpoint and returns what it writes.

model: a tdyn.Model or a checkpoint path. The samples, as tdyn.power and tdyn.jacobian take them: ids (a list
of token-id lists, or one list: one sample), else drawn as the CLI draws them from data (a text file, .npy or
.ids; default the WikiText-2 test split) or prompt (one text), with samples, max_len, min_len, sample_seed and
tokenizer (default the model's own). The other arguments are
the CLI's options: boundaries ('layers' or 'sublayers'), top_k or threshold, gamma, leiden_seed, gamma_scan,
coupling (False: topology only), positions, permutations, permutation_seed, min_effect, fdr_q, draw_boundary,
communities_control (a topology results directory), communities_control_independent, communities_permutations,
ablate (zero ablations as --ablate takes them, e.g. ['blocks.1.hook_attn_out']);
keep_correlations and keep_jacobians return (and with out= write) the d x d matrices. label names the checkpoint
(default: its file stem). compare: further checkpoints of the same architecture (Models or paths), and
random_init: the seed of a random initialisation of model's architecture, each analysed the same way on the
same samples as --compare and --random-init (they need out: each is written to out/compare/LABEL, beside the
comparison of all). progress: a callable given each progress line, or None. out: also write the CLI's results
directory there.

Returns a dict: results, options and model (results.json's sections), and the arrays of the .npy files:
membership, participation, n_other_communities [boundary, d_model], log_column_gain and log_row_gain
[coupled layer, d_model], correlations [boundary, d, d] and mean_jacobians [layer, d, d] (or None),
layout [d_model, 2], the node positions of the drawn boundary's graph, and compare: the same dict of each
compared checkpoint, then of the random initialisation (empty without them).)doc");
}

}  // namespace tdyn::python
