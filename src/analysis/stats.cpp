#include "analysis/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <boost/math/distributions/binomial.hpp>
#include <boost/math/distributions/students_t.hpp>

namespace tdyn {

double prediction_p_value(double x, std::span<const double> controls, int direction, double resolution) {
  const size_t k = controls.size();
  if (k < 2 || !std::isfinite(x)) return std::numeric_limits<double>::quiet_NaN();
  const double mean = std::accumulate(controls.begin(), controls.end(), 0.0) / static_cast<double>(k);
  double ss = 0;
  for (double c : controls) ss += (c - mean) * (c - mean);
  // A spread of round-off size is no spread: at least the resolution, and at least 1e-12 of the values' scale.
  const double scale = std::max(std::abs(x), std::abs(mean));
  const double s = std::max({std::sqrt(ss / static_cast<double>(k - 1)), resolution, 1e-12 * scale, std::numeric_limits<double>::min()});
  const double t = direction * (x - mean) / (s * std::sqrt(1 + 1.0 / static_cast<double>(k)));
  const boost::math::students_t student(static_cast<double>(k - 1));
  return boost::math::cdf(boost::math::complement(student, t));
}

std::vector<double> holm_adjusted(std::span<const double> p_values) {
  std::vector<size_t> order;
  for (size_t i = 0; i < p_values.size(); ++i)
    if (std::isfinite(p_values[i])) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p_values[a] < p_values[b]; });
  std::vector<double> adjusted(p_values.size(), std::numeric_limits<double>::quiet_NaN());
  const size_t m = order.size();
  double running_max = 0;
  for (size_t rank = 0; rank < m; ++rank) {
    const size_t i = order[rank];
    running_max = std::max(running_max, std::min(1.0, static_cast<double>(m - rank) * p_values[i]));
    adjusted[i] = running_max;
  }
  return adjusted;
}

std::pair<double, double> subset_interval(double estimate, std::span<const double> subset_values) {
  std::vector<double> v;
  for (double x : subset_values)
    if (std::isfinite(x)) v.push_back(x);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (v.size() < 2 || !std::isfinite(estimate)) return {nan, nan};
  const double g = static_cast<double>(v.size());
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / g;
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  const double half = boost::math::quantile(boost::math::students_t(g - 1), 0.975) * std::sqrt(ss / (g - 1)) / std::sqrt(g);
  return {estimate - half, estimate + half};
}

double order_tau(std::span<const double> values) {
  if (values.size() < 2) return NAN;
  long concordant = 0, discordant = 0;
  for (size_t i = 0; i < values.size(); ++i)
    for (size_t j = i + 1; j < values.size(); ++j) concordant += values[j] > values[i], discordant += values[j] < values[i];
  return static_cast<double>(concordant - discordant) / static_cast<double>(values.size() * (values.size() - 1) / 2);
}

double sign_test_p_value(long successes, long trials) {
  if (trials <= 0 || successes <= 0) return 1.0;
  if (successes > trials) return 0.0;
  const boost::math::binomial coin(static_cast<double>(trials), 0.5);
  return boost::math::cdf(boost::math::complement(coin, static_cast<double>(successes - 1)));
}

}  // namespace tdyn
