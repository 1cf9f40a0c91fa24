// File helpers shared by every writer: outputs are written to a temporary name and renamed into place, so a
// crash or kill never leaves a half-written file where a result is expected.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace tdyn {

namespace fs = std::filesystem;

// Writes `bytes` to `path` atomically (temp file in the same directory, fsync, rename).
void write_file_atomic(const fs::path& path, std::string_view bytes);

// Reads a whole (small) file; throws Error naming the file when it cannot.
std::string read_file(const fs::path& path);

}  // namespace tdyn
