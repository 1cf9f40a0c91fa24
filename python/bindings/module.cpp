// The Python module `tdyn`: numpy in, numpy out. Each part of the library is bound in its own file; this one
// holds the module itself, the conversions every part shares, and the mapping of tdyn::Error to tdyn.Error.
#include "convert.h"

#include "analysis/samples.h"
#include "core/error.h"
#include "kernels/packed_matrix.h"

namespace tdyn::python {

py::object to_python(const nlohmann::json& value) {
  using Type = nlohmann::json::value_t;
  switch (value.type()) {
    case Type::boolean: return py::bool_(value.get<bool>());
    case Type::number_integer: return py::int_(value.get<int64_t>());
    case Type::number_unsigned: return py::int_(value.get<uint64_t>());
    case Type::number_float: return py::float_(value.get<double>());
    case Type::string: return lenient_str(value.get_ref<const std::string&>());
    case Type::array: {
      py::list list;
      for (const auto& item : value) list.append(to_python(item));
      return std::move(list);
    }
    case Type::object: {
      py::dict dict;
      for (const auto& [key, item] : value.items()) dict[py::str(key)] = to_python(item);
      return std::move(dict);
    }
    default: return py::none();  // null, and the binary / discarded kinds no tdyn result uses
  }
}

py::str lenient_str(const std::string& bytes) {
  PyObject* text = PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace");
  if (text == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(text);
}

}  // namespace tdyn::python

PYBIND11_MODULE(tdyn, m) {
  using namespace tdyn::python;
  m.doc() = R"doc(tdyn: trained transformers as dynamical systems.

Load a checkpoint with tdyn.load(path), run it (logits and TransformerLens-named activations), take its layer
matrices F_t = O_t V_t and exact residual-stream Jacobians, measure operators (spectra, departure from
normality, effective ranks, Schur surgery) and simulate self-attention as a particle system. Arrays are
numpy arrays: float32 for activations (as the forward pass computes), float64 for analyses.
Errors in user data (files, shapes, ids, options) raise tdyn.Error with the library's message.)doc";
  m.attr("__version__") = TDYN_VERSION;
  m.attr("packed_products") = tdyn::packed_products_kernel();
  py::register_exception<tdyn::Error>(m, "Error", PyExc_RuntimeError).attr("__doc__") =
      "A problem with user data (a file, a shape, an id, an option); the message names what and where.";
  m.def("default_corpus", [] { return tdyn::default_corpus().string(); },
        "The file the analyses draw their samples from when given no data: the WikiText-2 test split that ships with "
        "tdyn (in $TDYN_DATA/wikitext-2/ when that is set).");
  bind_model(m);
  bind_operators(m);
  bind_particles(m);
  bind_power(m);
  bind_jacobian(m);
  bind_topology(m);
  bind_analyze(m);
  bind_compare(m);
}
