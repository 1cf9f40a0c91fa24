#include "core/npy.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <regex>

#include <fmt/ranges.h>

#include "core/error.h"

namespace tdyn {
namespace {

size_t item_size(const std::string& descr, const std::string& name) {
  if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '|')) {
    fail("{}: unsupported npy dtype '{}' (only little-endian arrays are read)", name, descr);
  }
  static const std::vector<std::string> known = {"f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1"};
  std::string code = descr.substr(1);
  for (const auto& k : known) {
    if (code == k) return static_cast<size_t>(k[1] - '0');
  }
  fail("{}: unsupported npy dtype '{}'", name, descr);
}

template <typename Out>
std::vector<Out> convert(const NpyArray& a, bool allow_float) {
  std::string code = a.descr.substr(1);
  size_t n = static_cast<size_t>(numel(a.shape));
  std::vector<Out> out(n);
  auto each = [&](auto tag) {
    using In = decltype(tag);
    for (size_t i = 0; i < n; ++i) {
      In v;
      std::memcpy(&v, a.bytes.data() + i * sizeof(In), sizeof(In));
      out[i] = static_cast<Out>(v);
    }
  };
  if (code == "f4" && allow_float) each(float{});
  else if (code == "f8" && allow_float) each(double{});
  else if (code == "i1") each(int8_t{});
  else if (code == "i2") each(int16_t{});
  else if (code == "i4") each(int32_t{});
  else if (code == "i8") each(int64_t{});
  else if (code == "u1" || code == "b1") each(uint8_t{});
  else if (code == "u2") each(uint16_t{});
  else if (code == "u4") each(uint32_t{});
  else if (code == "u8") each(uint64_t{});
  else fail("npy array of dtype '{}' cannot be read as {}", a.descr, allow_float ? "numbers" : "integers");
  return out;
}

std::string header_for(const std::string& descr, const Shape& shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += fmt::format("{}{}", shape[i], shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  size_t total = 10 + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(dict.size());
  out.push_back(static_cast<char>(len & 0xff));
  out.push_back(static_cast<char>(len >> 8));
  return out + dict;
}

void write_raw(const fs::path& path, const std::string& descr, const void* data, size_t bytes, const Shape& shape) {
  std::string out = header_for(descr, shape);
  out.append(static_cast<const char*>(data), bytes);
  write_file_atomic(path, out);
}

}  // namespace

std::vector<float> NpyArray::as_float() const { return convert<float>(*this, true); }
std::vector<double> NpyArray::as_double() const { return convert<double>(*this, true); }
std::vector<int64_t> NpyArray::as_int64() const { return convert<int64_t>(*this, false); }

NpyArray parse_npy(std::string_view b, const std::string& name) {
  if (b.size() < 10 || std::memcmp(b.data(), "\x93NUMPY", 6) != 0) fail("{}: not a .npy file (bad magic)", name);
  int major = static_cast<unsigned char>(b[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(b[8]) | (static_cast<unsigned char>(b[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) fail("{}: truncated .npy header", name);
    uint32_t len;
    std::memcpy(&len, b.data() + 8, 4);
    header_len = len;
    offset = 12;
  } else {
    fail("{}: unsupported .npy version {}", name, major);
  }
  if (header_len > b.size() - offset) fail("{}: .npy header length {} runs past the end of the file", name, header_len);
  // numpy itself refuses headers over 10,000 bytes; a bound also keeps the header parsing cheap.
  if (header_len > 65536) fail("{}: .npy header of {} bytes is too long (at most 65536)", name, header_len);
  std::string header(b.substr(offset, header_len));
  std::smatch m;
  NpyArray a;
  if (!std::regex_search(header, m, std::regex("'descr'\\s*:\\s*'([^']+)'"))) fail("{}: .npy header has no descr", name);
  a.descr = m[1];
  if (std::regex_search(header, m, std::regex("'fortran_order'\\s*:\\s*True"))) fail("{}: Fortran-order .npy arrays are not supported", name);
  if (!std::regex_search(header, m, std::regex("'shape'\\s*:\\s*\\(([^)]*)\\)"))) fail("{}: .npy header has no shape", name);
  std::string dims = m[1];
  std::regex num("[0-9]+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it) {
    if (it->str().size() > 15) fail("{}: .npy dimension too large", name);
    a.shape.push_back(std::stoll(it->str()));
  }
  size_t isz = item_size(a.descr, name);
  size_t n = 1;
  for (int64_t d : a.shape) {
    if (d != 0 && n > (SIZE_MAX / 16) / static_cast<size_t>(d)) fail("{}: .npy shape overflows", name);
    n *= static_cast<size_t>(d);
  }
  size_t data_off = offset + header_len;
  if (n * isz != b.size() - data_off) {
    fail("{}: .npy data is {} bytes, shape {} of {} needs {}", name, b.size() - data_off, shape_str(a.shape), a.descr, n * isz);
  }
  a.bytes.assign(b.begin() + data_off, b.end());
  return a;
}

NpyArray read_npy(const fs::path& path) { return parse_npy(read_file(path), path.string()); }

void write_npy(const fs::path& p, const float* d, const Shape& s) { write_raw(p, "<f4", d, numel(s) * 4, s); }
void write_npy(const fs::path& p, const double* d, const Shape& s) { write_raw(p, "<f8", d, numel(s) * 8, s); }
void write_npy(const fs::path& p, const int32_t* d, const Shape& s) { write_raw(p, "<i4", d, numel(s) * 4, s); }
void write_npy(const fs::path& p, const int64_t* d, const Shape& s) { write_raw(p, "<i8", d, numel(s) * 8, s); }
void write_npy_complex(const fs::path& p, const double* d, const Shape& s) { write_raw(p, "<c16", d, numel(s) * 16, s); }

NpyStream::NpyStream(const fs::path& path, const Shape& shape)
    : path_(path), temporary_(path.string() + ".partial"), expected_(numel(shape)) {
  file_ = std::fopen(temporary_.c_str(), "wb");
  if (!file_) fail("{}: cannot create ({})", temporary_.string(), std::strerror(errno));
  const std::string header = header_for("<f8", shape);
  if (std::fwrite(header.data(), 1, header.size(), file_) != header.size()) fail("{}: write failed", temporary_.string());
}

NpyStream::~NpyStream() {
  if (!file_) return;
  std::fclose(file_);
  std::error_code ignored;
  fs::remove(temporary_, ignored);
}

void NpyStream::append(const double* data, int64_t n) {
  TDYN_CHECK(file_ && written_ + n <= expected_);
  if (std::fwrite(data, sizeof(double), static_cast<size_t>(n), file_) != static_cast<size_t>(n))
    fail("{}: write failed ({})", temporary_.string(), std::strerror(errno));
  written_ += n;
}

void NpyStream::append_matrix(const double* column_major, int64_t rows, int64_t cols) {
  std::vector<double> row(cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) row[j] = column_major[j * rows + i];
    append(row.data(), cols);
  }
}

void NpyStream::finish() {
  TDYN_CHECK(file_);
  if (written_ != expected_) fail("{}: {} of {} values written", path_.string(), written_, expected_);
  const bool ok = std::fflush(file_) == 0 && ::fsync(fileno(file_)) == 0;
  std::fclose(file_);
  file_ = nullptr;
  if (!ok) fail("{}: flush failed ({})", temporary_.string(), std::strerror(errno));
  fs::rename(temporary_, path_);
}

}  // namespace tdyn
