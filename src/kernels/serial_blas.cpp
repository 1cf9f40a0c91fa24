#include "kernels/serial_blas.h"

#include <cblas.h>

namespace tdyn {

SerialBlas::SerialBlas(bool active) {
  if (!active) return;
  saved_ = openblas_get_num_threads();
  openblas_set_num_threads(1);
}

void SerialBlas::restore() {
  if (saved_ > 0) openblas_set_num_threads(saved_);
  saved_ = 0;
}

}  // namespace tdyn
