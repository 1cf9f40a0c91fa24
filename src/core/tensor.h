// A minimal owned float tensor: row-major data with a shape. Weights that can be used in place stay in the
// memory-mapped file (see io/tensor_store.h); this type holds activations and converted copies.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"

namespace tdyn {

using Shape = std::vector<int64_t>;

inline int64_t numel(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

std::string shape_str(const Shape& shape);  // "[24, 64]"

template <typename T>
struct TensorT {
  Shape shape;
  std::vector<T> data;

  TensorT() = default;
  explicit TensorT(Shape s, T fill = T(0)) : shape(std::move(s)), data(numel(shape), fill) {}
  TensorT(Shape s, std::vector<T> d) : shape(std::move(s)), data(std::move(d)) {
    TDYN_CHECK(static_cast<int64_t>(data.size()) == numel(shape));
  }

  int64_t size() const { return static_cast<int64_t>(data.size()); }
  int64_t dim(int i) const { return shape.at(i < 0 ? shape.size() + i : i); }
  T* ptr() { return data.data(); }
  const T* ptr() const { return data.data(); }
  T* row(int64_t r) { return data.data() + r * shape.back(); }
  const T* row(int64_t r) const { return data.data() + r * shape.back(); }
};

using Tensor = TensorT<float>;
using Tensor64 = TensorT<double>;

}  // namespace tdyn
