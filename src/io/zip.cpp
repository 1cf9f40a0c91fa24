#include "io/zip.h"

#include <array>
#include <cstring>

#include "core/error.h"

namespace tdyn {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEocd = 0x06054b50;
constexpr uint32_t kZip64Eocd = 0x06064b50, kZip64Locator = 0x07064b50;
constexpr size_t kLocalSize = 30, kCentralSize = 46, kEocdSize = 22, kZip64EocdSize = 56, kZip64LocatorSize = 20;
constexpr uint16_t kZip64ExtraId = 0x0001;

// Little-endian fields of `bytes`, bounds-checked against the whole file.
class Reader {
 public:
  Reader(std::string_view bytes, const std::string& name) : bytes_(bytes), name_(name) {}
  uint64_t u(uint64_t at, int n, const char* what) const {
    if (at > bytes_.size() || bytes_.size() - at < static_cast<uint64_t>(n))
      fail("{}: zip {} at offset {} runs past the end of the file ({} bytes)", name_, what, at, bytes_.size());
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes_[at + i]);
    return v;
  }
  uint16_t u16(uint64_t at, const char* what) const { return static_cast<uint16_t>(u(at, 2, what)); }
  uint32_t u32(uint64_t at, const char* what) const { return static_cast<uint32_t>(u(at, 4, what)); }
  uint64_t u64(uint64_t at, const char* what) const { return u(at, 8, what); }
  std::string_view bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  std::string_view bytes_;
  const std::string& name_;
};

uint32_t crc32(std::string_view bytes) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (char ch : bytes) c = table[(c ^ static_cast<unsigned char>(ch)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void put(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

}  // namespace

bool looks_like_zip(std::string_view head) { return head.size() >= 4 && head.substr(0, 4) == "PK\x03\x04"; }

namespace {

// Where the central directory lies, from the end record (and the ZIP64 end record when there is one).
struct CentralDirectory {
  uint64_t offset = 0, size = 0, count = 0;
};

CentralDirectory central_directory(const Reader& r) {
  const std::string& name = r.name();
  const uint64_t size = r.bytes().size();
  if (size < kEocdSize) fail("{}: too short for a zip archive ({} bytes)", name, size);
  // The EOCD is the last record; a comment of up to 65535 bytes may follow it.
  uint64_t eocd = UINT64_MAX;
  for (uint64_t at = size - kEocdSize + 1; at-- > 0 && size - at <= kEocdSize + 0xFFFF;) {
    if (r.u32(at, "end record") == kEocd && at + kEocdSize + r.u16(at + 20, "end record") <= size) {
      eocd = at;
      break;
    }
  }
  if (eocd == UINT64_MAX)
    fail("{}: no zip end-of-central-directory record in the last {} bytes: not a zip archive, or truncated", name,
         std::min<uint64_t>(size, kEocdSize + 0xFFFF));
  uint64_t disk = r.u16(eocd + 4, "end record"), cd_disk = r.u16(eocd + 6, "end record");
  uint64_t count = r.u16(eocd + 10, "end record"), count_here = r.u16(eocd + 8, "end record");
  uint64_t cd_size = r.u32(eocd + 12, "end record"), cd_offset = r.u32(eocd + 16, "end record");
  if (eocd >= kZip64LocatorSize && r.u32(eocd - kZip64LocatorSize, "ZIP64 locator") == kZip64Locator) {
    const uint64_t loc = eocd - kZip64LocatorSize;
    const uint64_t record = r.u64(loc + 8, "ZIP64 locator");
    if (r.u32(loc + 16, "ZIP64 locator") != 1) fail("{}: multi-disk zip archives are not supported", name);
    if (record > loc || loc - record < kZip64EocdSize || r.u32(record, "ZIP64 end record") != kZip64Eocd)
      fail("{}: the ZIP64 locator points to offset {}, where there is no ZIP64 end record", name, record);
    disk = r.u32(record + 16, "ZIP64 end record");
    cd_disk = r.u32(record + 20, "ZIP64 end record");
    count_here = r.u64(record + 24, "ZIP64 end record");
    count = r.u64(record + 32, "ZIP64 end record");
    cd_size = r.u64(record + 40, "ZIP64 end record");
    cd_offset = r.u64(record + 48, "ZIP64 end record");
    eocd = record;  // the central directory ends where the ZIP64 records begin
  } else if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    fail("{}: the end record says ZIP64 but there is no ZIP64 locator before it", name);
  }
  if (disk != 0 || cd_disk != 0 || count_here != count) fail("{}: multi-disk zip archives are not supported", name);
  if (cd_offset > eocd || cd_size > eocd - cd_offset)
    fail("{}: the central directory (offset {}, {} bytes) lies outside the file before its end record at {}", name,
         cd_offset, cd_size, eocd);
  if (count > cd_size / kCentralSize)
    fail("{}: {} entries cannot fit in a {}-byte central directory", name, count, cd_size);
  return {cd_offset, cd_size, count};
}

// Central directory record i of cd at offset `at`, which moves past it; with its data's offset from the local header.
ZipEntry central_record(const Reader& r, const CentralDirectory& cd, uint64_t i, uint64_t& at) {
  const std::string& name = r.name();
  const uint64_t cd_end = cd.offset + cd.size;
  if (cd_end - at < kCentralSize || r.u32(at, "central record") != kCentralHeader)
    fail("{}: central directory record {} of {} at offset {} is missing or has a bad signature", name, i, cd.count, at);
  ZipEntry e;
  e.flags = r.u16(at + 8, "central record");
  e.method = r.u16(at + 10, "central record");
  e.size = r.u32(at + 20, "central record");
  e.uncompressed = r.u32(at + 24, "central record");
  const uint64_t name_len = r.u16(at + 28, "central record"), extra_len = r.u16(at + 30, "central record");
  const uint64_t comment_len = r.u16(at + 32, "central record");
  uint64_t start_disk = r.u16(at + 34, "central record");
  uint64_t local = r.u32(at + 42, "central record");
  const uint64_t record_len = kCentralSize + name_len + extra_len + comment_len;
  if (record_len > cd_end - at) fail("{}: central directory record {} runs past the central directory", name, i);
  e.name = std::string(r.bytes().substr(at + kCentralSize, name_len));
  // The ZIP64 extra field holds, in this order, each of these whose 32-bit (16-bit) field is all ones.
  for (uint64_t x = at + kCentralSize + name_len, x_end = x + extra_len; x + 4 <= x_end;) {
    const uint16_t id = r.u16(x, "extra field"), len = r.u16(x + 2, "extra field");
    if (len > x_end - x - 4) fail("{}: entry '{}' has an extra field running past its record", name, e.name);
    if (id == kZip64ExtraId) {
      uint64_t f = x + 4;
      auto take64 = [&](uint64_t& v, uint64_t all_ones) {
        if (v != all_ones) return;
        if (f + 8 > x + 4 + len) fail("{}: entry '{}' has a ZIP64 extra field that is too short", name, e.name);
        v = r.u64(f, "ZIP64 extra field");
        f += 8;
      };
      take64(e.uncompressed, 0xFFFFFFFF);
      take64(e.size, 0xFFFFFFFF);
      take64(local, 0xFFFFFFFF);
      if (start_disk == 0xFFFF && f + 4 <= x + 4 + len) start_disk = r.u32(f, "ZIP64 extra field");
    }
    x += 4 + len;
  }
  if (start_disk != 0) fail("{}: entry '{}' starts on disk {}; multi-disk zip archives are not supported", name, e.name, start_disk);
  if (local > cd.offset || cd.offset - local < kLocalSize || r.u32(local, "local header") != kLocalHeader)
    fail("{}: entry '{}' has no local file header at offset {}", name, e.name, local);
  const uint64_t data = local + kLocalSize + r.u16(local + 26, "local header") + r.u16(local + 28, "local header");
  if (data > cd.offset || e.size > cd.offset - data)
    fail("{}: entry '{}' ({} bytes at offset {}) runs past the end of the entries at {}: the archive is truncated",
         name, e.name, e.size, data, cd.offset);
  e.data_offset = data;
  at += record_len;
  return e;
}

}  // namespace

ZipArchive::ZipArchive(std::shared_ptr<const MappedFile> file) : file_(std::move(file)) {
  const Reader r(file_->view(), file_->path());
  const CentralDirectory cd = central_directory(r);
  entries_.reserve(cd.count);
  uint64_t at = cd.offset;
  for (uint64_t i = 0; i < cd.count; ++i) {
    ZipEntry e = central_record(r, cd, i, at);
    if (!by_name_.emplace(e.name, entries_.size()).second) fail("{}: entry '{}' appears twice", file_->path(), e.name);
    entries_.push_back(std::move(e));
  }
}

const ZipEntry* ZipArchive::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

std::string_view ZipArchive::data(const ZipEntry& e) const {
  if (e.flags & 1) fail("{}: entry '{}' is encrypted", file_->path(), e.name);
  if (e.method != 0)
    fail("{}: entry '{}' is compressed (zip method {}); only stored entries can be used in place, as torch.save "
         "writes them (re-save the file with torch.save, or convert it to safetensors)",
         file_->path(), e.name, e.method);
  if (e.uncompressed != e.size)
    fail("{}: stored entry '{}' has {} bytes but says it holds {}", file_->path(), e.name, e.size, e.uncompressed);
  return file_->view().substr(e.data_offset, e.size);
}

namespace {

// An entry's local header and bytes, its data aligned to 64 bytes as torch aligns it.
void put_local_entry(std::string& out, const std::string& name, const std::string& bytes, uint32_t crc, bool zip64) {
  const size_t zip64_local = zip64 ? 4 + 16 : 0;
  const size_t pad = (64 - (out.size() + kLocalSize + name.size() + zip64_local + 4) % 64) % 64;
  put(out, kLocalHeader, 4);
  put(out, zip64 ? 45 : 20, 2);
  put(out, 0, 2);  // flags
  put(out, 0, 2);  // stored
  put(out, 0, 4);  // time, date
  put(out, crc, 4);
  put(out, zip64 ? 0xFFFFFFFF : bytes.size(), 4);
  put(out, zip64 ? 0xFFFFFFFF : bytes.size(), 4);
  put(out, name.size(), 2);
  put(out, zip64_local + 4 + pad, 2);
  out += name;
  if (zip64) {
    put(out, kZip64ExtraId, 2);
    put(out, 16, 2);
    put(out, bytes.size(), 8);
    put(out, bytes.size(), 8);
  }
  put(out, 0x4246, 2);  // "FB": torch's padding field
  put(out, pad, 2);
  out.append(pad, 'Z');
  out += bytes;
}

void put_central_record(std::string& central, const std::string& name, uint64_t size, uint32_t crc, uint64_t local, bool zip64) {
  put(central, kCentralHeader, 4);
  put(central, zip64 ? 45 : 20, 2);
  put(central, zip64 ? 45 : 20, 2);
  put(central, 0, 2);
  put(central, 0, 2);
  put(central, 0, 4);
  put(central, crc, 4);
  put(central, zip64 ? 0xFFFFFFFF : size, 4);
  put(central, zip64 ? 0xFFFFFFFF : size, 4);
  put(central, name.size(), 2);
  put(central, zip64 ? 4 + 24 : 0, 2);
  put(central, 0, 2);  // comment
  put(central, 0, 2);  // disk
  put(central, 0, 2);  // internal attributes
  put(central, 0, 4);  // external attributes
  put(central, zip64 ? 0xFFFFFFFF : local, 4);
  central += name;
  if (zip64) {
    put(central, kZip64ExtraId, 2);
    put(central, 24, 2);
    put(central, size, 8);
    put(central, size, 8);
    put(central, local, 8);
  }
}

// The end records after a central directory of `count` entries and `size` bytes at `offset`.
void put_end_records(std::string& out, uint64_t count, uint64_t size, uint64_t offset, bool zip64) {
  if (zip64) {
    const uint64_t record = out.size();
    put(out, kZip64Eocd, 4);
    put(out, kZip64EocdSize - 12, 8);
    put(out, 45, 2);
    put(out, 45, 2);
    put(out, 0, 4);
    put(out, 0, 4);
    put(out, count, 8);
    put(out, count, 8);
    put(out, size, 8);
    put(out, offset, 8);
    put(out, kZip64Locator, 4);
    put(out, 0, 4);
    put(out, record, 8);
    put(out, 1, 4);
  }
  put(out, kEocd, 4);
  put(out, 0, 4);  // disks
  put(out, zip64 ? 0xFFFF : count, 2);
  put(out, zip64 ? 0xFFFF : count, 2);
  put(out, zip64 ? 0xFFFFFFFF : size, 4);
  put(out, zip64 ? 0xFFFFFFFF : offset, 4);
  put(out, 0, 2);
}

}  // namespace

std::string write_zip_stored(const std::vector<std::pair<std::string, std::string>>& entries, bool zip64) {
  std::string out, central;
  for (const auto& [name, bytes] : entries) {
    const uint64_t local = out.size();
    const uint32_t crc = crc32(bytes);
    put_local_entry(out, name, bytes, crc, zip64);
    put_central_record(central, name, bytes.size(), crc, local, zip64);
  }
  const uint64_t cd_offset = out.size();
  out += central;
  put_end_records(out, entries.size(), central.size(), cd_offset, zip64);
  return out;
}

}  // namespace tdyn
