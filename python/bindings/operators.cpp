// Linear algebra on operators given as numpy arrays: operator metrics of a mean Jacobian, cumulative product or
// layer matrix; effective ranks; the dominant spectrum; Schur surgery; and tdyn's safetensors reader.
#include <optional>
#include <variant>
#include <vector>

#include <pybind11/complex.h>
#include <pybind11/eigen.h>
#include <pybind11/stl.h>

#include "analysis/operator_metrics.h"
#include "convert.h"
#include "io/safetensors.h"

namespace tdyn::python {
namespace {

using MatrixRef = Eigen::Ref<const Matrix>;

py::dict operator_metrics_dict(const MatrixRef& j, const std::vector<Index>& alignment_ks, double complex_tolerance) {
  OperatorMetricsOptions options;
  options.alignment_ks = alignment_ks;
  options.complex_tolerance = complex_tolerance;
  OperatorMetrics metrics;
  {
    py::gil_scoped_release release;
    metrics = operator_metrics(j, options);
  }
  py::dict d = to_python(metrics.to_json(false));
  d["eigenvalues"] = py::cast(std::move(metrics.eigenvalues));
  d["singular_values"] = py::cast(std::move(metrics.singular_values));
  return d;
}

py::dict effective_ranks_dict(const EffectiveRanks& r) {
  py::dict d;
  d["roy_vetterli"] = r.roy_vetterli;
  d["participation_ratio"] = r.participation_ratio;
  d["stable_rank"] = r.stable_rank;
  d["energy_rank"] = r.energy_rank;
  d["energy_fraction"] = r.energy_fraction;
  return d;
}

py::dict dominant_spectrum_dict(const MatrixRef& f) {
  DominantSpectrum s;
  {
    py::gil_scoped_release release;
    s = dominant_spectrum(f);
  }
  py::dict d = to_python(s.to_json());
  d["lambda1"] = s.lambda1;
  d["lambda2"] = s.lambda2 ? py::cast(*s.lambda2) : py::none();
  d["eigenvector_real"] = py::cast(std::move(s.eigenvector_real));
  d["eigenvector_imag"] = s.complex_pair ? py::cast(std::move(s.eigenvector_imag)) : py::none();
  return d;
}

// J_alpha = Q(Λ + αN)Q* for one alpha or a list of them (one Schur form for all).
py::object schur_surgery_of(const MatrixRef& j, const std::variant<double, std::vector<double>>& alphas,
                            std::optional<uint64_t> control_seed) {
  const bool one = std::holds_alternative<double>(alphas);
  const std::vector<double> list = one ? std::vector<double>{std::get<double>(alphas)} : std::get<std::vector<double>>(alphas);
  std::vector<ComplexMatrix> out;
  {
    py::gil_scoped_release release;
    linalg::require_finite(j, "schur_surgery");
    if (j.rows() != j.cols()) fail("schur_surgery: expected a square matrix, got {} x {}", j.rows(), j.cols());
    const linalg::ComplexSchur schur = linalg::complex_schur(j);
    for (double alpha : list)
      out.push_back(control_seed ? schur_surgery_control(schur, alpha, *control_seed) : schur_surgery(schur, alpha));
  }
  if (one) return py::cast(std::move(out[0]));
  return py::cast(std::move(out));
}

// {name: array} of every tensor in a .safetensors file, in its own dtype (F16 / BF16 widened to float32).
py::dict read_safetensors_file(const std::string& path) {
  TensorStore store;
  read_safetensors(fs::path(path), store);
  py::dict out;
  for (const std::string& name : store.names()) {
    const TensorInfo& info = store.get(name);
    switch (info.dtype) {
      case DType::F64: out[py::str(name)] = to_numpy(Tensor64(info.shape, store.doubles(name))); break;
      case DType::F32:
      case DType::F16:
      case DType::BF16: {
        FloatBuffer buffer = store.floats(name);
        out[py::str(name)] = to_numpy(Tensor(info.shape, std::vector<float>(buffer.data(), buffer.data() + buffer.size())));
        break;
      }
      default: {
        std::vector<int64_t> values = store.ints(name);
        out[py::str(name)] = py::array_t<int64_t>(info.shape, values.data());
      }
    }
  }
  return out;
}

}  // namespace

void bind_operators(py::module_& m) {
  m.def("operator_metrics", &operator_metrics_dict, py::arg("J"), py::arg("alignment_ks") = std::vector<Index>{1, 10, 100},
        py::arg("complex_tolerance") = 1e-8,
        R"doc(Metrics of a real square operator (mean Jacobian, cumulative product, layer matrix) in float64.

A dict with the keys of tdyn's results.json (d, frobenius_norm, spectral_norm, condition_number (None when
infinite), henrici_departure, self_alignment, expanding_fraction, complex_fraction, symmetry_index,
effective_rank, ...) plus the spectra as arrays: 'eigenvalues' (complex, by modulus, largest first) and
'singular_values' (descending).)doc");

  m.def(
      "effective_ranks",
      [](const Vector& singular_values, double energy_fraction) {
        return effective_ranks_dict(effective_ranks(singular_values, energy_fraction));
      },
      py::arg("singular_values"), py::arg("energy_fraction") = 0.9,
      "Effective ranks of a singular-value spectrum (any order): roy_vetterli (exp-entropy), participation_ratio "
      "((sum s^2)^2 / sum s^4), stable_rank (sum s^2 / s_1^2) and energy_rank (smallest k holding energy_fraction).");

  m.def("dominant_spectrum", &dominant_spectrum_dict, py::arg("F"),
        R"doc(The dominant eigenvalue of a real square matrix and its eigenvector (the power-method view).

lambda1 (largest modulus; of a complex pair the member with Im > 0), complex_pair, lambda2 (the next one that
is not lambda1's conjugate, or None), modulus_ratio |l2|/|l1|, gap |l1| - |l2|, and the unit eigenvector
v1 = eigenvector_real + i eigenvector_imag (eigenvector_imag None for a real lambda1).)doc");

  m.def("schur_surgery", &schur_surgery_of, py::arg("J"), py::arg("alpha"), py::arg("control_seed") = py::none(),
        R"doc(Schur surgery: J_alpha = Q(Lambda + alpha N)Q* from the complex Schur form J = Q(Lambda + N)Q*.

alpha: a number (returns one complex matrix) or a list (returns a list; the Schur form is computed once).
J_alpha is complex in general. control_seed: the control instead, N replaced by a random strictly upper
triangular matrix with the same Frobenius norm.)doc");

  m.def(
      "cumulative_products", [](const std::vector<Matrix>& layers) { return cumulative_products(layers); },
      py::arg("matrices"), "C_1 = J_1, C_k = J_k C_(k-1) for a list of square matrices in depth order.");

  m.def("read_safetensors", &read_safetensors_file, py::arg("path"),
        "Every tensor of a .safetensors file as {name: array} (float64 / float32 / int64; F16 and BF16 as float32), "
        "after tdyn's full header validation.");
}

}  // namespace tdyn::python
