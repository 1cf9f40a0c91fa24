#include "kernels/products.h"

#include <cblas.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "kernels/packed_matrix.h"
#include "kernels/serial_blas.h"
#include "kernels/team.h"

namespace tdyn {
namespace {

// Floats in a widened panel: 4 MiB per thread, large enough for sgemm to run at full speed.
constexpr int64_t kPanelFloats = int64_t{1} << 20;
// Products split over the threads take blocks of this many columns of Y (a multiple of sgemm's register block).
constexpr int64_t kColumnBlock = 64;

void sgemm(bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
           float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// Stored rows [first, first + n) widened into panel [n, w.cols], spread over the threads when there are any.
void widen_rows(const StoredMatrix& w, int64_t first, int64_t n, float* panel) {
  on_thread_shares(n * w.cols >= (int64_t{1} << 16), n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) w.row_floats(first + r, 0, w.cols, panel + r * w.cols);
  });
}

// Whether project() multiplies these rows of X by w one dot product per output.
bool by_dots(int64_t rows, bool transposed) {
  return rows <= kDotProductRows && !transposed;
}

// Every target's outputs as dot products (by_dots), all targets' weight rows shared over the threads in one job, in
// chunks of at least kDotGrain rows handed out as the threads ask (SharedRange). Each weight row is read once, from
// start to end, for every row of X: one sequential stream per core reads faster than several interleaved rows
// (docs/performance.md).
void project_by_dots(const float* x, int64_t rows, std::span<const Projection> targets) {
  constexpr int64_t kDotGrain = 16;
  int64_t total_rows = 0, total_work = 0;
  for (const Projection& t : targets) {
    total_rows += t.w.rows;
    total_work += t.w.rows * t.w.cols;
  }
  // Rows [begin, end) of all targets' rows, in target order.
  const auto dot_rows = [&](int64_t begin, int64_t end) {
    int64_t offset = 0;  // the first target row's index among all targets' rows
    for (const Projection& t : targets) {
      const int64_t n_out = t.w.rows, n_in = t.w.cols;
      for (int64_t o = std::max(begin - offset, int64_t{0}); o < std::min(end - offset, n_out); ++o)
        for (int64_t r = 0; r < rows; ++r) {
          float& out = t.y[r * n_out + o];
          out = t.w.row_dot(o, x + r * n_in) + (t.beta == 0.0f ? 0.0f : out);
        }
      offset += n_out;
    }
  };
  SharedRange shared(total_rows, kDotGrain);
  on_threads(total_work >= (int64_t{1} << 16), [&](int, int threads) {
    for (auto [begin, end] = shared.next(threads); begin < end; std::tie(begin, end) = shared.next(threads))
      dot_rows(begin, end);
  });
}

// Y [rows, n_out] with leading dimension ldy = X Wᵀ + beta Y for many rows of X, on this thread's BLAS: float32
// weights in place, others widened one panel of rows at a time.
void multiply_many(const float* x, int64_t rows, const StoredMatrix& w, bool transposed, float beta, float* y, int64_t ldy) {
  const int64_t n_out = transposed ? w.cols : w.rows, n_in = transposed ? w.rows : w.cols;
  if (const float* f = w.f32(); f && transposed && rows <= kDotProductRows) {
    // One GEMV per row: sgemm would first copy (pack) the whole weight matrix for these few rows.
    for (int64_t r = 0; r < rows; ++r)
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(w.rows), static_cast<int>(w.cols), 1.0f, f,
                  static_cast<int>(w.row_bytes / 4), x + r * n_in, 1, beta, y + r * ldy, 1);
    return;
  }
  if (const float* f = w.f32()) {
    sgemm(!transposed, rows, n_out, n_in, x, n_in, f, w.row_bytes / 4, beta, y, ldy);
    return;
  }
  thread_local std::vector<float> panel;
  const int64_t panel_rows = std::clamp<int64_t>(kPanelFloats / std::max<int64_t>(1, w.cols), 8, w.rows);
  panel.resize(panel_rows * w.cols);
  for (int64_t first = 0; first < w.rows; first += panel_rows) {
    const int64_t n = std::min(panel_rows, w.rows - first);
    widen_rows(w, first, n, panel.data());
    if (!transposed) {
      // Y[:, first : first + n] = X · panelᵀ
      sgemm(true, rows, n, n_in, x, n_in, panel.data(), w.cols, beta, y + first, ldy);
    } else {
      // The panel holds inputs [first, first + n): Y += X[:, first : first + n] · panel.
      sgemm(false, rows, n_out, n, x + first, n_in, panel.data(), w.cols, first == 0 ? beta : 1.0f, y, ldy);
    }
  }
}

}  // namespace

void project_each(const float* x, int64_t rows, std::span<const Projection> targets) {
  const bool all_by_dots = std::all_of(targets.begin(), targets.end(),
                                       [&](const Projection& t) { return by_dots(rows, t.transposed); });
  if (all_by_dots && rows > 0) {
    for (const Projection& t : targets) TDYN_CHECK(t.beta == 0.0f || t.beta == 1.0f);
    project_by_dots(x, rows, targets);
    return;
  }
  for (const Projection& t : targets) project(x, rows, t.w, t.transposed, t.beta, t.y);
}

void project(const float* x, int64_t rows, const StoredMatrix& w, bool transposed, float beta, float* y) {
  TDYN_CHECK(beta == 0.0f || beta == 1.0f);
  const int64_t n_out = transposed ? w.cols : w.rows, n_in = transposed ? w.rows : w.cols;
  if (rows == 0 || n_out == 0) return;
  if (by_dots(rows, transposed)) {
    const Projection one{w, false, beta, y};
    project_by_dots(x, rows, {&one, 1});
    return;
  }
  if (w.packed) {
    TDYN_CHECK(w.packed->transposed() == transposed && w.packed->n_out() == n_out && w.packed->n_in() == n_in);
    w.packed->multiply(x, rows, beta, y);
    return;
  }
  // A block of columns of Wᵀ is a column slice of the stored transpose, which a quantized row cannot give.
  const bool split = available_threads() > 1 && rows * n_out * n_in >= kSplitWork && (!transposed || !is_quantized(w.dtype));
  if (!split) {
    multiply_many(x, rows, w, transposed, beta, y, n_out);
    return;
  }
  // The threads take blocks of Y's columns, each running BLAS on its own thread: one pool of threads for the whole
  // forward pass. With OpenBLAS threading each product, its idle threads spun on the cores that the OpenMP loops
  // between products needed, and the other way round: a T = 256 prefill at d = 768 ran 1.45-1.65x its one-thread
  // speed on two cores that way, and 1.9-2.0x this way.
  SerialBlas serial_blas;
  on_threads(true, [&](int part, int parts) {
    const int64_t blocks = (n_out + kColumnBlock - 1) / kColumnBlock;
    const auto [first_block, end_block] = thread_share(blocks, parts, part);
    const int64_t first = std::min(n_out, first_block * kColumnBlock), n = std::min(n_out, end_block * kColumnBlock) - first;
    if (n > 0)
      multiply_many(x, rows, transposed ? w.column_slice(first, n) : w.row_slice(first, n), transposed, beta, y + first,
                    n_out);
  });
}

void gather_rows(const StoredMatrix& table, std::span<const int32_t> ids, int64_t col, int64_t n, float* out) {
  for (size_t i = 0; i < ids.size(); ++i) table.row_floats(ids[i], col, n, out + static_cast<int64_t>(i) * n);
}

}  // namespace tdyn
