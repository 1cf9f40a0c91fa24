// Hugging Face safetensors: reader (single file and sharded via model.safetensors.index.json) and writer.
//
// On-disk format: an 8-byte little-endian uint64 N, then N bytes of UTF-8 JSON (an object: optional
// "__metadata__": {str: str}, and per tensor "name": {"dtype": "F32"|"F16"|"BF16"|"F64"|"I64"|...,
// "shape": [ints], "data_offsets": [begin, end]}), then the byte buffer. Offsets are relative to the start of
// the buffer (byte 8 + N), little-endian, C order. Validation before any data is touched: N bounded and
// inside the file, valid JSON, known dtypes, no duplicate names, offsets inside the buffer, no two tensors
// overlapping, end - begin = numel(shape) * dtype size (with overflow checks).
//
// Sharded checkpoints: model.safetensors.index.json = {"metadata": {...}, "weight_map": {tensor: shard file}};
// every mapped tensor must be in its shard, and no tensor may appear in two shards.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/tensor_store.h"

namespace tdyn {

inline constexpr uint64_t kSafetensorsMaxHeader = 100u << 20;  // 100 MiB, as the reference implementation

// Adds every tensor of one .safetensors file to `store`.
void read_safetensors(const fs::path& file, TensorStore& store);
void read_safetensors(std::shared_ptr<const MappedFile> file, TensorStore& store);  // errors name file->path()

// Reads model.safetensors.index.json and every shard it names.
void read_safetensors_index(const fs::path& index_file, TensorStore& store);
// The same for any Hugging Face weight index (pytorch_model.bin.index.json has the same layout), each shard read
// with `read_shard`.
void read_weight_index(const fs::path& index_file, TensorStore& store,
                       const std::function<void(const fs::path&, TensorStore&)>& read_shard);
// Its two halves: the weight map {tensor: shard file name} of the index text (`name` for errors), and the
// check, once the shards are in `store`, that every mapped tensor came from its shard.
std::map<std::string, std::string> parse_safetensors_index(std::string_view text, const std::string& name);
void check_safetensors_index(const std::map<std::string, std::string>& weight_map, const TensorStore& store,
                             const std::string& name);

// Writes tensors (in name order, 8-byte aligned header, as the reference writer does).
struct TensorToWrite {
  DType dtype;
  Shape shape;
  std::string bytes;  // raw little-endian data, numel(shape) * dtype_size(dtype) bytes
};
void write_safetensors(const fs::path& file, const std::map<std::string, TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
TensorToWrite f32_tensor(const Shape& shape, const float* data);

}  // namespace tdyn
