// tdyn.compare does what `tdyn compare` does (report/compare.h): results directories side by side, written to a
// directory with the page, the figures and compare.csv, and returned with the long table as numpy columns.
#include <cmath>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "convert.h"
#include "core/error.h"
#include "core/files.h"
#include "report/compare.h"

namespace tdyn::python {
namespace {

// compare.csv's columns, one numpy array each: text as str arrays, numbers as float64 (NaN where the CSV is empty),
// depth as int64.
py::dict compare_columns(const std::vector<CompareRow>& rows) {
  const py::module_ numpy = py::module_::import("numpy");
  const auto text = [&](auto field) {
    py::list values;
    for (const CompareRow& r : rows) values.append(r.*field);
    return numpy.attr("array")(values, py::arg("dtype") = "str");
  };
  const auto numbers = [&](auto field) {
    py::array_t<double> values(static_cast<py::ssize_t>(rows.size()));
    for (size_t i = 0; i < rows.size(); ++i) values.mutable_at(i) = rows[i].*field;
    return values;
  };
  py::array_t<int64_t> depth(static_cast<py::ssize_t>(rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) depth.mutable_at(i) = rows[i].depth;
  py::dict table;
  table["model"] = text(&CompareRow::model);
  table["source"] = text(&CompareRow::source);
  table["part"] = text(&CompareRow::part);
  table["depth"] = depth;
  table["normalized_depth"] = numbers(&CompareRow::normalized_depth);
  table["sublayer"] = text(&CompareRow::sublayer);
  table["quantity"] = text(&CompareRow::quantity);
  table["at"] = numbers(&CompareRow::at);
  table["value"] = numbers(&CompareRow::value);
  table["lo"] = numbers(&CompareRow::lo);
  table["hi"] = numbers(&CompareRow::hi);
  table["from"] = text(&CompareRow::from);
  return table;
}

py::dict compare_dirs(const std::vector<std::string>& runs, const std::string& out, const std::vector<std::string>& labels) {
  if (labels.size() > runs.size()) fail("compare: {} labels for {} results directories", labels.size(), runs.size());
  std::vector<CompareInput> inputs;
  std::vector<std::string> argv = {"tdyn", "compare"};
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!fs::is_directory(runs[i])) fail("compare: {} is not a directory", runs[i]);
    inputs.push_back({runs[i], i < labels.size() ? labels[i] : ""});
    argv.push_back(runs[i]);
  }
  for (const std::string& label : labels) argv.insert(argv.end(), {"--label", label});
  argv.insert(argv.end(), {"--out", out});
  Comparison comparison;
  {
    py::gil_scoped_release release;
    comparison = compare_runs(inputs, out);
    write_comparison(comparison, out, argv);
  }
  py::dict result;
  result["dir"] = fs::absolute(out).lexically_normal().string();
  result["results"] = to_python(nlohmann::json::parse(read_file(fs::path(out) / "results.json")));
  result["table"] = compare_columns(comparison.rows);
  return result;
}

}  // namespace

void bind_compare(py::module_& m) {
  m.def("compare", &compare_dirs, py::arg("runs"), py::kw_only(), py::arg("out"), py::arg("labels") = std::vector<std::string>{},
        R"doc(Does what `tdyn compare` does: results directories of tdyn.power, tdyn.jacobian, tdyn.topology,
tdyn.particles or tdyn.analyze runs (or of the commands), of models of any depth and width, side by side in the
directory `out` (index.html, compare.csv, the figures, results.json). Nothing is recomputed.

runs: the results directories. labels: the models' labels in the order of `runs` (default: each model's name; a
checkpoint series is named by its directory, each checkpoint by its file).

Returns a dict: 'dir' the directory; 'results' out/results.json (the models, how their runs' options differ, the
verdicts side by side); 'table' compare.csv as a dict of numpy arrays, one per column ('model', 'source', 'part',
'depth', 'normalized_depth', 'sublayer', 'quantity', 'at', 'value', 'lo', 'hi', 'from'; NaN where the CSV is empty),
so that pandas.DataFrame(result['table']) is the tidy frame.)doc");
}

}  // namespace tdyn::python
