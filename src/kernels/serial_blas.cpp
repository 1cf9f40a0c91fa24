#include "kernels/serial_blas.h"

#include <cblas.h>
#include <omp.h>

#include <atomic>
#include <exception>
#include <mutex>

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

void parallel_tasks(int64_t n, const std::function<void(int64_t)>& task) {
  if (n <= 1 || omp_in_parallel() || omp_get_max_threads() < 2) {
    for (int64_t i = 0; i < n; ++i) task(i);
    return;
  }
  SerialBlas serial_blas;
  std::exception_ptr error;
  int64_t error_task = n;
  std::mutex error_mutex;
  std::atomic<bool> failed{false};
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    if (failed.load(std::memory_order_relaxed)) continue;
    try {
      task(i);
    } catch (...) {  // nothing may leave an OpenMP region by an exception
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (i < error_task) error = std::current_exception(), error_task = i;
      failed = true;
    }
  }
  serial_blas.restore();
  if (error) std::rethrow_exception(error);
}

}  // namespace tdyn
