// Self-attention as an interacting particle system (Geshkovski et al. 2023): tdyn.simulate runs a preset or a
// head given as arrays and returns the trajectories with the diagnostics of the paper's theorems;
// tdyn.particles runs what `tdyn particles` runs (a preset or a real layer) and returns what it writes.
#include <optional>
#include <string>
#include <variant>

#include <pybind11/eigen.h>
#include <pybind11/stl.h>

#include "analysis/particles/run.h"
#include "convert.h"
#include "pipeline/parts.h"
#include "py_model.h"
#include "py_samples.h"
#include "result_dicts.h"
#include "report/particles_output.h"

namespace tdyn::python {
namespace {

using namespace tdyn::particles;
using particles::Matrix;  // not linalg's, which the other analyses' headers bring

// A matrix argument: None (the preset's), a generator spec such as "identity" or "psd:1", or an array.
using MatrixArg = std::optional<std::variant<std::string, Matrix>>;

const Matrix* array_of(const MatrixArg& arg) { return arg ? std::get_if<Matrix>(&*arg) : nullptr; }

// Sets the spec string of a matrix given as a string; a matrix given as an array gets a placeholder of the
// right kind ("identity") and replaces the built one afterwards.
void apply_spec(const MatrixArg& arg, std::string& field) {
  if (!arg) return;
  if (const auto* text = std::get_if<std::string>(&*arg)) field = *text;
  else field = "identity";
}

py::dict simulate_particles(const std::optional<std::string>& preset_name, const MatrixArg& Q, const MatrixArg& K,
                            const MatrixArg& V, const MatrixArg& O, const std::optional<Matrix>& x0,
                            std::optional<int64_t> n, std::optional<int64_t> d, std::optional<double> T,
                            std::optional<double> dt, const std::string& integrator, const std::string& variable,
                            std::optional<uint64_t> seed, std::optional<std::string> init, std::optional<bool> sphere,
                            int save_every, bool diagnostics) {
  ExperimentSpec spec = preset_name ? preset(*preset_name) : ExperimentSpec{};
  apply_spec(Q, spec.query);
  apply_spec(K, spec.key);
  apply_spec(V, spec.value);
  apply_spec(O, spec.output);
  // Sizes: from the arrays given, then from explicit n and d.
  for (const Matrix* m : {array_of(Q), array_of(K), array_of(V)})
    if (m) spec.d = m->cols();
  if (const Matrix* q = array_of(Q)) spec.d_head = q->rows();
  if (x0) spec.n = x0->rows(), spec.d = x0->cols();
  if (n) spec.n = *n;
  if (d) spec.d = *d;
  if (T) spec.t_end = *T;
  if (dt) spec.dt = *dt;
  if (seed) spec.seed = *seed;
  if (init) spec.initial = *init;
  if (sphere) spec.sphere = *sphere;
  if (const Matrix* v = array_of(V); v && v->rows() != spec.d && !O)
    fail("V is {} x {}: without O it must be d x d (d = {})", v->rows(), v->cols(), spec.d);

  SimulationOptions options;
  options.t_end = spec.t_end;
  options.dt = spec.dt;
  options.integrator = parse_integrator(integrator);
  options.variable = parse_state_variable(variable);
  if (save_every < 1) fail("save_every must be >= 1, got {}", save_every);
  options.save_every = save_every;
  step_count(options.t_end, options.dt);  // validates T and dt before any work

  Experiment e = build(spec);
  AttentionHead& head = e.system.head;
  if (const Matrix* q = array_of(Q)) head.query = *q;
  if (const Matrix* k = array_of(K)) head.key = *k;
  else if (spec.key == "same") head.key = head.query;
  if (const Matrix* v = array_of(V)) head.value = *v;
  if (const Matrix* o = array_of(O)) head.output = *o;
  head.validate();
  if (x0) {
    if (x0->rows() != spec.n || x0->cols() != head.d_model())
      fail("x0 is {} x {} but n = {} and d = {}", x0->rows(), x0->cols(), spec.n, head.d_model());
    if (!x0->allFinite()) fail("x0 contains NaN or infinite entries");
    e.x0 = *x0;
  }

  Trajectory trajectory;
  ParticleDiagnostics diagnosis;
  {
    py::gil_scoped_release release;
    trajectory = simulate(e.system, e.x0, options);
    if (diagnostics) diagnosis = diagnose(e.system, trajectory, DiagnosticOptions{});
  }

  py::dict result;
  result["times"] = py::array_t<double>(static_cast<int64_t>(trajectory.times.size()), trajectory.times.data());
  result["x"] = stacked_matrices(trajectory.x);
  result["z"] = stacked_matrices(trajectory.z);
  result["rescaling"] = trajectory.rescaling();
  result["steps"] = trajectory.steps;
  result["velocity_evaluations"] = trajectory.velocity_evaluations;
  result["Q"] = py::cast(head.query);
  result["K"] = py::cast(head.key);
  result["V"] = py::cast(head.value);
  result["O"] = head.output.size() > 0 ? py::cast(head.output) : py::none();
  result["x0"] = py::cast(e.x0);
  py::dict settings;
  settings["preset"] = spec.preset;
  settings["n"] = spec.n;
  settings["d"] = head.d_model();
  settings["T"] = spec.t_end;
  settings["dt"] = spec.dt;
  settings["seed"] = spec.seed;
  settings["init"] = x0 ? std::string("array") : spec.initial;
  settings["sphere"] = spec.sphere;
  settings["ffn"] = spec.ffn;
  settings["integrator"] = to_string(options.integrator);
  settings["variable"] = to_string(options.variable);
  result["settings"] = settings;
  result["diagnostics"] = diagnostics ? to_python(to_json(diagnosis)) : py::none();
  return result;
}

// tdyn.particles: the keyword arguments past the named ones override the spec, as the CLI's flags do.
py::dict particles_run(const std::optional<std::string>& preset_name, const py::object& model, int64_t layer,
                       std::optional<int64_t> head, const py::object& ids, const std::optional<std::string>& data,
                       const std::optional<std::string>& prompt, const std::optional<std::string>& tokenizer, const std::string& integrator,
                       const std::string& variable, int save_every, int diagnose_every, const std::optional<std::string>& cluster_on,
                       const std::vector<double>& attention_times, int64_t perturbed_runs, double perturbation,
                       const std::optional<std::string>& out, const py::kwargs& spec_overrides) {
  const bool from_model = !model.is_none();
  if (from_model && preset_name) fail("give a preset or a model, not both");
  ExperimentSpec spec = from_model ? model_layer_defaults() : preset(preset_name.value_or("polytope"));
  for (const auto& [key, value] : spec_overrides) {
    const std::string name = py::str(key);
    if (name == "n") spec.n = value.cast<int64_t>();
    else if (name == "d") spec.d = value.cast<int64_t>();
    else if (name == "d_head") spec.d_head = value.cast<int64_t>();
    else if (name == "T") spec.t_end = value.cast<double>();
    else if (name == "dt") spec.dt = value.cast<double>();
    else if (name == "seed") spec.seed = value.cast<uint64_t>();
    else if (name == "init") spec.initial = value.cast<std::string>();
    else if (name == "query") spec.query = value.cast<std::string>();
    else if (name == "key") spec.key = value.cast<std::string>();
    else if (name == "value") spec.value = value.cast<std::string>();
    else if (name == "output") spec.output = value.cast<std::string>();
    else if (name == "ffn") spec.ffn = value.cast<std::string>();
    else if (name == "sphere") spec.sphere = value.cast<bool>();
    else fail("unknown argument '{}'", name);
  }
  ParticlesOptions options;
  options.simulation.integrator = parse_integrator(integrator);
  options.simulation.variable = parse_state_variable(variable);
  options.simulation.save_every = save_every;
  options.diagnostics.every = diagnose_every;
  options.diagnostics.cluster_on = parse_state_variable(cluster_on.value_or(spec.sphere ? "x" : "z"));
  options.attention_times = attention_times;
  options.perturbed_runs = perturbed_runs, options.perturbation = perturbation;
  if (save_every < 1 || diagnose_every < 1) fail("save_every and diagnose_every must be >= 1");
  if (perturbed_runs < 0 || !(perturbation > 0)) fail("perturbed_runs must be >= 0 and perturbation > 0");

  const bool tokens_given = !ids.is_none() || data || prompt || tokenizer;
  if (!from_model && tokens_given) fail("ids, data, prompt and tokenizer are a model's tokens: give model too");
  if (spec_overrides.contains("init") && tokens_given) fail("init makes the tokens: give it or ids, data, prompt and tokenizer");
  std::optional<AnalysisInputs> in;
  std::optional<SampleOptions> tokens;  // none: init makes them
  if (from_model) {
    in = given_model(model);
    if (!spec_overrides.contains("init")) tokens = py_samples(ids, data, prompt, 1, spec.n, 1, 0, tokenizer).options;
  }
  ParticlesResult r;
  std::optional<ResultsDir> dir;
  {
    py::gil_scoped_release release;
    if (out) dir.emplace(*out, "particles", std::vector<std::string>{"tdyn.particles"});
    if (in) {
      r = particles_to(dir ? &*dir : nullptr, in->model_path, *in->model, in->load, {layer, head.value_or(-1), spec.n}, tokens,
                       tokenizer.value_or(""), spec, options);
    } else {
      r = run_particles(spec, options);
      if (dir) write_particles(*dir, r, options);
    }
  }
  return particles_dict(r, options);
}

}  // namespace

py::dict particles_dict(const particles::ParticlesResult& r, const particles::ParticlesOptions& options) {
  py::dict result;
  result["results"] = to_python(results_json(r));
  result["options"] = to_python(options_json(r, options));
  result["model"] = to_python(r.model);
  result["x0"] = py::cast(r.experiment.x0);
  result["Q"] = py::cast(r.experiment.system.head.query);
  result["K"] = py::cast(r.experiment.system.head.key);
  result["V"] = py::cast(particles::Matrix(r.experiment.system.head.value_map()));
  result["t"] = py::array_t<double>(static_cast<int64_t>(r.trajectory.times.size()), r.trajectory.times.data());
  result["x"] = stacked_matrices(r.trajectory.x);
  result["z"] = stacked_matrices(r.trajectory.z);
  result["P"] = stacked_matrices(r.attention);
  std::vector<double> p_times;
  for (size_t k : r.attention_indices) p_times.push_back(r.trajectory.times[k]);
  result["P_times"] = py::array_t<double>(static_cast<int64_t>(p_times.size()), p_times.data());
  return result;
}

void bind_particles(py::module_& m) {
  m.def("particles", &particles_run,
      py::arg("preset") = py::none(), py::kw_only(), py::arg("model") = py::none(), py::arg("layer") = 0,
      py::arg("head") = py::none(), py::arg("ids") = py::none(), py::arg("data") = py::none(), py::arg("prompt") = py::none(),
      py::arg("tokenizer") = py::none(), py::arg("integrator") = "euler", py::arg("variable") = "x",
      py::arg("save_every") = 1, py::arg("diagnose_every") = 1, py::arg("cluster_on") = py::none(),
      py::arg("attention_times") = std::vector<double>{}, py::arg("perturbed_runs") = ParticlesOptions{}.perturbed_runs,
      py::arg("perturbation") = ParticlesOptions{}.perturbation, py::arg("out") = py::none(),
      R"doc(Runs what `tdyn particles` runs and returns what it writes.

preset: one of tdyn.particle_presets() (default 'polytope'), or model: a tdyn.Model or a checkpoint path,
whose layer `layer` (head `head`, default the whole layer) is simulated from the unit embeddings of the first
n tokens of one sample: ids (a list of token ids), else the first sample drawn as the CLI draws it from data (a
text file of passages, a .npy or .ids file; default the WikiText-2 test split) or prompt (one text), tokenized
with tokenizer (default the model's own); or from tokens made by init=. Keyword overrides as the CLI's flags:
n, d, d_head, T, dt, seed, init, query, key, value, output (generator specs or .npy paths), ffn, sphere. integrator 'euler', 'rk4' or
'dopri5'; variable 'x' or 'z'; cluster_on 'x' or 'z' (default x on the sphere, else z); attention_times
(default 0, T/2, T); perturbed_runs runs from initial tokens moved by perturbation x max |x_i(0)| for the
'locations' verdict. out: also write the CLI's results directory there.

Returns a dict: results, options and model (results.json's sections), and the arrays of the .npy files:
x0, Q, K, V (the value map W = O V used), t, x, z [saves, n, d], P [times, n, n], P_times.)doc");


  m.def("simulate", &simulate_particles, py::arg("preset") = py::none(), py::kw_only(), py::arg("Q") = py::none(),
        py::arg("K") = py::none(), py::arg("V") = py::none(), py::arg("O") = py::none(), py::arg("x0") = py::none(),
        py::arg("n") = py::none(), py::arg("d") = py::none(), py::arg("T") = py::none(), py::arg("dt") = py::none(),
        py::arg("integrator") = "euler", py::arg("variable") = "x", py::arg("seed") = py::none(),
        py::arg("init") = py::none(), py::arg("sphere") = py::none(), py::arg("save_every") = 1,
        py::arg("diagnostics") = true,
        R"doc(Simulates dx_i/dt = sum_j P_ij W x_j, P_ij = softmax_j <Q x_i, K x_j>, W = O V (or V).

preset: one of tdyn.particle_presets() ('polytope', 'hyperplanes', ...; default: V = Q = K = I, n = 20,
d = 2, T = 5, dt = 0.1); keyword arguments override it. Q, K [d_head, d], V [d_value, d], O [d, d_value]:
arrays, or generator specs as the CLI's --query etc. ('identity', 'psd:1', 'gaussian:2', ...); K defaults
to Q. x0 [n, d]: initial tokens (else init: 'uniform:5', 'gaussian:1', 'sphere'). integrator: 'euler'
(P frozen per step, the authors' scheme), 'rk4' or 'dopri5'; variable: 'x' or 'z' (rescaled).

Returns a dict: times [k], x and z [k, n, d] (z = R(t)^-1 x, see 'rescaling'), steps,
velocity_evaluations, the matrices used (Q, K, V, O, x0), settings, and diagnostics (clusters, rank and
Boolean-ness of P, leaders, hyperplane levels, polytope vertices, ...) unless diagnostics=False.)doc");

  m.def("particle_presets", &preset_names, "Names of the particle-simulation presets (the authors' experiments).");

  m.def(
      "attention_matrix", [](const Matrix& Q, const Matrix& K, const Matrix& X) {
        AttentionHead head;
        head.query = Q, head.key = K, head.value = Matrix::Identity(Q.cols(), Q.cols());
        head.validate();
        if (X.cols() != Q.cols()) fail("X has {} columns but Q and K take d = {}", X.cols(), Q.cols());
        return attention_matrix(head, X);
      },
      py::arg("Q"), py::arg("K"), py::arg("X"),
      "P [n, n] = row-wise softmax of <Q x_i, K x_j> for tokens X [n, d] (log-sum-exp, safe for large scores).");
}

}  // namespace tdyn::python
