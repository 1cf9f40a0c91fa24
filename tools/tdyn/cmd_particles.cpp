// tdyn particles: simulate self-attention as an interacting particle system (Geshkovski et al. 2023, SPEC §4)
// and write trajectories, attention matrices, diagnostics and figures to a results directory (SPEC §5).
#include <cmath>
#include <memory>

#include "analysis/particles.h"
#include "analysis/particles_diagnostics.h"
#include "analysis/particles_presets.h"
#include "command.h"
#include "report/figure.h"
#include "report/results.h"

namespace tdyn::cli {
namespace {

using namespace tdyn::particles;

struct ParticlesArgs {
  std::string out_dir;
  std::string preset_name = "polytope";
  ExperimentSpec spec;  // overrides; applied on top of the preset for the flags that were given
  SimulationOptions sim;
  DiagnosticOptions diag;
  std::string integrator = "euler", variable = "x", cluster_on = "z";
  std::vector<double> attention_times;
  std::map<std::string, CLI::Option*> given;
};

// Copies a flag's value into the preset's spec only when the user gave it.
template <typename T>
void override_if_given(const ParticlesArgs& a, const std::string& flag, T& field, const T& value) {
  if (a.given.at(flag)->count() > 0) field = value;
}

Shape stacked_shape(size_t count, const Matrix& m) { return {static_cast<int64_t>(count), m.rows(), m.cols()}; }

std::vector<double> stack(const std::vector<Matrix>& ms) {
  std::vector<double> out;
  for (const auto& m : ms) out.insert(out.end(), m.data(), m.data() + m.size());
  return out;
}

// 2-D coordinates for the trajectory figure: the plane itself (d = 2), time vs position (d = 1), an oblique view
// (d = 3), or the top two principal axes of the final tokens (d > 3).
Matrix plot_axes(const Trajectory& tr, std::string* xlabel, std::string* ylabel) {
  const int64_t d = tr.z.front().cols();
  if (d == 2) {
    *xlabel = "z_1", *ylabel = "z_2";
    return Matrix::Identity(2, 2);
  }
  if (d == 3) {
    // Azimuth 35°, elevation 25°: a fixed oblique view, the same at every time.
    const double az = 35 * M_PI / 180, el = 25 * M_PI / 180;
    Matrix view(3, 2);
    view << std::cos(az), -std::sin(az) * std::sin(el), std::sin(az), std::cos(az) * std::sin(el), 0, std::cos(el);
    *xlabel = "oblique view of (z_1, z_2, z_3), horizontal", *ylabel = "vertical";
    return view;
  }
  const Matrix& z = tr.z.back();
  Matrix centred = z.rowwise() - z.colwise().mean();
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(Eigen::MatrixXd(centred), Eigen::ComputeThinV);
  *xlabel = "z on principal axis 1 of z(T)", *ylabel = "principal axis 2";
  return Matrix(svd.matrixV().leftCols(2));
}

void write_figures(ResultsDir& out, const Experiment& e, const Trajectory& tr, const ParticleDiagnostics& diag,
                   const std::vector<size_t>& attention_indices, std::vector<std::string>* notes) {
  auto emit = [&](const Figure& fig, const std::string& what) {
    FigureFiles files = write_figure(out.path(), fig);
    for (const auto& f : files.written) out.record_file(f, what);
    if (!files.note.empty()) notes->push_back(files.note);
  };
  const int64_t n = tr.z.front().rows(), d = tr.z.front().cols();
  const size_t saves = tr.times.size();

  // Trajectories of the rescaled tokens, with snapshots at four times as in the paper's figures.
  {
    Figure fig{"trajectories", "rescaled tokens z_i(t) = R(t)^-1 x_i(t), R^-1 = " + tr.rescaling(), "", "", {"unset key"}, {}, 720, 640};
    if (d == 1) {
      fig.xlabel = "t", fig.ylabel = "z";
      for (int64_t i = 0; i < n; ++i) {
        Series s{"", {{}, {}}, "lines lc rgb '#1f77b4'"};
        for (size_t k = 0; k < saves; ++k) s.columns[0].push_back(tr.times[k]), s.columns[1].push_back(tr.z[k](i, 0));
        fig.series.push_back(s);
      }
    } else {
      const Matrix axes = plot_axes(tr, &fig.xlabel, &fig.ylabel);  // (d × 2)
      fig.settings = {"set key outside right", "set size ratio -1"};
      for (int64_t i = 0; i < n; ++i) {
        Series s{"", {{}, {}}, "lines lc rgb '#c0c0c0'"};
        for (size_t k = 0; k < saves; ++k) {
          Eigen::RowVector2d p = tr.z[k].row(i) * axes;
          s.columns[0].push_back(p[0]), s.columns[1].push_back(p[1]);
        }
        fig.series.push_back(s);
      }
      const char* colours[] = {"#2ca02c", "#ff7f0e", "#9467bd", "#d62728"};
      for (int q = 0; q < 4; ++q) {
        const size_t k = (saves - 1) * q / 3;
        Series s{fmt::format("t = {:.3g}", tr.times[k]), {{}, {}}, fmt::format("points pt 7 ps 0.8 lc rgb '{}'", colours[q])};
        Matrix p = tr.z[k] * axes;
        for (int64_t i = 0; i < n; ++i) s.columns[0].push_back(p(i, 0)), s.columns[1].push_back(p(i, 1));
        fig.series.push_back(s);
      }
    }
    emit(fig, "figure: trajectories of the rescaled tokens with snapshots");
  }

  const auto& s = diag.series;
  {
    Figure fig{"clusters", "number of clusters of z over time", "t", "clusters", {}, {{"clusters", {s.time, {}}, "linespoints pt 7 ps 0.5"}}};
    for (int c : s.clusters) fig.series[0].columns[1].push_back(c);
    if (!s.top_levels.empty()) {
      Series levels{"levels of phi1*(z)", {s.time, {}}, "linespoints pt 6 ps 0.5"};
      for (int l : s.top_levels) levels.columns[1].push_back(l);
      fig.series.push_back(levels);
    }
    emit(fig, "figure: cluster count (and phi1 level count) vs time");
  }
  {
    Figure fig{"rank_P", "numerical rank of P(t) and leaders", "t", "rank", {}, {}};
    Series rank{"rank P", {s.time, {}}, "linespoints pt 7 ps 0.5"}, leaders{"leaders (rank of nearest 0/1 matrix)", {s.time, {}}, "lines dt 2"};
    for (size_t k = 0; k < s.time.size(); ++k) rank.columns[1].push_back(s.rank_P[k]), leaders.columns[1].push_back(s.leaders[k]);
    fig.series = {rank, leaders};
    emit(fig, "figure: rank of P vs time");
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
    emit(fig, "figure: distance of P to Boolean and to uniform vs time");
  }
  for (size_t k : attention_indices) {
    const Matrix P = attention_matrix(e.system.head, tr.x[k]);
    Figure fig{fmt::format("attention_t{:.4g}", tr.times[k]), fmt::format("P at t = {:.4g}", tr.times[k]), "key token j",
               "query token i", {"unset key", "set yrange [*:*] reverse", "set size ratio -1", "set cbrange [0:1]"}, {}};
    Series img{"", {{}, {}, {}}, "image"};
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < n; ++i) img.columns[0].push_back(j), img.columns[1].push_back(i), img.columns[2].push_back(P(i, j));
    fig.series = {img};
    emit(fig, "figure: attention matrix heatmap");
  }
  const auto& f = diag.final;
  for (size_t k = 0; k < f.directions.size(); ++k) {
    if (!f.directions[k].is_top) continue;
    Vector values = tr.z.back() * f.directions[k].left;
    const double lo = values.minCoeff(), hi = values.maxCoeff();
    const int bins = 50;
    const double width = hi > lo ? (hi - lo) / bins : 1.0;
    Series h{"tokens", {{}, {}}, "boxes fill solid 0.6"};
    std::vector<double> counts(bins, 0.0);
    for (int64_t i = 0; i < values.size(); ++i) counts[std::min(bins - 1, static_cast<int>((values[i] - lo) / width))] += 1;
    for (int b = 0; b < bins; ++b) h.columns[0].push_back(lo + (b + 0.5) * width), h.columns[1].push_back(counts[b]);
    Figure fig{"phi1_histogram", fmt::format("phi1*(z_i(T)), lambda1 = {:.4g}: {} levels", f.directions[k].eigenvalue, f.levels[k].count()),
               "phi1*(z)", "tokens", {"unset key", fmt::format("set boxwidth {}", width)}, {h}};
    emit(fig, "figure: histogram of the top left-eigenvector coordinate of the rescaled tokens");
  }
}

int run_particles(ParticlesArgs& a) {
  // The preset supplies every default; the flags the user gave override it.
  ExperimentSpec spec = preset(a.preset_name);
  const ExperimentSpec& o = a.spec;
  override_if_given(a, "--n", spec.n, o.n);
  override_if_given(a, "--d", spec.d, o.d);
  override_if_given(a, "--d-head", spec.d_head, o.d_head);
  override_if_given(a, "--T", spec.t_end, o.t_end);
  override_if_given(a, "--dt", spec.dt, o.dt);
  override_if_given(a, "--seed", spec.seed, o.seed);
  override_if_given(a, "--init", spec.initial, o.initial);
  override_if_given(a, "--query", spec.query, o.query);
  override_if_given(a, "--key", spec.key, o.key);
  override_if_given(a, "--value", spec.value, o.value);
  override_if_given(a, "--output", spec.output, o.output);
  override_if_given(a, "--ffn", spec.ffn, o.ffn);
  override_if_given(a, "--ffn-hidden", spec.d_ff, o.d_ff);
  override_if_given(a, "--ffn-in", spec.ffn_in, o.ffn_in);
  override_if_given(a, "--ffn-out", spec.ffn_out, o.ffn_out);
  override_if_given(a, "--ffn-b-in", spec.ffn_b_in, o.ffn_b_in);
  override_if_given(a, "--ffn-b-out", spec.ffn_b_out, o.ffn_b_out);
  override_if_given(a, "--sphere", spec.sphere, o.sphere);
  SimulationOptions sim = a.sim;
  sim.t_end = spec.t_end;
  sim.dt = spec.dt;
  sim.integrator = parse_integrator(a.integrator);
  sim.variable = parse_state_variable(a.variable);
  DiagnosticOptions diag_options = a.diag;
  diag_options.cluster_on = parse_state_variable(a.cluster_on);
  step_count(sim.t_end, sim.dt);  // validates T and Δt before any work

  ResultsDir out(a.out_dir, "particles", invocation());
  Experiment experiment = [&] {
    PhaseTimer timer(out, "build");
    return build(spec);
  }();
  const int64_t n = experiment.x0.rows(), d = experiment.x0.cols();
  out.model() = {{"source", "synthetic"}, {"preset", spec.preset}, {"description", spec.description}};
  out.options() = {{"preset", spec.preset},
                   {"n", n},
                   {"d", d},
                   {"d_head", experiment.system.head.query.rows()},
                   {"T", sim.t_end},
                   {"dt", sim.dt},
                   {"seed", spec.seed},
                   {"init", spec.initial},
                   {"query", spec.query},
                   {"key", spec.key},
                   {"value", spec.value},
                   {"output", spec.output.empty() ? "none" : spec.output},
                   {"ffn", spec.ffn},
                   {"sphere", spec.sphere},
                   {"integrator", to_string(sim.integrator)},
                   {"integrate", to_string(sim.variable)},
                   {"atol", sim.abs_tol},
                   {"rtol", sim.rel_tol},
                   {"save_every", sim.save_every},
                   {"diagnose_every", diag_options.every},
                   {"cluster_on", to_string(diag_options.cluster_on)},
                   {"cluster_tol", diag_options.cluster_tol},
                   {"level_tol", diag_options.level_tol},
                   {"hull_tol", diag_options.hull_tol},
                   {"rank_tol", diag_options.rank_tol},
                   {"softmax", "log-sum-exp"},
                   {"precision", "float64"}};
  if (spec.ffn != "none")
    out.options()["ffn_weights"] = {{"hidden", experiment.system.ffn->w_in.rows()}, {"in", spec.ffn_in}, {"out", spec.ffn_out},
                                    {"b_in", spec.ffn_b_in}, {"b_out", spec.ffn_b_out}};

  Trajectory trajectory = [&] {
    PhaseTimer timer(out, "simulate");
    return simulate(experiment.system, experiment.x0, sim);
  }();
  ParticleDiagnostics diagnostics = [&] {
    PhaseTimer timer(out, "diagnose");
    return diagnose(experiment.system, trajectory, diag_options);
  }();

  PhaseTimer write_timer(out, "write");
  const auto& head = experiment.system.head;
  out.npy("x0.npy", experiment.x0.data(), {n, d}, "initial tokens (n, d)");
  out.npy("Q.npy", head.query.data(), {head.query.rows(), d}, "query matrix Q (d_head, d)");
  out.npy("K.npy", head.key.data(), {head.key.rows(), d}, "key matrix K (d_head, d)");
  const Matrix W = head.value_map();
  out.npy("V.npy", W.data(), {d, d}, "value map W = O V actually used (d, d)");
  const size_t saves = trajectory.times.size();
  out.npy("t.npy", trajectory.times.data(), {static_cast<int64_t>(saves)}, "saved times (saves)");
  std::vector<double> xs = stack(trajectory.x), zs = stack(trajectory.z);
  out.npy("x.npy", xs.data(), stacked_shape(saves, experiment.x0), "tokens x_i(t) (saves, n, d)");
  out.npy("z.npy", zs.data(), stacked_shape(saves, experiment.x0), "rescaled tokens z_i(t) = R(t)^-1 x_i(t), R = " + trajectory.rescaling() + " inverted (saves, n, d)");

  // Attention matrices at the requested times (nearest saved time); default 0, T/2, T.
  std::vector<double> wanted = a.attention_times.empty() ? std::vector<double>{0.0, sim.t_end / 2, sim.t_end} : a.attention_times;
  std::vector<size_t> attention_indices;
  for (double t : wanted) {
    if (t < 0 || t > sim.t_end + 1e-12) fail("--attention-times: {} is outside [0, T = {}]", t, sim.t_end);
    size_t best = 0;
    for (size_t k = 0; k < saves; ++k)
      if (std::abs(trajectory.times[k] - t) < std::abs(trajectory.times[best] - t)) best = k;
    if (std::find(attention_indices.begin(), attention_indices.end(), best) == attention_indices.end()) attention_indices.push_back(best);
  }
  std::vector<Matrix> attention;
  std::vector<double> attention_times;
  for (size_t k : attention_indices) {
    attention.push_back(attention_matrix(head, trajectory.x[k]));
    attention_times.push_back(trajectory.times[k]);
  }
  std::vector<double> ps = stack(attention);
  out.npy("P.npy", ps.data(), {static_cast<int64_t>(attention.size()), n, n}, "attention matrices P (times, n, n) at P_times.npy");
  out.npy("P_times.npy", attention_times.data(), {static_cast<int64_t>(attention_times.size())}, "times of P.npy");

  const auto& s = diagnostics.series;
  std::vector<std::vector<double>> rows;
  for (size_t k = 0; k < s.time.size(); ++k)
    rows.push_back({s.time[k], double(s.clusters[k]), double(s.rank_P[k]), s.boolean_distance[k], double(s.leaders[k]),
                    s.uniform_distance[k], s.max_norm_x[k], s.top_levels.empty() ? NAN : double(s.top_levels[k])});
  out.csv("diagnostics.csv", {"t", "clusters", "rank_P", "boolean_distance", "leaders", "uniform_distance", "max_norm_x", "phi1_levels"},
          rows, "diagnostics over time");

  std::vector<std::string> notes;
  write_figures(out, experiment, trajectory, diagnostics, attention_indices, &notes);
  out.results() = to_json(diagnostics);
  out.results()["integration"] = {{"steps", trajectory.steps},
                                  {"velocity_evaluations", trajectory.velocity_evaluations},
                                  {"rescaling_z_from_x", trajectory.rescaling()}};
  if (!notes.empty()) out.results()["figure_notes"] = notes;
  out.write();

  const auto& f = diagnostics.final;
  fmt::print("{}: n = {}, d = {}, T = {}, {} ({} steps)\n", spec.preset, n, d, sim.t_end, to_string(sim.integrator), trajectory.steps);
  fmt::print("  clusters of {} at T: {}; rank P(T) = {}; distance to 0/1 = {:.3g}; leaders = {}\n", to_string(diag_options.cluster_on),
             f.clusters.count(), f.rank_P, f.boolean.max_distance, fmt::join(f.boolean.leaders, " "));
  for (size_t k = 0; k < std::min<size_t>(f.directions.size(), 3); ++k)
    fmt::print("  lambda = {:.6g}{}: {} levels of phi*(z)\n", f.directions[k].eigenvalue, f.directions[k].is_top ? " (top)" : "",
               f.levels[k].count());
  if (f.polytope_dim > 0)
    fmt::print("  polytope in the top eigenspace (dim {}): {} limits, {} tokens at a hull vertex or 0, {} elsewhere\n",
               f.polytope_dim, f.polytope_limits.rows(), n - f.tokens_elsewhere, f.tokens_elsewhere);
  fmt::print("  max |x_i(T)| = {:.3g}; max |P - 1/n| = {:.3g}\n  results: {}\n", f.max_norm_x, f.uniform_distance,
             out.file("results.json").string());
  return 0;
}

std::function<int()> setup_particles(CLI::App& app) {
  auto a = std::make_shared<ParticlesArgs>();
  auto* cmd = app.add_subcommand(
      "particles",
      "Simulate self-attention as interacting particles (Geshkovski, Letrouit, Polyanskiy, Rigollet 2023):\n"
      "  dx_i/dt = sum_j P_ij V x_j,  P_ij = softmax_j <Q x_i, K x_j>  (log-sum-exp, float64),\n"
      "and track clusters, polytope vertices, hyperplanes (levels of phi1*(z)), rank and Boolean-ness of P, leaders.\n"
      "A preset sets every default; any flag given overrides it. Matrices are generators or .npy files.");
  auto& s = a->spec;
  auto add = [&](const std::string& flag, auto& field, const std::string& help) {
    a->given[flag] = cmd->add_option(flag, field, help);
  };
  cmd->add_option("--out", a->out_dir, "Results directory (created; results.json, .npy, .csv, figures)")->required();
  cmd->add_option("--preset", a->preset_name,
                  "Experiment of the paper to start from: " + preset_list() +
                      ". polytope: V = I, Q = K = I, n = 20, d = 2, T = 5 (Theorem 2.1); hyperplanes: the paper's 2x2 V "
                      "(Theorem 3.1); codim-k: symmetric V with mixed signs (d = 3); polytope-x-subspace: V = I but "
                      "V[d-1,d-1] = -0.5; leaders: d = 1, V = MM^T, Q^T K = NN^T; lowrank: n = 40, d = 80; high-dim: "
                      "n = d = 128, sparse symmetric V; collapse: V = -I")
      ->capture_default_str();
  add("--n", s.n, "Number of tokens n (default from the preset; 20 in the paper's low-dimensional figures)");
  add("--d", s.d, "Token dimension d (default from the preset)");
  add("--d-head", s.d_head, "Rows of Q and K (they need not be square); 0 = d");
  add("--T", s.t_end, "Final time T (the paper runs T = 5 to 10)");
  add("--dt", s.dt, "Time step; the paper's discrete transformer uses 0.1. For dopri5 it is the output grid spacing");
  add("--seed", s.seed, "Seed of every random generator (initial tokens and matrices use separate streams)");
  add("--init", s.initial, "Initial tokens: uniform:a (U[-a,a]^d; the paper's choice is uniform:5), gaussian:s, sphere, or an (n, d) .npy");
  add("--query", s.query, "Q (d_head x d): identity, gaussian[:s], diag:..., or .npy (see docs/particles.md for all generators)");
  add("--key", s.key, "K (d_head x d): same (K = Q, so Q^T K is positive semi-definite as the theorems assume), or any Q spec");
  add("--value", s.value,
      "V (d x d, or d_value x d with --output): identity, minus-identity, psd[:s] (M M^T scaled to spectral radius s), hyperplanes, identity-last:c, "
      "sym-mixed:k, sparse-sym[:density], gaussian[:s], diag:a,b,..., or .npy");
  add("--output", s.output, "Optional output matrix O (d x d_value): the tokens move by W = O V; a .npy file or generator");
  add("--ffn", s.ffn, "Feed-forward term added to the velocity, W_out s(W_in x + b_in) + b_out: none, relu or tanh (the paper's MLP experiments)");
  add("--ffn-hidden", s.d_ff, "FFN hidden width; 0 = d");
  add("--ffn-in", s.ffn_in, "FFN W_in (hidden x d): generator or .npy");
  add("--ffn-out", s.ffn_out, "FFN W_out (d x hidden): generator or .npy");
  add("--ffn-b-in", s.ffn_b_in, "FFN bias b_in (hidden) as .npy; default none");
  add("--ffn-b-out", s.ffn_b_out, "FFN bias b_out (d) as .npy; default none");
  a->given["--sphere"] = cmd->add_flag("--sphere", s.sphere,
                                       "Keep tokens on the unit sphere (LayerNorm idealisation): tangent projection of the "
                                       "velocity and renormalisation after each step");
  cmd->add_option("--integrator", a->integrator,
                  "euler (P frozen per step: the discrete transformer x^{k+1} = x^k + dt sum_j P_ij V x_j the authors ran), "
                  "rk4 (classic, P re-evaluated per stage), or dopri5 (adaptive Dormand-Prince 5(4))")
      ->capture_default_str();
  cmd->add_option("--integrate", a->variable, "Variables the integrator advances: x, or z = e^{-tV} x (the rescaled system)")
      ->capture_default_str();
  cmd->add_option("--atol", a->sim.abs_tol, "dopri5 absolute tolerance")->capture_default_str();
  cmd->add_option("--rtol", a->sim.rel_tol, "dopri5 relative tolerance")->capture_default_str();
  cmd->add_option("--save-every", a->sim.save_every, "Keep every k-th step in x.npy/z.npy (the last one always)")->capture_default_str();
  cmd->add_option("--diagnose-every", a->diag.every, "Diagnose every k-th saved time (the last one always)")->capture_default_str();
  cmd->add_option("--cluster-on", a->cluster_on, "Cluster the rescaled tokens z (where the theorems' limits live) or x")->capture_default_str();
  cmd->add_option("--cluster-tol", a->diag.cluster_tol, "Clustering distance, relative to max_i |x_i(0)| (single linkage)")->capture_default_str();
  cmd->add_option("--level-tol", a->diag.level_tol, "Tolerance for distinct values of phi*(z), relative to max_i |phi*(x_i(0))|")->capture_default_str();
  cmd->add_option("--hull-tol", a->diag.hull_tol, "A limit is a hull vertex when farther than this (relative to max_i |x_i(0)|) from the hull of the others")
      ->capture_default_str();
  cmd->add_option("--rank-tol", a->diag.rank_tol, "Numerical rank of P: singular values above rank_tol * sigma_max")->capture_default_str();
  cmd->add_option("--attention-times", a->attention_times, "Times at which to save P and draw heatmaps (nearest saved time); default 0, T/2, T")
      ->delimiter(',');
  return [a] { return run_particles(*a); };
}

}  // namespace

TDYN_REGISTER_COMMAND("particles", 40, setup_particles);

}  // namespace tdyn::cli
