#include "model/weights.h"

#include "kernels/products.h"

namespace tdyn {

namespace {

// The product that gives `linear`'s output in y; its bias, when it has one, is first copied into every row of y.
Projection with_bias(const Linear& linear, int64_t rows, float* y) {
  if (linear.b) {
    for (int64_t r = 0; r < rows; ++r) std::copy(linear.b, linear.b + linear.out, y + r * linear.out);
  }
  return {linear.w, linear.in_out, linear.b ? 1.0f : 0.0f, y};
}

}  // namespace

void Linear::apply(const float* x, int64_t rows, float* y) const {
  const Projection p = with_bias(*this, rows, y);
  project(x, rows, p.w, p.transposed, p.beta, p.y);
}

void apply_each(const float* x, int64_t rows, std::initializer_list<LinearOutput> outputs) {
  std::vector<Projection> products;
  products.reserve(outputs.size());
  for (const LinearOutput& o : outputs) products.push_back(with_bias(o.linear, rows, o.y));
  project_each(x, rows, products);
}

}  // namespace tdyn
