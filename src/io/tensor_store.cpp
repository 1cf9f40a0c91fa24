#include "io/tensor_store.h"

#include <cstring>

#include "core/error.h"

namespace tdyn {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: return 2;
    case DType::I8: case DType::U8: case DType::BOOL: return 1;
  }
  return 0;
}

float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) { mant <<= 1; --exp; }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

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

template <typename Out>
static std::vector<Out> convert_floats(const TensorInfo& t) {
  size_t n = static_cast<size_t>(numel(t.shape));
  std::vector<Out> out(n);
  const std::byte* p = t.data;
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
