#include "io/gguf_writer.h"

#include <bit>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/quant_blocks.h"

namespace tdyn {
namespace {

constexpr size_t kMaxTensorNameBytes = 63;  // llama.cpp keeps names in 64-byte buffers with a terminator

template <typename T>
void append(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void append_string(std::string& out, const std::string& s) {
  append<uint64_t>(out, s.size());
  out += s;
}

void pad_to(std::string& out, uint64_t alignment) { out.append((alignment - out.size() % alignment) % alignment, '\0'); }

template <typename T>
T scalar_as(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

uint32_t alignment_of(const GgufMetadata& metadata) {
  for (const auto& [key, value] : metadata) {
    if (key != "general.alignment") continue;
    if (value.type() != GgufType::UInt32) fail("GGUF key 'general.alignment' must be a uint32, got a {}", gguf_type_name(value.type()));
    uint32_t alignment = value.to_json().get<uint32_t>();
    if (!std::has_single_bit(alignment)) fail("GGUF key 'general.alignment' is {}, expected a power of two", alignment);
    return alignment;
  }
  return kGgufDefaultAlignment;
}

uint32_t ggml_type_of(const GgufTensor& t) {
  std::optional<uint32_t> type = ggml_type_id(t.dtype);
  if (!type)
    fail("cannot write tensor '{}' of dtype {} to GGUF (supported: {})", t.name, dtype_name(t.dtype), ggml_tensor_type_names());
  return *type;
}

// A quantized type packs each row (ne[0] values) into whole blocks.
void check_rows_are_whole_blocks(const std::string& tensor, const Shape& shape, DType dtype) {
  const int64_t block = dtype_layout(dtype).block_elements;
  if (shape.back() % block != 0)
    fail("cannot write GGUF tensor '{}' of shape {} as {}: its rows of {} values are not a whole number of {}-value "
         "blocks", tensor, shape_str(shape), dtype_name(dtype), shape.back(), block);
}

}  // namespace

GgufValue GgufValue::string(std::string v) {
  GgufValue value;
  value.type_ = GgufType::String;
  value.text_ = std::move(v);
  return value;
}

GgufValue GgufValue::array(GgufType element_type, std::vector<GgufValue> elements) {
  for (const auto& e : elements) TDYN_CHECK(e.type_ == element_type);
  GgufValue value;
  value.type_ = GgufType::Array;
  value.element_type_ = element_type;
  value.elements_ = std::move(elements);
  return value;
}

GgufValue GgufValue::strings(const std::vector<std::string>& v) {
  std::vector<GgufValue> elements;
  elements.reserve(v.size());
  for (const auto& s : v) elements.push_back(string(s));
  return array(GgufType::String, std::move(elements));
}

GgufValue GgufValue::float32s(const std::vector<float>& v) {
  std::vector<GgufValue> elements;
  elements.reserve(v.size());
  for (float f : v) elements.push_back(float32(f));
  return array(GgufType::Float32, std::move(elements));
}

GgufValue GgufValue::int32s(const std::vector<int32_t>& v) {
  std::vector<GgufValue> elements;
  elements.reserve(v.size());
  for (int32_t i : v) elements.push_back(int32(i));
  return array(GgufType::Int32, std::move(elements));
}

nlohmann::json GgufValue::to_json() const {
  switch (type_) {
    case GgufType::UInt8: return scalar_as<uint8_t>(bits_);
    case GgufType::Int8: return scalar_as<int8_t>(bits_);
    case GgufType::UInt16: return scalar_as<uint16_t>(bits_);
    case GgufType::Int16: return scalar_as<int16_t>(bits_);
    case GgufType::UInt32: return scalar_as<uint32_t>(bits_);
    case GgufType::Int32: return scalar_as<int32_t>(bits_);
    case GgufType::UInt64: return scalar_as<uint64_t>(bits_);
    case GgufType::Int64: return scalar_as<int64_t>(bits_);
    case GgufType::Float32: return scalar_as<float>(bits_);
    case GgufType::Float64: return scalar_as<double>(bits_);
    case GgufType::Bool: return bits_ != 0;
    case GgufType::String: return text_;
    case GgufType::Array: {
      nlohmann::json array = nlohmann::json::array();
      for (const auto& e : elements_) array.push_back(e.to_json());
      return array;
    }
  }
  TDYN_CHECK(false);
  return {};
}

void GgufValue::encode(std::string& out) const {
  if (type_ == GgufType::String) {
    append_string(out, text_);
  } else if (type_ == GgufType::Array) {
    append<uint32_t>(out, static_cast<uint32_t>(element_type_));
    append<uint64_t>(out, elements_.size());
    for (const auto& e : elements_) e.encode(out);
  } else {
    out.append(reinterpret_cast<const char*>(&bits_), gguf_scalar_size(type_));  // little-endian host
  }
}

GgufTensor gguf_f32_tensor(const std::string& name, const Shape& shape, const float* data) {
  return {name, DType::F32, shape, std::string(reinterpret_cast<const char*>(data), numel(shape) * sizeof(float))};
}

GgufTensor gguf_quantized_tensor(const std::string& name, const Shape& shape, DType dtype, const float* data) {
  TDYN_CHECK(is_quantized(dtype));
  if (shape.empty()) fail("cannot write GGUF tensor '{}' as {}: it has no dimensions", name, dtype_name(dtype));
  check_rows_are_whole_blocks(name, shape, dtype);
  const int64_t row = shape.back(), rows = row > 0 ? numel(shape) / row : 0;
  const uint64_t row_bytes = tensor_bytes(dtype, row);
  std::string bytes(tensor_bytes(dtype, numel(shape)), '\0');
  for (int64_t r = 0; r < rows; ++r)
    quantize_row(dtype, data + r * row, reinterpret_cast<std::byte*>(bytes.data()) + r * row_bytes, row);
  return {name, dtype, shape, std::move(bytes)};
}

std::string gguf_bytes(const GgufMetadata& metadata, const std::vector<GgufTensor>& tensors) {
  const uint64_t alignment = alignment_of(metadata);
  std::string out;
  append<uint32_t>(out, kGgufMagic);
  append<uint32_t>(out, kGgufVersion);
  append<uint64_t>(out, tensors.size());
  append<uint64_t>(out, metadata.size());

  std::set<std::string> keys;
  for (const auto& [key, value] : metadata) {
    if (!keys.insert(key).second) fail("GGUF metadata key '{}' given twice", key);
    append_string(out, key);
    append<uint32_t>(out, static_cast<uint32_t>(value.type()));
    value.encode(out);
  }

  // Tensor infos, with each tensor's data placed at the next aligned offset after the previous one.
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (!names.insert(t.name).second) fail("GGUF tensor '{}' given twice", t.name);
    if (t.name.size() > kMaxTensorNameBytes)
      fail("GGUF tensor name '{}' is {} bytes; at most {} are allowed", t.name, t.name.size(), kMaxTensorNameBytes);
    if (t.shape.empty() || t.shape.size() > kGgufMaxDims)
      fail("GGUF tensor '{}' has {} dimensions; 1..{} are allowed", t.name, t.shape.size(), kGgufMaxDims);
    const uint32_t type = ggml_type_of(t);
    if (is_quantized(t.dtype)) check_rows_are_whole_blocks(t.name, t.shape, t.dtype);
    TDYN_CHECK(t.bytes.size() == tensor_bytes(t.dtype, numel(t.shape)));
    append_string(out, t.name);
    append<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) append<uint64_t>(out, static_cast<uint64_t>(*d));
    append<uint32_t>(out, type);
    append<uint64_t>(out, offset);
    offset += (t.bytes.size() + alignment - 1) / alignment * alignment;
  }
  pad_to(out, alignment);
  for (const auto& t : tensors) {
    out += t.bytes;
    pad_to(out, alignment);
  }
  return out;
}

void write_gguf(const fs::path& file, const GgufMetadata& metadata, const std::vector<GgufTensor>& tensors) {
  write_file_atomic(file, gguf_bytes(metadata, tensors));
}

}  // namespace tdyn
