// ModelConfig from GGUF metadata (general.architecture and its "<arch>.*" keys).
#pragma once

#include "io/tensor_store.h"
#include "model/config.h"

namespace tdyn {

ModelConfig gguf_config(const TensorStore& store, const std::string& origin);

}  // namespace tdyn
