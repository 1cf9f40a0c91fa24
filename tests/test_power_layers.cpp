// The power-method paper's tests over the layers (analysis/power/layers.h): the permutation p-values against an enumeration of
// the permutations written here independently (recursive, with the textbook Spearman formula), and constructed
// matrices for which the cross-layer test must pass or must not.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "analysis/power/layers.h"

namespace tdyn {
namespace {

// Every permutation of 0..n-1, built by inserting each element in every free slot (not std::next_permutation).
void each_permutation(int64_t n, const std::function<void(const std::vector<int64_t>&)>& visit) {
  std::vector<int64_t> p(n, -1);
  std::function<void(int64_t)> place = [&](int64_t value) {
    if (value == n) return visit(p);
    for (int64_t slot = 0; slot < n; ++slot)
      if (p[slot] < 0) p[slot] = value, place(value + 1), p[slot] = -1;
  };
  place(0);
}

// P(Σ_t a[t][π(t)] ≥ Σ_t a[t][t]) by enumeration.
double enumerated_p(const linalg::Matrix& a) {
  const int64_t n = a.rows();
  const double observed = a.trace();
  int64_t as_large = 0, all = 0;
  each_permutation(n, [&](const std::vector<int64_t>& p) {
    double s = 0;
    for (int64_t t = 0; t < n; ++t) s += a(t, p[t]);
    as_large += s >= observed - 1e-12, ++all;
  });
  return static_cast<double>(as_large) / static_cast<double>(all);
}

TEST(PowerLayers, CrossLayerTestAgainstEnumeration) {
  // A random 5 × 5 matrix: the p-value is the enumerated one, the means are the diagonal's and the rest's.
  linalg::Matrix a(5, 5);
  std::vector<double> values = {0.31, 0.12, 0.25, 0.08, 0.19, 0.22, 0.41, 0.05, 0.16, 0.27, 0.11, 0.29, 0.36, 0.21, 0.07,
                                0.18, 0.09, 0.33, 0.28, 0.14, 0.26, 0.15, 0.06, 0.24, 0.38};
  for (int i = 0; i < 25; ++i) a(i / 5, i % 5) = values[i];
  const CrossLayerAlignment c = cross_layer_alignment(a);
  EXPECT_NEAR(c.p_value, enumerated_p(a), 1e-15);
  EXPECT_NEAR(c.diagonal, (0.31 + 0.41 + 0.36 + 0.28 + 0.38) / 5, 1e-15);
  EXPECT_NEAR(c.off_diagonal, (a.sum() - a.trace()) / 20, 1e-15);
}

TEST(PowerLayers, CrossLayerTestPassesOnlyForTheOwnLayer) {
  const int64_t n = 6;
  // Row and column effects only, A[t][s] = r_t + c_s: a layer whose v₁ every token aligns with, and depths whose
  // tokens align with everything. Every permutation has the same sum, so p = 1, although the diagonal mean can
  // exceed the off-diagonal one.
  linalg::Matrix effects(n, n);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t s = 0; s < n; ++s) effects(t, s) = 0.05 * t + (s == 2 ? 0.5 : 0.1);
  CrossLayerAlignment c = cross_layer_alignment(effects);
  EXPECT_NEAR(c.p_value, 1.0, 1e-15);
  // A planted own-layer alignment on top of the same effects: only the identity reaches the diagonal's sum.
  linalg::Matrix planted = effects;
  for (int64_t t = 0; t < n; ++t) planted(t, t) += 0.2;
  c = cross_layer_alignment(planted);
  EXPECT_NEAR(c.p_value, 1.0 / 720, 1e-15);
  EXPECT_GT(c.diagonal, c.off_diagonal);
  // Too few layers: not tested.
  EXPECT_TRUE(std::isnan(cross_layer_alignment(planted.topLeftCorner(3, 3)).p_value));
}

TEST(PowerLayers, MonteCarloAboveTheExactLimit) {
  // 10 layers (10! permutations): Monte Carlo; the planted diagonal is reached by the identity alone, which a draw
  // hits with probability 1/10! each.
  linalg::Matrix a = linalg::Matrix::Constant(10, 10, 0.1);
  a.diagonal().array() += 0.3;
  const CrossLayerAlignment c = cross_layer_alignment(a, 7);
  EXPECT_GE(c.p_value, 1.0 / (kLayerPermutations + 1));
  EXPECT_LE(c.p_value, 3.0 / (kLayerPermutations + 1));
  // No own-layer alignment: about half the permutations reach the diagonal's sum or more.
  const linalg::Matrix flat = linalg::Matrix::Constant(10, 10, 0.1);
  EXPECT_NEAR(cross_layer_alignment(flat, 7).p_value, 1.0, 1e-15);
}

TEST(PowerLayers, GammaGapSpearmanAgainstEnumeration) {
  const std::vector<double> gamma = {0.12, 0.30, 0.18, 0.41, 0.25}, gap = {0.05, 0.22, 0.31, 0.40, 0.10};
  const GammaGapTest g = gamma_gap_test(gamma, gap);
  // No ties: ρ = 1 − 6 Σ d² / (n (n² − 1)) with d the rank differences; p the share of gap orders with ρ ≥ it.
  auto ranks = [](const std::vector<double>& v) {
    std::vector<double> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = 1 + std::count_if(v.begin(), v.end(), [&](double x) { return x < v[i]; });
    return r;
  };
  const std::vector<double> rg = ranks(gamma), rp = ranks(gap);
  auto rho_of = [&](const std::vector<int64_t>& p) {
    double d2 = 0;
    for (size_t t = 0; t < rg.size(); ++t) d2 += (rg[t] - rp[p[t]]) * (rg[t] - rp[p[t]]);
    return 1 - 6 * d2 / (5.0 * 24);
  };
  std::vector<int64_t> identity = {0, 1, 2, 3, 4};
  const double rho = rho_of(identity);
  EXPECT_NEAR(g.rho, rho, 1e-12);
  int64_t as_large = 0;
  each_permutation(5, [&](const std::vector<int64_t>& p) { as_large += rho_of(p) >= rho - 1e-12; });
  EXPECT_NEAR(g.p_value, as_large / 120.0, 1e-15);
  EXPECT_EQ(g.layers, 5);
}

TEST(PowerLayers, GammaGapPassesOnlyForAPositiveRankCorrelation) {
  const std::vector<double> gap = {0.1, 0.2, 0.3, 0.4, 0.5};
  // γ rising with the gap: ρ = 1, reached by the identity alone.
  GammaGapTest g = gamma_gap_test({0.2, 0.25, 0.3, 0.5, 0.6}, gap);
  EXPECT_NEAR(g.rho, 1, 1e-12);
  EXPECT_NEAR(g.p_value, 1.0 / 120, 1e-15);
  // γ falling with the gap: every permutation is as large, p = 1.
  g = gamma_gap_test({0.6, 0.5, 0.3, 0.25, 0.2}, gap);
  EXPECT_NEAR(g.rho, -1, 1e-12);
  EXPECT_NEAR(g.p_value, 1.0, 1e-15);
  // Three layers: ρ, but no test.
  g = gamma_gap_test({0.2, 0.3, 0.4}, {0.1, 0.2, 0.3});
  EXPECT_NEAR(g.rho, 1, 1e-12);
  EXPECT_TRUE(std::isnan(g.p_value));
}

}  // namespace
}  // namespace tdyn
