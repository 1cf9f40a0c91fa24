#include "analysis/pass/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace tdyn {

uint64_t fnv1a(const void* data, size_t size, uint64_t hash) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

namespace {

constexpr char kMagic[8] = {'T', 'D', 'Y', 'N', 'P', 'A', 'S', 'S'};
constexpr uint32_t kFileVersion = 2;

constexpr uint64_t kSectionPrefix = 24;

// FNV-1a over 64-bit words: a section's values are hundreds of megabytes at d = 4096, and a byte-wise hash
// would cost more than reading them.
uint64_t fnv1a_words(const void* data, size_t n_words, uint64_t hash) {
  const auto* words = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n_words; ++i) {
    uint64_t w;
    std::memcpy(&w, words + 8 * i, 8);
    hash = (hash ^ w) * 1099511628211ull;
  }
  return hash;
}

uint64_t section_checksum(const unsigned char (&prefix)[kSectionPrefix], const double* values, uint64_t count) {
  return fnv1a_words(values, count, fnv1a(prefix, sizeof prefix));
}

void fill_prefix(unsigned char (&prefix)[kSectionPrefix], uint32_t kind, int64_t index, uint64_t count) {
  const uint32_t zero = 0;
  std::memcpy(prefix, &kind, 4);
  std::memcpy(prefix + 4, &zero, 4);
  std::memcpy(prefix + 8, &index, 8);
  std::memcpy(prefix + 16, &count, 8);
}

// ---- File access ------------------------------------------------------------------------------------------

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void read_at(int fd, void* out, size_t n, uint64_t offset, const std::string& name) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) fail("{}: read failed at byte {} ({})", name, offset, got == 0 ? "unexpected end" : std::strerror(errno));
    p += got, n -= got, offset += got;
  }
}

void write_all(int fd, const void* data, size_t n, const std::string& name) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) fail("{}: write failed ({})", name, std::strerror(errno));
    p += put, n -= put;
  }
}

}  // namespace

PassScan scan_pass(const fs::path& path, bool unfinished_ok) {
  const std::string name = path.string();
  Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.fd < 0) fail("{}: cannot open the pass file ({})", name, std::strerror(errno));
  const uint64_t size = fs::file_size(path);
  uint64_t at = 0;
  auto take = [&](void* out, uint64_t n, const char* what) {
    if (size - at < n) fail("{}: truncated pass file (it ends inside {})", name, what);
    read_at(file.fd, out, n, at, name);
    at += n;
  };
  char magic[sizeof kMagic];
  take(magic, sizeof magic, "the magic");
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) fail("{}: not a tdyn pass file", name);
  uint32_t version = 0;
  take(&version, sizeof version, "the version");
  if (version != kFileVersion) fail("{}: pass file version {} (this tdyn reads version {})", name, version, kFileVersion);
  uint64_t header_size = 0, header_checksum = 0;
  take(&header_size, sizeof header_size, "the header size");
  if (header_size > size - at) fail("{}: truncated pass file (header of {} bytes)", name, header_size);
  std::string header(header_size, '\0');
  take(header.data(), header_size, "the header");
  take(&header_checksum, sizeof header_checksum, "the header checksum");
  if (header_checksum != fnv1a(header.data(), header.size())) fail("{}: checksum mismatch in the header: the pass file is damaged", name);
  PassScan scan;
  try {
    scan.header = nlohmann::json::parse(header);
    if (!scan.header.is_object() || !scan.header.contains("identity")) fail("the header is not a pass header");
  } catch (const nlohmann::json::exception& e) {
    fail("{}: bad header: {}", name, e.what());
  } catch (const Error& e) {
    fail("{}: {}", name, e.what());
  }
  scan.end_of_layers = at;

  while (at < size && !scan.complete) {
    unsigned char prefix[kSectionPrefix];
    if (size - at < kSectionPrefix) {
      if (unfinished_ok) break;
      fail("{}: truncated pass file (it ends inside a section header at byte {})", name, at);
    }
    take(prefix, kSectionPrefix, "a section header");
    PassFile::Section s;
    std::memcpy(&s.kind, prefix, 4);
    std::memcpy(&s.index, prefix + 8, 8);
    std::memcpy(&s.count, prefix + 16, 8);
    s.offset = at;
    if (s.kind < kCorrelation || s.kind > kComplete || s.index < 0) fail("{}: unknown section (kind {}, index {}) at byte {}: the pass file is damaged", name, s.kind, s.index, at - kSectionPrefix);
    if (s.count > (size - at) / 8 || (size - at) - 8 * s.count < 8) {
      if (unfinished_ok) break;
      fail("{}: truncated pass file (a section of {} values at byte {})", name, s.count, at - kSectionPrefix);
    }
    at += 8 * s.count + 8;
    if (s.kind == kLayerDone || s.kind == kComplete) {  // small: check them now
      std::vector<double> values(s.count);
      uint64_t checksum = 0;
      read_at(file.fd, values.data(), 8 * s.count, s.offset, name);
      read_at(file.fd, &checksum, 8, s.offset + 8 * s.count, name);
      if (checksum != section_checksum(prefix, values.data(), s.count)) {
        if (unfinished_ok) break;
        fail("{}: checksum mismatch in a layer marker: the pass file is damaged", name);
      }
      if (s.kind == kLayerDone) {
        if (s.index != scan.layers_done) fail("{}: layer {} finished after {} layers: the pass file is damaged", name, s.index, scan.layers_done);
        scan.layers_done = s.index + 1;
        scan.end_of_layers = at;
      } else {
        if (values.size() != 3) fail("{}: the final section holds {} totals (expected 3)", name, values.size());
        scan.complete = true;
        scan.totals = values;
      }
    } else {
      scan.sections.push_back(s);
    }
  }
  if (scan.complete && at != size) fail("{}: {} unexpected bytes after the end of the pass", name, size - at);
  if (!scan.complete && !unfinished_ok)
    fail("{}: an unfinished pass ({} layers done): its run was interrupted; continue it with --resume", name, scan.layers_done);
  return scan;
}

PassWriter::PassWriter(const fs::path& path, const nlohmann::json& header)
    : path_(path), fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {
  if (fd_ < 0) fail("{}: cannot create the pass file ({})", path.string(), std::strerror(errno));
  const std::string text = header.dump(), name = path_.string();
  const uint64_t size = text.size(), checksum = fnv1a(text.data(), text.size());
  write_all(fd_, kMagic, sizeof kMagic, name);
  write_all(fd_, &kFileVersion, sizeof kFileVersion, name);
  write_all(fd_, &size, sizeof size, name);
  write_all(fd_, text.data(), text.size(), name);
  write_all(fd_, &checksum, sizeof checksum, name);
}

PassWriter::PassWriter(const fs::path& path, uint64_t end) : path_(path), fd_(::open(path.c_str(), O_WRONLY | O_CLOEXEC)) {
  if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(end)) != 0 || ::lseek(fd_, static_cast<off_t>(end), SEEK_SET) < 0)
    fail("{}: cannot continue the pass file ({})", path_.string(), std::strerror(errno));
}

PassWriter::~PassWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void PassWriter::section(uint32_t kind, int64_t index, std::span<const double> values) {
  unsigned char prefix[kSectionPrefix];
  fill_prefix(prefix, kind, index, values.size());
  const uint64_t checksum = section_checksum(prefix, values.data(), values.size());
  write_all(fd_, prefix, sizeof prefix, path_.string());
  write_all(fd_, values.data(), values.size() * sizeof(double), path_.string());
  write_all(fd_, &checksum, sizeof checksum, path_.string());
}

void PassWriter::sync() {
  if (::fsync(fd_) != 0) fail("{}: fsync failed ({})", path_.string(), std::strerror(errno));
}

WorkBuffer::WorkBuffer(const fs::path& path, int64_t n_floats, bool existing) : path_(path) {
  const uint64_t bytes = static_cast<uint64_t>(n_floats) * sizeof(float);
  if (bytes == 0) return;
  if (existing && (!fs::exists(path) || fs::file_size(path) != bytes))
    fail("{}: the working buffer of the interrupted pass is missing or has the wrong size; remove the pass file to start afresh",
         path.string());
  Fd file(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | (existing ? 0 : O_TRUNC), 0644));
  if (file.fd < 0 || ::ftruncate(file.fd, static_cast<off_t>(bytes)) != 0)
    fail("{}: cannot create a working buffer of {} bytes ({})", path.string(), bytes, std::strerror(errno));
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, file.fd, 0);
  if (p == MAP_FAILED) fail("{}: cannot map a working buffer of {} bytes ({})", path.string(), bytes, std::strerror(errno));
  data_ = static_cast<float*>(p);
  bytes_ = bytes;
}

WorkBuffer::~WorkBuffer() {
  if (data_) ::munmap(data_, bytes_);
}

void WorkBuffer::remove() {
  if (data_) ::munmap(data_, bytes_);
  data_ = nullptr;
  std::error_code ignored;
  fs::remove(path_, ignored);
}

RemovedUnlessKept::~RemovedUnlessKept() {
  std::error_code ignored;
  if (!kept)
    for (const fs::path& p : paths) fs::remove(p, ignored);
}

PassFile PassFile::open(const fs::path& path) {
  PassScan scan = scan_pass(path, false);
  PassFile f;
  f.path_ = path;
  f.header_ = std::move(scan.header);
  f.sections_ = std::move(scan.sections);
  const double most = 9007199254740992.0;  // 2^53
  for (double v : scan.totals)
    if (!(v >= 0 && v <= most && v == std::floor(v))) fail("{}: the totals are not counts: the pass file is damaged", path.string());
  f.n_samples_ = static_cast<int64_t>(scan.totals[0]);
  f.n_tokens_ = static_cast<int64_t>(scan.totals[1]);
  f.n_pairs_ = static_cast<int64_t>(scan.totals[2]);
  try {
    const nlohmann::json& spec = f.header_.at("spec");
    f.hooks_ = spec.at("boundaries").get<std::vector<std::string>>();
    for (const auto& p : spec.at("probes")) f.probes_.push_back(p.at("name").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: the header lacks the pass's spec ({})", path.string(), e.what());
  }
  return f;
}

std::vector<double> PassFile::section(uint32_t kind, const std::string& what, int64_t index) const {
  const auto at = std::find_if(sections_.begin(), sections_.end(), [&](const Section& s) { return s.kind == kind && s.index == index; });
  if (at == sections_.end()) fail("{}: the pass holds no {}", path_.string(), what);
  std::vector<double> values(at->count);
  uint64_t checksum = 0;
  Fd file(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.fd < 0) fail("{}: cannot open the pass file ({})", path_.string(), std::strerror(errno));
  read_at(file.fd, values.data(), values.size() * sizeof(double), at->offset, path_.string());
  read_at(file.fd, &checksum, sizeof checksum, at->offset + values.size() * sizeof(double), path_.string());
  unsigned char prefix[kSectionPrefix];
  fill_prefix(prefix, at->kind, at->index, at->count);
  if (checksum != section_checksum(prefix, values.data(), values.size()))
    fail("{}: checksum mismatch in the {}: the pass file is damaged", path_.string(), what);
  return values;
}

int64_t PassFile::boundary_index(const std::string& hook) const {
  const auto at = std::find(hooks_.begin(), hooks_.end(), hook);
  if (at == hooks_.end()) fail("{}: the pass has no sums at {}", path_.string(), hook);
  return at - hooks_.begin();
}

int64_t PassFile::probe_index(const std::string& name) const {
  const auto at = std::find(probes_.begin(), probes_.end(), name);
  if (at == probes_.end()) fail("{}: the pass has no token probe '{}'", path_.string(), name);
  return at - probes_.begin();
}

void PassFile::remove_when_done() {
  if (remove_) return;  // already set: replacing it would remove the file now, while this PassFile still reads it
  auto remover = std::make_shared<RemovedUnlessKept>();
  remover->paths = {path_};
  remove_ = std::move(remover);
}

int64_t finished_layers(const fs::path& path) {
  try {
    return fs::exists(path) ? scan_pass(path, true).layers_done : 0;
  } catch (const Error&) {
    return 0;  // a header still being written
  }
}

}  // namespace tdyn
