#include "model/gguf_config.h"

#include "core/error.h"

namespace tdyn {

ModelConfig gguf_config(const TensorStore&, const std::string& origin) { fail("{}: GGUF is not supported yet", origin); }

}  // namespace tdyn
