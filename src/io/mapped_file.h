// A read-only memory mapping of a whole file. Weights stay in the page cache and are used in place where
// their dtype and alignment allow, so a large model is never held in RAM twice. from_bytes() presents an
// in-memory copy the same way, so every reader also runs on bytes that never touched the disk (fuzzing).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/files.h"

namespace tdyn {

class MappedFile {
 public:
  static std::shared_ptr<const MappedFile> open(const fs::path& path);
  // A copy of `bytes`, exactly that size (so sanitizers see any read past the end), named `name` in errors.
  static std::shared_ptr<const MappedFile> from_bytes(std::string_view bytes, std::string name);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  std::unique_ptr<std::byte[]> owned_;  // from_bytes() storage; null for a real mapping
};

}  // namespace tdyn
