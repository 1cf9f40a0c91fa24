// `tdyn compare RUN_DIR...`: results directories of power, jacobian, topology, particles or analyze, of models of any
// depth and width, side by side as the papers' figures put them (docs/compare.md). Every per-depth quantity is read
// from the runs' results.json into one long table, placed on normalised depth (layer l of L at (l + 1) / L, its
// attention sublayer at (l + ½) / L, the MLP's at (l + 1) / L), and drawn per model with attention and MLP sublayers
// on separate axes and each analyze run's initialisation control dashed in its model's colour. A jacobian run of
// several checkpoints (--compare) and a topology run's comparisons become a checkpoint series, ordered by training
// step. Nothing is recomputed: the comparison is rebuilt from the runs' files alone.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "report/verdicts.h"

namespace tdyn {

// One results directory to compare; an empty label takes the model's name (its directory's or file's name).
struct CompareInput {
  fs::path dir;
  std::string label;
};

// One row of DIR/compare.csv: a quantity of one model (or its initialisation control, or one checkpoint of a series)
// at one depth, and the place in a results.json it was read from.
struct CompareRow {
  std::string model;    // the model's label (a checkpoint: the series' label, then the checkpoint's)
  std::string source;   // "model", or "init": the family's initialisation rule (analyze's control, seed 0)
  std::string part;     // power, power-l2, jacobian, topology, particles
  int64_t depth = 0;    // 1-based layer (power), sublayer (jacobian, topology) or cumulative depth; 0: the whole model
  double normalized_depth = NAN;
  std::string sublayer;  // "attn", "mlp", "layer" (a whole layer, or a parallel block), "" (none)
  std::string quantity;
  double at = NAN;       // α of a surgery point, t of a particle snapshot, the step of a checkpoint; NaN: none
  double value = NAN, lo = NAN, hi = NAN;  // lo, hi: the 95 % interval over sample subsets, where the run has them
  std::string from;      // where the value was read: FILE#JSON-POINTER (a boolean reads as 1 or 0)
};

// One model of the comparison.
struct ComparedModel {
  std::string label;
  fs::path dir;               // its results directory
  std::string command;        // the run's command (analyze, jacobian, ...)
  std::string family;
  int64_t n_layers = 0, d_model = 0;
  std::string series;         // the checkpoint series it belongs to ("" for none)
  double step = NAN;          // its training step within the series, when its label or revision names one
  std::vector<PaperSummary> verdicts;  // the papers' claims on it (the series' first checkpoint only)
  nlohmann::json options;     // the options that shape its numbers: samples, data, max_len
};

// A quantity over a checkpoint series in training order: its mean over depths at each checkpoint, and their trend.
struct SeriesTrend {
  std::string series, part, quantity;
  std::vector<std::string> checkpoints;  // labels, in order
  std::vector<double> means;
  double tau = NAN;  // Kendall's τ of the means with the order (analysis/stats.h order_tau)
};

struct Comparison {
  std::vector<ComparedModel> models;
  std::vector<CompareRow> rows;
  std::vector<SeriesTrend> trends;
  std::vector<std::string> differences;  // how the runs' options differ ("samples: 200 (a), 100 (b)")
};

// Reads the runs for a comparison to be written to `out` (each row's `from` is relative to it, so that compare.csv
// stays true when the tree moves). Throws Error for a directory with no results.json, a run of a command compare does
// not read, or one label given to two runs of the same analysis.
Comparison compare_runs(const std::vector<CompareInput>& runs, const fs::path& out);

// Writes DIR/compare.csv, DIR/results.json (command "compare"), the figures and DIR/index.html; returns index.html.
fs::path write_comparison(const Comparison& comparison, const fs::path& dir, const std::vector<std::string>& argv);

// The training step a checkpoint's label or revision names ("step1000", "global_step-5", "ckpt_200", "1000"): the last
// number in it, NaN when it has none.
double training_step(const std::string& label);

}  // namespace tdyn
