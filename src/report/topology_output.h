// Writes a topology analysis (analysis/topology/run.h) into a results directory: the graphs as edge lists, the
// communities and boundary scores as .npy, the per-boundary and per-layer tables as .csv, the figures, and
// results.json; and the comparison of several checkpoints analysed on the same samples.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/topology/run.h"
#include "report/results.h"

namespace tdyn {

// graph_HOOK.csv per boundary (and correlation_HOOK.npy, mean_jacobians.npy when kept), membership.npy,
// participation.npy, n_other_communities.npy, boundaries.csv, gamma_scan.csv, coupling.csv, the gain arrays,
// the figures, and results.json with its options (merged into any the caller set), model, results and timings.
void write_topology(ResultsDir& out, const TopologyResult& result, const TopologyOptions& options);

// What one checkpoint's analysis leaves for the comparison of checkpoints: results.json's entry in "checkpoints"
// (to_json), read back by from_json (the report's verdicts; it throws Error naming a key that is absent or of the
// wrong type). The depths, which only the figures draw, are not written and come back empty.
struct TopologyCheckpoint {
  std::string label, path, results_dir;
  std::vector<double> depth;           // per boundary
  std::vector<int64_t> n_communities;  // per boundary
  bool has_coupling = false;
  std::vector<double> coupling_depth, coupling_rho;  // per coupling layer: its column coupling's Spearman ρ
  std::vector<bool> coupling_significant, coupling_coupled;
  int64_t significant_row_gain = 0;    // layers whose row-gain coupling is BH-significant

  nlohmann::json to_json() const;
  static TopologyCheckpoint from_json(const nlohmann::json& j);
};
TopologyCheckpoint checkpoint_summary(const TopologyResult& result, const fs::path& results_dir);

// results.json's "checkpoints" (one entry per checkpoint, the first one included) and, with two or more,
// checkpoints.csv and the compare_*.svg figures; figure notes are appended to results.notes. Writes results.json.
void write_topology_comparison(ResultsDir& out, const std::vector<TopologyCheckpoint>& checkpoints);

}  // namespace tdyn
