// Families as data: for each (family, format) a table mapping every weight role to its tensor name, its
// expected stored shape (a function of the config) and its storage layout. Binding a checkpoint walks the
// table, checks every shape, and rejects tensors the table does not know: a checkpoint either matches its
// family exactly or fails with an error naming the tensor and the expected vs actual shape.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/weights.h"

namespace tdyn {

enum class Role { Embed, AttnNorm, AttnQ, AttnK, AttnV, AttnO, MlpNorm, MlpGate, MlpUp, MlpDown, FinalNorm, Unembed };
enum class Part { Weight, Bias };
// Vector: [n]; OutIn: nn.Linear [out, in]; InOut: GPT-2 Conv1D [in, out].
enum class Layout { Vector, OutIn, InOut };

struct TensorSpec {
  Role role;
  Part part;
  std::string name;  // "{l}" stands for the layer index
  std::function<Shape(const ModelConfig&)> shape;
  Layout layout;
  std::function<bool(const ModelConfig&)> present;  // null: always present
};

struct FamilyTable {
  std::string family, format;
  std::vector<TensorSpec> tensors;
  std::vector<std::string> ignored_suffixes;  // on-disk tensors the forward pass does not use (buffers)
};

const FamilyTable& family_table(const std::string& family, const std::string& format);

// Binds every role of `config` to tensors of `store`; throws Error on a missing, unknown or misshapen tensor.
ModelWeights bind_weights(const ModelConfig& config, const TensorStore& store, const FamilyTable& table);

}  // namespace tdyn
