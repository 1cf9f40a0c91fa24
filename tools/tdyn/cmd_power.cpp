// tdyn power MODEL --out DIR: the analysis of the power-method paper (Li & Altafini, SPEC §2) — layer matrices
// F_t = O_t V_t and their spectra, token alignment with the dominant eigenvectors over real text, shared-weight
// iteration of one layer, and rank-1 steering of the last layer — written to a results directory (SPEC §5).
#include <charconv>
#include <cmath>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "analysis/power/spectra.h"
#include "analysis/power/pass.h"
#include "cli_util.h"
#include "pass_args.h"
#include "report/progress.h"
#include "command.h"
#include "analysis/power/layers.h"
#include "core/npy.h"
#include "report/figure.h"
#include "report/results.h"
#include "tokenizer/tokenizer.h"

namespace tdyn::cli {
namespace {

struct PowerArgs {
  ModelArgs model;
  SampleArgs samples;
  std::string from_pass;
  std::string out_dir, mode = "full", steer = "random", steer_scales = "0,1,10,100,1000,10000,100000";
  bool no_residual = false, no_iterate = false, no_steer = false, save_matrices = false;
  int64_t iterate_layer = -1, iterate_sample = 0, steer_samples = 8;
  IterationOptions iteration;
  SteeringOptions steering;
  SpectrumOptions spectrum;
  uint64_t steer_seed = 0;
};

std::string piece_of(const Tokenizer* tok, int32_t id) {
  if (!tok) return "";
  try {
    return tok->piece(id);
  } catch (const Error&) {
    return "";
  }
}

nlohmann::json tokens_json(const std::vector<TokenProbability>& tokens, const Tokenizer* tok) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : tokens) out.push_back({{"token", t.token}, {"piece", piece_of(tok, t.token)}, {"probability", t.probability}});
  return out;
}

// --steer: "random" (seeded by --steer-seed), "token:ID" or "token:TEXT" (one token), or a .npy of d_model values.
Vector steering_direction(const PowerArgs& a, const Model& model, const Tokenizer* tok, std::string* description) {
  const int64_t d = model.config.d_model;
  if (a.steer == "random") {
    *description = fmt::format("random Gaussian direction, seed {}", a.steer_seed);
    return random_direction(d, a.steer_seed);
  }
  if (a.steer.rfind("token:", 0) == 0) {
    const std::string spec = a.steer.substr(6);
    int32_t id = 0;
    auto [ptr, ec] = std::from_chars(spec.data(), spec.data() + spec.size(), id);
    if (spec.empty() || ec != std::errc() || ptr != spec.data() + spec.size()) {
      if (!tok) fail("--steer {}: a token given as text needs a tokenizer", a.steer);
      std::vector<int32_t> ids = tok->encode(spec, false);
      if (ids.size() != 1) fail("--steer {}: '{}' is {} tokens, not one", a.steer, spec, ids.size());
      id = ids[0];
    }
    *description = fmt::format("embedding row of token {} '{}'", id, piece_of(tok, id));
    return token_direction(model, id);
  }
  NpyArray array = read_npy(a.steer);
  std::vector<double> values = array.as_double();
  if (static_cast<int64_t>(values.size()) != d)
    fail("--steer {}: expected {} values (d_model), got shape {}", a.steer, d, shape_str(array.shape));
  *description = "direction from " + a.steer;
  return Eigen::Map<Vector>(values.data(), d);
}

void write_complex(ResultsDir& out, const std::string& name, const std::vector<Complex>& values, const Shape& shape,
                   const std::string& what) {
  std::vector<double> interleaved;
  for (const Complex& z : values) interleaved.push_back(z.real()), interleaved.push_back(z.imag());
  write_npy_complex(out.file(name), interleaved.data(), shape);
  out.record_file(name, what);
}

void emit(ResultsDir& out, const Figure& fig, const std::string& what, std::vector<std::string>* notes) {
  FigureFiles files = write_figure(out.path(), fig);
  for (const auto& f : files.written) out.record_file(f, what);
  if (!files.note.empty()) notes->push_back(files.note);
}

void spectrum_figure(ResultsDir& out, const std::vector<LayerSpectrum>& spectra, std::vector<std::string>* notes) {
  Figure fig{"eigenvalues", "eigenvalues of the layer matrices F_t = O_t V_t", "Re lambda", "Im lambda",
             {"set size ratio -1", "set key outside right"}, {}, 760, 640};
  Series circle{"unit circle", {{}, {}}, "lines lc rgb '#888888' dt 2"};
  for (int k = 0; k <= 256; ++k) circle.columns[0].push_back(std::cos(2 * M_PI * k / 256)), circle.columns[1].push_back(std::sin(2 * M_PI * k / 256));
  fig.series.push_back(circle);
  for (const auto& s : spectra) {
    Series points{fmt::format("layer {}", s.layer), {{}, {}}, "points pt 7 ps 0.5"};
    for (Index i = 0; i < s.eigenvalues.size(); ++i)
      points.columns[0].push_back(s.eigenvalues[i].real()), points.columns[1].push_back(s.eigenvalues[i].imag());
    fig.series.push_back(points);
  }
  emit(out, fig, "figure: eigenvalues of every F_t in the complex plane with the unit circle", notes);
}

void dynamics_figure(ResultsDir& out, const TokenDynamics& dyn, std::vector<std::string>* notes) {
  Figure fig{"gamma_rho", fmt::format("alignment with v_1,t per layer (mode {}, {})", to_string(dyn.options.mode),
                                      dyn.options.residual ? "residual" : "no residual"),
             "layer t", "value", {"set yrange [0:1]", "set key outside right"}, {}, 760, 480};
  Series gamma{"gamma_t (F_t)", {{}, {}}, "linespoints pt 7"}, gamma_if{"gamma_t (I + F_t)", {{}, {}}, "linespoints pt 6"},
      rho{"rho_t (F_t)", {{}, {}}, "linespoints pt 5"}, baseline{"random baseline E|cos|", {{}, {}}, "lines dt 2"},
      half{"rho = 0.5", {{}, {}}, "lines dt 3 lc rgb '#888888'"};
  for (const auto& l : dyn.layers) {
    const double t = static_cast<double>(l.layer);
    gamma.columns[0].push_back(t), gamma.columns[1].push_back(l.f.gamma);
    gamma_if.columns[0].push_back(t), gamma_if.columns[1].push_back(l.identity_plus_f.gamma);
    rho.columns[0].push_back(t), rho.columns[1].push_back(l.f.rho);
    baseline.columns[0].push_back(t), baseline.columns[1].push_back(l.f.baseline);
    half.columns[0].push_back(t), half.columns[1].push_back(0.5);
  }
  fig.series = {gamma, gamma_if, rho, baseline, half};
  emit(out, fig, "figure: gamma_t and rho_t vs layer with the random baseline and 1/2", notes);
}

void iteration_figures(ResultsDir& out, const IterationResult& r, std::vector<std::string>* notes) {
  const auto& c = r.curves;
  Figure fig{"iteration_alignment", fmt::format("layer {} iterated: {} ({})", r.layer, to_string(r.regime.regime), r.step_matrix),
             "step", "alignment", {"set yrange [0:1.05]", "set key outside right"}, {}, 760, 480};
  Series mean{"mean a(x; v1 of step matrix)", {{}, {}}}, lowest{"min a(x; v1)", {{}, {}}},
      mean_f{"mean a(x; v1 of F)", {{}, {}}, "lines dt 2"}, span12{"energy in span{v1, v2}", {{}, {}}, "lines dt 3"},
      positive{"fraction with <x, v1> > 0", {{}, {}}, "lines dt 4"};
  for (size_t k = 0; k < c.mean_alignment.size(); ++k) {
    const double step = static_cast<double>(k);
    mean.columns[0].push_back(step), mean.columns[1].push_back(c.mean_alignment[k]);
    lowest.columns[0].push_back(step), lowest.columns[1].push_back(c.min_alignment[k]);
    mean_f.columns[0].push_back(step), mean_f.columns[1].push_back(c.mean_alignment_f[k]);
    span12.columns[0].push_back(step), span12.columns[1].push_back(c.span12_energy[k]);
    positive.columns[0].push_back(step), positive.columns[1].push_back(c.positive_fraction[k]);
  }
  fig.series = {mean, lowest, mean_f, span12, positive};
  if (c.mean_alignment.size() > 20) fig.settings.push_back("set logscale x");
  if (c.mean_alignment.size() > 20) for (auto& s : fig.series) s.columns[0][0] = 0.5;  // step 0 on a log axis
  emit(out, fig, "figure: alignment and subspace energy vs iteration", notes);

  if (!r.step.complex_pair) return;
  Figure plane{"iteration_plane", fmt::format("trajectories in span{{Re v1, Im v1}}: measured {:.4g} vs arg lambda1 {:.4g} rad/step",
                                              r.measured_angle_per_step, r.expected_angle_per_step),
               "Re zeta / |x|", "Im zeta / |x|", {"set size ratio -1", "unset key"}, {}, 640, 640};
  const int64_t n = r.tokens, steps = static_cast<int64_t>(c.mean_alignment.size());
  for (int64_t i = 0; i < std::min<int64_t>(n, 8); ++i) {
    Series s{"", {{}, {}}, "linespoints pt 7 ps 0.3"};
    for (int64_t k = std::max<int64_t>(0, steps - 200); k < steps; ++k)
      s.columns[0].push_back(r.plane_coordinates[(k * n + i) * 2]), s.columns[1].push_back(r.plane_coordinates[(k * n + i) * 2 + 1]);
    plane.series.push_back(s);
  }
  emit(out, plane, "figure: the last 200 steps of 8 tokens in the eigen-coordinates of span{Re v1, Im v1}", notes);
}

void steering_figure(ResultsDir& out, const SteeringResult& s, std::vector<std::string>* notes) {
  Figure fig{"steering_sweep", "rank-1 steering of the last layer", "c / |lambda1|", "value",
             {"set key outside right", "set yrange [0:1.05]"}, {}, 760, 480};
  Series mean{"mean final-layer a(x; u)", {{}, {}}, "linespoints pt 7"}, lowest{"min final-layer a(x; u)", {{}, {}}, "linespoints pt 6"},
      eig{"a(u; v1 of F')", {{}, {}}, "linespoints pt 5"}, ratio{"|lambda2|/|lambda1| of F'", {{}, {}}, "linespoints pt 4"},
      kl{"mean KL(p || p_steered) / max", {{}, {}}, "linespoints pt 3"};
  double max_kl = 0;
  for (const auto& p : s.points) max_kl = std::max(max_kl, p.mean_kl);
  for (const auto& p : s.points) {
    const double x = std::max(p.scale, 1e-2);  // c = 0 drawn at 0.01 on the log axis
    mean.columns[0].push_back(x), mean.columns[1].push_back(p.mean_alignment);
    lowest.columns[0].push_back(x), lowest.columns[1].push_back(p.min_alignment);
    eig.columns[0].push_back(x), eig.columns[1].push_back(p.eigenvector_alignment);
    ratio.columns[0].push_back(x), ratio.columns[1].push_back(p.spectrum.modulus_ratio);
    kl.columns[0].push_back(x), kl.columns[1].push_back(max_kl > 0 ? p.mean_kl / max_kl : 0);
  }
  fig.series = {mean, lowest, eig, ratio, kl};
  fig.settings.push_back("set logscale x");
  emit(out, fig, "figure: steering sweep (alignment, spectral ratio, KL) vs c/|lambda1|", notes);
}

// The power-method paper's claims across layers (power_layers.h): alignment with the own layer's v1 against the other layers', and
// γ_t against the relative spectral gap.
void across_layers(ResultsDir& out, const std::vector<LayerSpectrum>& spectra, const TokenDynamics& dyn, bool shared_weights) {
  const int64_t L = static_cast<int64_t>(spectra.size());
  const CrossLayerAlignment cross = cross_layer_alignment(dyn.cross_alignment);
  const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> row_major = cross.mean;
  out.npy("cross_layer_alignment.npy", row_major.data(), {L, L},
          "mean over tokens of a(x^{t+1}; v_1,s) [t: tokens leaving layer t, s: dominant subspace of F_s]; diagonal = gamma_t");
  nlohmann::json j = cross.to_json();
  // With one stored layer every F_s is the same matrix: nothing to tell the layers' eigenvectors apart.
  j["shared_weights"] = shared_weights;
  out.results()["cross_layer_alignment"] = j;
  std::vector<double> gamma, relative_gap;
  for (int64_t t = 0; t < L; ++t) {
    gamma.push_back(dyn.layers[t].f.gamma);
    relative_gap.push_back(1 - spectra[t].f.modulus_ratio);
  }
  out.results()["gamma_vs_gap"] = gamma_gap_test(gamma, relative_gap).to_json();
}

int run_power(PowerArgs& a) {
  const ProgressFn progress = progress_quiet() ? ProgressFn{} : ProgressFn([](const std::string& line) { std::cerr << "tdyn power: " << line << "\n"; });
  auto model = a.model.load();
  const ModelConfig& c = model->config;
  const Transformer transformer(model);
  DynamicsOptions dynamics{parse_dynamics_mode(a.mode), !a.no_residual};

  ResultsDir out(a.out_dir, "power", invocation());
  out.model() = {{"path", a.model.path}, {"family", c.family}, {"format", c.format}, {"d_model", c.d_model},
                 {"n_layers", c.n_layers}, {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"d_vocab", c.d_vocab},
                 {"stored_layers", c.n_stored_layers()}};
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = a.samples.tokenizer.empty() ? load_tokenizer_for_model(a.model.path) : load_tokenizer(a.samples.tokenizer);
  } catch (const Error&) {
  }
  std::vector<std::string> notes;

  // ---- Layer matrices and spectra
  std::vector<LayerMatrix> matrices;
  std::vector<LayerSpectrum> spectra;
  {
    PhaseTimer timer(out, "spectra");
    for (int64_t l = 0; l < c.n_layers; ++l) {
      matrices.push_back(layer_matrix(*model, l));
      spectra.push_back(layer_spectrum(matrices.back(), a.spectrum));
      for (const std::string& note : spectra.back().notes) {
        notes.push_back(fmt::format("layer {}: {}", l, note));
        if (progress) progress(notes.back());
      }
      if (progress) progress(fmt::format("spectrum of F_{}: |lambda1| = {:.4g}, |lambda2|/|lambda1| = {:.4f}", l,
                                         std::abs(spectra.back().f.lambda1), spectra.back().f.modulus_ratio));
    }
  }
  const int64_t L = c.n_layers, d = c.d_model, k = spectra[0].eigenvalues.size();
  {
    std::vector<Complex> eigenvalues, vectors_f, vectors_if;
    std::vector<double> bias;
    for (const auto& s : spectra) {
      eigenvalues.insert(eigenvalues.end(), s.eigenvalues.data(), s.eigenvalues.data() + s.eigenvalues.size());
      for (const DominantSpectrum* dom : {&s.f, &s.identity_plus_f}) {
        auto& target = dom == &s.f ? vectors_f : vectors_if;
        for (Index i = 0; i < d; ++i)
          target.emplace_back(dom->eigenvector_real[i], dom->complex_pair ? dom->eigenvector_imag[i] : 0.0);
      }
    }
    for (const auto& m : matrices) bias.insert(bias.end(), m.bias.data(), m.bias.data() + d);
    write_complex(out, "eigenvalues.npy", eigenvalues, {L, k}, "eigenvalues of F_t by modulus [layer, k] (complex128)");
    write_complex(out, "dominant_eigenvectors_F.npy", vectors_f, {L, d}, "unit dominant eigenvector v_1,t of F_t [layer, d_model]");
    write_complex(out, "dominant_eigenvectors_I_plus_F.npy", vectors_if, {L, d}, "dominant eigenvector of I + F_t [layer, d_model]");
    out.npy("layer_matrix_bias.npy", bias.data(), {L, d}, "c_t = O_t b_V + b_O [layer, d_model]");
    if (a.save_matrices) {
      std::vector<double> f;
      for (const auto& m : matrices) {
        const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> row_major = m.f;
        f.insert(f.end(), row_major.data(), row_major.data() + row_major.size());
      }
      out.npy("layer_matrices.npy", f.data(), {L, d, d}, "F_t = O_t V_t [layer, d_model, d_model], y = F x");
    }
  }
  spectrum_figure(out, spectra, &notes);

  // ---- Token dynamics over real text
  std::vector<Sample> samples = a.samples.load(a.model.path, c.d_vocab);
  TokenDynamics dyn;
  {
    PhaseTimer timer(out, "token_dynamics");
    if (a.from_pass.empty()) {
      dyn = token_dynamics(transformer, samples, spectra, dynamics, progress);
    } else {
      // The per-token alignments were measured by a shared pass (tdyn analyze): probes at the layer boundaries.
      if (dynamics.mode != DynamicsMode::Full || !dynamics.residual) fail("--from-pass needs --mode full with the residual");
      PassArgs pass;
      pass.from_pass = a.from_pass;
      PassSpec spec;
      spec.correlations = spec.jacobians = false;
      spec.probes = token_dynamics_probes(spectra);
      dyn = token_dynamics_from_pass(obtain_pass(pass, transformer, nullptr, samples, spec, pass_model_identity(a.model.path, *model), {}, false, ""),
                                     samples, c.causal, spectra, d, dynamics);
    }
  }
  {
    std::vector<float> before, after;
    std::vector<int64_t> histogram;
    for (int64_t t = 0; t < L; ++t) {
      before.insert(before.end(), dyn.before[t].begin(), dyn.before[t].end());
      after.insert(after.end(), dyn.after[t].begin(), dyn.after[t].end());
      histogram.insert(histogram.end(), dyn.layers[t].f.histogram.begin(), dyn.layers[t].f.histogram.end());
    }
    out.npy("alignment_before.npy", before.data(), {L, dyn.tokens}, "a(x_i^t; v_1,t) per token [layer, token] (all samples concatenated)");
    out.npy("alignment_after.npy", after.data(), {L, dyn.tokens}, "a(x_i^{t+1}; v_1,t) per token [layer, token]");
    out.npy("alignment_histogram.npy", histogram.data(), {L, kHistogramBins}, "histogram of a(x^{t+1}; v_1,t), 20 bins on [0, 1] [layer, bin]");
    std::vector<std::vector<double>> rows;
    for (int64_t t = 0; t < L; ++t) {
      const LayerSpectrum& s = spectra[t];
      const LayerDynamics& l = dyn.layers[t];
      rows.push_back({static_cast<double>(t), static_cast<double>(s.value_layer), s.f.lambda1.real(), s.f.lambda1.imag(),
                      std::abs(s.f.lambda1), s.f.complex_pair ? 1.0 : 0.0, s.f.modulus_ratio, s.f.gap,
                      s.identity_plus_f.lambda1.real(), s.identity_plus_f.lambda1.imag(), s.identity_plus_f.modulus_ratio,
                      s.identity_plus_f.gap, s.bias_norm, l.f.gamma, l.f.gamma_before, l.f.baseline, l.f.rho, l.f.p_value,
                      l.identity_plus_f.gamma, l.identity_plus_f.rho, l.identity_plus_f.p_value});
    }
    out.csv("layers.csv", {"layer", "value_layer", "lambda1_re", "lambda1_im", "lambda1_abs", "lambda1_complex", "ratio21", "gap",
                           "IF_lambda1_re", "IF_lambda1_im", "IF_ratio21", "IF_gap", "bias_norm", "gamma", "gamma_before",
                           "baseline", "rho", "p_value", "IF_gamma", "IF_rho", "IF_p_value"},
            rows, "per layer: spectrum of F_t and I + F_t, gamma_t, rho_t, binomial p-values");
  }
  dynamics_figure(out, dyn, &notes);
  nlohmann::json layers = nlohmann::json::array();
  for (int64_t t = 0; t < L; ++t) {
    nlohmann::json j = spectra[t].to_json();
    j["dynamics_F"] = dyn.layers[t].f.to_json();
    j["dynamics_I_plus_F"] = dyn.layers[t].identity_plus_f.to_json();
    j["mean_norm_before"] = dyn.layers[t].mean_norm_before;
    j["mean_norm_after"] = dyn.layers[t].mean_norm_after;
    layers.push_back(j);
  }
  out.results()["layers"] = layers;
  out.results()["tokens"] = dyn.tokens;
  out.results()["samples"] = dyn.samples;
  out.results()["random_baseline_approx"] = std::sqrt(2.0 / (M_PI * d));
  across_layers(out, spectra, dyn, c.n_stored_layers() == 1 && L > 1);

  // ---- Shared-weight iteration
  const bool shared_weights = c.n_stored_layers() == 1 && c.n_layers > 1;
  int64_t iterate_layer_index = a.iterate_layer >= 0 ? a.iterate_layer : (shared_weights ? 0 : -1);
  if (a.no_iterate) iterate_layer_index = -1;
  if (iterate_layer_index >= L) fail("--iterate-layer {}: the model has {} layers", iterate_layer_index, L);
  if (a.iterate_sample >= static_cast<int64_t>(samples.size()))
    fail("--iterate-sample {}: only {} samples were loaded", a.iterate_sample, samples.size());
  out.options()["iteration"] = {{"layer", iterate_layer_index >= 0 ? nlohmann::json(iterate_layer_index) : nlohmann::json(nullptr)},
                                {"layer_default", "the shared layer for shared-weight models (ALBERT), else none"},
                                {"sample", a.iterate_sample}, {"steps", a.iteration.steps}, {"threshold", a.iteration.threshold},
                                {"eigenvectors_searched", a.iteration.eigenvectors}, {"perturbation", a.iteration.perturbation},
                                {"bipartite_steps", a.iteration.bipartite_steps > 0 ? a.iteration.bipartite_steps : a.iteration.steps},
                                {"seed", a.iteration.seed}};
  if (iterate_layer_index >= 0) {
    PhaseTimer timer(out, "iteration");
    IterationOptions options = a.iteration;
    options.layer = iterate_layer_index;
    options.dynamics = dynamics;
    IterationResult r = iterate_layer(transformer, samples[a.iterate_sample], matrices[iterate_layer_index], options, progress);
    const int64_t steps = static_cast<int64_t>(r.curves.mean_alignment.size());
    std::vector<std::vector<double>> rows;
    for (int64_t s = 0; s < steps; ++s)
      rows.push_back({static_cast<double>(s), r.curves.mean_alignment[s], r.curves.min_alignment[s], r.curves.mean_alignment_f[s],
                      r.curves.span12_energy[s], r.curves.positive_fraction[s], r.curves.mean_angle_step[s]});
    out.csv("iteration_curves.csv", {"step", "mean_alignment", "min_alignment", "mean_alignment_F", "span12_energy",
                                     "positive_fraction", "mean_angle_step"},
            rows, "per iteration step: alignment with the step matrix's v1, span{v1,v2} energy, sign pattern, angle");
    std::vector<float> per_token(r.alignment_per_token.begin(), r.alignment_per_token.end());
    out.npy("iteration_alignment.npy", per_token.data(), {steps, r.tokens}, "alignment with v1 of the step matrix [step, token]");
    out.npy("iteration_plane.npy", r.plane_coordinates.data(), {steps, r.tokens, 2},
            "eigen-coordinates zeta/|x| in span{Re v1, Im v1} (real v1: <x, v1>/|x|, 0) [step, token, 2]");
    iteration_figures(out, r, &notes);
    out.results()["iteration"] = r.to_json();
    if (progress) progress(fmt::format("layer {} iterated {} steps: {}", r.layer, options.steps, r.regime.description));
  }

  // ---- Steering
  if (!a.no_steer) {
    PhaseTimer timer(out, "steering");
    std::string description;
    const Vector u = steering_direction(a, *model, tok.get(), &description);
    std::vector<Sample> steer_samples(samples.begin(), samples.begin() + std::min<int64_t>(a.steer_samples, samples.size()));
    SteeringOptions options = a.steering;
    options.scales = parse_double_list(a.steer_scales, "--steer-scales");
    SteeringResult s = steering_sweep(model, u, steer_samples, options, progress);
    nlohmann::json j = s.to_json();
    j["direction"] = description;
    j["token_closest_to_u_piece"] = piece_of(tok.get(), s.token_closest_to_u);
    j["unsteered_top_tokens"] = tokens_json(s.unsteered_top_tokens, tok.get());
    for (size_t i = 0; i < s.points.size(); ++i) j["points"][i]["top_tokens"] = tokens_json(s.points[i].top_tokens, tok.get());
    out.results()["steering"] = j;
    std::vector<std::vector<double>> rows;
    for (const auto& p : s.points)
      rows.push_back({p.scale, p.c, std::abs(p.spectrum.lambda1), p.spectrum.gap, p.spectrum.modulus_ratio, p.eigenvector_alignment,
                      p.mean_alignment, p.min_alignment, p.mean_kl, p.max_kl, p.probability_of_argmax_u});
    out.csv("steering.csv", {"scale", "c", "lambda1_abs", "gap", "ratio21", "eigenvector_alignment_with_u", "mean_alignment",
                             "min_alignment", "mean_kl", "max_kl", "probability_of_token_closest_to_u"},
            rows, "steering sweep: spectrum of F', final-layer alignment with u, KL to the unsteered outputs");
    out.npy("steering_direction.npy", s.steering.u.data(), {d}, "unit steering direction u [d_model]");
    steering_figure(out, s, &notes);
    out.options()["steering"] = {{"direction", a.steer}, {"seed", a.steer_seed}, {"scales_relative_to_lambda1", options.scales},
                                 {"samples", static_cast<int64_t>(steer_samples.size())}, {"top_k", options.top_k},
                                 {"layer", c.n_layers - 1}, {"kl", "KL(p_unsteered || p_steered) per position"}};
  }

  out.options()["mode"] = to_string(dynamics.mode);
  out.options()["attention_input"] = attention_input(dynamics.mode);
  out.options()["residual"] = dynamics.residual;
  out.options()["from_pass"] = a.from_pass.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.from_pass);
  out.options()["samples"] = a.samples.options.to_json();
  if (a.samples.options.data.empty() && a.samples.options.prompt.empty() && a.samples.options.ids.empty())
    out.options()["samples"]["data"] = default_corpus().string();
  out.options()["tokenizer"] = a.samples.tokenizer;
  out.options()["spectrum"] = {{"full_spectrum_max_d", a.spectrum.full_spectrum_max_d}, {"top_k", a.spectrum.top_k},
                               {"arnoldi_restarts", a.spectrum.arnoldi.max_restarts},
                               {"method", spectra[0].full ? "dgeev (all eigenvalues)" : "Spectra (top-k Arnoldi)"}};
  out.options()["save_matrices"] = a.save_matrices;
  out.options()["alignment"] = "a(x; v) = |<x, v>| / |x|; complex pair: |projection onto span{Re v1, Im v1}| / |x|";
  out.options()["p_value"] = "one-sided exact binomial test of rho_t > 1/2 over every pooled token";
  out.options()["p_value_samples"] = "one-sided sign-flip test over samples of rho_s > 1/2, rho_s over the sample's tokens whose "
                                     "state is new (rho_unique); states repeated from an earlier sample (a shared prefix) counted once";
  out.results()["notes"] = notes;
  out.write();
  if (progress) progress("wrote " + out.file("results.json").string());
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("power", "Power-method analysis (Li & Altafini, \"Analogies between Transformer Layers and Power Method\"): layer matrices F = O V, their spectra, token "
                                          "alignment over real text, shared-weight iteration, rank-1 steering");
  auto a = std::make_shared<PowerArgs>();
  a->model.add_to(cmd);
  a->samples.add_to(cmd, 200);
  auto* text = cmd->add_option("--text", a->samples.options.data, "Alias of --data: a text file (passages) or an id file");
  text->excludes(cmd->get_option("--data"))->excludes(cmd->get_option("--prompt"))->excludes(cmd->get_option("--ids"));
  cmd->add_option("--out", a->out_dir, "Results directory")->required();
  cmd->add_option("--from-pass", a->from_pass,
                  "Take the token alignments from this pass file (written by tdyn analyze as DIR/pass/pass.tdynpass) instead of "
                  "running the samples; same model, samples and --mode full");
  cmd->add_option("--mode", a->mode, "Token dynamics: full (the real model), attn-only (FFN removed), attn-only-l2 (FFN "
                                     "removed, norms replaced by x/|x|: the paper's idealisation)")
      ->capture_default_str()->check(CLI::IsMember({"full", "attn-only", "attn-only-l2"}));
  cmd->add_flag("--no-residual", a->no_residual, "Drop the residual: Attn(x) instead of x + Attn(x)");
  cmd->add_option("--full-spectrum-max-d", a->spectrum.full_spectrum_max_d, "Every eigenvalue (dgeev) up to this d_model; "
                  "above it the top-k by Arnoldi (Spectra)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--top-eigs", a->spectrum.top_k, "k for the Arnoldi top-k above --full-spectrum-max-d")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--arnoldi-restarts", a->spectrum.arnoldi.max_restarts, "Arnoldi restarts before the top-k falls back "
                  "to dgeev")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--save-matrices", a->save_matrices, "Also write every F_t as layer_matrices.npy [layer, d, d] (float64)");
  cmd->add_option("--iterate-layer", a->iterate_layer, "Iterate this layer (default: the shared layer of a shared-weight model)");
  cmd->add_flag("--no-iterate", a->no_iterate, "Skip the iteration even for shared-weight models");
  cmd->add_option("--iterations", a->iteration.steps, "Steps of the shared-weight iteration")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--iterate-sample", a->iterate_sample, "Which loaded sample's tokens to iterate")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--threshold", a->iteration.threshold, "Alignment at which a token counts as in a subspace (regime classification)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--eigenvectors", a->iteration.eigenvectors, "Eigenvectors v_k searched for consensus/bipartite states")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--perturbation", a->iteration.perturbation, "Relative size of the perturbation in the bipartite instability test")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--bipartite-steps", a->iteration.bipartite_steps, "Steps of the bipartite test (0: --iterations)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", a->iteration.seed, "Seed of the bipartite perturbation")->capture_default_str();
  cmd->add_option("--steer", a->steer, "Steering direction u: random, token:ID, token:TEXT (one token), or a .npy of d_model values")
      ->capture_default_str();
  cmd->add_option("--steer-seed", a->steer_seed, "Seed of the random steering direction")->capture_default_str();
  cmd->add_option("--steer-scales", a->steer_scales, "Scales c/|lambda1(F_L)| of the steering sweep")->capture_default_str();
  cmd->add_option("--steer-samples", a->steer_samples, "Samples run through each steered model")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--top-k", a->steering.top_k, "Tokens listed per output distribution")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--no-steer", a->no_steer, "Skip the steering sweep");
  return [a] { return run_power(*a); };
}

TDYN_REGISTER_COMMAND("power", 30, setup);

}  // namespace
}  // namespace tdyn::cli
