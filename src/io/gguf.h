// GGUF (llama.cpp / ggml) checkpoints, versions 2 and 3: reader. The writer is io/gguf_writer.h.
//
// On-disk format (all integers little-endian; a "string" is a uint64 byte length followed by that many
// UTF-8 bytes, no terminator):
//
//   uint32  magic          "GGUF" (bytes 47 47 55 46)
//   uint32  version        2 or 3 (v3 only added big-endian files, whose version reads byte-swapped here;
//                          v1 used uint32 counts and string lengths and is rejected)
//   uint64  tensor_count
//   uint64  kv_count
//   kv_count key/value pairs:
//     string  key          unique; "general.alignment" (uint32, a power of two) sets the data alignment
//     uint32  value_type   one of GgufType below
//     value                scalar: its fixed-size little-endian bytes (bool: one byte, 0 or 1);
//                          string: as above;
//                          array: uint32 element type, uint64 count, then count values of that type
//                          (arrays may nest: an array of arrays gives every inner array its own header)
//   tensor_count tensor infos:
//     string  name         unique
//     uint32  n_dims       1..4
//     uint64  ne[n_dims]   element counts, fastest-varying first (row-major shape = ne reversed)
//     uint32  type         ggml type id (kGgmlTensorTypes below: 0 F32, 1 F16, 30 BF16, 2 Q4_0, 8 Q8_0, ...)
//     uint64  offset       from the start of the data section; a multiple of the alignment
//   padding to the next multiple of the alignment (default 32)
//   data section: the tensors' bytes, each at its offset, in ggml's layout (ne[0] contiguous). A quantized
//                 type stores each run of block_elements values of a row as one block of block_bytes bytes
//                 (core/dtype.h; the block layouts are in kernels/quant_blocks.h), so ne[0] is a whole
//                 number of blocks and a tensor of numel values takes tensor_bytes(type, numel) bytes.
//
// Validation happens before any tensor data is touched: magic, version, every count bounded by the bytes
// that remain (so no allocation is driven by an unchecked count), string lengths, value types, array
// nesting depth, duplicate keys and tensor names, n_dims, dimension products overflowing, tensor types,
// rows of whole blocks, offsets aligned and inside the file, no two tensors overlapping. tdyn reads the
// types of kGgmlTensorTypes: F32, F16, BF16 and the block-quantized Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
// Q6_K (TensorStore::floats decodes them); any other type is an error naming the type and the tensor.
//
// Metadata: every key/value lands in TensorStore::metadata() as JSON (integers as numbers, float32/64 as
// numbers, bool, strings, arrays as JSON arrays, nested arrays as nested JSON arrays), tokenizer arrays
// included.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "io/tensor_store.h"

namespace tdyn {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
inline constexpr uint32_t kGgufVersion = 3;         // what the writer emits
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr uint32_t kGgufMaxDims = 4;

// Metadata value types, with their on-disk ids.
enum class GgufType : uint32_t {
  UInt8 = 0, Int8 = 1, UInt16 = 2, Int16 = 3, UInt32 = 4, Int32 = 5, Float32 = 6, Bool = 7,
  String = 8, Array = 9, UInt64 = 10, Int64 = 11, Float64 = 12,
};
const char* gguf_type_name(GgufType t);  // "uint32", "string", ...
size_t gguf_scalar_size(GgufType t);     // bytes of a scalar value; 0 for string and array

// The ggml tensor types tdyn reads and writes, with their on-disk ids (ggml's enum ggml_type).
struct GgmlTensorType {
  uint32_t id;
  DType dtype;
};
inline constexpr GgmlTensorType kGgmlTensorTypes[] = {
    {0, DType::F32},   {1, DType::F16},   {30, DType::BF16}, {2, DType::Q4_0},  {3, DType::Q4_1},  {6, DType::Q5_0},
    {7, DType::Q5_1},  {8, DType::Q8_0},  {12, DType::Q4_K}, {13, DType::Q5_K}, {14, DType::Q6_K},
};
std::optional<DType> ggml_type_dtype(uint32_t type);  // nullopt for a type tdyn does not read
std::optional<uint32_t> ggml_type_id(DType dtype);    // nullopt for a dtype GGUF files of tdyn cannot hold
std::string ggml_tensor_type_names();                 // "F32, F16, BF16, Q4_0, ...": for error messages

// The ggml name of a tensor type id ("F32", "Q4_K", ...), or nullptr for an id ggml does not define.
const char* ggml_type_name(uint32_t type);

bool is_gguf_file(const fs::path& file);  // the file starts with the magic "GGUF"
void read_gguf(const fs::path& file, TensorStore& store);
void read_gguf(std::shared_ptr<const MappedFile> file, TensorStore& store);  // errors name file->path()

}  // namespace tdyn
