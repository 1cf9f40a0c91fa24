// tdyn.Model's C++ side, shared by the binding files that take a loaded model.
#pragma once

#include <memory>

#include "analysis/jacobian/jacobian_model.h"
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

}  // namespace tdyn::python
