// Writes a power-method run (analysis/power/run.h) into a results directory: eigenvalues, eigenvectors and
// per-token alignments as .npy, per-layer, iteration and steering tables as .csv, the figures, and results.json.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "analysis/power/run.h"
#include "report/results.h"

namespace tdyn {

// One array of a run as its .npy file holds it (C order); complex values are written as complex128.
struct PowerArray {
  std::string name;  // the file's name without ".npy"
  Shape shape;
  std::variant<std::vector<double>, std::vector<float>, std::vector<int64_t>, std::vector<Complex>> values;
  std::string what;  // results.json's description of the file
};

// Every array of the run, in the order they are written (layer_matrices only when `save_matrices`).
std::vector<PowerArray> power_arrays(const PowerResult& result, bool save_matrices);

// Every array, table and figure of the run, and results.json with its options (merged into any the caller set),
// model, results and timings sections.
void write_power(ResultsDir& out, const PowerResult& result, const PowerOptions& options);

}  // namespace tdyn
