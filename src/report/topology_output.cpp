#include "report/topology_output.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_number.h"
#include "report/figure.h"

namespace tdyn {
namespace {

void emit(ResultsDir& out, const Figure& fig, const std::string& what, nlohmann::json* notes) {
  if (const std::string note = out.figure(fig, what); !note.empty()) notes->push_back(note);
}

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
             fmt::format("{}: Spearman(participation, gain) per layer; filled = BH-significant at q = {}", label, c.fdr_q),
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

void graph_figure(ResultsDir& out, const ResidualBoundary& boundary, const BoundaryTopology& t,
                  const std::vector<std::pair<double, double>>& xy, const std::string& label, nlohmann::json* notes) {
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

// ---- The comparison of checkpoints ----------------------------------------------------------------------------

void comparison(ResultsDir& out, const std::vector<TopologyCheckpoint>& summaries, nlohmann::json* notes) {
  nlohmann::json list = nlohmann::json::array();
  std::vector<std::vector<double>> rows;
  for (size_t i = 0; i < summaries.size(); ++i) {
    const auto& s = summaries[i];
    list.push_back(s.to_json());
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

// ---- Arrays and tables ---------------------------------------------------------------------------------------

// graph_HOOK.csv per boundary, each after its correlation_HOOK.npy when the correlations were kept.
void write_graphs(ResultsDir& out, const TopologyResult& r) {
  const int64_t d = r.model.at("d_model").get<int64_t>();
  for (size_t b = 0; b < r.boundaries.size(); ++b) {
    const std::string& hook = r.boundaries[b].hook;
    if (!r.correlations.empty())
      out.npy(fmt::format("correlation_{}.npy", hook), r.correlations[b].values.data(), {d, d},
              fmt::format("Pearson correlation of the residual units at {} [d_model, d_model] (NaN: constant unit)", hook));
    topology::write_edge_list_csv(out.file(fmt::format("graph_{}.csv", hook)), r.topology[b].graph);
    out.record_file(fmt::format("graph_{}.csv", hook), fmt::format("signed edge list of {} (source, target, r; 0-based units)", hook));
  }
  if (r.mean_jacobians.empty()) return;
  NpyStream saved(out.file("mean_jacobians.npy"), {static_cast<int64_t>(r.mean_jacobians.size()), d, d});
  for (const linalg::Matrix& j : r.mean_jacobians) saved.append_matrix(j.data(), j.rows(), j.cols());
  saved.finish();
  out.record_file("mean_jacobians.npy", "mean Jacobian of the sublayer map leaving each coupled boundary [layer, d_out, d_in]");
}

void write_boundary_arrays(ResultsDir& out, const TopologyResult& r) {
  const int64_t n_boundaries = static_cast<int64_t>(r.boundaries.size()), d = r.model.at("d_model").get<int64_t>();
  std::vector<int64_t> membership, n_other;
  std::vector<double> participation;
  for (const auto& t : r.topology) {
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
    const auto& t = r.topology[b];
    const auto& p = t.scores.participation;
    const ResidualBoundary& boundary = r.boundaries[b];
    rows.push_back({static_cast<double>(b), depth_of(boundary), static_cast<double>(boundary.layer),
                    static_cast<double>(boundary.sublayer), static_cast<double>(r.n_tokens),
                    static_cast<double>(std::count(t.constant_unit.begin(), t.constant_unit.end(), true)),
                    static_cast<double>(t.graph.edges.size()), static_cast<double>(t.n_positive_edges),
                    static_cast<double>(t.n_negative_edges), static_cast<double>(t.partition.n_communities),
                    static_cast<double>(t.community_sizes.empty() ? 0 : t.community_sizes[0]), t.partition.quality,
                    static_cast<double>(t.partition.passes), static_cast<double>(t.n_bridge_nodes), quantile(p, 0.5),
                    quantile(p, 0.9)});
    for (const auto& s : t.scan)
      scan_rows.push_back({static_cast<double>(b), depth_of(boundary), s.resolution, static_cast<double>(s.n_communities), s.quality, s.nmi_with_main});
  }
  out.csv("boundaries.csv", {"boundary", "depth", "layer", "sublayer", "tokens", "constant_units", "edges", "positive_edges",
                             "negative_edges", "communities", "largest_community", "cpm_quality", "leiden_passes",
                             "bridge_nodes", "participation_median", "participation_q90"},
          rows, "per boundary (hooks in results.json): graph size, communities, CPM quality, boundary nodes");
  if (!scan_rows.empty())
    out.csv("gamma_scan.csv", {"boundary", "depth", "gamma", "communities", "cpm_quality", "nmi_with_main"}, scan_rows,
            "gamma scan: communities, quality and NMI with the main partition per boundary and resolution");
}

void write_coupling_arrays(ResultsDir& out, const TopologyResult& r) {
  const CouplingResult& coupling = r.coupling;
  if (coupling.layers.empty()) return;
  std::vector<std::vector<double>> rows;
  std::vector<double> column_gain, row_gain;
  for (size_t i = 0; i < coupling.layers.size(); ++i) {
    const auto& l = coupling.layers[i];
    const auto& bnd = r.boundaries[r.coupled[i]];
    rows.push_back({static_cast<double>(r.coupled[i]), depth_of(bnd), static_cast<double>(bnd.layer), static_cast<double>(bnd.sublayer),
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
          rows, "per coupled layer: Spearman(participation, log gain) with p-values, BH decisions, operator type of J");
  const int64_t k = static_cast<int64_t>(coupling.layers.size()), d = r.model.at("d_model").get<int64_t>();
  out.npy("log_column_gain.npy", column_gain.data(), {k, d}, "log |J_l e_i| per coupled layer [layer, d_model]");
  out.npy("log_row_gain.npy", row_gain.data(), {k, d}, "log |e_i^T J_l| per coupled layer [layer, d_model]");
}

std::vector<double> coupling_depths(const TopologyResult& r) {
  std::vector<double> depth;
  for (int64_t b : r.coupled) depth.push_back(depth_of(r.boundaries[b]));
  return depth;
}

}  // namespace

void write_topology(ResultsDir& out, const TopologyResult& r, const TopologyOptions& options) {
  for (const auto& [phase, seconds] : r.timings) out.add_timing(phase, seconds);
  out.model() = r.model;
  out.options().merge_patch(options_json(r, options));  // beside what the caller put there (samples, pass)
  nlohmann::json notes = nlohmann::json::array();
  {
    PhaseTimer timer(out, "write");
    write_graphs(out, r);
    write_boundary_arrays(out, r);
    write_coupling_arrays(out, r);
    out.results() = results_json(r);
    depth_figures(out, r.boundaries, r.topology, r.label, &notes);
    if (!r.coupling.layers.empty()) coupling_figure(out, coupling_depths(r), r.coupling, r.label, &notes);
    if (!r.layout.empty()) graph_figure(out, r.boundaries[r.drawn_boundary], r.topology[r.drawn_boundary], r.layout, r.label, &notes);
  }
  out.results()["notes"] = notes;
  out.write();
}

TopologyCheckpoint checkpoint_summary(const TopologyResult& r, const fs::path& results_dir) {
  TopologyCheckpoint s;
  s.label = r.label, s.path = r.path, s.results_dir = results_dir.string();
  s.has_coupling = r.has_coupling;
  s.significant_row_gain = r.coupling.n_significant_row;
  for (size_t b = 0; b < r.boundaries.size(); ++b) {
    s.depth.push_back(depth_of(r.boundaries[b]));
    s.n_communities.push_back(r.topology[b].partition.n_communities);
  }
  s.coupling_depth = coupling_depths(r);
  for (const LayerCoupling& l : r.coupling.layers) {
    s.coupling_rho.push_back(l.column.test.rho);
    s.coupling_significant.push_back(l.column.significant);
    s.coupling_coupled.push_back(l.column.coupled);
  }
  return s;
}

nlohmann::json TopologyCheckpoint::to_json() const {
  const auto count = [](const std::vector<bool>& flags) { return std::count(flags.begin(), flags.end(), true); };
  const nlohmann::json coupling = !has_coupling ? nlohmann::json(nullptr) : nlohmann::json{
      {"significant_layers", count(coupling_significant)}, {"significant_layers_row_gain", significant_row_gain},
      {"coupled_layers", count(coupling_coupled)}, {"rho", finite_or_null(coupling_rho)}, {"significant", coupling_significant},
      {"coupled", coupling_coupled}};
  return {{"label", label}, {"path", path}, {"results_dir", results_dir}, {"communities", n_communities}, {"coupling", coupling}};
}

TopologyCheckpoint TopologyCheckpoint::from_json(const nlohmann::json& j) {
  TopologyCheckpoint s;
  s.label = string_at(j, "label"), s.path = string_at(j, "path"), s.results_dir = string_at(j, "results_dir");
  s.n_communities = integers_at(j, "communities");
  const nlohmann::json& coupling = value_at(j, "coupling");
  s.has_coupling = !coupling.is_null();
  if (!s.has_coupling) return s;
  s.coupling_rho = numbers_at(coupling, "rho");
  s.coupling_significant = booleans_at(coupling, "significant"), s.coupling_coupled = booleans_at(coupling, "coupled");
  s.significant_row_gain = integer_at(coupling, "significant_layers_row_gain");
  if (s.coupling_significant.size() != s.coupling_rho.size() || s.coupling_coupled.size() != s.coupling_rho.size())
    fail("results.json: a checkpoint's coupling lists have {} ρ, {} significant and {} coupled flags", s.coupling_rho.size(),
         s.coupling_significant.size(), s.coupling_coupled.size());
  return s;
}

void write_topology_comparison(ResultsDir& out, const std::vector<TopologyCheckpoint>& checkpoints) {
  nlohmann::json notes = out.results()["notes"];
  comparison(out, checkpoints, &notes);
  out.results()["notes"] = notes;
  out.write();
}

}  // namespace tdyn
