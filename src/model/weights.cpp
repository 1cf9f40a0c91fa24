#include "model/weights.h"

#include <cblas.h>

namespace tdyn {

void Linear::apply(const float* x, int64_t rows, float* y) const {
  if (b) {
    for (int64_t r = 0; r < rows; ++r) std::copy(b, b + out, y + r * out);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, in_out ? CblasNoTrans : CblasTrans, static_cast<int>(rows),
              static_cast<int>(out), static_cast<int>(in), 1.0f, x, static_cast<int>(in), w, static_cast<int>(ld),
              b ? 1.0f : 0.0f, y, static_cast<int>(out));
}

}  // namespace tdyn
