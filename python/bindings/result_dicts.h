// Each analysis's result as the dict its Python function returns: "results", "options" and "model" as in the
// CLI's results.json, and the arrays the CLI writes as .npy, as numpy arrays under the same names. tdyn.power,
// tdyn.jacobian, tdyn.topology and tdyn.particles return one each; tdyn.analyze one per part.
#pragma once

#include <pybind11/pybind11.h>

#include "analysis/jacobian/run.h"
#include "analysis/particles/run.h"
#include "analysis/power/run.h"
#include "analysis/topology/run.h"

namespace tdyn::python {

namespace py = pybind11;

py::dict power_dict(const PowerResult& r, const PowerOptions& options);
// The mean and cumulative matrices are there when options.keep_matrices.
py::dict jacobian_dict(const JacobianResult& r, const JacobianOptions& options);
py::dict topology_dict(const TopologyResult& r, const TopologyOptions& options);
py::dict particles_dict(const particles::ParticlesResult& r, const particles::ParticlesOptions& options);

}  // namespace tdyn::python
