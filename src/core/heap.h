// Large working buffers that a computation allocates and frees step after step (a forward pass's activations
// per layer, a particle simulation's products per call) stay on glibc's heap and are reused.
#pragma once

namespace tdyn {

// Above glibc's mmap threshold (128 KiB until a free happens to raise it) each such buffer is a fresh mapping, and
// freeing trims the heap back: page faults and kernel zeroing on every use, measured at 40 % of a 256-token prefill
// of a d = 768 model and 12 % of a particle step at n = d = 128. Buffers up to 256 MiB stay on the heap instead.
// Sets this once per process; call before the first such allocation.
void reuse_large_buffers();

}  // namespace tdyn
