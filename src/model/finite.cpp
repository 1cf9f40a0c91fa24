#include "model/finite.h"

#include <cmath>

#include "core/error.h"

namespace tdyn {

int64_t count_non_finite(const float* x, int64_t n) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += is_non_finite(x[i]);
  return count;
}

int64_t first_non_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (is_non_finite(x[i])) return i;
  return -1;
}

std::string value_name(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{}", v);
}

void report_non_finite(const Tensor& x, int64_t start, int64_t layer, const char* hook, const char* producer) {
  const int64_t first = first_non_finite(x.ptr(), x.size());
  TDYN_CHECK(first >= 0);
  const int64_t width = x.size() / x.dim(0);  // units per position (all trailing dimensions)
  const std::string name = layer >= 0 ? fmt::format("blocks.{}.{}", layer, hook) : std::string(hook);
  const int64_t count = count_non_finite(x.ptr(), x.size());
  fail("non-finite activation{}: {} is {} at position {}, unit {} ({} of its {} values {} NaN or Inf); it first "
       "appeared in {}",
       layer >= 0 ? fmt::format(" in layer {}", layer) : "", name, value_name(x.data[first]), start + first / width,
       first % width, count, x.size(), count == 1 ? "is" : "are", producer);
}

}  // namespace tdyn
