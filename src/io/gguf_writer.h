// GGUF v3 writer: typed metadata + F32/F16/BF16 and block-quantized tensors, in the layout documented in
// io/gguf.h. Files it
// writes are read back bit-exactly by read_gguf and follow llama.cpp's conventions (every tensor's data
// padded to the alignment, names shorter than 64 bytes), so llama.cpp can read them too.
#pragma once

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/gguf.h"

namespace tdyn {

// A metadata value with its exact GGUF type (JSON, the reader's output, cannot tell uint32 from int64).
class GgufValue {
 public:
  static GgufValue uint8(uint8_t v) { return scalar(GgufType::UInt8, v); }
  static GgufValue int8(int8_t v) { return scalar(GgufType::Int8, v); }
  static GgufValue uint16(uint16_t v) { return scalar(GgufType::UInt16, v); }
  static GgufValue int16(int16_t v) { return scalar(GgufType::Int16, v); }
  static GgufValue uint32(uint32_t v) { return scalar(GgufType::UInt32, v); }
  static GgufValue int32(int32_t v) { return scalar(GgufType::Int32, v); }
  static GgufValue uint64(uint64_t v) { return scalar(GgufType::UInt64, v); }
  static GgufValue int64(int64_t v) { return scalar(GgufType::Int64, v); }
  static GgufValue float32(float v) { return scalar(GgufType::Float32, v); }
  static GgufValue float64(double v) { return scalar(GgufType::Float64, v); }
  static GgufValue boolean(bool v) { return scalar(GgufType::Bool, static_cast<uint8_t>(v)); }
  static GgufValue string(std::string v);
  // Every element must have `element_type` (arrays of arrays may hold inner arrays of different types).
  static GgufValue array(GgufType element_type, std::vector<GgufValue> elements);
  static GgufValue strings(const std::vector<std::string>& v);
  static GgufValue float32s(const std::vector<float>& v);
  static GgufValue int32s(const std::vector<int32_t>& v);

  GgufType type() const { return type_; }
  // The value as read_gguf stores it in TensorStore::metadata().
  nlohmann::json to_json() const;
  // Appends the value's encoding (without its type id) to `out`.
  void encode(std::string& out) const;

 private:
  template <typename T>
  static GgufValue scalar(GgufType type, T v) {
    GgufValue value;
    value.type_ = type;
    std::memcpy(&value.bits_, &v, sizeof v);
    return value;
  }

  GgufType type_ = GgufType::UInt8;
  uint64_t bits_ = 0;  // scalars: the value's bytes, zero-extended
  std::string text_;
  GgufType element_type_ = GgufType::UInt8;
  std::vector<GgufValue> elements_;
};

// Key/value pairs, written in this order. "general.alignment" (uint32, a power of two) sets the alignment.
using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;

struct GgufTensor {
  std::string name;   // unique, shorter than 64 bytes
  DType dtype;        // one of kGgmlTensorTypes: F32, F16, BF16 or a quantized type
  Shape shape;        // row-major, 1..4 dims; stored as ne = shape reversed. Quantized: shape.back() (ne[0])
                      // a multiple of the type's block
  std::string bytes;  // tensor_bytes(dtype, numel(shape)) little-endian bytes, row-major (rows of blocks)
};

GgufTensor gguf_f32_tensor(const std::string& name, const Shape& shape, const float* data);
// `data` (row-major, numel(shape) floats) encoded row by row with quantize_row (kernels/quant_blocks.h) as the
// quantized dtype `dtype`; shape.back() must be a multiple of the type's block.
GgufTensor gguf_quantized_tensor(const std::string& name, const Shape& shape, DType dtype, const float* data);

// The complete file contents, and the same written atomically to `file`.
std::string gguf_bytes(const GgufMetadata& metadata, const std::vector<GgufTensor>& tensors);
void write_gguf(const fs::path& file, const GgufMetadata& metadata, const std::vector<GgufTensor>& tensors);

}  // namespace tdyn
