// Rank correlation, its p-values, and Benjamini–Hochberg FDR (see statistics.h).
#include "analysis/topology/statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include <boost/math/distributions/students_t.hpp>

#include "analysis/topology/leiden.h"
#include "core/error.h"

namespace tdyn::topology {
namespace {

void validate_pair(std::span<const double> x, std::span<const double> y, const char* what) {
  if (x.size() != y.size()) fail("{}: samples of different lengths {} and {}", what, x.size(), y.size());
  if (x.size() < 2) fail("{}: needs at least 2 pairs, got {}", what, x.size());
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) fail("{}: pair {} is not finite ({}, {})", what, i, x[i], y[i]);
}

// v − mean(v), scaled to unit norm; all zeros for a constant sample. Then r = ⟨x̂, ŷ⟩.
std::vector<double> standardized(std::span<const double> v, bool* is_constant) {
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  std::vector<double> out(v.size());
  double norm_squared = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = v[i] - mean;
    norm_squared += out[i] * out[i];
  }
  *is_constant = !(norm_squared > 0);
  if (!*is_constant)
    for (double& value : out) value /= std::sqrt(norm_squared);
  return out;
}

double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

}  // namespace

std::vector<double> average_ranks(std::span<const double> values) {
  const size_t n = values.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::vector<double> ranks(n);
  for (size_t first = 0; first < n;) {
    size_t last = first;  // [first, last] is one run of equal values, sharing the mean of ranks first+1..last+1
    while (last + 1 < n && values[order[last + 1]] == values[order[first]]) ++last;
    const double shared_rank = (static_cast<double>(first + 1) + static_cast<double>(last + 1)) / 2;
    for (size_t t = first; t <= last; ++t) ranks[order[t]] = shared_rank;
    first = last + 1;
  }
  return ranks;
}

double pearson_correlation(std::span<const double> x, std::span<const double> y) {
  validate_pair(x, y, "Pearson correlation");
  bool x_constant = false, y_constant = false;
  const std::vector<double> x_hat = standardized(x, &x_constant), y_hat = standardized(y, &y_constant);
  if (x_constant || y_constant) return std::numeric_limits<double>::quiet_NaN();
  return std::clamp(dot(x_hat, y_hat), -1.0, 1.0);
}

double spearman_correlation(std::span<const double> x, std::span<const double> y) {
  validate_pair(x, y, "Spearman correlation");
  const std::vector<double> rank_x = average_ranks(x), rank_y = average_ranks(y);
  return pearson_correlation(rank_x, rank_y);
}

double correlation_t_test_p_value(double r, int64_t n) {
  if (n < 3) fail("correlation t-test: needs at least 3 pairs, got {}", n);
  if (std::isnan(r)) return std::numeric_limits<double>::quiet_NaN();
  if (std::abs(r) >= 1) return 0.0;
  const double dof = static_cast<double>(n - 2);
  const double t = r * std::sqrt(dof / (1 - r * r));
  const boost::math::students_t student(dof);
  return std::min(1.0, 2 * boost::math::cdf(boost::math::complement(student, std::abs(t))));
}

double spearman_permutation_p_value(std::span<const double> x, std::span<const double> y, int64_t n_permutations,
                                    uint64_t seed) {
  validate_pair(x, y, "Spearman permutation test");
  if (n_permutations < 1) fail("Spearman permutation test: needs at least 1 permutation, got {}", n_permutations);
  bool x_constant = false, y_constant = false;
  const std::vector<double> x_hat = standardized(average_ranks(x), &x_constant);
  std::vector<double> y_hat = standardized(average_ranks(y), &y_constant);
  if (x_constant || y_constant) return std::numeric_limits<double>::quiet_NaN();
  // Shuffling y's standardized ranks keeps their mean and norm, so ρ_perm is one dot product.
  const double observed = std::abs(dot(x_hat, y_hat));
  const double slack = 1e-12;  // a permuted ρ equal to the observed one up to rounding counts as "as extreme"
  std::mt19937_64 generator(seed);
  int64_t as_extreme = 0;
  for (int64_t p = 0; p < n_permutations; ++p) {
    std::shuffle(y_hat.begin(), y_hat.end(), generator);
    if (std::abs(dot(x_hat, y_hat)) >= observed - slack) ++as_extreme;
  }
  return static_cast<double>(as_extreme + 1) / static_cast<double>(n_permutations + 1);
}

SpearmanTest spearman_test(std::span<const double> x, std::span<const double> y, int64_t n_permutations,
                           uint64_t seed) {
  SpearmanTest test;
  test.n = static_cast<int64_t>(x.size());
  test.rho = spearman_correlation(x, y);
  test.p_parametric = correlation_t_test_p_value(test.rho, test.n);
  test.p_permutation = n_permutations > 0 ? spearman_permutation_p_value(x, y, n_permutations, seed)
                                          : std::numeric_limits<double>::quiet_NaN();
  return test;
}

FdrResult benjamini_hochberg(std::span<const double> p_values, double q) {
  if (!(q > 0 && q < 1)) fail("Benjamini–Hochberg: q must be in (0, 1), got {}", q);
  for (size_t i = 0; i < p_values.size(); ++i)
    if (!(p_values[i] >= 0 && p_values[i] <= 1)) fail("Benjamini–Hochberg: p-value {} is {}", i, p_values[i]);
  const size_t m = p_values.size();
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p_values[a] < p_values[b]; });

  FdrResult result;
  result.q = q;
  result.adjusted_p_values.assign(m, 1.0);
  result.rejected.assign(m, false);
  // Step-up from the largest p: the running minimum of m p_(j) / j makes the adjusted values monotone.
  double running_min = 1.0;
  for (size_t rank = m; rank >= 1; --rank) {
    const size_t i = order[rank - 1];
    running_min = std::min(running_min, p_values[i] * static_cast<double>(m) / static_cast<double>(rank));
    result.adjusted_p_values[i] = running_min;
  }
  for (size_t i = 0; i < m; ++i) {
    result.rejected[i] = result.adjusted_p_values[i] <= q;
    result.n_rejected += result.rejected[i];
  }
  return result;
}

CommunitySimilarity community_similarity(const std::vector<std::vector<int64_t>>& model,
                                         const std::vector<std::vector<int64_t>>& control, int64_t permutations, uint64_t seed) {
  if (model.size() != control.size()) fail("community similarity: {} boundaries against {} in the control", model.size(), control.size());
  if (model.empty()) fail("community similarity: no boundaries");
  if (permutations < 1) fail("community similarity: needs at least 1 permutation, got {}", permutations);
  const size_t n_boundaries = model.size();
  CommunitySimilarity c;
  c.permutations = permutations;
  c.null_mean.assign(n_boundaries, 0.0);
  std::vector<int64_t> as_large(n_boundaries, 0);
  for (size_t b = 0; b < n_boundaries; ++b) {
    if (model[b].size() != control[b].size())
      fail("community similarity: boundary {} has {} units, the control {}", b, model[b].size(), control[b].size());
    c.nmi.push_back(normalized_mutual_information(model[b], control[b]));
  }
  c.mean_nmi = mean_of(c.nmi);
  const double slack = 1e-12;
  std::mt19937_64 generator(seed);
  std::vector<std::vector<int64_t>> shuffled = control;
  int64_t mean_as_large = 0;
  for (int64_t k = 0; k < permutations; ++k) {
    double sum = 0;
    for (size_t b = 0; b < n_boundaries; ++b) {
      std::shuffle(shuffled[b].begin(), shuffled[b].end(), generator);
      const double nmi = normalized_mutual_information(model[b], shuffled[b]);
      c.null_mean[b] += nmi / static_cast<double>(permutations);
      as_large[b] += nmi >= c.nmi[b] - slack;
      sum += nmi;
    }
    mean_as_large += sum / static_cast<double>(n_boundaries) >= c.mean_nmi - slack;
  }
  for (size_t b = 0; b < n_boundaries; ++b) c.p_value.push_back(static_cast<double>(as_large[b] + 1) / static_cast<double>(permutations + 1));
  c.mean_null = mean_of(c.null_mean);
  c.p_value_mean = static_cast<double>(mean_as_large + 1) / static_cast<double>(permutations + 1);
  return c;
}

}  // namespace tdyn::topology
