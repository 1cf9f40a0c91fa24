// tdyn topology MODEL --out DIR: activation-graph communities, boundary nodes and their coupling to the Jacobian
// gains (the residual-stream paper, SPEC §3 "Topology"), for one checkpoint and optionally others (--compare) and a random
// initialisation of the same architecture (--random-init), the paper's training-vs-architecture comparison.
//
// Layout of DIR: the first MODEL's results at the top (results.json, tables, arrays, figures) plus the
// comparison of all checkpoints (checkpoints.csv, compare_*.svg); every further checkpoint in
// DIR/compare/LABEL/ as a complete results directory of its own.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "analysis/topology/topology_analysis.h"
#include "cli_util.h"
#include "pass_args.h"
#include "command.h"
#include "core/npy.h"
#include "model/init.h"
#include "report/figure.h"
#include "report/progress.h"
#include "report/results.h"

namespace tdyn::cli {
namespace {

struct TopologyArgs {
  ModelArgs model;
  SampleArgs samples;
  PassArgs pass;
  std::string out_dir;
  std::vector<std::string> compare;
  bool random_init = false;
  uint64_t init_seed = 0;
  std::string boundaries = "sublayers";  // every sublayer map, the MLPs included, is coupled
  GraphOptions graph;
  std::string gamma_scan;
  bool no_coupling = false;
  std::string positions = "last";
  CouplingOptions coupling;
  bool save_correlations = false, save_jacobians = false;
  int64_t draw_boundary = -1;  // −1: the middle boundary
  std::string communities_control;           // a topology results directory whose communities are compared
  bool communities_control_independent = false;  // its model is an independent random draw: no unit is the same unit
  int64_t communities_permutations = 1000;
};

// A short name for a checkpoint: the file stem, or the directory name for HF directories and files called
// "model.*"; made unique among `taken`.
std::string checkpoint_label(const fs::path& path, std::vector<std::string>* taken) {
  fs::path p = path;
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  std::string label = fs::is_directory(p) ? p.filename().string()
                      : p.stem() == "model" ? p.parent_path().filename().string()
                                            : p.stem().string();
  if (label.empty()) label = "model";
  std::string unique = label;
  for (int n = 2; std::find(taken->begin(), taken->end(), unique) != taken->end(); ++n) unique = fmt::format("{}_{}", label, n);
  taken->push_back(unique);
  return unique;
}

void emit(ResultsDir& out, const Figure& fig, const std::string& what, nlohmann::json* notes) {
  FigureFiles files = write_figure(out.path(), fig);
  for (const auto& f : files.written) out.record_file(f, what);
  if (!files.note.empty()) notes->push_back(files.note);
}

// Depth coordinate of a boundary for plots: l for the input of layer l, l + 0.5 for its pre-MLP stream, L after.
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

nlohmann::json test_json(const GainTest& g) {
  auto number = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  return {{"rho", number(g.test.rho)}, {"sign", g.sign()}, {"p_parametric", number(g.test.p_parametric)},
          {"p_permutation", number(g.test.p_permutation)}, {"p_adjusted", g.p_adjusted}, {"significant", g.significant}, {"coupled", g.coupled}};
}

// What one checkpoint's analysis leaves for the comparison.
struct CheckpointSummary {
  std::string label, path, results_dir;
  std::vector<double> depth;
  std::vector<int64_t> n_communities;
  std::vector<double> coupling_depth, coupling_rho;
  std::vector<bool> coupling_significant, coupling_coupled;
  nlohmann::json json;
};

// ---- Figures of one checkpoint --------------------------------------------------------------------------------

void depth_figures(ResultsDir& out, const std::vector<ResidualBoundary>& boundaries, const std::vector<BoundaryTopology>& topo,
                   const std::string& label, nlohmann::json* notes) {
  Figure communities{"communities_vs_depth", fmt::format("{}: signed Leiden CPM communities per boundary", label),
                     "depth (boundary: input of layer l; last = output of the last layer)", "communities",
                     {"set y2tics", "set ytics nomirror", "set y2label 'CPM quality Q'", "set key below", "set offsets 0.25, 0.25, 0, 0"}, {}, 760, 480};
  Series count{"communities", {{}, {}}, "linespoints pt 7"}, quality{"CPM quality (right axis)", {{}, {}}, "linespoints pt 6 dt 2", "1:2 axes x1y2"};
  Figure participation{"participation_vs_depth", fmt::format("{}: participation coefficient per boundary", label), "depth",
                       "participation coefficient", {"set yrange [0:1]", "set boxwidth 0.2", "set key below", "set offsets 0.25, 0.25, 0, 0"}, {}, 760, 480};
  Series boxes{"quartiles, min-max", {{}, {}, {}, {}, {}, {}}, "candlesticks whiskerbars 0.5 fs solid 0.25", "1:3:2:6:5"},
      median{"median", {{}, {}}, "linespoints pt 7 ps 0.6"}, bridges{"fraction of bridge nodes (>= 2 other communities)", {{}, {}}, "linespoints pt 5 dt 2"};
  for (size_t b = 0; b < boundaries.size(); ++b) {
    const double x = depth_of(boundaries[b]);
    const auto& p = topo[b].scores.participation;
    count.columns[0].push_back(x), count.columns[1].push_back(static_cast<double>(topo[b].partition.n_communities));
    quality.columns[0].push_back(x), quality.columns[1].push_back(topo[b].partition.quality);
    const double qs[] = {0, 0.25, 0.5, 0.75, 1};
    boxes.columns[0].push_back(x);
    for (int i = 0; i < 5; ++i) boxes.columns[i + 1].push_back(quantile(p, qs[i]));
    median.columns[0].push_back(x), median.columns[1].push_back(quantile(p, 0.5));
    bridges.columns[0].push_back(x), bridges.columns[1].push_back(static_cast<double>(topo[b].n_bridge_nodes) / static_cast<double>(p.size()));
  }
  communities.series = {count, quality};
  participation.series = {boxes, median, bridges};
  emit(out, communities, "figure: community count and CPM quality vs depth", notes);
  emit(out, participation, "figure: participation-coefficient quantiles and bridge-node fraction vs depth", notes);
}

void coupling_figure(ResultsDir& out, const std::vector<double>& depth, const CouplingResult& c, const std::string& label,
                     nlohmann::json* notes) {
  Figure fig{"coupling_vs_depth",
             fmt::format("{}: Spearman(participation, gain) per layer; filled = BH-significant at q = {}", label, c.column_fdr.q),
             "depth (boundary the sublayer map leaves)", "Spearman rho", {"set yrange [-1:1]", "set key below", "set offsets 0.25, 0.25, 0, 0"}, {}, 760, 480};
  Series column{"rho vs log|J e_i| (column gain)", {{}, {}}, "linespoints pt 6 lc rgb '#1f77b4'"},
      row{"rho vs log|e_i^T J| (row gain)", {{}, {}}, "linespoints pt 4 dt 2 lc rgb '#ff7f0e'"},
      column_sig{"significant (column)", {{}, {}}, "points pt 7 ps 1.6 lc rgb '#1f77b4'"},
      row_sig{"significant (row)", {{}, {}}, "points pt 5 ps 1.4 lc rgb '#ff7f0e'"}, zero{"", {{}, {}}, "lines lc rgb '#888888'"};
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const auto& l = c.layers[i];
    column.columns[0].push_back(depth[i]), column.columns[1].push_back(l.column.test.rho);
    row.columns[0].push_back(depth[i]), row.columns[1].push_back(l.row.test.rho);
    if (l.column.significant) column_sig.columns[0].push_back(depth[i]), column_sig.columns[1].push_back(l.column.test.rho);
    if (l.row.significant) row_sig.columns[0].push_back(depth[i]), row_sig.columns[1].push_back(l.row.test.rho);
    zero.columns[0].push_back(depth[i]), zero.columns[1].push_back(0);
  }
  fig.series = {column, row, zero};
  // gnuplot refuses an empty data block: significance series only when there is something to mark.
  if (!column_sig.columns[0].empty()) fig.series.push_back(column_sig);
  if (!row_sig.columns[0].empty()) fig.series.push_back(row_sig);
  emit(out, fig, "figure: coupling coefficient per layer with BH significance marks", notes);
}

void graph_figure(ResultsDir& out, const ResidualBoundary& boundary, const BoundaryTopology& t, uint64_t seed,
                  const std::string& label, nlohmann::json* notes) {
  const auto xy = graph_layout(t.graph, seed);
  std::vector<std::vector<double>> rows;
  for (int64_t i = 0; i < t.graph.n_nodes; ++i)
    rows.push_back({static_cast<double>(i), xy[i].first, xy[i].second, static_cast<double>(t.partition.membership[i]),
                    t.scores.participation[i], t.scores.bridges_communities[i] ? 1.0 : 0.0});
  out.csv("graph_layout.csv", {"node", "x", "y", "community", "participation", "bridge"}, rows,
          fmt::format("Fruchterman-Reingold positions of the nodes of {} (edges: graph_{}.csv)", boundary.hook, boundary.hook));
  Figure fig{"graph", fmt::format("{}: {} ({} communities; ring = bridge node)", label, boundary.hook, t.partition.n_communities),
             "", "", {"set size ratio -1", "unset xtics", "unset ytics", "unset grid", "unset border", "unset key"}, {}, 720, 720};
  Series positive{"positive edges", {{}, {}, {}, {}}, "vectors nohead lc rgb '#c8c8c8' lw 0.5", "1:2:3:4"},
      negative{"negative edges", {{}, {}, {}, {}}, "vectors nohead lc rgb '#f0b0b0' lw 0.5 dt 3", "1:2:3:4"},
      nodes{"nodes", {{}, {}, {}}, "points pt 7 ps 1.1 lc variable", "1:2:3"}, ring{"bridge nodes", {{}, {}}, "points pt 6 ps 1.8 lc rgb 'black'"};
  for (const auto& e : t.graph.edges) {
    Series& s = e.weight > 0 ? positive : negative;
    s.columns[0].push_back(xy[e.source].first), s.columns[1].push_back(xy[e.source].second);
    s.columns[2].push_back(xy[e.target].first - xy[e.source].first), s.columns[3].push_back(xy[e.target].second - xy[e.source].second);
  }
  for (int64_t i = 0; i < t.graph.n_nodes; ++i) {
    nodes.columns[0].push_back(xy[i].first), nodes.columns[1].push_back(xy[i].second);
    nodes.columns[2].push_back(static_cast<double>(t.partition.membership[i] % 8 + 1));  // gnuplot's 8 distinct line colours
    if (t.scores.bridges_communities[i]) ring.columns[0].push_back(xy[i].first), ring.columns[1].push_back(xy[i].second);
  }
  for (Series* s : {&positive, &negative, &nodes, &ring})
    if (!s->columns[0].empty()) fig.series.push_back(*s);
  emit(out, fig, fmt::format("figure: the graph of {} drawn with communities coloured", boundary.hook), notes);
}

// ---- One checkpoint --------------------------------------------------------------------------------------------

nlohmann::json options_json(const TopologyArgs& a, const std::vector<ResidualBoundary>& boundaries) {
  nlohmann::json samples = a.samples.options.to_json();
  if (a.samples.options.data.empty() && a.samples.options.prompt.empty() && a.samples.options.ids.empty())
    samples["data"] = default_corpus().string();
  nlohmann::json hooks = nlohmann::json::array();
  for (const auto& b : boundaries) hooks.push_back(b.hook);
  const auto& leiden = a.graph.leiden;
  return {
      {"samples", samples},
      {"tokenizer", a.samples.tokenizer.empty() ? "the one shipped with MODEL" : a.samples.tokenizer},
      {"boundaries", a.boundaries},
      {"boundary_hooks", hooks},
      {"pass", pass_options_json(a.pass)},
      {"correlation", "Pearson r of the d_model residual units over all tokens of all samples (streaming, float64)"},
      {"graph", a.graph.threshold > 0
                    ? nlohmann::json{{"method", "threshold"}, {"min_abs_r", a.graph.threshold}}
                    : nlohmann::json{{"method", "top_k"}, {"k", a.graph.top_k},
                                     {"rule", "an edge is kept when it is among the k largest |r| of either end; sign kept"}}},
      {"leiden", {{"objective", "signed CPM: Q_CPM(G+; gamma) - Q_CPM(G-; 0)"}, {"gamma", leiden.resolution}, {"seed", leiden.seed},
                  {"beta", leiden.beta}, {"max_passes", leiden.max_passes}}},
      {"gamma_scan", a.graph.gamma_scan},
      {"boundary_score", "participation coefficient 1 - sum_c (k_ic/k_i)^2 over positive edges (weighted)"},
      {"bridge_rule", "positive edges into >= 2 communities other than the node's own"},
      {"coupling", a.no_coupling
                       ? nlohmann::json(false)
                       : nlohmann::json{{"gain", "log |J_l e_i| (column norms of the mean Jacobian of the sublayer map leaving the boundary)"},
                                        {"row_gain", "log |e_i^T J_l| (row norms)"},
                                        {"statistic", "Spearman rho over units; constant units left out"},
                                        {"jacobian_positions", a.positions},
                                        {"jacobian_method", "structured mean over (sample, position) pairs (analysis/jacobian.h)"},
                                        {"permutations", a.coupling.permutations},
                                        {"permutation_seed", a.coupling.seed},
                                        {"permutation_seed_rule", "layer i uses permutation_seed + i"},
                                        {"fdr", "Benjamini-Hochberg across layers"},
                                        {"fdr_q", a.coupling.fdr_q},
                                        {"min_effect", a.coupling.min_effect},
                                        {"coupled_rule", "BH-significant and |rho| >= min_effect"},
                                        {"sign_rule", "Spearman over layers of rho with the normalized departure; the paper predicts < 0 "
                                                      "(near-symmetric layers amplify, non-normal ones attenuate); permutation seed "
                                                      "permutation_seed - 1"},
                                        {"decision_p", a.coupling.permutations > 0 ? "permutation" : "parametric"}}},
      {"compare", a.compare},
      {"random_init", a.random_init ? nlohmann::json{{"seed", a.init_seed}, {"rule", "Hugging Face _init_weights: N(0, 0.02), norms 1"}}
                                    : nlohmann::json(false)},
      {"save_correlations", a.save_correlations},
      {"save_jacobians", a.save_jacobians},
      {"draw_boundary", a.draw_boundary},
      {"communities_control", a.communities_control.empty() ? nlohmann::json(false) : nlohmann::json{
          {"dir", a.communities_control}, {"independent_draw", a.communities_control_independent},
          {"permutations", a.communities_permutations}}},
  };
}

CheckpointSummary analyse_checkpoint(const TopologyArgs& a, const std::shared_ptr<const Model>& model, const std::string& model_path,
                                     const std::string& label, const std::vector<Sample>& samples, ResultsDir& out) {
  const ModelConfig& c = model->config;
  const int64_t d = c.d_model;
  for (const Sample& s : samples)
    for (int32_t id : s.ids)
      if (id < 0 || id >= c.d_vocab) fail("{}: sample token id {} is outside its vocabulary of {}", model_path, id, c.d_vocab);
  auto transformer = std::make_shared<const Transformer>(model);
  std::unique_ptr<JacobianModel> jacobians;
  if (!a.no_coupling) jacobians = std::make_unique<JacobianModel>(transformer);
  const std::vector<ResidualBoundary> boundaries = residual_boundaries(c.n_layers, parse_boundary_set(a.boundaries));
  const int64_t n_boundaries = static_cast<int64_t>(boundaries.size());
  out.model() = {{"path", model_path}, {"label", label}, {"family", c.family}, {"format", c.format}, {"d_model", d},
                 {"n_layers", c.n_layers}, {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"d_vocab", c.d_vocab}};
  out.options() = options_json(a, boundaries);
  nlohmann::json notes = nlohmann::json::array();

  // ---- One forward pass per sample (or the sums of analyze's pass): correlations (all tokens) and, for the
  // coupling, mean Jacobians.
  PassSpec spec;
  spec.boundaries = boundaries;
  spec.jacobians = jacobians != nullptr;
  spec.positions = PositionSpec::parse(a.positions);
  std::optional<PassFile> pass;
  {
    PhaseTimer timer(out, jacobians ? "forward_correlations_and_jacobians" : "forward_correlations");
    pass = obtain_pass(a.pass, *transformer, jacobians.get(), samples, spec, pass_model_identity(model_path, *model),
                       out.file("pass.tdynpass"), false, fmt::format("topology {}: samples", label));
  }

  // ---- Graph, communities, boundary nodes per boundary.
  std::vector<BoundaryTopology> topo;
  {
    PhaseTimer timer(out, "graphs_and_communities");
    Progress progress(fmt::format("topology {}: communities", label), n_boundaries, "boundaries");
    for (int64_t b = 0; b < n_boundaries; ++b) {
      const topology::CorrelationMatrix r = pass->correlation(boundaries[b].hook).correlation();
      if (a.save_correlations)
        out.npy(fmt::format("correlation_{}.npy", boundaries[b].hook), r.values.data(), {d, d},
                fmt::format("Pearson correlation of the residual units at {} [d_model, d_model] (NaN: constant unit)", boundaries[b].hook));
      topo.push_back(analyse_boundary(r, a.graph));
      topology::write_edge_list_csv(out.file(fmt::format("graph_{}.csv", boundaries[b].hook)), topo.back().graph);
      out.record_file(fmt::format("graph_{}.csv", boundaries[b].hook),
                      fmt::format("signed edge list of {} (source, target, r; 0-based units)", boundaries[b].hook));
      progress.advance();
    }
  }

  // ---- Coupling of boundary scores with the Jacobian gains, over boundaries that a sublayer map leaves.
  std::vector<int64_t> coupled;  // boundary index of every coupling layer
  CouplingResult coupling;
  if (jacobians) {
    PhaseTimer timer(out, "coupling");
    std::vector<std::vector<double>> scores;
    for (int64_t b = 0; b < n_boundaries; ++b)
      if (boundaries[b].sublayer >= 0) {
        coupled.push_back(b);
        scores.push_back(topo[b].boundary_score());
      }
    // One J̄ at a time from the pass, each appended to mean_jacobians.npy when it is saved.
    std::unique_ptr<NpyStream> saved;
    if (a.save_jacobians)
      saved = std::make_unique<NpyStream>(out.file("mean_jacobians.npy"), std::vector<int64_t>{static_cast<int64_t>(coupled.size()), d, d});
    coupling = topology_dynamics_coupling(scores, [&](size_t i) {
      linalg::Matrix j = pass->mean_jacobian(boundaries[coupled[i]].hook);
      if (saved) saved->append_matrix(j.data(), j.rows(), j.cols());
      return j;
    }, a.coupling);
    if (saved) {
      saved->finish();
      out.record_file("mean_jacobians.npy", "mean Jacobian of the sublayer map leaving each coupled boundary [layer, d_out, d_in]");
    }
  }

  // ---- Arrays and tables.
  {
    std::vector<int64_t> membership, n_other;
    std::vector<double> participation;
    for (const auto& t : topo) {
      membership.insert(membership.end(), t.partition.membership.begin(), t.partition.membership.end());
      n_other.insert(n_other.end(), t.scores.n_other_communities.begin(), t.scores.n_other_communities.end());
      participation.insert(participation.end(), t.scores.participation.begin(), t.scores.participation.end());
    }
    out.npy("membership.npy", membership.data(), {n_boundaries, d}, "community of every unit [boundary, d_model] (0 = largest)");
    out.npy("participation.npy", participation.data(), {n_boundaries, d}, "participation coefficient [boundary, d_model]");
    out.npy("n_other_communities.npy", n_other.data(), {n_boundaries, d},
            "other communities reached by positive edges [boundary, d_model]; >= 2: bridge node");
    std::vector<std::vector<double>> rows, scan_rows;
    for (int64_t b = 0; b < n_boundaries; ++b) {
      const auto& t = topo[b];
      const auto& p = t.scores.participation;
      rows.push_back({static_cast<double>(b), depth_of(boundaries[b]), static_cast<double>(boundaries[b].layer),
                      static_cast<double>(boundaries[b].sublayer), static_cast<double>(pass->n_tokens()),
                      static_cast<double>(std::count(t.constant_unit.begin(), t.constant_unit.end(), true)),
                      static_cast<double>(t.graph.edges.size()), static_cast<double>(t.n_positive_edges),
                      static_cast<double>(t.n_negative_edges), static_cast<double>(t.partition.n_communities),
                      static_cast<double>(t.community_sizes.empty() ? 0 : t.community_sizes[0]), t.partition.quality,
                      static_cast<double>(t.partition.passes), static_cast<double>(t.n_bridge_nodes), quantile(p, 0.5),
                      quantile(p, 0.9)});
      for (const auto& s : t.scan)
        scan_rows.push_back({static_cast<double>(b), depth_of(boundaries[b]), s.resolution, static_cast<double>(s.n_communities), s.quality, s.nmi_with_main});
    }
    out.csv("boundaries.csv", {"boundary", "depth", "layer", "sublayer", "tokens", "constant_units", "edges", "positive_edges",
                               "negative_edges", "communities", "largest_community", "cpm_quality", "leiden_passes",
                               "bridge_nodes", "participation_median", "participation_q90"},
            rows, "per boundary (hooks in results.json): graph size, communities, CPM quality, boundary nodes");
    if (!scan_rows.empty())
      out.csv("gamma_scan.csv", {"boundary", "depth", "gamma", "communities", "cpm_quality", "nmi_with_main"}, scan_rows,
              "gamma scan: communities, quality and NMI with the main partition per boundary and resolution");
    if (!coupling.layers.empty()) {
      std::vector<std::vector<double>> crows;
      std::vector<double> column_gain, row_gain;
      for (size_t i = 0; i < coupling.layers.size(); ++i) {
        const auto& l = coupling.layers[i];
        const auto& bnd = boundaries[coupled[i]];
        crows.push_back({static_cast<double>(coupled[i]), depth_of(bnd), static_cast<double>(bnd.layer), static_cast<double>(bnd.sublayer),
                         static_cast<double>(l.n_nodes), l.column.test.rho, l.column.test.p_parametric, l.column.test.p_permutation,
                         l.column.p_adjusted, l.column.significant ? 1.0 : 0.0, l.row.test.rho, l.row.test.p_parametric,
                         l.row.test.p_permutation, l.row.p_adjusted, l.row.significant ? 1.0 : 0.0, l.normalized_departure,
                         l.symmetry_index, l.complex_fraction});
        column_gain.insert(column_gain.end(), l.log_column_gain.begin(), l.log_column_gain.end());
        row_gain.insert(row_gain.end(), l.log_row_gain.begin(), l.log_row_gain.end());
      }
      out.csv("coupling.csv", {"boundary", "depth", "layer", "sublayer", "nodes", "rho", "p_parametric", "p_permutation", "p_adjusted",
                               "significant", "rho_row", "p_parametric_row", "p_permutation_row", "p_adjusted_row", "significant_row",
                               "normalized_departure", "symmetry_index", "complex_fraction"},
              crows, "per coupled layer: Spearman(participation, log gain) with p-values, BH decisions, operator type of J");
      const int64_t k = static_cast<int64_t>(coupling.layers.size());
      out.npy("log_column_gain.npy", column_gain.data(), {k, d}, "log |J_l e_i| per coupled layer [layer, d_model]");
      out.npy("log_row_gain.npy", row_gain.data(), {k, d}, "log |e_i^T J_l| per coupled layer [layer, d_model]");
    }
  }

  // ---- results.json.
  nlohmann::json per_boundary = nlohmann::json::array();
  CheckpointSummary summary{label, model_path, out.path().string()};
  for (int64_t b = 0; b < n_boundaries; ++b) {
    const auto& t = topo[b];
    const auto& p = t.scores.participation;
    nlohmann::json scan = nlohmann::json::array();
    for (const auto& s : t.scan)
      scan.push_back({{"gamma", s.resolution}, {"communities", s.n_communities}, {"cpm_quality", s.quality}, {"nmi_with_main", s.nmi_with_main}});
    per_boundary.push_back({{"index", b}, {"hook", boundaries[b].hook}, {"depth", depth_of(boundaries[b])},
                            {"leaving_map", boundaries[b].sublayer >= 0 ? sublayer_name(boundaries[b].sublayer) : "none"},
                            {"constant_units", std::count(t.constant_unit.begin(), t.constant_unit.end(), true)},
                            {"edges", t.graph.edges.size()}, {"positive_edges", t.n_positive_edges}, {"negative_edges", t.n_negative_edges},
                            {"communities", t.partition.n_communities}, {"community_sizes", t.community_sizes},
                            {"cpm_quality", t.partition.quality}, {"leiden_passes", t.partition.passes},
                            {"bridge_nodes", t.n_bridge_nodes},
                            {"participation", {{"min", quantile(p, 0)}, {"q25", quantile(p, 0.25)}, {"median", quantile(p, 0.5)},
                                               {"q75", quantile(p, 0.75)}, {"q90", quantile(p, 0.9)}, {"max", quantile(p, 1)}}},
                            {"gamma_scan", scan}});
    summary.depth.push_back(depth_of(boundaries[b]));
    summary.n_communities.push_back(t.partition.n_communities);
  }
  out.results()["samples"] = pass->n_samples();
  out.results()["tokens"] = pass->n_tokens();
  out.results()["boundaries"] = per_boundary;
  nlohmann::json coupling_json = nullptr;
  if (jacobians) {
    nlohmann::json layers = nlohmann::json::array(), significant = nlohmann::json::array(), coupled_hooks = nlohmann::json::array();
    for (size_t i = 0; i < coupling.layers.size(); ++i) {
      const auto& l = coupling.layers[i];
      const auto& bnd = boundaries[coupled[i]];
      layers.push_back({{"boundary", coupled[i]}, {"hook", bnd.hook}, {"map", sublayer_name(bnd.sublayer)}, {"nodes", l.n_nodes},
                        {"column_gain", test_json(l.column)}, {"row_gain", test_json(l.row)},
                        {"operator", {{"normalized_departure", l.normalized_departure}, {"symmetry_index", l.symmetry_index},
                                      {"complex_fraction", l.complex_fraction}}}});
      if (l.column.significant) significant.push_back(bnd.hook);
      if (l.column.coupled) coupled_hooks.push_back(bnd.hook);
      summary.coupling_depth.push_back(depth_of(bnd));
      summary.coupling_rho.push_back(l.column.test.rho);
      summary.coupling_significant.push_back(l.column.significant);
      summary.coupling_coupled.push_back(l.column.coupled);
    }
    auto number = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
    coupling_json = {{"jacobian_pairs", pass->n_pairs()}, {"decision_p", coupling.decision_p}, {"fdr_q", a.coupling.fdr_q},
                     {"significant_layers", coupling.n_significant_column}, {"significant_hooks", significant},
                     {"significant_layers_row_gain", coupling.n_significant_row},
                     {"coupled_layers", coupling.n_coupled_column}, {"coupled_hooks", coupled_hooks}, {"min_effect", a.coupling.min_effect},
                     {"sign_rule", {{"rho", number(coupling.sign_rule.rho)}, {"layers", coupling.sign_rule.n},
                                    {"p_parametric", number(coupling.sign_rule.p_parametric)},
                                    {"p_permutation", number(coupling.sign_rule.p_permutation)}, {"predicted", "negative"}}},
                     {"rho_vs_normalized_departure", number(coupling.rho_vs_departure)},
                     {"rho_vs_symmetry_index", number(coupling.rho_vs_symmetry)}, {"layers", layers}};
  }
  out.results()["coupling"] = coupling_json;

  // ---- Figures.
  {
    PhaseTimer timer(out, "figures");
    depth_figures(out, boundaries, topo, label, &notes);
    if (!coupling.layers.empty()) coupling_figure(out, summary.coupling_depth, coupling, label, &notes);
    const int64_t drawn = a.draw_boundary >= 0 ? a.draw_boundary : n_boundaries / 2;
    if (drawn >= n_boundaries) fail("--draw-boundary {}: there are {} boundaries", drawn, n_boundaries);
    graph_figure(out, boundaries[drawn], topo[drawn], a.graph.leiden.seed, label, &notes);
    out.results()["drawn_boundary"] = boundaries[drawn].hook;
  }
  out.results()["notes"] = notes;
  summary.json = {{"label", label}, {"path", model_path}, {"results_dir", out.path().string()},
                  {"communities", summary.n_communities}, {"coupling", coupling_json.is_null() ? nlohmann::json(nullptr) : nlohmann::json{
                      {"significant_layers", coupling.n_significant_column}, {"significant_layers_row_gain", coupling.n_significant_row},
                      {"coupled_layers", coupling.n_coupled_column},
                      {"rho", summary.coupling_rho}}}};
  return summary;
}

// ---- The comparison of checkpoints ----------------------------------------------------------------------------

void comparison(ResultsDir& out, const std::vector<CheckpointSummary>& summaries, nlohmann::json* notes) {
  nlohmann::json list = nlohmann::json::array();
  std::vector<std::vector<double>> rows;
  for (size_t i = 0; i < summaries.size(); ++i) {
    const auto& s = summaries[i];
    list.push_back(s.json);
    const int64_t significant = std::count(s.coupling_significant.begin(), s.coupling_significant.end(), true),
                  coupled = std::count(s.coupling_coupled.begin(), s.coupling_coupled.end(), true);
    double mean_communities = 0;
    for (int64_t n : s.n_communities) mean_communities += static_cast<double>(n) / static_cast<double>(s.n_communities.size());
    rows.push_back({static_cast<double>(i), static_cast<double>(s.n_communities.size()), mean_communities,
                    static_cast<double>(s.coupling_rho.size()), static_cast<double>(significant), static_cast<double>(coupled)});
  }
  out.results()["checkpoints"] = list;
  if (summaries.size() < 2) return;
  out.csv("checkpoints.csv", {"checkpoint", "boundaries", "mean_communities", "tested_layers", "significant_layers", "coupled_layers"}, rows,
          "per checkpoint (labels in results.json 'checkpoints', same order): communities, and layers tested, BH-significant "
          "and coupled (significant with |rho| >= min_effect)");
  Figure communities{"compare_communities", "communities per boundary, per checkpoint", "depth", "communities", {"set key below"}, {}, 760, 480};
  Figure coupling{"compare_coupling", "coupling rho per layer, per checkpoint (filled: BH-significant)", "depth", "Spearman rho",
                  {"set yrange [-1:1]", "set key below"}, {}, 760, 480};
  for (size_t i = 0; i < summaries.size(); ++i) {
    const auto& s = summaries[i];
    const std::string colour = fmt::format("lc {}", i + 1);
    Series n{s.label, {s.depth, {}}, "linespoints pt 7 " + colour};
    for (int64_t v : s.n_communities) n.columns[1].push_back(static_cast<double>(v));
    communities.series.push_back(n);
    if (s.coupling_rho.empty()) continue;
    coupling.series.push_back({s.label, {s.coupling_depth, s.coupling_rho}, "linespoints pt 6 " + colour});
    Series marks{"", {{}, {}}, "points pt 7 ps 1.6 " + colour};
    for (size_t k = 0; k < s.coupling_rho.size(); ++k)
      if (s.coupling_significant[k]) marks.columns[0].push_back(s.coupling_depth[k]), marks.columns[1].push_back(s.coupling_rho[k]);
    if (!marks.columns[0].empty()) coupling.series.push_back(marks);
  }
  emit(out, communities, "figure: community count vs depth for every checkpoint", notes);
  if (!coupling.series.empty()) emit(out, coupling, "figure: coupling rho vs depth for every checkpoint with significance", notes);
}

// Partitions [boundary][unit] from a topology directory's membership.npy and its boundary hooks (results.json).
std::vector<std::vector<int64_t>> memberships(const fs::path& file, int64_t n_boundaries) {
  const NpyArray array = read_npy(file);
  if (array.shape.size() != 2 || array.shape[0] != n_boundaries)
    fail("{}: expected [{} boundaries, d_model] community labels", file.string(), n_boundaries);
  const std::vector<int64_t> labels = array.as_int64();
  std::vector<std::vector<int64_t>> out;
  for (int64_t b = 0; b < n_boundaries; ++b) out.emplace_back(labels.begin() + b * array.shape[1], labels.begin() + (b + 1) * array.shape[1]);
  return out;
}

// --communities-control: NMI of this model's communities with those of another topology results directory over the
// same units and boundaries, against the null of the control's units shuffled (topology::community_similarity).
nlohmann::json compare_communities(const TopologyArgs& a, ResultsDir& out) {
  const fs::path control_dir = a.communities_control;
  const nlohmann::json control = nlohmann::json::parse(read_file(control_dir / "results.json"));
  const nlohmann::json& own_boundaries = out.results().at("boundaries");
  const nlohmann::json* control_boundaries = nullptr;
  if (control.contains("results") && control["results"].is_object() && control["results"].contains("boundaries"))
    control_boundaries = &control["results"]["boundaries"];
  if (!control_boundaries || !control_boundaries->is_array() || control_boundaries->size() != own_boundaries.size())
    fail("--communities-control {}: its results.json has no boundaries matching this run's {}", control_dir.string(), own_boundaries.size());
  for (size_t b = 0; b < own_boundaries.size(); ++b)
    if ((*control_boundaries)[b].value("hook", "") != own_boundaries[b]["hook"].get<std::string>())
      fail("--communities-control {}: boundary {} is {}, here {}", control_dir.string(), b, (*control_boundaries)[b].value("hook", "?"),
           own_boundaries[b]["hook"].get<std::string>());
  const int64_t n = static_cast<int64_t>(own_boundaries.size());
  const topology::CommunitySimilarity c = topology::community_similarity(memberships(out.file("membership.npy"), n),
                                                                         memberships(control_dir / "membership.npy", n),
                                                                         a.communities_permutations, a.coupling.seed);
  nlohmann::json per_boundary = nlohmann::json::array();
  for (int64_t b = 0; b < n; ++b)
    per_boundary.push_back({{"hook", own_boundaries[b]["hook"]}, {"nmi", c.nmi[b]}, {"null_mean", c.null_mean[b]}, {"p_permutation", c.p_value[b]}});
  return {{"control_dir", control_dir.string()},
          {"control_model", control.contains("model") ? control["model"].value("path", "") : ""},
          {"independent_draw", a.communities_control_independent},
          {"statistic", "NMI of the communities of the same unit at the same boundary"},
          {"null", "the control's units shuffled at every boundary (community sizes kept)"},
          {"permutations", c.permutations}, {"permutation_seed", a.coupling.seed},
          {"mean_nmi", c.mean_nmi}, {"null_mean", c.mean_null}, {"p_permutation", c.p_value_mean}, {"boundaries", per_boundary}};
}

// The architecture of `model` as a Hugging Face config for write_random_init: Llama from its config, any other
// family from the config.json of its directory.
nlohmann::json random_init_config(const Model& model, const fs::path& path) {
  if (model.config.family == "llama") return llama_hf_config_json(model.config);
  if (fs::is_directory(path) && fs::exists(path / "config.json")) return nlohmann::json::parse(read_file(path / "config.json"));
  fail("--random-init: {} is a {} checkpoint without a config.json directory; give a Hugging Face directory", path.string(),
       model.config.family);
}

int run_topology(TopologyArgs& a) {
  if (!a.gamma_scan.empty()) a.graph.gamma_scan = parse_double_list(a.gamma_scan, "--gamma-scan");
  PositionSpec::parse(a.positions);  // fail early on a bad --positions
  require_single_rank(!a.compare.empty() || a.random_init, "topology with --compare or --random-init");
  auto model = a.model.load();
  const std::vector<Sample> samples = a.samples.load(a.model.path, model->config.d_vocab);
  ResultsDir out(a.out_dir, "topology", invocation());
  std::vector<std::string> labels;
  std::vector<CheckpointSummary> summaries;
  summaries.push_back(analyse_checkpoint(a, model, a.model.path, checkpoint_label(a.model.path, &labels), samples, out));
  if (!a.communities_control.empty()) out.results()["community_similarity"] = compare_communities(a, out);
  const LoadOptions load_options = a.model.options();
  for (const std::string& path : a.compare) {
    const std::string label = checkpoint_label(path, &labels);
    ResultsDir sub(out.file("compare") / label, "topology", invocation());
    summaries.push_back(analyse_checkpoint(a, load_model(path, load_options), path, label, samples, sub));
    sub.write();
  }
  if (a.random_init) {
    const std::string label = checkpoint_label("random_init", &labels);
    ResultsDir sub(out.file("compare") / label, "topology", invocation());
    const fs::path model_dir = sub.file("model");
    write_random_init(random_init_config(*model, a.model.path), model_dir, a.init_seed);
    sub.record_file("model/config.json", "random initialisation of MODEL's architecture: configuration");
    sub.record_file("model/model.safetensors", fmt::format("random initialisation: weights (seed {})", a.init_seed));
    summaries.push_back(analyse_checkpoint(a, load_model(model_dir), model_dir.string(), label, samples, sub));
    sub.write();
  }
  nlohmann::json notes = out.results()["notes"];
  comparison(out, summaries, &notes);
  out.results()["notes"] = notes;
  out.write();
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("topology", "Activation-graph topology (\"Dynamics of the Transformer Residual Stream: Coupling Spectral Geometry to Network "
                                             "Topology\"): per residual boundary, Pearson correlation "
                                             "graph, signed Leiden CPM communities, boundary nodes, and their coupling with "
                                             "the Jacobian gains (Spearman, BH across layers); --compare / --random-init for "
                                             "training vs architecture");
  auto a = std::make_shared<TopologyArgs>();
  a->model.add_to(cmd);
  a->samples.add_to(cmd, 1000);
  a->pass.add_to(cmd);
  cmd->add_option("--out", a->out_dir, "Results directory")->required();
  cmd->add_option("--compare", a->compare,
                  "Further checkpoints analysed the same way on the same samples (DIR/compare/LABEL; comma-separated "
                  "or repeated; CACHE@REVISION for the steps of a training run)")
      ->delimiter(',');
  cmd->add_flag("--random-init", a->random_init, "Also analyse a random initialisation of MODEL's architecture (the step-0 null model)");
  cmd->add_option("--init-seed", a->init_seed, "Seed of --random-init")->capture_default_str();
  cmd->add_option("--boundaries", a->boundaries, "layers: input of every layer + output of the last; sublayers: also the "
                                                 "pre-MLP stream (hook_resid_mid)")
      ->capture_default_str()->check(CLI::IsMember({"layers", "sublayers"}));
  auto* top_k = cmd->add_option("--top-k", a->graph.top_k, "Keep the k strongest edges (|r|, sign kept) of every unit")
                    ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--threshold", a->graph.threshold, "Instead of --top-k: keep every pair with |r| >= this")
      ->check(CLI::Range(0.0, 1.0))->excludes(top_k);
  cmd->add_option("--gamma", a->graph.leiden.resolution, "CPM resolution of the positive layer")->capture_default_str();
  cmd->add_option("--leiden-seed", a->graph.leiden.seed, "Seed of igraph's Leiden (and of the graph layout)")->capture_default_str();
  cmd->add_option("--gamma-scan", a->gamma_scan, "Comma-separated resolutions also partitioned at every boundary (gamma_scan.csv)");
  cmd->add_flag("--no-coupling", a->no_coupling, "Topology only: no mean Jacobians, no coupling statistics");
  cmd->add_option("--positions", a->positions, "Positions averaged in the mean Jacobians: last, all, or a list like 5,23,-1")
      ->capture_default_str();
  cmd->add_option("--permutations", a->coupling.permutations, "Permutations of each Spearman permutation test (0: parametric p only)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--permutation-seed", a->coupling.seed, "Seed of the permutation tests (layer i: seed + i)")->capture_default_str();
  cmd->add_option("--min-effect", a->coupling.min_effect,
                  "|rho| a BH-significant layer must also reach to count as coupled (with thousands of units tiny rho are significant)")
      ->capture_default_str()->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--fdr-q", a->coupling.fdr_q, "Benjamini-Hochberg level across layers")->capture_default_str()->check(CLI::Range(1e-12, 1.0 - 1e-12));
  cmd->add_flag("--save-correlations", a->save_correlations, "Write every correlation matrix as correlation_HOOK.npy [d, d]");
  cmd->add_flag("--save-jacobians", a->save_jacobians, "Write the mean Jacobians used by the coupling as mean_jacobians.npy");
  cmd->add_option("--communities-control", a->communities_control,
                  "A topology results directory of the same architecture on the same samples (e.g. the same run's step-0 "
                  "checkpoint): NMI of the communities per boundary against its, with a shuffled-unit null "
                  "(results.community_similarity)");
  cmd->add_flag("--communities-control-independent", a->communities_control_independent,
                "The --communities-control model is an independent random draw (tdyn init), so its units are not this model's: "
                "recorded so that the report shows the NMI without judging it");
  cmd->add_option("--communities-permutations", a->communities_permutations, "Shuffles of the --communities-control null")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--draw-boundary", a->draw_boundary, "Boundary index whose graph is drawn (default: the middle one)");
  return [a] { return run_topology(*a); };
}

}  // namespace

TDYN_REGISTER_COMMAND("topology", 60, setup);

}  // namespace tdyn::cli
