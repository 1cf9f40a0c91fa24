// A tensor store: named, typed, shaped views into memory-mapped checkpoint files. Readers (safetensors,
// GGUF, llama2.c) validate their file completely and then fill a store; the model layer looks tensors up by
// name and never sees the on-disk format. The store knows nothing about models.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/json_value.h"
#include "core/tensor.h"
#include "io/mapped_file.h"

namespace tdyn {

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;                        // row-major (C order), outermost first
  const std::byte* data = nullptr;    // points into a mapped file
  size_t nbytes = 0;
  std::string file;                   // for error messages
};

// Float data of one tensor: a view into the mapping when it is already aligned float32, else an owned copy.
class FloatBuffer {
 public:
  FloatBuffer() = default;
  FloatBuffer(const float* view, size_t n) : view_(view), size_(n) {}
  explicit FloatBuffer(std::vector<float> owned) : owned_(std::move(owned)), view_(owned_.data()), size_(owned_.size()) {}
  FloatBuffer(FloatBuffer&& o) noexcept { *this = std::move(o); }
  FloatBuffer& operator=(FloatBuffer&& o) noexcept {
    bool was_owned = o.view_ == o.owned_.data();
    owned_ = std::move(o.owned_);
    view_ = was_owned ? owned_.data() : o.view_;
    size_ = o.size_;
    return *this;
  }
  const float* data() const { return view_; }
  size_t size() const { return size_; }
  bool is_view() const { return view_ != owned_.data() || owned_.empty(); }

 private:
  std::vector<float> owned_;
  const float* view_ = nullptr;
  size_t size_ = 0;
};

class TensorStore {
 public:
  TensorStore();
  // Adds a tensor; a duplicate name is an error naming both files.
  void add(TensorInfo info);
  void keep_alive(std::shared_ptr<const MappedFile> file) { files_.push_back(std::move(file)); }

  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  const TensorInfo* find(const std::string& name) const;
  const TensorInfo& get(const std::string& name) const;  // throws Error naming the tensor
  std::vector<std::string> names() const;
  size_t size() const { return tensors_.size(); }

  // The tensor as float32 (F32 used in place when aligned; F16, BF16, F64 converted; quantized types decoded
  // row by row with kernels/quant_blocks.h).
  FloatBuffer floats(const std::string& name) const;
  std::vector<double> doubles(const std::string& name) const;  // any float dtype (is_float), converted
  std::vector<int64_t> ints(const std::string& name) const;     // integer dtypes

  // Format-level metadata (safetensors __metadata__, GGUF key/values, llama2.c header, PyTorch archive name and
  // version record), for `tdyn info`.
  nlohmann::json& metadata() { return *metadata_; }
  const nlohmann::json& metadata() const { return *metadata_; }
  std::string format;  // "safetensors", "pytorch", "gguf", "llama2c"

 private:
  std::map<std::string, TensorInfo> tensors_;
  std::vector<std::shared_ptr<const MappedFile>> files_;
  JsonValue metadata_;  // an object
};

}  // namespace tdyn
