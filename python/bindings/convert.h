// Conversions between tdyn's types and Python objects, shared by the binding files. Tensors become numpy arrays
// of the same dtype and shape; JSON results become plain dicts and lists.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include <nlohmann/json.hpp>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "core/tensor.h"

namespace tdyn::python {

namespace py = pybind11;

// Hands the tensor's buffer to numpy without copying: the array owns the moved-from tensor.
template <typename T>
py::array_t<T> to_numpy(TensorT<T>&& tensor) {
  auto* owned = new TensorT<T>(std::move(tensor));
  py::capsule release(owned, [](void* p) { delete static_cast<TensorT<T>*>(p); });
  return py::array_t<T>(owned->shape, owned->ptr(), release);
}

// A copy, for tensors that stay owned by someone else (an activation cache).
template <typename T>
py::array_t<T> to_numpy(const TensorT<T>& tensor) {
  return py::array_t<T>(tensor.shape, tensor.ptr());
}

// [k, rows, cols] in C order (as the .npy files hold them) of k matrices of one shape, in either storage order.
template <typename M>
py::array_t<double> stacked_matrices(const std::vector<M>& matrices) {
  using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t rows = matrices.empty() ? 0 : matrices.front().rows(), cols = matrices.empty() ? 0 : matrices.front().cols();
  py::array_t<double> out({static_cast<int64_t>(matrices.size()), rows, cols});
  double* p = out.mutable_data();
  for (const M& m : matrices) {
    Eigen::Map<RowMajor>(p, rows, cols) = m;
    p += rows * cols;
  }
  return out;
}

// null -> None, numbers, strings, arrays -> list, objects -> dict (key order kept).
py::object to_python(const nlohmann::json& value);

// Text that may hold a partial UTF-8 sequence (a byte-level token) as str, invalid bytes replaced by U+FFFD.
py::str lenient_str(const std::string& bytes);

// The parts of the module, one per binding file.
void bind_model(py::module_& m);
void bind_operators(py::module_& m);
void bind_particles(py::module_& m);
void bind_power(py::module_& m);
void bind_jacobian(py::module_& m);
void bind_topology(py::module_& m);
void bind_analyze(py::module_& m);
void bind_compare(py::module_& m);

}  // namespace tdyn::python
