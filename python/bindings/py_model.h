// tdyn.Model's C++ side, shared by the binding files that take a loaded model.
#pragma once

#include <memory>
#include <string>

#include <pybind11/pybind11.h>

#include "analysis/jacobian/jacobian_model.h"
#include "analysis/jacobian/run.h"
#include "core/error.h"
#include "model/loader.h"
#include "model/transformer.h"

namespace tdyn::python {

// A loaded checkpoint with its forward pass; the float64 Jacobian weights are made on first use.
class PyModel {
 public:
  explicit PyModel(std::shared_ptr<const Model> model)
      : model_(std::move(model)), transformer_(std::make_shared<const Transformer>(model_)) {}

  const Model& model() const { return *model_; }
  const std::shared_ptr<const Model>& shared_model() const { return model_; }
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
  std::shared_ptr<const Transformer> transformer_;
  std::unique_ptr<JacobianModel> jacobians_;
};

// A checkpoint given to an analysis as a tdyn.Model (shared with it) or a path (loaded here), with the path that
// results.json records: as given, or the loaded Model's own.
inline JacobianCheckpoint given_checkpoint(const pybind11::object& model_or_path) {
  if (pybind11::isinstance<PyModel>(model_or_path)) {
    const PyModel& m = model_or_path.cast<const PyModel&>();
    return {m.model().path.string(), m.shared_model()};
  }
  const std::string path = model_or_path.cast<std::string>();
  return {path, load_model(path, LoadOptions{})};
}

}  // namespace tdyn::python
