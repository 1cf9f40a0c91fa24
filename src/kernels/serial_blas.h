// OpenBLAS's own threads, switched off while OpenMP's threads share the work out themselves.
#pragma once

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

}  // namespace tdyn
