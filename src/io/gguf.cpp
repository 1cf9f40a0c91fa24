#include "io/gguf.h"

#include "core/error.h"

namespace tdyn {

bool is_gguf_file(const fs::path&) { return false; }
void read_gguf(const fs::path& file, TensorStore&) { fail("{}: GGUF is not supported yet", file.string()); }

}  // namespace tdyn
