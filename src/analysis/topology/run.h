// One checkpoint's topology analysis from start to end, as `tdyn topology` and tdyn.topology run it: from the
// sums of the shared sample pass (analysis/pass/run.h), per residual boundary the correlation graph, its
// signed Leiden communities and boundary nodes (topology_analysis.h), their coupling with the Jacobian gains of
// the sublayer map leaving the boundary, the layout of the graph drawn, and optionally the similarity of the
// communities with those of another topology results directory. report/topology_output.h writes the result as
// results.json, .npy, .csv and figures.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/pass/run.h"
#include "analysis/topology/topology_analysis.h"
#include "core/phase_times.h"
#include "core/progress.h"

namespace tdyn {

struct TopologyOptions {
  BoundarySet boundaries = BoundarySet::Sublayers;  // every sublayer map, the MLPs included, is coupled
  GraphOptions graph;
  bool coupling = true;            // mean Jacobians and the coupling statistics; false: topology only
  std::string positions = "last";  // positions averaged in the mean Jacobians (PositionSpec::parse)
  CouplingOptions coupling_test;
  std::vector<Ablation> ablations;  // zero ablations (model/ablation.h): the topology of the ablated model, every checkpoint alike
  bool keep_correlations = false;  // TopologyResult::correlations (each d × d)
  bool keep_jacobians = false;     // TopologyResult::mean_jacobians (each d × d)
  int64_t draw_boundary = -1;      // the boundary whose graph is laid out; −1: the middle one
  bool layout = true;              // lay that graph out (graph_layout.csv, the graph figure): O(d²) per iteration
  // A topology results directory of the same architecture on the same samples whose communities are compared
  // with this run's (NMI per boundary against a shuffled-unit null); "" for none.
  std::string communities_control;
  bool communities_control_independent = false;  // its model is an independent random draw: no unit is the same unit
  int64_t communities_permutations = 1000;
  // A jacobian results directory of the same pass (same samples, positions and ablations): each coupled map's
  // normality (departure, symmetry index, complex share) is read from its depths instead of computed again; "" for
  // none. tdyn analyze passes its jacobian part's.
  std::string normality_from;
  // Every MPI rank runs this analysis (`tdyn topology` under mpirun): the ranks share the coupling's layers (J̄'s Schur
  // form), rank 0 sending each its layers' J̄ and boundary scores (take_coupling_share is a worker rank's side). Not
  // with normality_from, which leaves no Schur form to share. No effect in one process.
  bool ranks_share_coupling = false;
};

// This run's communities against those of a control run over the same units and boundaries (communities_control):
// results.json's "community_similarity", which to_json writes and from_json reads back (the report's verdicts).
struct CommunityComparison {
  std::string control_dir, control_model;
  bool independent_draw = false;  // the control is an independent random draw, whose units are not this model's
  uint64_t permutation_seed = 0;
  std::vector<std::string> hooks;  // the boundaries, in the similarity's order
  topology::CommunitySimilarity similarity;

  nlohmann::json to_json() const;
  // Throws Error naming a key that is absent or of the wrong type.
  static CommunityComparison from_json(const nlohmann::json& j);
};

// One entry of results.json's "boundaries": a residual boundary's graph and communities in numbers, which to_json
// writes and from_json reads back (the report's verdicts). The memberships and scores themselves go to .npy.
struct BoundarySummary {
  int64_t index = 0;
  std::string hook;
  double depth = 0;                 // depth_of the boundary
  std::string leaving_map;          // the sublayer map leaving it; "none" after the last layer
  int64_t constant_units = 0;       // units without correlation, left out of the graph's edges
  int64_t edges = 0, positive_edges = 0, negative_edges = 0;
  int64_t communities = 0;
  std::vector<int64_t> community_sizes;
  double cpm_quality = 0;
  int64_t leiden_passes = 0, bridge_nodes = 0;
  std::array<double, 6> participation{};  // quantiles of the participation coefficient (kParticipationQuantiles)
  std::vector<GammaScanEntry> gamma_scan;

  static constexpr std::array<std::pair<const char*, double>, 6> kParticipationQuantiles = {
      {{"min", 0}, {"q25", 0.25}, {"median", 0.5}, {"q75", 0.75}, {"q90", 0.9}, {"max", 1}}};
  nlohmann::json to_json() const;
  // Throws Error naming a key that is absent or of the wrong type.
  static BoundarySummary from_json(const nlohmann::json& j);
};

// results.json's "coupling": the coupling test across the sublayer maps under the maps' names, which to_json writes and
// from_json reads back (the report's verdicts). The layers' log gains are not in it (log_column_gain.npy, log_row_gain.npy).
struct TopologyCoupling {
  struct Map {
    int64_t boundary = 0;    // index in results.boundaries of the boundary the map leaves
    std::string hook, name;  // that boundary's hook and the map's own (blocks.l.jac_attn, blocks.l.jac_mlp)
  };
  std::vector<Map> maps;       // one per layer of `test`
  int64_t jacobian_pairs = 0;  // of the pass
  CouplingResult test;

  nlohmann::json to_json() const;
  // Throws Error naming a key that is absent or of the wrong type.
  static TopologyCoupling from_json(const nlohmann::json& j);
};

struct TopologyResult {
  std::string label, path;  // the checkpoint's short name and where it was loaded from
  nlohmann::json model;     // results.json's "model"
  std::vector<ResidualBoundary> boundaries;
  int64_t n_samples = 0, n_tokens = 0, n_pairs = 0;  // of the pass
  std::vector<BoundaryTopology> topology;            // per boundary
  std::vector<topology::CorrelationMatrix> correlations;  // per boundary, with keep_correlations
  bool has_coupling = false;
  std::vector<int64_t> coupled;  // boundary index of every coupling layer (boundaries a sublayer map leaves)
  CouplingResult coupling;
  int64_t coupling_ranks = 1;  // the MPI ranks that computed the layers' couplings
  std::vector<linalg::Matrix> mean_jacobians;  // per coupling layer, with keep_jacobians
  int64_t drawn_boundary = 0;
  std::vector<std::pair<double, double>> layout;  // node positions of the drawn boundary's graph
  std::optional<CommunityComparison> community_similarity;  // with a communities_control
  PhaseTimes timings;
};

// The pass spec of `transformer`'s checkpoint: the options' boundaries, correlations, and the Jacobian sums at the
// options' positions when coupling, all of the model with the options' ablations. Throws Error on bad positions or
// ablations.
PassSpec topology_pass_spec(const Transformer& transformer, const TopologyOptions& options);

// Throws Error naming `path` when a sample holds a token id outside the model's vocabulary.
void check_sample_ids(const std::vector<Sample>& samples, const ModelConfig& config, const std::string& path);

// The analysis of the checkpoint `model` (loaded from `path`, called `label`) from `pass`, a finished pass of
// topology_pass_spec (or a superset of it). Throws Error on bad options, and on a communities_control directory
// whose boundaries are not these.
TopologyResult run_topology(const Model& model, const std::string& path, const std::string& label, const PassFile& pass,
                            const TopologyOptions& options, ProgressSink& progress);

// An MPI worker rank's side of a run_topology that rank 0 runs with options.ranks_share_coupling: its share of the
// coupling's layers, whose J̄ and boundary scores rank 0 sends. It reads no pass and writes nothing.
void take_coupling_share(const TopologyOptions& options);

// A short name for a checkpoint (figure titles, results.json): the file stem, or the directory name for Hugging Face
// directories and files called "model.*"; with `taken`, made unique among those and added to them.
std::string checkpoint_label(const fs::path& path, std::vector<std::string>* taken = nullptr);

// Depth coordinate of a boundary for tables and plots: l for the input of layer l, l + 0.5 for its pre-MLP
// stream, L after the last layer.
double depth_of(const ResidualBoundary& boundary);

// The q-quantile of `values` (linear interpolation), NaN left out; NaN when nothing is left.
double quantile(std::vector<double> values, double q);

// results.json's "options" of the analysis (the samples and pass are the caller's).
nlohmann::json options_json(const TopologyResult& result, const TopologyOptions& options);

// results.json's "results": samples, tokens, the boundaries, the coupling and the community similarity.
nlohmann::json results_json(const TopologyResult& result);

}  // namespace tdyn
