#include "model/weights.h"

#include "kernels/products.h"

namespace tdyn {

void Linear::apply(const float* x, int64_t rows, float* y) const {
  if (b) {
    for (int64_t r = 0; r < rows; ++r) std::copy(b, b + out, y + r * out);
  }
  project(x, rows, w, in_out, b ? 1.0f : 0.0f, y);
}

Eigen::MatrixXd Linear::dense() const {
  Eigen::MatrixXd d(out, in);
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    w.row_floats(r, 0, w.cols, row.data());
    for (int64_t c = 0; c < w.cols; ++c) (in_out ? d(c, r) : d(r, c)) = row[c];
  }
  return d;
}

}  // namespace tdyn
