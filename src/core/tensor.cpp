#include "core/tensor.h"

#include <fmt/ranges.h>

namespace tdyn {

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace tdyn
