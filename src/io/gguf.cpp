#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tdyn {

static_assert(std::endian::native == std::endian::little, "the GGUF reader maps little-endian data in place");

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::UInt8: return "uint8";
    case GgufType::Int8: return "int8";
    case GgufType::UInt16: return "uint16";
    case GgufType::Int16: return "int16";
    case GgufType::UInt32: return "uint32";
    case GgufType::Int32: return "int32";
    case GgufType::Float32: return "float32";
    case GgufType::Bool: return "bool";
    case GgufType::String: return "string";
    case GgufType::Array: return "array";
    case GgufType::UInt64: return "uint64";
    case GgufType::Int64: return "int64";
    case GgufType::Float64: return "float64";
  }
  return "?";
}

size_t gguf_scalar_size(GgufType t) {
  switch (t) {
    case GgufType::UInt8: case GgufType::Int8: case GgufType::Bool: return 1;
    case GgufType::UInt16: case GgufType::Int16: return 2;
    case GgufType::UInt32: case GgufType::Int32: case GgufType::Float32: return 4;
    case GgufType::UInt64: case GgufType::Int64: case GgufType::Float64: return 8;
    case GgufType::String: case GgufType::Array: return 0;
  }
  return 0;
}

std::optional<DType> ggml_type_dtype(uint32_t type) {
  for (const auto& t : kGgmlTensorTypes)
    if (t.id == type) return t.dtype;
  return std::nullopt;
}

std::optional<uint32_t> ggml_type_id(DType dtype) {
  for (const auto& t : kGgmlTensorTypes)
    if (t.dtype == dtype) return t.id;
  return std::nullopt;
}

std::string ggml_tensor_type_names() {
  std::string names;
  for (const auto& t : kGgmlTensorTypes) names += (names.empty() ? "" : ", ") + std::string(dtype_name(t.dtype));
  return names;
}

const char* ggml_type_name(uint32_t type) {
  // Indexed by ggml type id. Ids 4, 5 and 31..33, 36..38 are retired but still name what they were.
  static const char* const names[] = {
      "F32",     "F16",      "Q4_0",     "Q4_1",    "Q4_2",     "Q4_3",       "Q5_0",       "Q5_1",
      "Q8_0",    "Q8_1",     "Q2_K",     "Q3_K",    "Q4_K",     "Q5_K",       "Q6_K",       "Q8_K",
      "IQ2_XXS", "IQ2_XS",   "IQ3_XXS",  "IQ1_S",   "IQ4_NL",   "IQ3_S",      "IQ2_S",      "IQ4_XS",
      "I8",      "I16",      "I32",      "I64",     "F64",      "IQ1_M",      "BF16",       "Q4_0_4_4",
      "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",   "TQ2_0",   "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  return type < std::size(names) ? names[type] : nullptr;
}

namespace {

constexpr int kMaxArrayNesting = 8;  // real files nest at most once; deeper is corruption (and recursion)

// Smallest encodings, used to bound counts by the bytes that remain before anything is allocated.
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;          // empty key, type, one-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, n_dims, one dim, type, offset

bool is_known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::Float64); }

uint64_t min_value_bytes(GgufType t) {
  if (t == GgufType::String) return 8;     // the length
  if (t == GgufType::Array) return 4 + 8;  // element type and count
  return gguf_scalar_size(t);
}

// Reads the header region of a mapped GGUF file front to back. Every read is bounds-checked; errors name
// the file, the byte offset and what was being read (`context`: the key or tensor at hand).
class Cursor {
 public:
  Cursor(const MappedFile& file, std::string name) : file_(file), name_(std::move(name)) {}

  std::string context = "header";

  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return file_.size() - offset_; }
  const std::string& file_name() const { return name_; }

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("{}: {}: {}", name_, context, fmt::format(format, std::forward<Args>(args)...));
  }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, file_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }

  std::string read_string(const char* what) {
    uint64_t length = read<uint64_t>(what);
    if (length > remaining())
      error("{} of {} bytes at offset {} runs past the end of the file ({} bytes remain)", what, length, offset_, remaining());
    std::string s(reinterpret_cast<const char*>(file_.data() + offset_), length);
    offset_ += length;
    return s;
  }

 private:
  void need(uint64_t n, const char* what) const {
    if (n > remaining())
      error("file is truncated: {} needs {} bytes at offset {} but only {} remain", what, n, offset_, remaining());
  }

  const MappedFile& file_;
  std::string name_;
  uint64_t offset_ = 0;
};

nlohmann::json read_value(Cursor& in, uint32_t raw_type, int depth) {
  if (!is_known_value_type(raw_type)) in.error("unknown value type {} (known: 0..12)", raw_type);
  switch (static_cast<GgufType>(raw_type)) {
    case GgufType::UInt8: return in.read<uint8_t>("uint8 value");
    case GgufType::Int8: return in.read<int8_t>("int8 value");
    case GgufType::UInt16: return in.read<uint16_t>("uint16 value");
    case GgufType::Int16: return in.read<int16_t>("int16 value");
    case GgufType::UInt32: return in.read<uint32_t>("uint32 value");
    case GgufType::Int32: return in.read<int32_t>("int32 value");
    case GgufType::UInt64: return in.read<uint64_t>("uint64 value");
    case GgufType::Int64: return in.read<int64_t>("int64 value");
    case GgufType::Float32: return in.read<float>("float32 value");
    case GgufType::Float64: return in.read<double>("float64 value");
    case GgufType::Bool: {
      uint8_t b = in.read<uint8_t>("bool value");
      if (b > 1) in.error("bool value is {}, expected 0 or 1", b);
      return b == 1;
    }
    case GgufType::String: return in.read_string("string value");
    case GgufType::Array: {
      if (depth >= kMaxArrayNesting) in.error("arrays nested deeper than {} levels", kMaxArrayNesting);
      uint32_t element_type = in.read<uint32_t>("array element type");
      if (!is_known_value_type(element_type)) in.error("array has unknown element type {} (known: 0..12)", element_type);
      uint64_t count = in.read<uint64_t>("array count");
      uint64_t min_bytes = min_value_bytes(static_cast<GgufType>(element_type));
      if (count > in.remaining() / min_bytes)
        in.error("array of {} {} elements needs at least {} bytes per element but only {} bytes remain", count,
                 gguf_type_name(static_cast<GgufType>(element_type)), min_bytes, in.remaining());
      // No reserve(count): the array grows only as elements are actually read from the file.
      nlohmann::json array = nlohmann::json::array();
      for (uint64_t i = 0; i < count; ++i) array.push_back(read_value(in, element_type, depth + 1));
      return array;
    }
  }
  in.error("unknown value type {}", raw_type);
}

struct RawTensorInfo {
  std::string name;
  Shape shape;  // row-major: ne reversed
  uint64_t numel = 1;
  uint32_t type = 0;
  uint64_t offset = 0;
};

RawTensorInfo read_tensor_info(Cursor& in, uint64_t index) {
  RawTensorInfo t;
  in.context = fmt::format("tensor info #{}", index);
  t.name = in.read_string("tensor name");
  in.context = fmt::format("tensor '{}'", t.name);
  uint32_t n_dims = in.read<uint32_t>("n_dims");
  if (n_dims == 0 || n_dims > kGgufMaxDims) in.error("n_dims is {}, expected 1..{}", n_dims, kGgufMaxDims);
  std::vector<uint64_t> ne(n_dims);
  for (auto& d : ne) {
    d = in.read<uint64_t>("dimension");
    // 2^60 elements keep every later byte count (at most 8 bytes per element) below 2^63, away from overflow.
    // Each dimension is bounded on its own as well: after a zero dimension the product stays 0 whatever
    // follows, and a dimension past 2^63 would turn negative in Shape.
    constexpr uint64_t kMaxElements = uint64_t{1} << 60;
    if (d > kMaxElements || (d != 0 && t.numel > kMaxElements / d))
      in.error("dimensions overflow (a dimension or the element count beyond 2^60)");
    t.numel *= d;
  }
  t.shape.assign(ne.rbegin(), ne.rend());
  t.type = in.read<uint32_t>("ggml type");
  t.offset = in.read<uint64_t>("data offset");
  return t;
}

DType supported_dtype(uint32_t type, const std::string& tensor, const std::string& file) {
  if (std::optional<DType> dtype = ggml_type_dtype(type)) return *dtype;
  const char* name = ggml_type_name(type);
  if (!name) fail("{}: tensor '{}' has unknown ggml type id {}", file, tensor, type);
  fail("{}: unsupported tensor type {} for tensor '{}' (tdyn reads GGUF tensors of types {}; re-quantize the model "
       "to one of them, e.g. Q8_0, or convert it unquantized, e.g. with --outtype f16)", file, name, tensor,
       ggml_tensor_type_names());
}

}  // namespace

bool is_gguf_file(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return false;
  std::ifstream in(file, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

void read_gguf(const fs::path& path, TensorStore& store) { read_gguf(MappedFile::open(path), store); }

namespace {

struct GgufCounts {
  uint64_t tensors = 0, key_values = 0;
};

// The magic, the version (2 or 3, little-endian) and the counts, each count checked against the bytes left.
GgufCounts read_header(Cursor& in, const MappedFile& file) {
  const std::string& name = in.file_name();
  if (file.size() < 4 || std::memcmp(file.data(), "GGUF", 4) != 0)
    fail("{}: not a GGUF file (expected the magic \"GGUF\" in its first 4 bytes)", name);
  in.read<uint32_t>("magic");
  uint32_t version = in.read<uint32_t>("version");
  if (version == 1)
    fail("{}: GGUF version 1 is not supported (it stored counts and lengths as 32-bit integers); tdyn reads "
         "versions 2 and 3: re-convert the model with a current llama.cpp", name);
  const uint32_t swapped = __builtin_bswap32(version);
  if (swapped == 2 || swapped == 3) fail("{}: big-endian GGUF (version {}) is not supported", name, swapped);
  if (version != 2 && version != 3) fail("{}: unsupported GGUF version {} (tdyn reads versions 2 and 3)", name, version);
  GgufCounts c;
  c.tensors = in.read<uint64_t>("tensor count");
  c.key_values = in.read<uint64_t>("key/value count");
  if (c.key_values > in.remaining() / kMinKeyValueBytes)
    fail("{}: header claims {} key/value pairs but the {} bytes after it hold at most {}", name, c.key_values,
         in.remaining(), in.remaining() / kMinKeyValueBytes);
  if (c.tensors > in.remaining() / kMinTensorInfoBytes)
    fail("{}: header claims {} tensors but the {} bytes after it hold at most {} tensor infos", name, c.tensors,
         in.remaining(), in.remaining() / kMinTensorInfoBytes);
  if (c.key_values * kMinKeyValueBytes + c.tensors * kMinTensorInfoBytes > in.remaining())
    fail("{}: header claims {} key/value pairs and {} tensors, more than the {} bytes after it can hold", name, c.key_values,
         c.tensors, in.remaining());
  return c;
}

// The key/value pairs, and general.alignment (a power of two) among them.
nlohmann::json read_metadata(Cursor& in, uint64_t count, uint32_t& alignment) {
  nlohmann::json metadata = nlohmann::json::object();
  alignment = kGgufDefaultAlignment;
  for (uint64_t i = 0; i < count; ++i) {
    in.context = fmt::format("key/value #{}", i);
    std::string key = in.read_string("key");
    in.context = fmt::format("key '{}'", key);
    if (metadata.contains(key)) in.error("duplicate key");
    uint32_t type = in.read<uint32_t>("value type");
    nlohmann::json value = read_value(in, type, 0);
    if (key == "general.alignment") {
      if (type != static_cast<uint32_t>(GgufType::UInt32))
        in.error("must be a uint32, got a {}", is_known_value_type(type) ? gguf_type_name(static_cast<GgufType>(type)) : "?");
      alignment = value.get<uint32_t>();
      if (!std::has_single_bit(alignment)) in.error("alignment {} is not a power of two", alignment);
    }
    metadata[key] = std::move(value);
  }
  return metadata;
}

// Each tensor's bytes in the data section at data_start: aligned, whole blocks, inside the file, none overlapping.
std::vector<TensorInfo> place_tensors(const std::vector<RawTensorInfo>& raw, const MappedFile& file, uint64_t data_start,
                                      uint32_t alignment, const std::string& name) {
  const uint64_t data_size = data_start <= file.size() ? file.size() - data_start : 0;
  struct Span { uint64_t begin, end; const std::string* tensor; };
  std::vector<Span> spans;
  std::vector<TensorInfo> infos;
  for (const auto& t : raw) {
    DType dtype = supported_dtype(t.type, t.name, name);
    const int64_t block = dtype_layout(dtype).block_elements;
    if (t.shape.back() % block != 0)
      fail("{}: tensor '{}' of type {} has rows of ne[0] = {} values, not a whole number of its {}-value blocks", name,
           t.name, dtype_name(dtype), t.shape.back(), block);
    const uint64_t nbytes = tensor_bytes(dtype, static_cast<int64_t>(t.numel));
    if (t.offset % alignment != 0)
      fail("{}: tensor '{}' data offset {} is not a multiple of the alignment {}", name, t.name, t.offset, alignment);
    if (t.offset > data_size || nbytes > data_size - t.offset)
      fail("{}: tensor '{}' data [{}, {}) lies outside the {}-byte data section (shape {} of {}; truncated file?)", name,
           t.name, t.offset, t.offset + nbytes, data_size, shape_str(t.shape), dtype_name(dtype));
    if (nbytes > 0) spans.push_back({t.offset, t.offset + nbytes, &t.name});
    infos.push_back({t.name, dtype, t.shape, file.data() + data_start + t.offset, nbytes, name});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end)
      fail("{}: tensors '{}' and '{}' overlap in the data section ([{}, {}) and [{}, {}))", name, *spans[i - 1].tensor,
           *spans[i].tensor, spans[i - 1].begin, spans[i - 1].end, spans[i].begin, spans[i].end);
  }
  return infos;
}

}  // namespace

void read_gguf(std::shared_ptr<const MappedFile> file, TensorStore& store) {
  Cursor in(*file, file->path());
  const std::string& name = in.file_name();
  const GgufCounts counts = read_header(in, *file);
  // Collected locally: the store is only touched once the whole file has been validated.
  uint32_t alignment = 0;
  nlohmann::json metadata = read_metadata(in, counts.key_values, alignment);
  std::vector<RawTensorInfo> raw;
  std::set<std::string> tensor_names;
  for (uint64_t i = 0; i < counts.tensors; ++i) {
    raw.push_back(read_tensor_info(in, i));
    if (!tensor_names.insert(raw.back().name).second) fail("{}: duplicate tensor name '{}'", name, raw.back().name);
  }
  // The data section starts at the next multiple of the alignment; offsets are relative to it.
  const uint64_t data_start = (in.offset() + alignment - 1) / alignment * alignment;
  if (counts.tensors > 0 && data_start > file->size())
    fail("{}: the data section would start at byte {}, past the end of the file ({} bytes; truncated?)", name,
         data_start, file->size());
  for (auto& info : place_tensors(raw, *file, data_start, alignment, name)) store.add(std::move(info));
  for (auto& [key, value] : metadata.items()) store.metadata()[key] = std::move(value);
  store.keep_alive(std::move(file));
  store.format = "gguf";
}

}  // namespace tdyn
