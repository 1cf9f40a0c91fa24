#include "kernels/packed_matrix.h"

#include <omp.h>

#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "kernels/products.h"
#include "kernels/team.h"

#ifdef TDYN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace tdyn {

#ifdef TDYN_HAVE_DNNL

struct PackedMatrix::Block {
  int64_t first = 0, width = 0;  // output columns [first, first + width)
  dnnl::memory weights;          // Wᵀ's columns [n_in, width] in the layout the matmul chose
};

namespace {

using dnnl::memory;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// oneDNN's OpenMP threading off on the calling thread while it lives. A matmul created with more than one thread
// available may split its sums along n_in between threads, and then Y would depend on the thread count; tdyn's
// threads share the blocks out instead.
class OneThread {
 public:
  OneThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

memory::desc dense(int64_t rows, int64_t cols) {
  return memory::desc({rows, cols}, memory::data_type::f32, memory::format_tag::ab);
}

// The matmul of `rows` rows of X by one block packed as `weights` [n_in, width], writing a dense [rows, width]:
// created once per thread and shape, then reused (a pass runs the same shapes for every sample).
const dnnl::matmul& matmul_for(int64_t rows, const memory::desc& weights) {
  struct Entry {
    int64_t rows;
    memory::desc weights;
    dnnl::matmul matmul;
  };
  thread_local std::vector<Entry> cache;
  for (const Entry& e : cache)
    if (e.rows == rows && e.weights == weights) return e.matmul;
  if (cache.size() >= 64) cache.clear();  // prompts of many lengths: oneDNN keeps their kernels in its own cache
  const memory::dims dims = weights.dims();
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(dense(rows, dims[0]), weights, dense(rows, dims[1])),
                                        cpu_engine());
  cache.push_back({rows, weights, dnnl::matmul(pd)});
  return cache.back().matmul;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

// Columns [first, first + width) of Wᵀ [n_in, width] repacked for the matmul.
dnnl::memory pack_block(const StoredMatrix& w, bool transposed, int64_t first, int64_t width, std::vector<float>& plain) {
  const int64_t n_in = transposed ? w.rows : w.cols;
  plain.resize(width * n_in);
  memory::desc plain_desc;
  if (!transposed) {  // rows [first, first + width) of W: Wᵀ's columns, each n_in contiguous values
    for (int64_t o = 0; o < width; ++o) w.row_floats(first + o, 0, n_in, plain.data() + o * n_in);
    plain_desc = memory::desc({n_in, width}, memory::data_type::f32, memory::dims{1, n_in});
  } else {  // the stored [n_in, n_out] matrix's columns [first, first + width)
    for (int64_t i = 0; i < n_in; ++i) w.row_floats(i, first, width, plain.data() + i * width);
    plain_desc = dense(n_in, width);
  }
  // The layout does not depend on the number of rows (measured for 8 to 4096): any count picks it.
  const memory::desc any({n_in, width}, memory::data_type::f32, memory::format_tag::any);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(dense(16, n_in), any, dense(16, width)), cpu_engine());
  dnnl::memory packed(pd.weights_desc(), cpu_engine());
  dnnl::memory source(plain_desc, cpu_engine(), plain.data());
  dnnl::reorder(source, packed).execute(thread_stream(), source, packed);
  thread_stream().wait();
  return packed;
}

}  // namespace

std::shared_ptr<const PackedMatrix> PackedMatrix::of(const StoredMatrix& w, bool transposed) {
  if (packed_products_kernel().empty() || !w) return nullptr;
  return std::make_shared<PackedMatrix>(w, transposed);
}

void PackedMatrix::pack() const {
  std::call_once(packed_once_, [&] {
    const int64_t count = (n_out_ + kPackedColumns - 1) / kPackedColumns;
    std::vector<std::unique_ptr<Block>> blocks(count);
    SharedRange shared(count, 1);
    on_threads(n_out_ * n_in_ >= (int64_t{1} << 16), [&](int, int threads) {
      const OneThread one;
      std::vector<float> plain;
      for (auto [begin, end] = shared.next(threads); begin < end; std::tie(begin, end) = shared.next(threads))
        for (int64_t b = begin; b < end; ++b) {
          const int64_t first = b * kPackedColumns, width = std::min(kPackedColumns, n_out_ - first);
          blocks[b] = std::make_unique<Block>(Block{first, width, pack_block(w_, transposed_, first, width, plain)});
        }
    });
    blocks_ = std::move(blocks);
    packed_.store(true, std::memory_order_release);
  });
}

void PackedMatrix::multiply(const float* x, int64_t rows, float beta, float* y) const {
  TDYN_CHECK(beta == 0.0f || beta == 1.0f);
  if (rows == 0) return;
  pack();
  SharedRange shared(static_cast<int64_t>(blocks_.size()), 1);
  on_threads(rows * n_out_ * n_in_ >= kSplitWork, [&](int, int threads) {
    const OneThread one;
    thread_local std::vector<float> out;  // one block's dense output
    const dnnl::memory source(dense(rows, n_in_), cpu_engine(), const_cast<float*>(x));
    for (auto [begin, end] = shared.next(threads); begin < end; std::tie(begin, end) = shared.next(threads))
      for (int64_t b = begin; b < end; ++b) {
        const Block& block = *blocks_[b];
        out.resize(rows * block.width);
        const dnnl::memory target(dense(rows, block.width), cpu_engine(), out.data());
        matmul_for(rows, block.weights.get_desc())
            .execute(thread_stream(), {{DNNL_ARG_SRC, source}, {DNNL_ARG_WEIGHTS, block.weights}, {DNNL_ARG_DST, target}});
        thread_stream().wait();
        for (int64_t r = 0; r < rows; ++r) {
          const float* from = out.data() + r * block.width;
          float* to = y + r * n_out_ + block.first;
          if (beta == 0.0f) {
            std::copy_n(from, block.width, to);
          } else {
            for (int64_t j = 0; j < block.width; ++j) to[j] += from[j];
          }
        }
      }
  });
}

int64_t PackedMatrix::bytes() const {
  if (!is_packed()) return 0;
  int64_t total = 0;
  for (const auto& block : blocks_) total += static_cast<int64_t>(block->weights.get_desc().get_size());
  return total;
}

std::string packed_products_kernel() {
  static const std::string kernel = [] {
    try {
      const OneThread one;
      const memory::desc any({256, PackedMatrix::kPackedColumns}, memory::data_type::f32, memory::format_tag::any);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(dense(16, 256), any, dense(16, PackedMatrix::kPackedColumns)),
                                            cpu_engine());
      const std::string impl = pd.impl_info_str();
      // Only the brgemm kernels read a blocked layout. oneDNN 2.6 has them for AVX-512 CPUs; on AVX2 its matmul runs
      // a gemm that repacks the weights on every call, at 40-50 % of the FMA peak on some of the forward's shapes
      // where OpenBLAS ran at 80-85 % (docs/performance.md), and its reference implementation is slower still.
      if (impl.rfind("brg", 0) != 0) return std::string();
      const dnnl_version_t* v = dnnl_version();
      return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + ", " + impl;
    } catch (const dnnl::error&) {
      return std::string();
    }
  }();
  return kernel;
}

#else  // without oneDNN

struct PackedMatrix::Block {};

std::shared_ptr<const PackedMatrix> PackedMatrix::of(const StoredMatrix&, bool) { return nullptr; }
void PackedMatrix::pack() const { TDYN_CHECK(false); }
void PackedMatrix::multiply(const float*, int64_t, float, float*) const { TDYN_CHECK(false); }
int64_t PackedMatrix::bytes() const { return 0; }
std::string packed_products_kernel() { return {}; }

#endif

PackedMatrix::PackedMatrix(const StoredMatrix& w, bool transposed)
    : w_(w), n_out_(transposed ? w.cols : w.rows), n_in_(transposed ? w.rows : w.cols), transposed_(transposed) {
  w_.packed = nullptr;
}
PackedMatrix::~PackedMatrix() = default;

}  // namespace tdyn
