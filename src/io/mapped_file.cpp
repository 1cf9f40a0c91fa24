#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace tdyn {

std::shared_ptr<const MappedFile> MappedFile::open(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open '{}': {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("'{}' is not a regular file", path.string());
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path.string();
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail("cannot map '{}': {}", path.string(), std::strerror(err));
    }
    file->data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);
  return file;
}

std::shared_ptr<const MappedFile> MappedFile::from_bytes(std::string_view bytes, std::string name) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = std::move(name);
  file->size_ = bytes.size();
  file->owned_.reset(new std::byte[bytes.size()]);
  if (!bytes.empty()) std::memcpy(file->owned_.get(), bytes.data(), bytes.size());
  file->data_ = file->owned_.get();
  return file;
}

MappedFile::~MappedFile() {
  if (data_ && !owned_) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace tdyn
