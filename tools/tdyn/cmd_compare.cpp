// tdyn compare RUN_DIR... --out DIR: results directories of power, jacobian, topology, particles or analyze, of models
// of any depth and width, side by side as the papers' figures put them: every per-depth quantity on normalised depth,
// the verdicts in one table, and every number in one long CSV (report/compare.h). Nothing is recomputed.
#include <iostream>

#include "command.h"
#include "report/compare.h"

namespace tdyn::cli {
namespace {

struct CompareArgs {
  std::vector<std::string> runs, labels;
  std::string out;
};

int run(const CompareArgs& a) {
  if (a.labels.size() > a.runs.size())
    throw CLI::ValidationError("--label", fmt::format("{} labels for {} results directories", a.labels.size(), a.runs.size()));
  std::vector<CompareInput> inputs;
  for (size_t i = 0; i < a.runs.size(); ++i) inputs.push_back({a.runs[i], i < a.labels.size() ? a.labels[i] : ""});
  const Comparison comparison = compare_runs(inputs, a.out);
  const fs::path index = write_comparison(comparison, a.out, invocation());
  std::cerr << fmt::format("tdyn compare: {} models, {} values; wrote {}\n", comparison.models.size(), comparison.rows.size(), index.string());
  return 0;
}

std::function<int()> setup_compare(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "compare",
      "Put results directories of power, jacobian, topology, particles or analyze side by side, models of any depth and "
      "width: the papers' figures on normalised depth (attention and MLP sublayers on separate axes, each analyze run's "
      "initialisation control dashed), a checkpoint series (jacobian --compare, topology --compare) in training order, the "
      "verdicts in one table, and DIR/compare.csv with one row per (model, part, depth, sublayer, quantity)");
  auto a = std::make_shared<CompareArgs>();
  cmd->add_option("RUN_DIR", a->runs, "Results directories (each with a results.json)")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--label", a->labels,
                  "The models' labels, in the order of the directories (repeat the flag; default: the model's name, and for a "
                  "checkpoint series each checkpoint's file name, whose last number is read as its training step). Runs of one "
                  "architecture whose labels each name a step (step1000, ckpt_200, 1500) are a checkpoint series ordered by step");
  cmd->add_option("--out", a->out, "Output directory (index.html, compare.csv, results.json, the figures)")->required();
  return [a] { return run(*a); };
}

TDYN_REGISTER_COMMAND("compare", 85, setup_compare);

}  // namespace
}  // namespace tdyn::cli
