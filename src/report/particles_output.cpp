#include "report/particles_output.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <Eigen/SVD>

#include "report/figure.h"

namespace tdyn::particles {
namespace {

Shape stacked_shape(size_t count, const Matrix& m) { return {static_cast<int64_t>(count), m.rows(), m.cols()}; }

std::vector<double> stack(const std::vector<Matrix>& ms) {
  std::vector<double> out;
  for (const auto& m : ms) out.insert(out.end(), m.data(), m.data() + m.size());
  return out;
}

// 2-D coordinates for the trajectory figure of the tokens `v` (x or z, named `var`): the plane itself (d = 2),
// time vs position (d = 1), an oblique view (d = 3), or the top two principal axes of the final tokens (d > 3),
// where the clusters are. When the final tokens have met in one point (every one within `collapsed` of their
// mean) those axes are rounding noise, and the axes of the whole trajectory, all saved times together, are used.
Matrix plot_axes(const std::vector<Matrix>& v, const std::string& var, double collapsed, std::string* xlabel, std::string* ylabel) {
  const int64_t d = v.front().cols();
  if (d == 2) {
    *xlabel = var + "_1", *ylabel = var + "_2";
    return Matrix::Identity(2, 2);
  }
  if (d == 3) {
    // Azimuth 35°, elevation 25°: a fixed oblique view, the same at every time.
    const double az = 35 * M_PI / 180, el = 25 * M_PI / 180;
    Matrix view(3, 2);
    view << std::cos(az), -std::sin(az) * std::sin(el), std::sin(az), std::cos(az) * std::sin(el), 0, std::cos(el);
    *xlabel = fmt::format("oblique view of ({0}_1, {0}_2, {0}_3), horizontal", var), *ylabel = "vertical";
    return view;
  }
  Matrix points = v.back();
  *xlabel = fmt::format("{0} on principal axis 1 of {0}(T)", var);
  if ((points.rowwise() - points.colwise().mean()).rowwise().norm().maxCoeff() <= collapsed) {
    const int64_t n = points.rows();
    points.resize(static_cast<int64_t>(v.size()) * n, d);
    for (size_t k = 0; k < v.size(); ++k) points.middleRows(static_cast<int64_t>(k) * n, n) = v[k];
    *xlabel = fmt::format("{0} on principal axis 1 of all {0}(t) ({0}(T) is one point)", var);
  }
  const Matrix centred = points.rowwise() - points.colwise().mean();
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(Eigen::MatrixXd(centred), Eigen::ComputeThinV);
  *ylabel = "principal axis 2";
  return Matrix(svd.matrixV().leftCols(2));
}

// A figure into `out`; why it was not rendered goes to `notes`.
void emit_figure(ResultsDir& out, std::vector<std::string>* notes, const Figure& fig, const std::string& what) {
  if (const std::string note = out.figure(fig, what); !note.empty()) notes->push_back(note);
}

// Trajectories, with snapshots at four times as in the paper's figures, of the variable that clusters: x on the
// sphere or with --cluster-on x, the rescaled z otherwise. (z = R(t)^-1 x undoes the linear growth of the
// unnormalised system; applied to the bounded tokens on the sphere it sends them to 0 or to infinity.)
void trajectory_figure(ResultsDir& out, const Experiment& e, const Trajectory& tr, const ParticleDiagnostics& diag,
                       const DiagnosticOptions& diag_options, std::vector<std::string>* notes) {
  const int64_t n = tr.z.front().rows(), d = tr.z.front().cols();
  const size_t saves = tr.times.size();
  const bool plot_x = e.system.project_to_sphere || diag_options.cluster_on == StateVariable::x;
  const std::vector<Matrix>& v = plot_x ? tr.x : tr.z;
  const std::string var = plot_x ? "x" : "z";
  const std::string what = plot_x ? std::string(e.system.project_to_sphere ? "tokens x_i(t) on the unit sphere" : "tokens x_i(t)")
                                  : "rescaled tokens z_i(t) = R(t)^-1 x_i(t), R^-1 = " + tr.rescaling();
  Figure fig{"trajectories", what, "", "", {"unset key"}, {}, 720, 640};
  if (d == 1) {
    fig.xlabel = "t", fig.ylabel = var;
    for (int64_t i = 0; i < n; ++i) {
      Series s{"", {{}, {}}, "lines lc rgb '#1f77b4'"};
      for (size_t k = 0; k < saves; ++k) s.columns[0].push_back(tr.times[k]), s.columns[1].push_back(v[k](i, 0));
      fig.series.push_back(s);
    }
  } else {
    const Matrix axes = plot_axes(v, var, diag_options.cluster_tol * diag.final.scale, &fig.xlabel, &fig.ylabel);  // (d × 2)
    fig.settings = {"set key outside right", "set size ratio -1"};
    for (int64_t i = 0; i < n; ++i) {
      Series s{"", {{}, {}}, "lines lc rgb '#c0c0c0'"};
      for (size_t k = 0; k < saves; ++k) {
        Eigen::RowVector2d p = v[k].row(i) * axes;
        s.columns[0].push_back(p[0]), s.columns[1].push_back(p[1]);
      }
      fig.series.push_back(s);
    }
    const char* colours[] = {"#2ca02c", "#ff7f0e", "#9467bd", "#d62728"};
    for (int q = 0; q < 4; ++q) {
      const size_t k = (saves - 1) * q / 3;
      Series s{fmt::format("t = {:.3g}", tr.times[k]), {{}, {}}, fmt::format("points pt 7 ps 0.8 lc rgb '{}'", colours[q])};
      Matrix p = v[k] * axes;
      for (int64_t i = 0; i < n; ++i) s.columns[0].push_back(p(i, 0)), s.columns[1].push_back(p(i, 1));
      fig.series.push_back(s);
    }
  }
  emit_figure(out, notes, fig, "figure: trajectories of the " + what + " with snapshots");
}

// The diagnostics' series over time: cluster count, rank of P, distance of P to Boolean and to uniform.
void series_figures(ResultsDir& out, const ParticleDiagnostics& diag, const DiagnosticOptions& diag_options,
                    std::vector<std::string>* notes) {
  const auto& s = diag.series;
  {
    const std::string var = to_string(diag_options.cluster_on);
    Figure fig{"clusters", "number of clusters of " + var + " over time", "t", "clusters", {},
               {{"clusters of " + var, {s.time, {}}, "linespoints pt 7 ps 0.5"}}};
    for (int c : s.clusters) fig.series[0].columns[1].push_back(c);
    if (!s.top_levels.empty()) {
      Series levels{"levels of phi1*(z)", {s.time, {}}, "linespoints pt 6 ps 0.5"};
      for (int l : s.top_levels) levels.columns[1].push_back(l);
      fig.series.push_back(levels);
    }
    emit_figure(out, notes, fig, "figure: cluster count of " + var + " (and phi1*(z) level count) vs time");
  }
  {
    Figure fig{"rank_P", "numerical rank of P(t) and leaders", "t", "rank", {}, {}};
    Series rank{"rank P", {s.time, {}}, "linespoints pt 7 ps 0.5"}, leaders{"leaders (rank of nearest 0/1 matrix)", {s.time, {}}, "lines dt 2"};
    for (size_t k = 0; k < s.time.size(); ++k) rank.columns[1].push_back(s.rank_P[k]), leaders.columns[1].push_back(s.leaders[k]);
    fig.series = {rank, leaders};
    emit_figure(out, notes, fig, "figure: rank of P vs time");
  }
  {
    Figure fig{"boolean_distance", "distance of P(t) to the nearest 0/1 matrix and to uniform", "t", "max-entry distance",
               {"set logscale y", "set format y '%.0e'"}, {}};
    Series b{"to nearest 0/1 matrix", {{}, {}}}, u{"to uniform 1/n", {{}, {}}};
    for (size_t k = 0; k < s.time.size(); ++k) {
      // Log scale: exact zeros are drawn at 1e-300 rather than dropped.
      b.columns[0].push_back(s.time[k]), b.columns[1].push_back(std::max(s.boolean_distance[k], 1e-300));
      u.columns[0].push_back(s.time[k]), u.columns[1].push_back(std::max(s.uniform_distance[k], 1e-300));
    }
    fig.series = {b, u};
    emit_figure(out, notes, fig, "figure: distance of P to Boolean and to uniform vs time");
  }
}

// P(t) as a heatmap at each of the chosen times.
void attention_figures(ResultsDir& out, const Experiment& e, const Trajectory& tr, const std::vector<size_t>& attention_indices,
                       std::vector<std::string>* notes) {
  const int64_t n = tr.z.front().rows();
  for (size_t k : attention_indices) {
    const Matrix P = attention_matrix(e.system.head, tr.x[k]);
    Figure fig{fmt::format("attention_t{:.4g}", tr.times[k]), fmt::format("P at t = {:.4g}", tr.times[k]), "key token j",
               "query token i", {"unset key", "set yrange [*:*] reverse", "set size ratio -1", "set cbrange [0:1]"}, {}};
    Series img{"", {{}, {}, {}}, "image"};
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < n; ++i) img.columns[0].push_back(j), img.columns[1].push_back(i), img.columns[2].push_back(P(i, j));
    fig.series = {img};
    emit_figure(out, notes, fig, "figure: attention matrix heatmap");
  }
}

// The histogram of φ1*(z_i(T)) for each top left eigenvector of V: its levels are the clusters the paper predicts.
void phi1_histograms(ResultsDir& out, const Trajectory& tr, const ParticleDiagnostics& diag, const DiagnosticOptions& diag_options,
                     std::vector<std::string>* notes) {
  const auto& f = diag.final;
  for (size_t k = 0; k < f.directions.size(); ++k) {
    if (!f.directions[k].is_top) continue;
    // φ1*(z_i(T)) as the diagnostics compute it (from x, with the scalar rescaling factor), relative to its mean and
    // in units of max_i |φ1*(z_i(0))|, the unit of --level-tol: absolute values (7.2997e-7 ± 1e-11 on stories260K)
    // give unreadable ticks, and 50 bins over a spread far below the tolerance look like many levels.
    const EigenDirection& top = f.directions[k];
    const Vector values = tr.x.back() * top.left / tr.rescale_factor(top.eigenvalue, tr.times.back());
    const double unit = std::max((tr.x.front() * top.left).cwiseAbs().maxCoeff(), 1e-300);
    const Vector u = (values.array() - values.mean()) / unit;
    if (!u.allFinite()) {
      notes->push_back("phi1_histogram not drawn: phi1*(z_i(T)) is not finite");
      continue;
    }
    const double lo = u.minCoeff(), hi = u.maxCoeff(), spread = hi - lo, tol = diag_options.level_tol;
    // Bins no narrower than a quarter of the tolerance, so that one level is one or two bars; the x range at least
    // ±tolerance around the values.
    double width = std::max(spread / 50, tol / 4);
    if (!(width > 0)) width = 1;  // every value equal and --level-tol 0
    const int bins = std::max(1, static_cast<int>(std::ceil(spread / width)));
    const double first = 0.5 * (lo + hi) - 0.5 * bins * width;
    Series h{"tokens", {{}, {}}, "boxes fill solid 0.6"};
    std::vector<double> counts(bins, 0.0);
    for (int64_t i = 0; i < u.size(); ++i) counts[std::clamp(static_cast<int>((u[i] - first) / width), 0, bins - 1)] += 1;
    for (int b = 0; b < bins; ++b) h.columns[0].push_back(first + (b + 0.5) * width), h.columns[1].push_back(counts[b]);
    const double half = 1.1 * std::max(0.5 * spread + width, tol);
    const int levels = f.levels[k].count();
    const std::string count = levels == 1 && spread <= tol
                                  ? fmt::format("1 level (spread {:.2g} below the tolerance {:.2g})", spread, tol)
                                  : fmt::format("{} level{} (tolerance {:.2g})", levels, levels == 1 ? "" : "s", tol);
    Figure fig{"phi1_histogram", fmt::format("phi1*(z_i(T)), lambda1 = {:.4g}: {}", top.eigenvalue, count),
               "(phi1*(z_i(T)) - mean) / max_i |phi1*(z_i(0))|", "tokens",
               {"unset key", fmt::format("set boxwidth {:.10g}", width),
                fmt::format("set xrange [{:.10g}:{:.10g}]", 0.5 * (lo + hi) - half, 0.5 * (lo + hi) + half), "set yrange [0:*]",
                "set format x '%g'"},
               {h}};
    emit_figure(out, notes, fig,
                "figure: histogram of phi1*(z_i(T)) (top left eigenvector of V) minus its mean, in units of max_i |phi1*(z_i(0))|");
  }
}

void write_figures(ResultsDir& out, const Experiment& e, const Trajectory& tr, const ParticleDiagnostics& diag,
                   const DiagnosticOptions& diag_options, const std::vector<size_t>& attention_indices,
                   std::vector<std::string>* notes) {
  trajectory_figure(out, e, tr, diag, diag_options, notes);
  series_figures(out, diag, diag_options, notes);
  attention_figures(out, e, tr, attention_indices, notes);
  phi1_histograms(out, tr, diag, diag_options, notes);
}

void write_arrays(ResultsDir& out, const ParticlesResult& r) {
  const Experiment& e = r.experiment;
  const Trajectory& tr = r.trajectory;
  const int64_t n = e.x0.rows(), d = e.x0.cols();
  const auto& head = e.system.head;
  out.npy("x0.npy", e.x0.data(), {n, d}, "initial tokens (n, d)");
  out.npy("Q.npy", head.query.data(), {head.query.rows(), d}, "query matrix Q (d_head, d)");
  out.npy("K.npy", head.key.data(), {head.key.rows(), d}, "key matrix K (d_head, d)");
  const Matrix W = head.value_map();
  out.npy("V.npy", W.data(), {d, d}, "value map W = O V actually used (d, d)");
  const size_t saves = tr.times.size();
  out.npy("t.npy", tr.times.data(), {static_cast<int64_t>(saves)}, "saved times (saves)");
  std::vector<double> xs = stack(tr.x), zs = stack(tr.z);
  out.npy("x.npy", xs.data(), stacked_shape(saves, e.x0), "tokens x_i(t) (saves, n, d)");
  out.npy("z.npy", zs.data(), stacked_shape(saves, e.x0), "rescaled tokens z_i(t) = R(t)^-1 x_i(t), R = " + tr.rescaling() + " inverted (saves, n, d)");
  std::vector<double> attention_times;
  for (size_t k : r.attention_indices) attention_times.push_back(tr.times[k]);
  std::vector<double> ps = stack(r.attention);
  out.npy("P.npy", ps.data(), {static_cast<int64_t>(r.attention.size()), n, n}, "attention matrices P (times, n, n) at P_times.npy");
  out.npy("P_times.npy", attention_times.data(), {static_cast<int64_t>(attention_times.size())}, "times of P.npy");

  const auto& s = r.diagnostics.series;
  std::vector<std::vector<double>> rows;
  for (size_t k = 0; k < s.time.size(); ++k)
    rows.push_back({s.time[k], double(s.clusters[k]), double(s.rank_P[k]), s.boolean_distance[k], double(s.leaders[k]),
                    s.uniform_distance[k], s.max_norm_x[k], s.top_levels.empty() ? NAN : double(s.top_levels[k])});
  out.csv("diagnostics.csv", {"t", "clusters", "rank_P", "boolean_distance", "leaders", "uniform_distance", "max_norm_x", "phi1_levels"},
          rows, "diagnostics over time");
}

}  // namespace

void write_particles(ResultsDir& out, const ParticlesResult& r, const ParticlesOptions& options) {
  for (const auto& [phase, seconds] : r.timings) out.add_timing(phase, seconds);
  out.model() = r.model;
  out.options().merge_patch(options_json(r, options));  // beside what the caller put there
  {
    PhaseTimer write_timer(out, "write");
    write_arrays(out, r);
    std::vector<std::string> notes;
    write_figures(out, r.experiment, r.trajectory, r.diagnostics, options.diagnostics, r.attention_indices, &notes);
    out.results() = results_json(r);
    if (!notes.empty()) out.results()["figure_notes"] = notes;
  }
  out.write();
}

}  // namespace tdyn::particles
