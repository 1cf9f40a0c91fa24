#include "analysis/power/run.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "analysis/pass/source.h"
#include "analysis/power/pass.h"
#include "core/error.h"
#include "core/phase_times.h"
#include "core/npy.h"

namespace tdyn {
namespace {

std::string piece_of(const Tokenizer* tok, int32_t id) {
  if (!tok) return "";
  try {
    return tok->piece(id);
  } catch (const Error&) {
    return "";
  }
}

// The direction `spec` names (PowerOptions::steer_direction), and a description of it.
Vector steering_direction(const std::string& spec, uint64_t seed, const Model& model, const Tokenizer* tok,
                          std::string* description) {
  const int64_t d = model.config.d_model;
  if (spec == "random") {
    *description = fmt::format("random Gaussian direction, seed {}", seed);
    return random_direction(d, seed);
  }
  if (spec.starts_with("token:")) {
    const std::string token = spec.substr(6);
    int32_t id = 0;
    auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), id);
    if (token.empty() || ec != std::errc() || ptr != token.data() + token.size()) {
      if (!tok) fail("steer_direction {}: a token given as text needs a tokenizer", spec);
      std::vector<int32_t> ids = tok->encode(token, false);
      if (ids.size() != 1) fail("steer_direction {}: '{}' is {} tokens, not one", spec, token, ids.size());
      id = ids[0];
    }
    *description = fmt::format("embedding row of token {} '{}'", id, piece_of(tok, id));
    return token_direction(model, id);
  }
  NpyArray array = read_npy(spec);
  std::vector<double> values = array.as_double();
  if (static_cast<int64_t>(values.size()) != d)
    fail("steer_direction {}: expected {} values (d_model), got shape {}", spec, d, shape_str(array.shape));
  *description = "direction from " + spec;
  return Eigen::Map<Vector>(values.data(), d);
}

void measure_spectra(const Model& model, const PowerOptions& options, ProgressSink& progress, PowerResult& r) {
  PhaseClock clock(r.timings, "spectra");
  if (options.spectra) TDYN_CHECK(static_cast<int64_t>(options.spectra->size()) == model.config.n_layers);
  r.matrices = layer_matrices(model, options.dynamics.zeroed);
  auto report = [&](const LayerSpectrum& s) {
    for (const std::string& note : s.notes) {
      r.notes.push_back(fmt::format("layer {}: {}", s.layer, note));
      progress.note(r.notes.back());
    }
    progress.note(fmt::format("spectrum of F_{}: |lambda1| = {:.4g}, |lambda2|/|lambda1| = {:.4f}", s.layer, std::abs(s.f.lambda1),
                              s.f.modulus_ratio));
  };
  if (options.spectra) {
    r.spectra = *options.spectra;
    for (const LayerSpectrum& s : r.spectra) report(s);
  } else {
    r.spectra = layer_spectra(r.matrices, options.spectrum, report);
  }
}

void measure_token_dynamics(const Transformer& transformer, const std::string& path, const std::vector<Sample>& samples,
                            const PowerOptions& options, ProgressSink& progress, const PowerPassSource& pass, PowerResult& r) {
  PhaseClock clock(r.timings, "token_dynamics");
  const ModelConfig& c = transformer.config();
  if (options.dynamics.mode != DynamicsMode::Full || !options.dynamics.residual) {
    if (pass) fail("token dynamics from a pass need dynamics mode full with the residual");
    r.dynamics = token_dynamics(transformer, samples, r.spectra, options.dynamics, progress);
  } else {
    // The model's own dynamics are per-token probes of the sample pass: tdyn analyze's shared one, or one run here,
    // so that power alone measures what analyze does, bit for bit (the pass stacks a chunk's rows, which may
    // round differently from one sample's).
    PassSpec spec;
    spec.boundaries = residual_boundaries(c.n_layers, BoundarySet::Layers);  // where the probes are taken
    spec.correlations = spec.jacobians = false;
    spec.probes = token_dynamics_probes(r.spectra);
    spec.zeroed = options.dynamics.zeroed;
    const PassFile file = pass ? pass(spec)
                               : obtain_pass(PassSource{}, transformer, nullptr, samples, spec,
                                             pass_model_identity(path, transformer.model()), "", false, "token dynamics", progress);
    r.dynamics = token_dynamics_from_pass(file, samples, c.causal, r.spectra, c.d_model, options.dynamics);
  }
  const int64_t L = static_cast<int64_t>(r.spectra.size());
  std::vector<double> gamma, relative_gap;
  for (int64_t t = 0; t < L; ++t) {
    gamma.push_back(r.dynamics.layers[t].f.gamma);
    relative_gap.push_back(1 - r.spectra[t].f.modulus_ratio);
  }
  r.cross_layer = cross_layer_alignment(r.dynamics.cross_alignment);
  r.gamma_gap = gamma_gap_test(gamma, relative_gap);
}

void run_iteration(const Transformer& transformer, const std::vector<Sample>& samples, const PowerOptions& options,
               ProgressSink& progress, PowerResult& r) {
  if (r.iterate_layer < 0) return;
  PhaseClock clock(r.timings, "iteration");
  IterationOptions iteration = options.iteration;
  iteration.layer = r.iterate_layer;
  iteration.dynamics = options.dynamics;
  r.iteration = iterate_layer(transformer, samples[options.iterate_sample], r.matrices[r.iterate_layer], iteration, progress);
  progress.note(fmt::format("layer {} iterated {} steps: {}", r.iteration->layer, iteration.steps, r.iteration->regime.description));
}

void run_steering(std::shared_ptr<const Model> model, const std::vector<Sample>& samples, const PowerOptions& options,
              ProgressSink& progress, const Tokenizer* tok, PowerResult& r) {
  if (!options.steer) return;
  PhaseClock clock(r.timings, "steering");
  const Vector u = steering_direction(options.steer_direction, options.steer_seed, *model, tok, &r.steering_description);
  r.steering_samples = std::min<int64_t>(options.steer_samples, samples.size());
  const std::vector<Sample> steered(samples.begin(), samples.begin() + r.steering_samples);
  r.steering = steering_sweep(model, u, steered, options.steering, progress, options.dynamics.zeroed);
  r.pieces[r.steering->token_closest_to_u] = piece_of(tok, r.steering->token_closest_to_u);
  for (const auto& t : r.steering->unsteered_top_tokens) r.pieces[t.token] = piece_of(tok, t.token);
  for (const auto& p : r.steering->points)
    for (const auto& t : p.top_tokens) r.pieces[t.token] = piece_of(tok, t.token);
}

nlohmann::json tokens_json(const std::vector<TokenProbability>& tokens, const std::map<int32_t, std::string>& pieces) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : tokens) out.push_back({{"token", t.token}, {"piece", pieces.at(t.token)}, {"probability", t.probability}});
  return out;
}

}  // namespace

PowerResult run_power(std::shared_ptr<const Model> model, const std::string& path, const std::vector<Sample>& samples,
                      const PowerOptions& asked, ProgressSink& progress, const Tokenizer* tokenizer,
                      const PowerPassSource& pass) {
  const ModelConfig& c = model->config;
  const Transformer transformer(model);
  PowerOptions options = asked;  // with the ablations resolved against the model, for every part to run
  options.dynamics.zeroed = ZeroedParts(transformer, asked.ablations);
  PowerResult r;
  r.shared_weights = c.n_stored_layers() == 1 && c.n_layers > 1;
  r.iterate_layer = !options.iterate ? -1 : options.iterate_layer >= 0 ? options.iterate_layer : (r.shared_weights ? 0 : -1);
  if (r.iterate_layer >= c.n_layers) fail("iterate_layer {}: the model has {} layers", r.iterate_layer, c.n_layers);
  if (options.iterate_sample < 0 || options.iterate_sample >= static_cast<int64_t>(samples.size()))
    fail("iterate_sample {}: only {} samples were loaded", options.iterate_sample, samples.size());
  r.model = {{"path", path},         {"family", c.family},     {"format", c.format},
             {"d_model", c.d_model}, {"n_layers", c.n_layers}, {"n_heads", c.n_heads},
             {"n_kv_heads", c.n_kv_heads}, {"d_vocab", c.d_vocab}, {"stored_layers", c.n_stored_layers()}};
  measure_spectra(*model, options, progress, r);
  measure_token_dynamics(transformer, path, samples, options, progress, pass, r);
  run_iteration(transformer, samples, options, progress, r);
  run_steering(model, samples, options, progress, tokenizer, r);
  if (!options.save_matrices)
    for (LayerMatrix& m : r.matrices) m.f = Matrix();  // d × d each: kept only when asked for
  return r;
}

nlohmann::json options_json(const PowerResult& r, const PowerOptions& options) {
  const IterationOptions& it = options.iteration;
  nlohmann::json o;
  o["iteration"] = {{"layer", r.iterate_layer >= 0 ? nlohmann::json(r.iterate_layer) : nlohmann::json(nullptr)},
                    {"layer_default", "the shared layer for shared-weight models (ALBERT), else none"},
                    {"sample", options.iterate_sample}, {"steps", it.steps}, {"threshold", it.threshold},
                    {"eigenvectors_searched", it.eigenvectors}, {"perturbation", it.perturbation},
                    {"bipartite_steps", it.bipartite_steps > 0 ? it.bipartite_steps : it.steps}, {"seed", it.seed}};
  if (r.steering)
    o["steering"] = {{"direction", options.steer_direction}, {"seed", options.steer_seed},
                     {"scales_relative_to_lambda1", options.steering.scales}, {"samples", r.steering_samples},
                     {"top_k", options.steering.top_k}, {"control_draws", options.steering.control_draws}, {"layer", r.steering->steering.layer},
                     {"kl", "KL(p_unsteered || p_steered) per position"}};
  o["mode"] = to_string(options.dynamics.mode);
  o["attention_input"] = attention_input(options.dynamics.mode);
  o["residual"] = options.dynamics.residual;
  o["spectrum"] = {{"full_spectrum_max_d", options.spectrum.full_spectrum_max_d}, {"top_k", options.spectrum.top_k},
                   {"arnoldi_restarts", options.spectrum.arnoldi.max_restarts},
                   {"method", r.spectra.at(0).full ? "dgeev (all eigenvalues)" : "Spectra (top-k Arnoldi)"}};
  o["save_matrices"] = options.save_matrices;
  o["ablate"] = to_json(options.ablations);
  o["alignment"] = "a(x; v) = |<x, v>| / |x|; complex pair: |projection onto span{Re v1, Im v1}| / |x|";
  o["p_value"] = "one-sided exact binomial test of rho_t > 1/2 over every pooled token";
  o["p_value_samples"] = "one-sided sign-flip test over samples of rho_s > 1/2, rho_s over the sample's tokens whose "
                         "state is new (rho_unique); states repeated from an earlier sample (a shared prefix) counted once";
  return o;
}

nlohmann::json results_json(const PowerResult& r) {
  const TokenDynamics& dyn = r.dynamics;
  nlohmann::json layers = nlohmann::json::array();
  for (size_t t = 0; t < r.spectra.size(); ++t) {
    nlohmann::json j = r.spectra[t].to_json();
    j["dynamics_F"] = dyn.layers[t].f.to_json();
    j["dynamics_I_plus_F"] = dyn.layers[t].identity_plus_f.to_json();
    j["mean_norm_before"] = dyn.layers[t].mean_norm_before;
    j["mean_norm_after"] = dyn.layers[t].mean_norm_after;
    layers.push_back(j);
  }
  nlohmann::json out = {{"layers", layers}, {"tokens", dyn.tokens}, {"samples", dyn.samples}, {"notes", r.notes}};
  out["random_baseline_approx"] = std::sqrt(2.0 / (M_PI * r.model.at("d_model").get<double>()));
  out["cross_layer_alignment"] = r.cross_layer.to_json();
  // With one stored layer every F_s is the same matrix: nothing to tell the layers' eigenvectors apart.
  out["cross_layer_alignment"]["shared_weights"] = r.shared_weights;
  out["gamma_vs_gap"] = r.gamma_gap.to_json();
  if (r.iteration) out["iteration"] = r.iteration->to_json();
  if (r.steering) {
    nlohmann::json j = r.steering->to_json();
    j["direction"] = r.steering_description;
    j["token_closest_to_u_piece"] = r.pieces.at(r.steering->token_closest_to_u);
    j["unsteered_top_tokens"] = tokens_json(r.steering->unsteered_top_tokens, r.pieces);
    for (size_t i = 0; i < r.steering->points.size(); ++i) j["points"][i]["top_tokens"] = tokens_json(r.steering->points[i].top_tokens, r.pieces);
    out["steering"] = j;
  }
  return out;
}

}  // namespace tdyn
