#include "analysis/particles/run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "core/error.h"
#include "core/phase_times.h"

namespace tdyn::particles {
namespace {

// The saved times nearest the wanted ones (default 0, T/2, T), each once, in the order asked.
std::vector<size_t> attention_indices(const std::vector<double>& saved, const std::vector<double>& asked, double t_end) {
  const std::vector<double> wanted = asked.empty() ? std::vector<double>{0.0, t_end / 2, t_end} : asked;
  std::vector<size_t> indices;
  for (double t : wanted) {
    size_t best = 0;
    for (size_t k = 0; k < saved.size(); ++k)
      if (std::abs(saved[k] - t) < std::abs(saved[best] - t)) best = k;
    if (std::find(indices.begin(), indices.end(), best) == indices.end()) indices.push_back(best);
  }
  return indices;
}

// The median of the perturbed runs' displacements at which the clusters count as moving with the tokens: a tenth
// of the perturbation survives to T.
constexpr double kMovedDisplacement = 0.1;

// Repeats the run from perturbed initial tokens (ParticlesOptions::perturbed_runs) and judges "locations": the
// clusters' places depend on where the tokens start, as the paper's limits do (the vertices of Theorem 2.1 are
// initial tokens' own directions), unlike a fixed attractor of the weights.
void perturbed_runs(ParticlesResult& r, const ParticlesOptions& options, const SimulationOptions& simulation) {
  const DiagnosticOptions& o = options.diagnostics;
  const double scale = r.diagnostics.final.scale, step = options.perturbation * scale;
  const Matrix& centres = r.diagnostics.final.clusters.centres;
  const Matrix& x0 = r.experiment.x0;
  for (int64_t j = 0; j < options.perturbed_runs && step > 0; ++j) {
    PerturbedRun run;
    run.seed = options.perturbation_seed + static_cast<uint64_t>(j);
    std::mt19937_64 rng(run.seed);
    std::normal_distribution<double> normal;
    Matrix start = x0;
    for (Index i = 0; i < start.rows(); ++i) {
      Vector g(start.cols());
      for (Index k = 0; k < g.size(); ++k) g[k] = normal(rng);
      start.row(i) += step * g.normalized().transpose();
      if (r.experiment.system.project_to_sphere) start.row(i).normalize();
    }
    const Trajectory t = simulate(r.experiment.system, start, simulation);
    const Clusters c = find_clusters(o.cluster_on == StateVariable::z ? t.z.back() : t.x.back(), o.cluster_tol * scale);
    run.clusters = c.count();
    double total = 0;
    for (Index a = 0; a < centres.rows(); ++a) total += (c.centres.rowwise() - centres.row(a)).rowwise().norm().minCoeff();
    run.displacement = centres.rows() > 0 ? total / static_cast<double>(centres.rows()) / step : 0.0;
    r.perturbed.push_back(run);
  }
  if (r.perturbed.empty()) return;
  std::vector<double> moved;
  for (const PerturbedRun& p : r.perturbed) moved.push_back(p.displacement);
  std::sort(moved.begin(), moved.end());
  ClaimVerdict v;
  v.claim = "locations";
  v.theorem = "initial-tokens";
  v.statement = "Where the tokens cluster depends on where they start: initial tokens moved a little end in clusters moved with them.";
  v.measure = fmt::format("the median over {} runs from initial tokens moved by {} × max‖x_i(0)‖ of the mean distance of each "
                          "cluster centre at T to the nearest of that run's, in units of the move",
                          r.perturbed.size(), options.perturbation);
  v.value = moved[moved.size() / 2];
  v.control = 1;  // at t = 0 every token has moved by exactly one unit
  v.rule = fmt::format("pass when the median displacement is at least {} (a tenth of the move survives to T); differs when "
                       "the clusters return to the same places (a fixed attractor of the weights); shown when the tokens did "
                       "not cluster ({} clusters of {} tokens)",
                       kMovedDisplacement, r.diagnostics.final.clusters.count(), x0.rows());
  if (r.diagnostics.final.clusters.count() >= x0.rows()) {
    v.verdict = "shown";
    v.note = "the tokens did not cluster by T, so there are no cluster locations to follow";
  } else {
    v.verdict = v.value >= kMovedDisplacement ? "pass" : "differs";
  }
  r.diagnostics.verdicts.push_back(std::move(v));
}

// Simulates and diagnoses the experiment already in `r`.
void simulate_and_diagnose(ParticlesResult& r, const ParticlesOptions& options) {
  for (double t : options.attention_times)
    if (t < 0 || t > r.spec.t_end + 1e-12) fail("attention time {} is outside [0, T = {}]", t, r.spec.t_end);
  SimulationOptions simulation = options.simulation;
  simulation.t_end = r.spec.t_end;
  simulation.dt = r.spec.dt;
  r.trajectory = timed(r.timings, "simulate", [&] { return simulate(r.experiment.system, r.experiment.x0, simulation); });
  r.diagnostics = timed(r.timings, "diagnose", [&] { return diagnose(r.experiment.system, r.trajectory, options.diagnostics); });
  r.attention_indices = attention_indices(r.trajectory.times, options.attention_times, r.spec.t_end);
  for (size_t k : r.attention_indices) r.attention.push_back(attention_matrix(r.experiment.system.head, r.trajectory.x[k]));
  timed(r.timings, "perturbed_runs", [&] { perturbed_runs(r, options, simulation); });
}

nlohmann::json head_json(int64_t head) { return head < 0 ? nlohmann::json("all") : nlohmann::json(head); }

}  // namespace

ExperimentSpec model_layer_defaults() {
  ExperimentSpec spec;
  spec.preset = "from-model";
  spec.n = 32;
  spec.t_end = 20;
  spec.sphere = true;
  return spec;
}

ParticlesResult run_particles(const ExperimentSpec& spec, const ParticlesOptions& options) {
  step_count(spec.t_end, spec.dt);  // validates T and Δt before any work
  ParticlesResult r;
  r.spec = spec;
  r.model = {{"source", "synthetic"}, {"preset", spec.preset}, {"description", spec.description}};
  r.experiment = timed(r.timings, "build", [&] { return build(spec); });
  simulate_and_diagnose(r, options);
  return r;
}

ParticlesResult run_particles(const Model& model, const std::string& path, const ModelHeadOptions& head,
                              const std::vector<int32_t>* ids, const ExperimentSpec& spec, const ParticlesOptions& options) {
  step_count(spec.t_end, spec.dt);
  if (spec.n < 1) fail("n must be at least 1, got {}", spec.n);
  const ModelConfig& c = model.config;
  ParticlesResult r;
  r.spec = spec;
  r.model_tokens = ids != nullptr;
  r.experiment = timed(r.timings, "build", [&] {
    const ModelHeadOptions layer{head.layer, head.head, spec.n};
    ModelParticles bridge;
    if (ids) {
      bridge = model_particles(model, *ids, layer);
    } else {
      bridge.experiment.system.head = model_attention_head(model, layer, &bridge.record);
      bridge.record["initial_tokens"] = "--init " + spec.initial;
    }
    Experiment& e = bridge.experiment;
    if (!ids || spec.ffn != "none") {
      // Generated tokens and the feed-forward term are made as build() makes them, on a throwaway spec of the
      // model's width.
      ExperimentSpec extras = spec;
      extras.d = c.d_model;
      extras.d_head = 1;  // the throwaway head: as small as build() allows
      extras.query = "identity", extras.key = "same", extras.value = "identity", extras.output.clear();
      Experiment made = build(extras);
      if (!ids) {
        if (made.x0.cols() != c.d_model)
          fail("initial tokens {}: they have d = {} but the model's d_model is {}", spec.initial, made.x0.cols(), c.d_model);
        e.x0 = std::move(made.x0);
      }
      e.system.ffn = std::move(made.system.ffn);
    }
    e.system.project_to_sphere = spec.sphere;
    r.model = {{"source", "model"},      {"path", path},           {"family", c.family},   {"format", c.format},
               {"d_model", c.d_model},   {"n_layers", c.n_layers}, {"layer", head.layer},  {"head", head_json(head.head)},
               {"bridge", bridge.record}};
    return std::move(bridge.experiment);
  });
  simulate_and_diagnose(r, options);
  return r;
}

nlohmann::json options_json(const ParticlesResult& r, const ParticlesOptions& options) {
  const ExperimentSpec& spec = r.spec;
  const ParticleSystem& system = r.experiment.system;
  const SimulationOptions& sim = options.simulation;
  const DiagnosticOptions& diag = options.diagnostics;
  nlohmann::json o = {{"preset", spec.preset},
                      {"n", r.experiment.x0.rows()},
                      {"d", r.experiment.x0.cols()},
                      {"d_head", system.head.query.rows()},
                      {"T", spec.t_end},
                      {"dt", spec.dt},
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
                      {"diagnose_every", diag.every},
                      {"cluster_on", to_string(diag.cluster_on)},
                      {"cluster_tol", diag.cluster_tol},
                      {"level_tol", diag.level_tol},
                      {"hull_tol", diag.hull_tol},
                      {"rank_tol", diag.rank_tol},
                      {"perturbed_runs", options.perturbed_runs},
                      {"perturbation", options.perturbation},
                      {"perturbation_seed", options.perturbation_seed},
                      {"softmax", "log-sum-exp"},
                      {"precision", "float64"}};
  if (r.model.value("source", "") == "model") {
    // The matrices come from the model (described in model.bridge), not from generators.
    const std::string taken = "from the model (model.bridge)";
    o["query"] = taken, o["key"] = taken, o["value"] = taken, o["output"] = taken;
    if (r.model_tokens) o["init"] = "model: unit token embeddings (model.bridge)";
    o["from_model"] = {{"path", r.model["path"]}, {"layer", r.model["layer"]}, {"head", r.model["head"]}};
  }
  if (spec.ffn != "none")
    o["ffn_weights"] = {{"hidden", system.ffn->w_in.rows()}, {"in", spec.ffn_in}, {"out", spec.ffn_out},
                        {"b_in", spec.ffn_b_in}, {"b_out", spec.ffn_b_out}};
  return o;
}

nlohmann::json results_json(const ParticlesResult& r) {
  nlohmann::json results = to_json(r.diagnostics);
  results["integration"] = {{"steps", r.trajectory.steps},
                            {"velocity_evaluations", r.trajectory.velocity_evaluations},
                            {"rescaling_z_from_x", r.trajectory.rescaling()}};
  results["perturbed_runs"] = nlohmann::json::array();
  for (const PerturbedRun& p : r.perturbed)
    results["perturbed_runs"].push_back({{"seed", p.seed}, {"clusters", p.clusters}, {"displacement", p.displacement}});
  return results;
}

}  // namespace tdyn::particles
