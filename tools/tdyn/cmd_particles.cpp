// tdyn particles: simulate self-attention as an interacting particle system (Geshkovski et al. 2023, SPEC §4)
// and write trajectories, attention matrices, diagnostics and figures to a results directory (SPEC §5).
// The system is a preset with generated matrices, or (--from-model) one head or the whole attention of a real
// layer with the model's own tokens (analysis/particles_bridge.h).
#include <algorithm>
#include <cmath>
#include <memory>

#include "analysis/particles.h"
#include "analysis/particles_bridge.h"
#include "analysis/particles_diagnostics.h"
#include "analysis/particles_presets.h"
#include "cli_util.h"
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
  // --from-model: the checkpoint, the layer and head, and where the tokens come from.
  std::string from_model;
  bool allow_unknown_config_keys = false, no_check_weights = false;
  int64_t layer = 0, head = -1;  // head -1: the whole layer
  SampleArgs tokens;             // --data | --prompt | --ids, --tokenizer; the first sample only
};

bool given(const ParticlesArgs& a, const std::string& flag) { return a.given.at(flag)->count() > 0; }

// Defaults for a real layer: on the sphere (the folded norm gain assumes unit tokens) and long enough to
// cluster (a real head of stories260K clusters between T = 10 and 15; 5 is too short).
ExperimentSpec model_defaults() {
  ExperimentSpec spec;
  spec.preset = "from-model";
  spec.n = 32;
  spec.t_end = 20;
  spec.sphere = true;
  return spec;
}

// The experiment of a real layer, plus results.json's "model" section. --init and --ffn still apply: they are
// made as build() makes them, on a throwaway spec of the model's width.
Experiment build_from_model(const ParticlesArgs& a, const ExperimentSpec& spec, nlohmann::json* model_section) {
  LoadOptions load;
  load.config.allow_unknown_keys = a.allow_unknown_config_keys;
  load.check_finite = !a.no_check_weights;
  const std::shared_ptr<const Model> model = load_model(a.from_model, load);
  const ModelConfig& c = model->config;
  if (spec.n < 1) fail("--n must be at least 1, got {}", spec.n);
  const ModelHeadOptions options{a.layer, a.head, spec.n};
  ModelParticles bridge;
  if (given(a, "--init")) {
    bridge.experiment.system.head = model_attention_head(*model, options, &bridge.record);
    bridge.record["initial_tokens"] = "--init " + spec.initial;
  } else {
    SampleArgs one = a.tokens;
    // An absolute corpus path in results.json, so the run reproduces from any directory.
    if (one.options.data.empty() && one.options.prompt.empty() && one.options.ids.empty())
      one.options.data = fs::absolute(default_corpus()).lexically_normal().string();
    one.options.samples = 1;
    one.options.min_len = 1;
    one.options.max_len = spec.n;
    bridge = model_particles(*model, one.load(a.from_model, c.d_vocab).at(0).ids, options);
    bridge.record["token_source"] = one.options.to_json();
  }
  Experiment& e = bridge.experiment;
  if (given(a, "--init") || spec.ffn != "none") {
    ExperimentSpec extras = spec;
    extras.d = c.d_model;
    extras.d_head = 1;  // the throwaway head: as small as build() allows
    extras.query = "identity", extras.key = "same", extras.value = "identity", extras.output.clear();
    Experiment made = build(extras);
    if (given(a, "--init")) {
      if (made.x0.cols() != c.d_model) fail("--init {}: the tokens have d = {} but the model's d_model is {}", spec.initial, made.x0.cols(), c.d_model);
      e.x0 = std::move(made.x0);
    }
    e.system.ffn = std::move(made.system.ffn);
  }
  e.system.project_to_sphere = spec.sphere;
  *model_section = {{"source", "model"},  {"path", a.from_model},   {"family", c.family}, {"format", c.format},
                    {"d_model", c.d_model}, {"n_layers", c.n_layers}, {"layer", a.layer},
                    {"head", a.head < 0 ? nlohmann::json("all") : nlohmann::json(a.head)}, {"bridge", bridge.record}};
  return std::move(bridge.experiment);
}

// Copies a flag's value into the preset's spec only when the user gave it.
template <typename T>
void override_if_given(const ParticlesArgs& a, const std::string& flag, T& field, const T& value) {
  if (given(a, flag)) field = value;
}

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

void write_figures(ResultsDir& out, const Experiment& e, const Trajectory& tr, const ParticleDiagnostics& diag,
                   const DiagnosticOptions& diag_options, const std::vector<size_t>& attention_indices,
                   std::vector<std::string>* notes) {
  auto emit = [&](const Figure& fig, const std::string& what) {
    FigureFiles files = write_figure(out.path(), fig);
    for (const auto& f : files.written) out.record_file(f, what);
    if (!files.note.empty()) notes->push_back(files.note);
  };
  const int64_t n = tr.z.front().rows(), d = tr.z.front().cols();
  const size_t saves = tr.times.size();

  // Trajectories, with snapshots at four times as in the paper's figures, of the variable that clusters: x on the
  // sphere or with --cluster-on x, the rescaled z otherwise. (z = R(t)^-1 x undoes the linear growth of the
  // unnormalised system; applied to the bounded tokens on the sphere it sends them to 0 or to infinity.)
  {
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
    emit(fig, "figure: trajectories of the " + what + " with snapshots");
  }

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
    emit(fig, "figure: cluster count of " + var + " (and phi1*(z) level count) vs time");
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
    emit(fig, "figure: histogram of phi1*(z_i(T)) (top left eigenvector of V) minus its mean, in units of max_i |phi1*(z_i(0))|");
  }
}

int run_particles(ParticlesArgs& a) {
  // The preset (or a real layer's defaults) supplies every default; the flags the user gave override it.
  const bool from_model = !a.from_model.empty();
  ExperimentSpec spec = from_model ? model_defaults() : preset(a.preset_name);
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
  // On the sphere the tokens themselves cluster; z = e^{-tW} x rescales the unnormalised system only (on the
  // sphere it shrinks to 0, and its cluster count falls whatever the dynamics do).
  diag_options.cluster_on = parse_state_variable(spec.sphere && !given(a, "--cluster-on") ? "x" : a.cluster_on);
  step_count(sim.t_end, sim.dt);  // validates T and Δt before any work

  ResultsDir out(a.out_dir, "particles", invocation());
  nlohmann::json model_section = {{"source", "synthetic"}, {"preset", spec.preset}, {"description", spec.description}};
  Experiment experiment = [&] {
    PhaseTimer timer(out, "build");
    return from_model ? build_from_model(a, spec, &model_section) : build(spec);
  }();
  const int64_t n = experiment.x0.rows(), d = experiment.x0.cols();
  out.model() = model_section;
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
  if (from_model) {
    // The matrices come from the model (described in model.bridge), not from generators.
    const std::string taken = "from the model (model.bridge)";
    out.options()["query"] = taken, out.options()["key"] = taken, out.options()["value"] = taken, out.options()["output"] = taken;
    if (!given(a, "--init")) out.options()["init"] = "model: unit token embeddings (model.bridge)";
    out.options()["from_model"] = {{"path", a.from_model}, {"layer", a.layer}, {"head", a.head < 0 ? nlohmann::json("all") : nlohmann::json(a.head)},
                                   {"allow_unknown_config_keys", a.allow_unknown_config_keys}};
  }
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
  write_figures(out, experiment, trajectory, diagnostics, diag_options, attention_indices, &notes);
  out.results() = to_json(diagnostics);
  out.results()["integration"] = {{"steps", trajectory.steps},
                                  {"velocity_evaluations", trajectory.velocity_evaluations},
                                  {"rescaling_z_from_x", trajectory.rescaling()}};
  if (!notes.empty()) out.results()["figure_notes"] = notes;
  out.write();

  const auto& f = diagnostics.final;
  const std::string name = from_model ? fmt::format("{} layer {} {}", a.from_model, a.layer, a.head < 0 ? "(all heads)" : fmt::format("head {}", a.head))
                                      : spec.preset;
  fmt::print("{}: n = {}, d = {}, T = {}, {} ({} steps)\n", name, n, d, sim.t_end, to_string(sim.integrator), trajectory.steps);
  fmt::print("  clusters of {} at T: {}; rank P(T) = {}; distance to 0/1 = {:.3g}; leaders = {}\n", to_string(diag_options.cluster_on),
             f.clusters.count(), f.rank_P, f.boolean.max_distance, fmt::join(f.boolean.leaders, " "));
  for (size_t k = 0; k < std::min<size_t>(f.directions.size(), 3); ++k)
    fmt::print("  lambda = {:.6g}{}: {} levels of phi*(z)\n", f.directions[k].eigenvalue, f.directions[k].is_top ? " (top)" : "",
               f.levels[k].count());
  if (f.polytope_dim > 0)
    fmt::print("  polytope in the top eigenspace (dim {}): {} limits, {} tokens at a hull vertex or 0, {} elsewhere\n",
               f.polytope_dim, f.polytope_limits.rows(), n - f.tokens_elsewhere, f.tokens_elsewhere);
  for (const auto& v : diagnostics.verdicts)
    fmt::print("  {} ({}): {} = {:.4g} at T, {:.4g} at t = 0 -> {}\n", v.claim, v.theorem, v.measure, v.value, v.control, v.verdict);
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
      "A preset sets every default; any flag given overrides it. Matrices are generators or .npy files.\n"
      "--from-model MODEL --layer L [--head H] simulates a real layer instead: Q, K, V, O of head H (or of the whole\n"
      "layer, its heads stacked: scores summed over heads, W = O V = the layer matrix F) with the pre-attention norm\n"
      "gain sqrt(d) g and the attention scale folded in, starting from the unit token embeddings of the first --n\n"
      "tokens of --prompt/--ids/--data (default: the first WikiText-2 passage drawn). Defaults then: --sphere,\n"
      "--T 20, --cluster-on x, n = 32. RoPE, the causal mask and the MLP are left out (docs/particles.md).");
  auto& s = a->spec;
  auto add = [&](const std::string& flag, auto& field, const std::string& help) {
    a->given[flag] = cmd->add_option(flag, field, help);
  };
  cmd->add_option("--out", a->out_dir, "Results directory (created; results.json, .npy, .csv, figures)")->required();
  auto* preset_option =
      cmd->add_option("--preset", a->preset_name,
                      "Experiment of the paper to start from: " + preset_list() +
                          ". polytope: V = I, Q = K = I, n = 20, d = 2, T = 5 (Theorem 2.1); hyperplanes: the paper's 2x2 V "
                          "(Theorem 3.1); codim-k: symmetric V with mixed signs (d = 3); polytope-x-subspace: V = I but "
                          "V[d-1,d-1] = -0.5; leaders: d = 1, V = MM^T, Q^T K = NN^T; lowrank: n = 40, d = 80; high-dim: "
                          "n = d = 128, sparse symmetric V; collapse: V = -I")
          ->capture_default_str();
  add("--n", s.n, "Number of tokens n (default from the preset; 20 in the paper's low-dimensional figures; with --from-model the "
                  "first n tokens of the sample, default 32)");
  add("--d", s.d, "Token dimension d (default from the preset)");
  add("--d-head", s.d_head, "Rows of Q and K (they need not be square); 0 = d");
  add("--T", s.t_end, "Final time T (the paper runs T = 5 to 10; default 20 with --from-model)");
  add("--dt", s.dt, "Time step; the paper's discrete transformer uses 0.1. For dopri5 it is the output grid spacing");
  add("--seed", s.seed, "Seed of every random generator (initial tokens and matrices use separate streams; with --from-model the random "
                        "unit tokens of a model whose embeddings are narrower than d_model)");
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
  a->given["--sphere"] = cmd->add_flag("--sphere,!--no-sphere", s.sphere,
                                       "Keep tokens on the unit sphere (LayerNorm idealisation): tangent projection of the "
                                       "velocity and renormalisation after each step (on by default with --from-model; "
                                       "--no-sphere turns it off)");
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
  a->given["--cluster-on"] =
      cmd->add_option("--cluster-on", a->cluster_on, "Cluster the rescaled tokens z (where the theorems' limits live) or x (default with --sphere and --from-model: "
                                                     "on the sphere the tokens themselves cluster)")
          ->capture_default_str();
  cmd->add_option("--cluster-tol", a->diag.cluster_tol, "Clustering distance, relative to max_i |x_i(0)| (single linkage)")->capture_default_str();
  cmd->add_option("--level-tol", a->diag.level_tol, "Tolerance for distinct values of phi*(z), relative to max_i |phi*(x_i(0))|")->capture_default_str();
  cmd->add_option("--hull-tol", a->diag.hull_tol, "A limit is a hull vertex when farther than this (relative to max_i |x_i(0)|) from the hull of the others")
      ->capture_default_str();
  cmd->add_option("--rank-tol", a->diag.rank_tol, "Numerical rank of P: singular values above rank_tol * sigma_max")->capture_default_str();
  cmd->add_option("--attention-times", a->attention_times, "Times at which to save P and draw heatmaps (nearest saved time); default 0, T/2, T")
      ->delimiter(',');

  // A real layer instead of a preset.
  auto* from_model = cmd->add_option("--from-model", a->from_model,
                                     "MODEL: a Hugging Face directory, .gguf or llama2.c .bin; simulate its layer --layer (head --head, "
                                     "or the whole layer)");
  auto* unknown_keys = cmd->add_flag("--allow-unknown-config-keys", a->allow_unknown_config_keys,
                                     "With --from-model: warn about config.json keys tdyn does not know instead of refusing the model");
  auto* no_check = cmd->add_flag("--no-check-weights", a->no_check_weights,
                                 "With --from-model: skip the NaN/Inf check of every weight at load");
  auto* layer = cmd->add_option("--layer", a->layer, "With --from-model: the layer (0-based)")->capture_default_str()->check(CLI::NonNegativeNumber);
  auto* head = cmd->add_option("--head", a->head,
                               "With --from-model: one head (0-based); default: the whole layer, its heads stacked into one (scores "
                               "summed over heads, one softmax; W = O V = the layer matrix F times the norm gain)")
                   ->check(CLI::NonNegativeNumber);
  SampleOptions& t = a->tokens.options;
  auto* data = cmd->add_option("--data", t.data,
                               "With --from-model: the tokens' source, a text file of passages (default: ../shared/data/wikitext-2/"
                               "wiki.test.raw), a .npy of ids or a .ids file; the first sample drawn is used");
  auto* prompt = cmd->add_option("--prompt", t.prompt, "With --from-model: the tokens as text (the model's tokenizer, special tokens added)");
  auto* ids = cmd->add_option("--ids", t.ids, "With --from-model: the tokens as comma-separated ids");
  auto* tokenizer = cmd->add_option("--tokenizer", a->tokens.tokenizer, "With --from-model: tokenizer file (default: the one shipped with MODEL)");
  data->excludes(prompt)->excludes(ids);
  prompt->excludes(ids);
  for (auto* source : {data, prompt, ids, tokenizer}) source->excludes(a->given.at("--init"));  // --init replaces the model's tokens
  for (auto* option : {unknown_keys, no_check, layer, head, data, prompt, ids, tokenizer}) option->needs(from_model);
  // The model supplies the matrices and the width.
  for (const char* flag : {"--query", "--key", "--value", "--output", "--d", "--d-head"}) from_model->excludes(a->given.at(flag));
  from_model->excludes(preset_option);
  return [a] { return run_particles(*a); };
}

}  // namespace

TDYN_REGISTER_COMMAND("particles", 40, setup_particles);

}  // namespace tdyn::cli
