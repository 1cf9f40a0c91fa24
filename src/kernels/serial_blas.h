// OpenBLAS's own threads, switched off while OpenMP's threads share the work out themselves.
#pragma once

#include <cstdint>
#include <functional>

namespace tdyn {

// From construction (when `active`) to restore() or destruction, BLAS runs on its calling thread only; the
// thread count before is restored after. For loops whose OpenMP threads already fill the cores (one sample per
// thread, one block of a product's columns per thread): BLAS threads of their own would oversubscribe them, and
// OpenBLAS's idle threads spin on the cores the loop needs. The products after such a loop (one large dgemm) want the threads back: restore() then.
class SerialBlas {
 public:
  explicit SerialBlas(bool active = true);
  ~SerialBlas() { restore(); }
  void restore();
  SerialBlas(const SerialBlas&) = delete;
  SerialBlas& operator=(const SerialBlas&) = delete;

 private:
  int saved_ = 0;  // 0: inactive
};

// Runs task(0), ..., task(n − 1) on the OpenMP threads, one task per thread at a time in order of asking, with BLAS
// serial while more than one runs: for independent decompositions of one size (a Schur form or an SVD per depth),
// which gain little from LAPACK's own threads. One task, one thread or a call inside a parallel region runs them in
// order on this thread. After a task throws, the tasks not yet started are skipped, and once the running ones have
// ended the exception of the lowest task that threw is rethrown here (every task below it has run: they start in order).
void parallel_tasks(int64_t n, const std::function<void(int64_t)>& task);

// One process's share of tasks that `count` processes (MPI ranks) split: task t is process t mod count's.
struct TaskShare {
  int64_t index = 0, count = 1;
  bool root() const { return index == 0; }
  int64_t owner(int64_t task) const { return task % count; }
  bool mine(int64_t task) const { return owner(task) == index; }
};

}  // namespace tdyn
