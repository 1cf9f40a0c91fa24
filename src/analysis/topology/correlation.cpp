// Streaming Pearson correlation (see correlation.h for the sums and why they are shifted).
#include "analysis/topology/correlation.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace tdyn::topology {
namespace {

constexpr double kBufferVersion = 1.0;
constexpr int64_t kHeaderSize = 3;

// Rows per dsyrk call: large enough for GEMM-speed blocking, small enough that the centred copy stays a few
// tens of MB (4M doubles = 32 MB).
int64_t chunk_rows_for(int64_t n_units) { return std::clamp<int64_t>((int64_t{1} << 22) / n_units, 256, 4096); }

int64_t packed_size(int64_t d) { return d * (d + 1) / 2; }

}  // namespace

CorrelationAccumulator::CorrelationAccumulator(int64_t n_units) : n_units_(n_units) {
  if (n_units <= 0) fail("correlation accumulator: n_units must be positive, got {}", n_units);
  shift_.assign(n_units, 0.0);
  sum_.assign(n_units, 0.0);
  cross_.assign(n_units * n_units, 0.0);
}

void CorrelationAccumulator::add_rows(std::span<const double> rows) { add_rows_impl(rows); }
void CorrelationAccumulator::add_rows(std::span<const float> rows) { add_rows_impl(rows); }

template <typename Scalar>
void CorrelationAccumulator::add_rows_impl(std::span<const Scalar> rows) {
  const int64_t d = n_units_;
  if (rows.size() % d != 0)
    fail("correlation accumulator: batch of {} values is not a whole number of rows of {} units", rows.size(), d);
  const int64_t n_batch = rows.size() / d;
  if (n_batch == 0) return;
  for (const Scalar v : rows)
    if (!std::isfinite(v)) fail("correlation accumulator: batch contains NaN or infinite activations");

  if (n_rows_ == 0) {
    // The shift: this first batch's mean per unit, an estimate of the final mean (see correlation.h).
    std::fill(shift_.begin(), shift_.end(), 0.0);
    for (int64_t r = 0; r < n_batch; ++r)
      for (int64_t i = 0; i < d; ++i) shift_[i] += rows[r * d + i];
    for (double& c : shift_) c /= static_cast<double>(n_batch);
  }

  const int64_t chunk = std::min(n_batch, chunk_rows_for(d));
  centred_.resize(chunk * d);
  for (int64_t first = 0; first < n_batch; first += chunk) {
    const int64_t n_chunk = std::min(chunk, n_batch - first);
    // centred (n_chunk × d) = rows − 1 cᵀ
#pragma omp parallel for schedule(static) if (n_chunk * d >= (1 << 16))
    for (int64_t r = 0; r < n_chunk; ++r) {
      const Scalar* row = rows.data() + (first + r) * d;
      double* out = centred_.data() + r * d;
      for (int64_t i = 0; i < d; ++i) out[i] = static_cast<double>(row[i]) - shift_[i];
    }
    for (int64_t r = 0; r < n_chunk; ++r)
      for (int64_t i = 0; i < d; ++i) sum_[i] += centred_[r * d + i];
    // S += centredᵀ centred, upper triangle: the one rank-k update per chunk that carries all the work.
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(d), static_cast<int>(n_chunk), 1.0,
                centred_.data(), static_cast<int>(d), 1.0, cross_.data(), static_cast<int>(d));
  }
  n_rows_ += n_batch;
}

void CorrelationAccumulator::merge(const CorrelationAccumulator& other) {
  if (other.n_units_ != n_units_)
    fail("correlation accumulator: cannot merge {} units into {} units", other.n_units_, n_units_);
  if (other.n_rows_ == 0) return;
  if (n_rows_ == 0) {
    *this = other;
    return;
  }
  // Re-express the other sums around this shift: with δ = c_other − c_this, x − c_this = (x − c_other) + δ, so
  //   Σ (x − c_this)                = S' + n' δ
  //   Σ (x − c_this)(x − c_this)ᵀ   = S'' + S' δᵀ + δ S'ᵀ + n' δ δᵀ.
  // δ is a difference of two batch means, small against the spread, so nothing cancels.
  const int64_t d = n_units_;
  const double n_other = static_cast<double>(other.n_rows_);
  std::vector<double> delta(d);
  for (int64_t i = 0; i < d; ++i) delta[i] = other.shift_[i] - shift_[i];
#pragma omp parallel for schedule(dynamic, 16) if (d >= 256)
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = i; j < d; ++j) {
      cross_[i * d + j] += other.cross_[i * d + j] + other.sum_[i] * delta[j] + delta[i] * other.sum_[j] +
                           n_other * delta[i] * delta[j];
    }
  }
  for (int64_t i = 0; i < d; ++i) sum_[i] += other.sum_[i] + n_other * delta[i];
  n_rows_ += other.n_rows_;
}

std::vector<double> CorrelationAccumulator::means() const {
  std::vector<double> mean(n_units_, std::numeric_limits<double>::quiet_NaN());
  if (n_rows_ == 0) return mean;
  for (int64_t i = 0; i < n_units_; ++i) mean[i] = shift_[i] + sum_[i] / static_cast<double>(n_rows_);
  return mean;
}

std::vector<double> CorrelationAccumulator::variances() const {
  std::vector<double> variance(n_units_, std::numeric_limits<double>::quiet_NaN());
  if (n_rows_ < 2) return variance;
  const double n = static_cast<double>(n_rows_);
  for (int64_t i = 0; i < n_units_; ++i)
    variance[i] = std::max(0.0, cross_[i * n_units_ + i] - sum_[i] * sum_[i] / n) / (n - 1);
  return variance;
}

CorrelationMatrix CorrelationAccumulator::correlation() const {
  if (n_rows_ < 2) fail("correlation needs at least 2 rows (tokens), got {}", n_rows_);
  const int64_t d = n_units_;
  const double n = static_cast<double>(n_rows_);
  const double nan = std::numeric_limits<double>::quiet_NaN();

  // Centred sums of squares M_ii, and 1/sqrt(M_ii) for units that vary.
  std::vector<double> inverse_norm(d, nan);
  CorrelationMatrix result;
  result.n_units = d;
  for (int64_t i = 0; i < d; ++i) {
    const double centred_square_sum = cross_[i * d + i] - sum_[i] * sum_[i] / n;
    const double magnitude = std::max(std::abs(shift_[i]), std::abs(shift_[i] + sum_[i] / n));
    const double rounding_noise = 64 * std::numeric_limits<double>::epsilon() * magnitude;
    if (!(centred_square_sum > 0) || std::sqrt(centred_square_sum / n) <= rounding_noise) {
      result.constant_units.push_back(i);
    } else {
      inverse_norm[i] = 1.0 / std::sqrt(centred_square_sum);
    }
  }

  result.values.assign(d * d, nan);
#pragma omp parallel for schedule(dynamic, 16) if (d >= 256)
  for (int64_t i = 0; i < d; ++i) {
    if (std::isnan(inverse_norm[i])) continue;
    result.values[i * d + i] = 1.0;
    for (int64_t j = i + 1; j < d; ++j) {
      if (std::isnan(inverse_norm[j])) continue;
      const double centred_cross = cross_[i * d + j] - sum_[i] * sum_[j] / n;
      const double r = std::clamp(centred_cross * inverse_norm[i] * inverse_norm[j], -1.0, 1.0);
      result.values[i * d + j] = r;
      result.values[j * d + i] = r;
    }
  }
  return result;
}

std::vector<double> CorrelationAccumulator::to_buffer() const {
  const int64_t d = n_units_;
  std::vector<double> buffer;
  buffer.reserve(kHeaderSize + 2 * d + packed_size(d));
  buffer.push_back(kBufferVersion);
  buffer.push_back(static_cast<double>(d));
  buffer.push_back(static_cast<double>(n_rows_));
  buffer.insert(buffer.end(), shift_.begin(), shift_.end());
  buffer.insert(buffer.end(), sum_.begin(), sum_.end());
  for (int64_t i = 0; i < d; ++i) buffer.insert(buffer.end(), cross_.begin() + i * d + i, cross_.begin() + (i + 1) * d);
  return buffer;
}

CorrelationAccumulator CorrelationAccumulator::from_buffer(std::span<const double> buffer) {
  if (buffer.size() < kHeaderSize) fail("correlation buffer: {} values, shorter than its 3-value header", buffer.size());
  if (buffer[0] != kBufferVersion) fail("correlation buffer: format version {} (expected {})", buffer[0], kBufferVersion);
  const double d_value = buffer[1], n_rows_value = buffer[2];
  if (!(d_value >= 1 && d_value <= (1 << 20) && d_value == std::floor(d_value)))
    fail("correlation buffer: invalid n_units {}", d_value);
  if (!(n_rows_value >= 0 && n_rows_value <= 9007199254740992.0 && n_rows_value == std::floor(n_rows_value)))
    fail("correlation buffer: invalid n_rows {}", n_rows_value);
  const int64_t d = static_cast<int64_t>(d_value);
  const size_t expected = kHeaderSize + 2 * d + packed_size(d);
  if (buffer.size() != expected)
    fail("correlation buffer: {} values for {} units, expected {}", buffer.size(), d, expected);
  for (const double v : buffer)
    if (!std::isfinite(v)) fail("correlation buffer: contains NaN or infinite values");

  CorrelationAccumulator accumulator(d);
  accumulator.n_rows_ = static_cast<int64_t>(n_rows_value);
  const double* cursor = buffer.data() + kHeaderSize;
  std::copy(cursor, cursor + d, accumulator.shift_.begin());
  cursor += d;
  std::copy(cursor, cursor + d, accumulator.sum_.begin());
  cursor += d;
  for (int64_t i = 0; i < d; ++i) {
    std::copy(cursor, cursor + (d - i), accumulator.cross_.begin() + i * d + i);
    cursor += d - i;
  }
  return accumulator;
}

}  // namespace tdyn::topology
