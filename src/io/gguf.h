// GGUF (llama.cpp) checkpoints, versions 2 and 3.
#pragma once

#include "io/tensor_store.h"

namespace tdyn {

bool is_gguf_file(const fs::path& file);
void read_gguf(const fs::path& file, TensorStore& store);

}  // namespace tdyn
