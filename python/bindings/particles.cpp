// Self-attention as an interacting particle system (Geshkovski et al. 2023): tdyn.simulate runs a preset or a
// head given as arrays and returns the trajectories with the diagnostics of the paper's theorems.
#include <optional>
#include <string>
#include <variant>

#include <pybind11/eigen.h>
#include <pybind11/stl.h>

#include "analysis/particles.h"
#include "analysis/particles_diagnostics.h"
#include "analysis/particles_presets.h"
#include "convert.h"

namespace tdyn::python {
namespace {

using namespace tdyn::particles;

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

// (k, n, d) array of k matrices (n × d).
py::array_t<double> stack(const std::vector<Matrix>& frames) {
  const int64_t n = frames.empty() ? 0 : frames[0].rows(), d = frames.empty() ? 0 : frames[0].cols();
  py::array_t<double> out({static_cast<int64_t>(frames.size()), n, d});
  double* p = out.mutable_data();
  for (const Matrix& frame : frames) p = std::copy(frame.data(), frame.data() + frame.size(), p);
  return out;
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
  result["x"] = stack(trajectory.x);
  result["z"] = stack(trajectory.z);
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

}  // namespace

void bind_particles(py::module_& m) {
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
