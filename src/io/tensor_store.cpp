#include "io/tensor_store.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/quant_blocks.h"

namespace tdyn {

TensorStore::TensorStore() : metadata_(nlohmann::json::object()) {}

void TensorStore::add(TensorInfo info) {
  auto it = tensors_.find(info.name);
  if (it != tensors_.end()) fail("tensor '{}' appears twice ('{}' and '{}')", info.name, it->second.file, info.file);
  std::string name = info.name;
  tensors_.emplace(std::move(name), std::move(info));
}

const TensorInfo* TensorStore::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorInfo& TensorStore::get(const std::string& name) const {
  if (const TensorInfo* t = find(name)) return *t;
  fail("missing tensor '{}' in the {} checkpoint", name, format);
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : tensors_) out.push_back(name);
  return out;
}

// A quantized tensor's rows (shape.back() values, whole blocks: the readers check it) decoded one by one.
template <typename Out>
static void dequantize_rows(const TensorInfo& t, std::vector<Out>& out) {
  const int64_t n = static_cast<int64_t>(out.size());
  TDYN_CHECK(!t.shape.empty() && t.nbytes == tensor_bytes(t.dtype, n));
  const int64_t row = t.shape.back(), rows = row > 0 ? n / row : 0;
  const uint64_t row_bytes = tensor_bytes(t.dtype, row);
  std::vector<float> values(std::is_same_v<Out, float> ? 0 : row);
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (std::is_same_v<Out, float>) {
      dequantize_row(t.dtype, t.data + r * row_bytes, out.data() + r * row, row);
    } else {
      dequantize_row(t.dtype, t.data + r * row_bytes, values.data(), row);
      std::copy(values.begin(), values.end(), out.begin() + r * row);
    }
  }
}

template <typename Out>
static std::vector<Out> convert_floats(const TensorInfo& t) {
  size_t n = static_cast<size_t>(numel(t.shape));
  std::vector<Out> out(n);
  const std::byte* p = t.data;
  if (is_quantized(t.dtype)) {
    dequantize_rows(t, out);
    return out;
  }
  switch (t.dtype) {
    case DType::F32:
      for (size_t i = 0; i < n; ++i) { float v; std::memcpy(&v, p + 4 * i, 4); out[i] = static_cast<Out>(v); }
      break;
    case DType::F64:
      for (size_t i = 0; i < n; ++i) { double v; std::memcpy(&v, p + 8 * i, 8); out[i] = static_cast<Out>(v); }
      break;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) { uint16_t v; std::memcpy(&v, p + 2 * i, 2); out[i] = static_cast<Out>(half_to_float(v)); }
      break;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) { uint16_t v; std::memcpy(&v, p + 2 * i, 2); out[i] = static_cast<Out>(bf16_to_float(v)); }
      break;
    default:
      fail("tensor '{}' in '{}' has dtype {}, expected a floating-point type", t.name, t.file, dtype_name(t.dtype));
  }
  return out;
}

FloatBuffer TensorStore::floats(const std::string& name) const {
  const TensorInfo& t = get(name);
  if (t.dtype == DType::F32 && reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0) {
    return FloatBuffer(reinterpret_cast<const float*>(t.data), t.nbytes / 4);
  }
  return FloatBuffer(convert_floats<float>(t));
}

std::vector<double> TensorStore::doubles(const std::string& name) const { return convert_floats<double>(get(name)); }

std::vector<int64_t> TensorStore::ints(const std::string& name) const {
  const TensorInfo& t = get(name);
  size_t n = static_cast<size_t>(numel(t.shape));
  std::vector<int64_t> out(n);
  auto each = [&](auto tag) {
    using In = decltype(tag);
    for (size_t i = 0; i < n; ++i) { In v; std::memcpy(&v, t.data + sizeof(In) * i, sizeof(In)); out[i] = v; }
  };
  switch (t.dtype) {
    case DType::I64: each(int64_t{}); break;
    case DType::I32: each(int32_t{}); break;
    case DType::I16: each(int16_t{}); break;
    case DType::I8: each(int8_t{}); break;
    case DType::U8: case DType::BOOL: each(uint8_t{}); break;
    default: fail("tensor '{}' in '{}' has dtype {}, expected an integer type", name, t.file, dtype_name(t.dtype));
  }
  return out;
}

}  // namespace tdyn
