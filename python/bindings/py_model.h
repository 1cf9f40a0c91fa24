// tdyn.Model's C++ side, shared by the binding files that take a loaded model.
#pragma once

#include <memory>
#include <string>

#include <pybind11/pybind11.h>

#include "analysis/jacobian/jacobian_model.h"
#include "core/error.h"
#include "model/loader.h"
#include "model/transformer.h"
#include "pipeline/inputs.h"

namespace tdyn::python {

// A loaded checkpoint with its forward pass; the float64 Jacobian weights are made on first use.
class PyModel {
 public:
  PyModel(std::shared_ptr<const Model> model, const LoadOptions& load)
      : model_(std::move(model)), load_(load), transformer_(std::make_shared<const Transformer>(model_)) {}

  const Model& model() const { return *model_; }
  const std::shared_ptr<const Model>& shared_model() const { return model_; }
  const LoadOptions& load_options() const { return load_; }  // how it was loaded
  const ModelConfig& config() const { return model_->config; }
  const Transformer& transformer() const { return *transformer_; }

  // The float64 Jacobian model of this model with the `zeroed` parts set to 0 (made again when they change).
  const JacobianModel& jacobian_model(const ZeroedParts& zeroed = {}) {
    if (!jacobians_ || jacobians_->zeroed().to_json() != zeroed.to_json())
      jacobians_ = std::make_unique<JacobianModel>(transformer_, zeroed);
    return *jacobians_;
  }

  void check_layer(int64_t layer) const {
    if (layer < 0 || layer >= config().n_layers) fail("layer {} is outside [0, {})", layer, config().n_layers);
  }

 private:
  std::shared_ptr<const Model> model_;
  LoadOptions load_;
  std::shared_ptr<const Transformer> transformer_;
  std::unique_ptr<JacobianModel> jacobians_;
};

// A model given to an analysis as a tdyn.Model (shared with it) or a path (loaded here with the default options):
// the inputs' model_path (as given, or the Model's own, which results.json records), load and model.
inline AnalysisInputs given_model(const pybind11::object& model_or_path) {
  AnalysisInputs in;
  if (pybind11::isinstance<PyModel>(model_or_path)) {
    const PyModel& m = model_or_path.cast<const PyModel&>();
    in.model_path = m.model().path.string(), in.load = m.load_options(), in.model = m.shared_model();
  } else {
    in.model_path = model_or_path.cast<std::string>();
    in.model = load_model(in.model_path, in.load);
  }
  return in;
}

}  // namespace tdyn::python
