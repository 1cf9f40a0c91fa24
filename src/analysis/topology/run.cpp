#include "analysis/topology/run.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "analysis/jacobian/jacobian_sums.h"
#include "analysis/topology/correlation_sums.h"
#include "core/error.h"
#include "core/phase_times.h"
#include "core/files.h"
#include "core/json_number.h"
#include "core/npy.h"
#include "core/ranks.h"
#include "kernels/serial_blas.h"

namespace tdyn {
namespace {

// Graph, communities and boundary nodes of every boundary, from the pass's correlation sums.
void analyse_boundaries(TopologyResult& r, const PassFile& pass, const TopologyOptions& options, ProgressSink& progress) {
  ProgressLoop loop(progress, fmt::format("topology {}: communities", r.label), static_cast<int64_t>(r.boundaries.size()), "boundaries");
  for (const ResidualBoundary& boundary : r.boundaries) {
    topology::CorrelationMatrix correlation = correlation_sums(pass, boundary.hook).correlation();
    r.topology.push_back(analyse_boundary(correlation, options.graph));
    if (options.keep_correlations) r.correlations.push_back(std::move(correlation));
    loop.advance();
  }
}

// The normality of the maps named `maps` from the depths of a jacobian results directory.
std::vector<MapNormality> normality_from(const fs::path& dir, const std::vector<std::string>& maps) {
  const fs::path file = dir / "results.json";
  if (!fs::exists(file)) fail("normality_from {}: no results.json there (a jacobian results directory)", dir.string());
  const nlohmann::json j = nlohmann::json::parse(read_file(file), nullptr, false);
  if (j.is_discarded()) fail("normality_from {}: not valid JSON", file.string());
  const nlohmann::json::json_pointer at("/results/models/0/depths");
  const nlohmann::json* depths = j.is_object() && j.contains(at) ? &j.at(at) : nullptr;
  std::vector<MapNormality> out;
  for (const std::string& map : maps) {
    const nlohmann::json* depth = nullptr;
    if (depths && depths->is_array())
      for (const nlohmann::json& d : *depths)
        if (d.value("name", "") == map) depth = &d;
    if (!depth) fail("normality_from {}: its results.json has no depth {} (a jacobian run of this model's pass)", file.string(), map);
    try {
      const nlohmann::json& mean = depth->at("mean");
      out.push_back({mean.at("frobenius_norm").get<double>(), mean.at("henrici_departure").at("schur_normalized").get<double>(),
                     mean.at("symmetry_index").get<double>(), mean.at("complex_fraction").get<double>()});
    } catch (const nlohmann::json::exception& e) {
      fail("normality_from {}: depth {} lacks its mean's metrics ({})", file.string(), map, e.what());
    }
  }
  return out;
}

// The coupling's layers over the MPI ranks (TopologyOptions::ranks_share_coupling): layer i is rank (i mod N)'s.
// Rank 0 first tells every rank the layer count, d and the batch (as many layers as its threads hold, times the
// ranks), then per batch sends each rank its layers' boundary scores and J̄ (d + d² numbers each), computes its own
// one per thread and receives the others' LayerCoupling. A worker rank passes no `scores` and no `mean_jacobian`, and gets nothing back.
std::vector<LayerCoupling> shared_layer_couplings(const std::vector<std::vector<double>>& scores,
                                                  const std::function<linalg::Matrix(size_t)>& mean_jacobian,
                                                  const CouplingOptions& options) {
  const TaskShare share{ranks().rank, ranks().size};
  std::vector<double> plan;
  if (share.root()) {
    const auto n = static_cast<int64_t>(scores.size());
    const int64_t d = n ? static_cast<int64_t>(scores.front().size()) : 0;
    plan = {static_cast<double>(n), static_cast<double>(d), static_cast<double>(operators_in_flight(d, 5, n) * share.count)};
  }
  broadcast_from_root(plan);
  const auto n_layers = static_cast<int64_t>(plan.at(0)), d = static_cast<int64_t>(plan.at(1)), batch = static_cast<int64_t>(plan.at(2));
  std::vector<LayerCoupling> layers(static_cast<size_t>(n_layers));
  for (int64_t first = 0; first < n_layers; first += batch) {
    const int64_t end = std::min(n_layers, first + batch);
    std::vector<int64_t> mine;
    std::vector<std::vector<double>> inputs;  // of my layers: the scores, then J̄ column-major
    for (int64_t layer = first; layer < end; ++layer) {
      const bool own = share.mine(layer);
      if (own) mine.push_back(layer);
      if (!share.root()) {
        if (own) inputs.push_back(receive_from(0));
        continue;
      }
      std::vector<double> numbers = scores[static_cast<size_t>(layer)];
      const linalg::Matrix j = mean_jacobian(static_cast<size_t>(layer));
      numbers.insert(numbers.end(), j.data(), j.data() + j.size());
      if (own) inputs.push_back(std::move(numbers));
      else send_to(static_cast<int>(share.owner(layer)), numbers);
    }
    parallel_tasks(static_cast<int64_t>(mine.size()), [&](int64_t i) {
      const std::vector<double>& in = inputs[static_cast<size_t>(i)];
      TDYN_CHECK(in.size() == static_cast<size_t>(d + d * d));
      const std::vector<double> score(in.begin(), in.begin() + d);
      const linalg::Matrix j = Eigen::Map<const linalg::Matrix>(in.data() + d, d, d);
      const auto layer = static_cast<size_t>(mine[static_cast<size_t>(i)]);
      layers[layer] = layer_coupling(j, score, layer, options);
    });
    if (!share.root()) {
      for (int64_t layer : mine) {
        std::vector<double> numbers;
        append_numbers(numbers, layers[static_cast<size_t>(layer)]);
        send_to(0, numbers);
      }
      continue;
    }
    for (int64_t layer = first; layer < end; ++layer)
      if (!share.mine(layer)) {
        const std::vector<double> numbers = receive_from(static_cast<int>(share.owner(layer)));
        NumberReader in(numbers, "a rank's layer coupling");
        layers[static_cast<size_t>(layer)] = read_layer_coupling(in);
        in.finish();
      }
  }
  return layers;
}

// Whether the ranks share the coupling's layers (the same answer on every rank: from the options alone).
bool shares_coupling(const TopologyOptions& options) {
  return options.ranks_share_coupling && options.normality_from.empty() && ranks().size > 1;
}

// Coupling of the boundary scores with the gains of the mean Jacobian of the sublayer map leaving each boundary.
void couple(TopologyResult& r, const PassFile& pass, const TopologyOptions& options) {
  std::vector<std::vector<double>> scores;
  std::vector<std::string> maps;
  for (size_t b = 0; b < r.boundaries.size(); ++b)
    if (r.boundaries[b].sublayer >= 0) {
      r.coupled.push_back(static_cast<int64_t>(b));
      scores.push_back(r.topology[b].boundary_score());
      maps.push_back(sublayer_name(r.boundaries[b].sublayer));
    }
  CouplingOptions test = options.coupling_test;
  if (!options.normality_from.empty()) test.known_normality = normality_from(options.normality_from, maps);
  // One J̄ at a time from the pass (d × d each), kept only when asked.
  const auto mean_jacobian = [&](size_t i) {
    linalg::Matrix j = tdyn::mean_jacobian(pass, r.boundaries[r.coupled[i]].hook);
    if (options.keep_jacobians) r.mean_jacobians.push_back(j);
    return j;
  };
  if (!shares_coupling(options)) {
    r.coupling = topology_dynamics_coupling(scores, mean_jacobian, test);
    return;
  }
  check_coupling_options(test, scores.size());
  r.coupling = decide_coupling(shared_layer_couplings(scores, mean_jacobian, test), test);
  r.coupling_ranks = ranks().size;
}

// Partitions [boundary][unit] from a topology directory's membership.npy.
std::vector<std::vector<int64_t>> memberships(const fs::path& file, int64_t n_boundaries) {
  const NpyArray array = read_npy(file);
  if (array.shape.size() != 2 || array.shape[0] != n_boundaries)
    fail("{}: expected [{} boundaries, d_model] community labels", file.string(), n_boundaries);
  const std::vector<int64_t> labels = array.as_int64();
  std::vector<std::vector<int64_t>> out;
  for (int64_t b = 0; b < n_boundaries; ++b) out.emplace_back(labels.begin() + b * array.shape[1], labels.begin() + (b + 1) * array.shape[1]);
  return out;
}

// The boundaries of the control directory's results.json, which must be this run's.
void check_control_boundaries(const TopologyResult& r, const fs::path& control_dir, const nlohmann::json& control) {
  const nlohmann::json* hooks = nullptr;
  if (control.contains("results") && control["results"].is_object() && control["results"].contains("boundaries"))
    hooks = &control["results"]["boundaries"];
  if (!hooks || !hooks->is_array() || hooks->size() != r.boundaries.size())
    fail("communities_control {}: its results.json has no boundaries matching this run's {}", control_dir.string(), r.boundaries.size());
  for (size_t b = 0; b < r.boundaries.size(); ++b)
    if ((*hooks)[b].value("hook", "") != r.boundaries[b].hook)
      fail("communities_control {}: boundary {} is {}, here {}", control_dir.string(), b, (*hooks)[b].value("hook", "?"), r.boundaries[b].hook);
}

// NMI of this run's communities with those of another topology results directory over the same units and
// boundaries, against the null of the control's units shuffled (topology::community_similarity).
CommunityComparison compare_communities(const TopologyResult& r, const TopologyOptions& options) {
  const fs::path control_dir = options.communities_control;
  const nlohmann::json control = nlohmann::json::parse(read_file(control_dir / "results.json"));
  check_control_boundaries(r, control_dir, control);
  const int64_t n = static_cast<int64_t>(r.boundaries.size());
  std::vector<std::vector<int64_t>> own;
  for (const auto& t : r.topology) own.push_back(t.partition.membership);
  CommunityComparison out;
  out.control_dir = control_dir.string();
  out.control_model = control.contains("model") ? control["model"].value("path", "") : "";
  out.independent_draw = options.communities_control_independent;
  out.permutation_seed = options.coupling_test.seed;
  for (const ResidualBoundary& b : r.boundaries) out.hooks.push_back(b.hook);
  out.similarity = topology::community_similarity(own, memberships(control_dir / "membership.npy", n), options.communities_permutations,
                                                  options.coupling_test.seed);
  return out;
}

}  // namespace

nlohmann::json CommunityComparison::to_json() const {
  const topology::CommunitySimilarity& c = similarity;
  nlohmann::json per_boundary = nlohmann::json::array();
  for (size_t b = 0; b < hooks.size(); ++b)
    per_boundary.push_back({{"hook", hooks[b]}, {"nmi", c.nmi[b]}, {"null_mean", c.null_mean[b]}, {"p_permutation", c.p_value[b]}});
  return {{"control_dir", control_dir},
          {"control_model", control_model},
          {"independent_draw", independent_draw},
          {"statistic", "NMI of the communities of the same unit at the same boundary"},
          {"null", "the control's units shuffled at every boundary (community sizes kept)"},
          {"permutations", c.permutations}, {"permutation_seed", permutation_seed},
          {"mean_nmi", c.mean_nmi}, {"null_mean", c.mean_null}, {"p_permutation", c.p_value_mean}, {"boundaries", per_boundary}};
}

CommunityComparison CommunityComparison::from_json(const nlohmann::json& j) {
  CommunityComparison out;
  out.control_dir = string_at(j, "control_dir"), out.control_model = string_at(j, "control_model");
  out.independent_draw = boolean_at(j, "independent_draw");
  out.permutation_seed = static_cast<uint64_t>(number_at(j, "permutation_seed"));
  topology::CommunitySimilarity& c = out.similarity;
  c.permutations = integer_at(j, "permutations");
  c.mean_nmi = number_at(j, "mean_nmi"), c.mean_null = number_at(j, "null_mean"), c.p_value_mean = number_at(j, "p_permutation");
  for (const nlohmann::json& b : list_at(j, "boundaries")) {
    out.hooks.push_back(string_at(b, "hook"));
    c.nmi.push_back(number_at(b, "nmi")), c.null_mean.push_back(number_at(b, "null_mean")), c.p_value.push_back(number_at(b, "p_permutation"));
  }
  return out;
}

namespace {

nlohmann::json test_json(const GainTest& g) {
  return {{"rho", finite_or_null(g.test.rho)}, {"sign", g.sign()}, {"p_parametric", finite_or_null(g.test.p_parametric)},
          {"p_permutation", finite_or_null(g.test.p_permutation)}, {"p_adjusted", g.p_adjusted}, {"significant", g.significant}, {"coupled", g.coupled}};
}

// `sign` is the rho's, not read back.
GainTest gain_test_from_json(const nlohmann::json& j, int64_t n_nodes) {
  GainTest g;
  g.test.n = n_nodes, g.test.rho = number_at(j, "rho"), g.test.p_parametric = number_at(j, "p_parametric");
  g.test.p_permutation = number_at(j, "p_permutation"), g.p_adjusted = number_at(j, "p_adjusted");
  g.significant = boolean_at(j, "significant"), g.coupled = boolean_at(j, "coupled");
  return g;
}

}  // namespace

nlohmann::json TopologyCoupling::to_json() const {
  nlohmann::json layers = nlohmann::json::array(), significant = nlohmann::json::array(), coupled_hooks = nlohmann::json::array();
  for (size_t i = 0; i < maps.size(); ++i) {
    const LayerCoupling& l = test.layers[i];
    layers.push_back({{"boundary", maps[i].boundary}, {"hook", maps[i].hook}, {"map", maps[i].name}, {"nodes", l.n_nodes},
                      {"column_gain", test_json(l.column)}, {"row_gain", test_json(l.row)},
                      {"operator", {{"normalized_departure", l.normalized_departure}, {"symmetry_index", l.symmetry_index},
                                    {"complex_fraction", l.complex_fraction}}}});
    if (l.column.significant) significant.push_back(maps[i].hook);
    if (l.column.coupled) coupled_hooks.push_back(maps[i].hook);
  }
  const topology::SpearmanTest& sign = test.sign_rule;
  return {{"jacobian_pairs", jacobian_pairs}, {"decision_p", test.decision_p}, {"fdr_q", test.fdr_q},
          {"significant_layers", test.n_significant_column}, {"significant_hooks", significant},
          {"significant_layers_row_gain", test.n_significant_row},
          {"coupled_layers", test.n_coupled_column}, {"coupled_hooks", coupled_hooks}, {"min_effect", test.min_effect},
          {"sign_rule", {{"rho", finite_or_null(sign.rho)}, {"layers", sign.n}, {"p_parametric", finite_or_null(sign.p_parametric)},
                         {"p_permutation", finite_or_null(sign.p_permutation)}, {"predicted", "negative"}}},
          {"rho_vs_normalized_departure", finite_or_null(test.rho_vs_departure)},
          {"rho_vs_symmetry_index", finite_or_null(test.rho_vs_symmetry)}, {"layers", layers}};
}

nlohmann::json BoundarySummary::to_json() const {
  nlohmann::json scan = nlohmann::json::array(), quantiles = nlohmann::json::object();
  for (const GammaScanEntry& e : gamma_scan)
    scan.push_back({{"gamma", e.resolution}, {"communities", e.n_communities}, {"cpm_quality", e.quality}, {"nmi_with_main", e.nmi_with_main}});
  for (size_t i = 0; i < participation.size(); ++i) quantiles[kParticipationQuantiles[i].first] = participation[i];
  return {{"index", index}, {"hook", hook}, {"depth", depth}, {"leaving_map", leaving_map}, {"constant_units", constant_units},
          {"edges", edges}, {"positive_edges", positive_edges}, {"negative_edges", negative_edges}, {"communities", communities},
          {"community_sizes", community_sizes}, {"cpm_quality", cpm_quality}, {"leiden_passes", leiden_passes},
          {"bridge_nodes", bridge_nodes}, {"participation", quantiles}, {"gamma_scan", scan}};
}

BoundarySummary BoundarySummary::from_json(const nlohmann::json& j) {
  BoundarySummary s;
  s.index = integer_at(j, "index"), s.hook = string_at(j, "hook"), s.depth = number_at(j, "depth");
  s.leaving_map = string_at(j, "leaving_map"), s.constant_units = integer_at(j, "constant_units");
  s.edges = integer_at(j, "edges"), s.positive_edges = integer_at(j, "positive_edges"), s.negative_edges = integer_at(j, "negative_edges");
  s.communities = integer_at(j, "communities");
  s.community_sizes = integers_at(j, "community_sizes");
  s.cpm_quality = number_at(j, "cpm_quality"), s.leiden_passes = integer_at(j, "leiden_passes"), s.bridge_nodes = integer_at(j, "bridge_nodes");
  const nlohmann::json& quantiles = object_at(j, "participation");
  for (size_t i = 0; i < s.participation.size(); ++i) s.participation[i] = number_at(quantiles, kParticipationQuantiles[i].first);
  for (const nlohmann::json& e : list_at(j, "gamma_scan"))
    s.gamma_scan.push_back({number_at(e, "gamma"), integer_at(e, "communities"), number_at(e, "cpm_quality"), number_at(e, "nmi_with_main")});
  return s;
}

TopologyCoupling TopologyCoupling::from_json(const nlohmann::json& j) {
  TopologyCoupling out;
  out.jacobian_pairs = integer_at(j, "jacobian_pairs");
  CouplingResult& c = out.test;
  c.decision_p = string_at(j, "decision_p"), c.fdr_q = number_at(j, "fdr_q"), c.min_effect = number_at(j, "min_effect");
  c.n_significant_column = integer_at(j, "significant_layers"), c.n_significant_row = integer_at(j, "significant_layers_row_gain");
  c.n_coupled_column = integer_at(j, "coupled_layers");
  const nlohmann::json& sign = object_at(j, "sign_rule");
  c.sign_rule.n = integer_at(sign, "layers"), c.sign_rule.rho = number_at(sign, "rho");
  c.sign_rule.p_parametric = number_at(sign, "p_parametric"), c.sign_rule.p_permutation = number_at(sign, "p_permutation");
  c.rho_vs_departure = number_at(j, "rho_vs_normalized_departure"), c.rho_vs_symmetry = number_at(j, "rho_vs_symmetry_index");
  for (const nlohmann::json& l : list_at(j, "layers")) {
    out.maps.push_back({integer_at(l, "boundary"), string_at(l, "hook"), string_at(l, "map")});
    LayerCoupling& layer = c.layers.emplace_back();
    layer.n_nodes = integer_at(l, "nodes");
    layer.column = gain_test_from_json(object_at(l, "column_gain"), layer.n_nodes);
    layer.row = gain_test_from_json(object_at(l, "row_gain"), layer.n_nodes);
    const nlohmann::json& op = object_at(l, "operator");
    layer.normalized_departure = number_at(op, "normalized_departure"), layer.symmetry_index = number_at(op, "symmetry_index");
    layer.complex_fraction = number_at(op, "complex_fraction");
  }
  return out;
}

namespace {

BoundarySummary summarize_boundary(const TopologyResult& r, size_t b) {
  const BoundaryTopology& t = r.topology[b];
  const ResidualBoundary& boundary = r.boundaries[b];
  BoundarySummary s;
  s.index = static_cast<int64_t>(b), s.hook = boundary.hook, s.depth = depth_of(boundary);
  s.leaving_map = boundary.sublayer >= 0 ? sublayer_name(boundary.sublayer) : "none";
  s.constant_units = std::count(t.constant_unit.begin(), t.constant_unit.end(), true);
  s.edges = static_cast<int64_t>(t.graph.edges.size()), s.positive_edges = t.n_positive_edges, s.negative_edges = t.n_negative_edges;
  s.communities = t.partition.n_communities, s.community_sizes = t.community_sizes, s.cpm_quality = t.partition.quality;
  s.leiden_passes = t.partition.passes, s.bridge_nodes = t.n_bridge_nodes;
  for (size_t i = 0; i < s.participation.size(); ++i)
    s.participation[i] = quantile(t.scores.participation, BoundarySummary::kParticipationQuantiles[i].second);
  s.gamma_scan = t.scan;
  return s;
}

TopologyCoupling named_coupling(const TopologyResult& r) {
  TopologyCoupling out;
  for (int64_t b : r.coupled) out.maps.push_back({b, r.boundaries[b].hook, sublayer_name(r.boundaries[b].sublayer)});
  out.jacobian_pairs = r.n_pairs, out.test = r.coupling;
  return out;
}

}  // namespace

PassSpec topology_pass_spec(const Transformer& transformer, const TopologyOptions& options) {
  PassSpec spec;
  spec.boundaries = residual_boundaries(transformer.config().n_layers, options.boundaries);
  spec.zeroed = ZeroedParts(transformer, options.ablations);
  spec.jacobians = options.coupling;
  spec.positions = PositionSpec::parse(options.positions);
  return spec;
}

void check_sample_ids(const std::vector<Sample>& samples, const ModelConfig& config, const std::string& path) {
  for (const Sample& s : samples)
    for (int32_t id : s.ids)
      if (id < 0 || id >= config.d_vocab) fail("{}: sample token id {} is outside its vocabulary of {}", path, id, config.d_vocab);
}

TopologyResult run_topology(const Model& model, const std::string& path, const std::string& label, const PassFile& pass,
                            const TopologyOptions& options, ProgressSink& progress) {
  const ModelConfig& c = model.config;
  TopologyResult r;
  r.label = label, r.path = path;
  r.boundaries = residual_boundaries(c.n_layers, options.boundaries);
  const int64_t n_boundaries = static_cast<int64_t>(r.boundaries.size());
  r.drawn_boundary = options.draw_boundary >= 0 ? options.draw_boundary : n_boundaries / 2;
  if (r.drawn_boundary >= n_boundaries) fail("draw_boundary {}: there are {} boundaries", r.drawn_boundary, n_boundaries);
  r.model = {{"path", path}, {"label", label}, {"family", c.family}, {"format", c.format}, {"d_model", c.d_model},
             {"n_layers", c.n_layers}, {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"d_vocab", c.d_vocab}};
  r.n_samples = pass.n_samples(), r.n_tokens = pass.n_tokens(), r.n_pairs = pass.n_pairs();
  timed(r.timings, "graphs_and_communities", [&] { analyse_boundaries(r, pass, options, progress); });
  r.has_coupling = options.coupling;
  if (r.has_coupling) timed(r.timings, "coupling", [&] { couple(r, pass, options); });
  if (options.layout)
    timed(r.timings, "graph_layout", [&] { r.layout = graph_layout(r.topology[r.drawn_boundary].graph, options.graph.leiden.seed); });
  if (!options.communities_control.empty())
    timed(r.timings, "community_similarity", [&] { r.community_similarity = compare_communities(r, options); });
  return r;
}

void take_coupling_share(const TopologyOptions& options) {
  TDYN_CHECK(!ranks().root());
  if (options.coupling && shares_coupling(options)) shared_layer_couplings({}, {}, options.coupling_test);
}

std::string checkpoint_label(const fs::path& path, std::vector<std::string>* taken) {
  fs::path p = path;
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  std::string label = fs::is_directory(p) ? p.filename().string()
                      : p.stem() == "model" ? p.parent_path().filename().string()
                                            : p.stem().string();
  if (label.empty()) label = "model";
  if (!taken) return label;
  std::string unique = label;
  for (int n = 2; std::find(taken->begin(), taken->end(), unique) != taken->end(); ++n) unique = fmt::format("{}_{}", label, n);
  taken->push_back(unique);
  return unique;
}

double depth_of(const ResidualBoundary& b) { return b.sublayer < 0 ? b.layer : b.layer + 0.5 * (b.sublayer % 2); }

double quantile(std::vector<double> values, double q) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }), values.end());
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const double position = q * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (position - static_cast<double>(below)) * (values[above] - values[below]);
}

nlohmann::json options_json(const TopologyResult& r, const TopologyOptions& o) {
  nlohmann::json hooks = nlohmann::json::array();
  for (const auto& b : r.boundaries) hooks.push_back(b.hook);
  const auto& leiden = o.graph.leiden;
  const CouplingOptions& test = o.coupling_test;
  return {
      {"boundaries", to_string(o.boundaries)},
      {"boundary_hooks", hooks},
      {"correlation", "Pearson r of the d_model residual units over all tokens of all samples (streaming, float64)"},
      {"graph", o.graph.threshold > 0
                    ? nlohmann::json{{"method", "threshold"}, {"min_abs_r", o.graph.threshold}}
                    : nlohmann::json{{"method", "top_k"}, {"k", o.graph.top_k},
                                     {"rule", "an edge is kept when it is among the k largest |r| of either end; sign kept"}}},
      {"leiden", {{"objective", "signed CPM: Q_CPM(G+; gamma) - Q_CPM(G-; 0)"}, {"gamma", leiden.resolution}, {"seed", leiden.seed},
                  {"beta", leiden.beta}, {"max_passes", leiden.max_passes}}},
      {"gamma_scan", o.graph.gamma_scan},
      {"ablate", to_json(o.ablations)},
      {"boundary_score", "participation coefficient 1 - sum_c (k_ic/k_i)^2 over positive edges (weighted)"},
      {"bridge_rule", "positive edges into >= 2 communities other than the node's own"},
      {"coupling", !o.coupling
                       ? nlohmann::json(false)
                       : nlohmann::json{{"gain", "log |J_l e_i| (column norms of the mean Jacobian of the sublayer map leaving the boundary)"},
                                        {"row_gain", "log |e_i^T J_l| (row norms)"},
                                        {"statistic", "Spearman rho over units; constant units left out"},
                                        {"jacobian_positions", o.positions},
                                        {"jacobian_method", "structured mean over (sample, position) pairs (analysis/jacobian/means.h)"},
                                        {"permutations", test.permutations},
                                        {"permutation_seed", test.seed},
                                        {"permutation_seed_rule", "layer i uses permutation_seed + i"},
                                        {"fdr", "Benjamini-Hochberg across layers"},
                                        {"fdr_q", test.fdr_q},
                                        {"min_effect", test.min_effect},
                                        {"coupled_rule", "BH-significant and |rho| >= min_effect"},
                                        {"normality_from", o.normality_from.empty()
                                                               ? nlohmann::json("each J_l's Schur form, here")
                                                               : nlohmann::json(o.normality_from)},
                                        {"sign_rule", "Spearman over layers of rho with the normalized departure; the paper predicts < 0 "
                                                      "(near-symmetric layers amplify, non-normal ones attenuate); permutation seed "
                                                      "permutation_seed - 1"},
                                        {"decision_p", test.permutations > 0 ? "permutation" : "parametric"},
                                        {"ranks", r.coupling_ranks}}},
      {"save_correlations", o.keep_correlations},
      {"save_jacobians", o.keep_jacobians},
      {"draw_boundary", o.draw_boundary},
      {"layout", o.layout},
      {"communities_control", o.communities_control.empty() ? nlohmann::json(false) : nlohmann::json{
          {"dir", o.communities_control}, {"independent_draw", o.communities_control_independent},
          {"permutations", o.communities_permutations}}},
  };
}

nlohmann::json results_json(const TopologyResult& r) {
  nlohmann::json per_boundary = nlohmann::json::array();
  for (size_t b = 0; b < r.boundaries.size(); ++b) per_boundary.push_back(summarize_boundary(r, b).to_json());
  nlohmann::json results = {{"samples", r.n_samples}, {"tokens", r.n_tokens}, {"boundaries", per_boundary},
                            {"coupling", r.has_coupling ? named_coupling(r).to_json() : nlohmann::json(nullptr)},
                            {"drawn_boundary", r.boundaries[r.drawn_boundary].hook}};
  if (r.community_similarity) results["community_similarity"] = r.community_similarity->to_json();
  return results;
}

}  // namespace tdyn
