#include "core/heap.h"

#include <malloc.h>

namespace tdyn {

void reuse_large_buffers() {
  static const bool set = [] {
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    return true;
  }();
  (void)set;
}

}  // namespace tdyn
