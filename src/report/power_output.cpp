#include "report/power_output.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <variant>

#include <fmt/format.h>

#include "report/figure.h"

namespace tdyn {
namespace {

using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void emit(ResultsDir& out, const Figure& fig, const std::string& what, std::vector<std::string>* notes) {
  if (const std::string note = out.figure(fig, what); !note.empty()) notes->push_back(note);
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

void write_array(ResultsDir& out, const PowerArray& a) {
  const std::string file = a.name + ".npy";
  std::visit(
      [&](const auto& values) {
        using T = typename std::decay_t<decltype(values)>::value_type;
        if constexpr (std::is_same_v<T, Complex>) {
          write_npy_complex(out.file(file), reinterpret_cast<const double*>(values.data()), a.shape);
          out.record_file(file, a.what);
        } else {
          out.npy(file, values.data(), a.shape, a.what);
        }
      },
      a.values);
}

// Eigenvalues, dominant eigenvectors and biases of every F_t (and F_t itself when kept).
void add_spectra(const PowerResult& r, bool save_matrices, std::vector<PowerArray>& arrays) {
  const int64_t L = static_cast<int64_t>(r.spectra.size()), d = r.model.at("d_model").get<int64_t>();
  const int64_t k = r.spectra.at(0).eigenvalues.size();
  std::vector<Complex> eigenvalues, vectors_f, vectors_if;
  std::vector<double> bias;
  for (const auto& s : r.spectra) {
    eigenvalues.insert(eigenvalues.end(), s.eigenvalues.data(), s.eigenvalues.data() + s.eigenvalues.size());
    for (const DominantSpectrum* dom : {&s.f, &s.identity_plus_f}) {
      auto& target = dom == &s.f ? vectors_f : vectors_if;
      for (Index i = 0; i < d; ++i) target.emplace_back(dom->eigenvector_real[i], dom->complex_pair ? dom->eigenvector_imag[i] : 0.0);
    }
  }
  for (const auto& m : r.matrices) bias.insert(bias.end(), m.bias.data(), m.bias.data() + d);
  arrays.push_back({"eigenvalues", {L, k}, std::move(eigenvalues), "eigenvalues of F_t by modulus [layer, k] (complex128)"});
  arrays.push_back({"dominant_eigenvectors_F", {L, d}, std::move(vectors_f), "unit dominant eigenvector v_1,t of F_t [layer, d_model]"});
  arrays.push_back({"dominant_eigenvectors_I_plus_F", {L, d}, std::move(vectors_if), "dominant eigenvector of I + F_t [layer, d_model]"});
  arrays.push_back({"layer_matrix_bias", {L, d}, std::move(bias), "c_t = O_t b_V + b_O [layer, d_model]"});
  if (!save_matrices) return;
  std::vector<double> f;
  for (const auto& m : r.matrices) {
    const RowMajor row_major = m.f;
    f.insert(f.end(), row_major.data(), row_major.data() + row_major.size());
  }
  arrays.push_back({"layer_matrices", {L, d, d}, std::move(f), "F_t = O_t V_t [layer, d_model, d_model], y = F x"});
}

// Per-token alignments, their histograms and the alignment across layers.
void add_dynamics(const PowerResult& r, std::vector<PowerArray>& arrays) {
  const TokenDynamics& dyn = r.dynamics;
  const int64_t L = static_cast<int64_t>(r.spectra.size());
  std::vector<float> before, after;
  std::vector<int64_t> histogram;
  for (int64_t t = 0; t < L; ++t) {
    before.insert(before.end(), dyn.before[t].begin(), dyn.before[t].end());
    after.insert(after.end(), dyn.after[t].begin(), dyn.after[t].end());
    histogram.insert(histogram.end(), dyn.layers[t].f.histogram.begin(), dyn.layers[t].f.histogram.end());
  }
  arrays.push_back({"alignment_before", {L, dyn.tokens}, std::move(before), "a(x_i^t; v_1,t) per token [layer, token] (all samples concatenated)"});
  arrays.push_back({"alignment_after", {L, dyn.tokens}, std::move(after), "a(x_i^{t+1}; v_1,t) per token [layer, token]"});
  // The per-token facts a bootstrap over samples needs (the report's intervals of γ and ρ).
  if (static_cast<int64_t>(dyn.sample_of_token.size()) == dyn.tokens && static_cast<int64_t>(dyn.repeated.size()) == dyn.tokens) {
    arrays.push_back({"token_sample", {dyn.tokens}, dyn.sample_of_token, "the sample of each token [token] (0-based, in sample order)"});
    arrays.push_back({"token_repeated", {dyn.tokens}, std::vector<int64_t>(dyn.repeated.begin(), dyn.repeated.end()),
                      "1 where the token's state repeats an earlier sample's (left out of rho_unique) [token]"});
  }
  if (static_cast<int64_t>(dyn.after_covariance.size()) == L) {
    std::vector<float> covariance;
    for (int64_t t = 0; t < L; ++t) covariance.insert(covariance.end(), dyn.after_covariance[t].begin(), dyn.after_covariance[t].end());
    if (static_cast<int64_t>(covariance.size()) == L * dyn.tokens)
      arrays.push_back({"alignment_covariance", {L, dyn.tokens}, std::move(covariance),
                        "a(x_i^{t+1}; U), U drawn from the sample's own tokens (gamma_covariance), NaN where not drawn [layer, token]"});
  }
  arrays.push_back({"alignment_histogram", {L, kHistogramBins}, std::move(histogram),
                    "histogram of a(x^{t+1}; v_1,t), 20 bins on [0, 1] [layer, bin]"});
  const RowMajor cross = r.cross_layer.mean;
  arrays.push_back({"cross_layer_alignment", {cross.rows(), cross.cols()}, std::vector<double>(cross.data(), cross.data() + cross.size()),
                    "mean over tokens of a(x^{t+1}; v_1,s) [t: tokens leaving layer t, s: dominant subspace of F_s]; diagonal = gamma_t"});
}

void add_iteration(const IterationResult& r, std::vector<PowerArray>& arrays) {
  const int64_t steps = static_cast<int64_t>(r.curves.mean_alignment.size());
  arrays.push_back({"iteration_alignment", {steps, r.tokens}, std::vector<float>(r.alignment_per_token.begin(), r.alignment_per_token.end()),
                    "alignment with v1 of the step matrix [step, token]"});
  arrays.push_back({"iteration_plane", {steps, r.tokens, 2}, r.plane_coordinates,
                    "eigen-coordinates zeta/|x| in span{Re v1, Im v1} (real v1: <x, v1>/|x|, 0) [step, token, 2]"});
}

void write_layers_table(ResultsDir& out, const PowerResult& r) {
  std::vector<std::vector<double>> rows;
  for (size_t t = 0; t < r.spectra.size(); ++t) {
    const LayerSpectrum& s = r.spectra[t];
    const LayerDynamics& l = r.dynamics.layers[t];
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

void write_iteration_table(ResultsDir& out, const IterationResult& r) {
  std::vector<std::vector<double>> rows;
  for (size_t s = 0; s < r.curves.mean_alignment.size(); ++s)
    rows.push_back({static_cast<double>(s), r.curves.mean_alignment[s], r.curves.min_alignment[s], r.curves.mean_alignment_f[s],
                    r.curves.span12_energy[s], r.curves.positive_fraction[s], r.curves.mean_angle_step[s]});
  out.csv("iteration_curves.csv", {"step", "mean_alignment", "min_alignment", "mean_alignment_F", "span12_energy",
                                   "positive_fraction", "mean_angle_step"},
          rows, "per iteration step: alignment with the step matrix's v1, span{v1,v2} energy, sign pattern, angle");
}

void write_steering_table(ResultsDir& out, const SteeringResult& s) {
  std::vector<std::vector<double>> rows;
  for (const auto& p : s.points)
    rows.push_back({p.scale, p.c, std::abs(p.spectrum.lambda1), p.spectrum.gap, p.spectrum.modulus_ratio, p.eigenvector_alignment,
                    p.mean_alignment, p.min_alignment, p.mean_kl, p.max_kl, p.probability_of_argmax_u});
  out.csv("steering.csv", {"scale", "c", "lambda1_abs", "gap", "ratio21", "eigenvector_alignment_with_u", "mean_alignment",
                           "min_alignment", "mean_kl", "max_kl", "probability_of_token_closest_to_u"},
          rows, "steering sweep: spectrum of F', final-layer alignment with u, KL to the unsteered outputs");
}

}  // namespace

std::vector<PowerArray> power_arrays(const PowerResult& r, bool save_matrices) {
  std::vector<PowerArray> arrays;
  add_spectra(r, save_matrices, arrays);
  add_dynamics(r, arrays);
  if (r.iteration) add_iteration(*r.iteration, arrays);
  if (r.steering) {
    const Vector& u = r.steering->steering.u;
    arrays.push_back({"steering_direction", {u.size()}, std::vector<double>(u.data(), u.data() + u.size()), "unit steering direction u [d_model]"});
  }
  return arrays;
}

void write_power(ResultsDir& out, const PowerResult& r, const PowerOptions& options) {
  for (const auto& [phase, seconds] : r.timings) out.add_timing(phase, seconds);
  out.model() = r.model;
  // Beside what the caller put there (a merge patch would drop the null values).
  const nlohmann::json options_used = options_json(r, options);
  for (const auto& [key, value] : options_used.items()) out.options()[key] = value;
  {
    PhaseTimer write_timer(out, "write");
    for (const PowerArray& a : power_arrays(r, options.save_matrices)) write_array(out, a);
    write_layers_table(out, r);
    std::vector<std::string> notes;  // the figures'
    spectrum_figure(out, r.spectra, &notes);
    dynamics_figure(out, r.dynamics, &notes);
    if (r.iteration) {
      write_iteration_table(out, *r.iteration);
      iteration_figures(out, *r.iteration, &notes);
    }
    if (r.steering) {
      write_steering_table(out, *r.steering);
      steering_figure(out, *r.steering, &notes);
    }
    out.results() = results_json(r);
    for (const std::string& note : notes) out.results()["notes"].push_back(note);
  }
  out.write();
}

}  // namespace tdyn
