#include "analysis/power/layers.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "analysis/topology/statistics.h"
#include "core/error.h"
#include "core/json_number.h"

namespace tdyn {

double layer_permutation_p_value(int64_t n, const std::function<double(const std::vector<int64_t>&)>& statistic, uint64_t seed) {
  TDYN_CHECK(n >= 1);
  std::vector<int64_t> permutation(n);
  std::iota(permutation.begin(), permutation.end(), 0);
  const double observed = statistic(permutation);
  const double slack = 1e-12;
  int64_t as_large = 0, drawn = 0;
  if (n <= kExactLayers) {
    do {
      as_large += statistic(permutation) >= observed - slack;
      ++drawn;
    } while (std::next_permutation(permutation.begin(), permutation.end()));
    return static_cast<double>(as_large) / static_cast<double>(drawn);
  }
  std::mt19937_64 generator(seed);
  for (; drawn < kLayerPermutations; ++drawn) {
    std::shuffle(permutation.begin(), permutation.end(), generator);
    as_large += statistic(permutation) >= observed - slack;
  }
  return static_cast<double>(as_large + 1) / static_cast<double>(drawn + 1);
}

CrossLayerAlignment cross_layer_alignment(const linalg::Matrix& mean, uint64_t seed) {
  TDYN_CHECK(mean.rows() == mean.cols());
  const int64_t n = mean.rows();
  CrossLayerAlignment c;
  c.mean = mean;
  if (n == 0) return c;
  c.diagonal = mean.diagonal().mean();
  if (n > 1) c.off_diagonal = (mean.sum() - mean.diagonal().sum()) / static_cast<double>(n * (n - 1));
  if (n >= kMinTestedLayers)
    c.p_value = layer_permutation_p_value(n, [&](const std::vector<int64_t>& column) {
      double sum = 0;
      for (int64_t t = 0; t < n; ++t) sum += mean(t, column[t]);
      return sum;
    }, seed);
  return c;
}

nlohmann::json CrossLayerAlignment::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (Eigen::Index t = 0; t < mean.rows(); ++t) {
    nlohmann::json row = nlohmann::json::array();
    for (Eigen::Index s = 0; s < mean.cols(); ++s) row.push_back(mean(t, s));
    rows.push_back(row);
  }
  return {{"mean", rows},
          {"diagonal_mean", finite_or_null(diagonal)},
          {"off_diagonal_mean", finite_or_null(off_diagonal)},
          {"p_permutation", finite_or_null(p_value)},
          {"permutations", mean.rows() <= kExactLayers ? "every permutation of the layers" : "Monte Carlo"},
          {"definition", "mean[t][s] = mean over tokens of a(x^{t+1}; v1 of F_s); p: columns permuted, "
                         "P(sum_t mean[t][pi(t)] >= sum_t mean[t][t])"}};
}

GammaGapTest gamma_gap_test(const std::vector<double>& gamma, const std::vector<double>& relative_gap, uint64_t seed) {
  TDYN_CHECK(gamma.size() == relative_gap.size());
  GammaGapTest g;
  g.layers = static_cast<int64_t>(gamma.size());
  if (g.layers < 2) return g;
  g.rho = topology::spearman_correlation(gamma, relative_gap);
  if (g.layers < kMinTestedLayers || std::isnan(g.rho)) return g;
  // Σ r_γ(t) r_gap(π(t)) orders the permutations as their ρ does (the ranks' mean and spread do not change).
  const std::vector<double> rank_gamma = topology::average_ranks(gamma), rank_gap = topology::average_ranks(relative_gap);
  g.p_value = layer_permutation_p_value(g.layers, [&](const std::vector<int64_t>& order) {
    double sum = 0;
    for (size_t t = 0; t < rank_gamma.size(); ++t) sum += rank_gamma[t] * rank_gap[order[t]];
    return sum;
  }, seed);
  return g;
}

CrossLayerAlignment CrossLayerAlignment::from_json(const nlohmann::json& j) {
  CrossLayerAlignment a;
  const nlohmann::json& rows = list_at(j, "mean");
  a.mean.resize(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(rows.size()));
  for (size_t t = 0; t < rows.size(); ++t) {
    if (!rows[t].is_array() || rows[t].size() != rows.size()) fail("results.json: 'mean' is not a square table of numbers");
    for (size_t s = 0; s < rows.size(); ++s) {
      const nlohmann::json& v = rows[t][s];
      if (!v.is_number() && !v.is_null()) fail("results.json: 'mean' holds {}, not a number", v.dump());
      a.mean(static_cast<Eigen::Index>(t), static_cast<Eigen::Index>(s)) = v.is_null() ? NAN : v.get<double>();
    }
  }
  a.diagonal = number_at(j, "diagonal_mean"), a.off_diagonal = number_at(j, "off_diagonal_mean"), a.p_value = number_at(j, "p_permutation");
  return a;
}

nlohmann::json GammaGapTest::to_json() const {
  return {{"layers", layers},
          {"rho", finite_or_null(rho)},
          {"p_permutation", finite_or_null(p_value)},
          {"alternative", "rho > 0"},
          {"gap", "1 - |lambda2|/|lambda1| of F_t (F.modulus_ratio): the power method's convergence factor per step, free of "
                  "F_t's scale"}};
}

GammaGapTest GammaGapTest::from_json(const nlohmann::json& j) {
  return {integer_at(j, "layers"), number_at(j, "rho"), number_at(j, "p_permutation")};
}

}  // namespace tdyn
