// Statistics of the topology–dynamics coupling (SPEC §3: per layer, the Spearman correlation between a node's
// boundary score and its gain log‖J̄_l e_i‖, with parametric and permutation p-values, and Benjamini–Hochberg
// FDR across layers).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tdyn::topology {

// Ranks 1..n, tied values sharing the average of the ranks they span (e.g. {10, 20, 20, 30} → {1, 2.5, 2.5, 4}).
std::vector<double> average_ranks(std::span<const double> values);

// Pearson r of two samples; NaN when either is constant. Throws Error on different lengths, n < 2, or
// non-finite values (as do the functions below).
double pearson_correlation(std::span<const double> x, std::span<const double> y);

// Spearman ρ: the Pearson r of the average ranks (the definition that stays valid with ties).
double spearman_correlation(std::span<const double> x, std::span<const double> y);

// Two-sided p-value of a correlation r over n pairs: t = r sqrt((n − 2)/(1 − r²)) against Student's t with
// n − 2 degrees of freedom (the usual large-sample test for Spearman's ρ too). 0 when |r| = 1; needs n ≥ 3.
double correlation_t_test_p_value(double r, int64_t n);

// Two-sided permutation p-value of Spearman's ρ: y's ranks are shuffled n_permutations times with
// std::mt19937_64(seed); p = (#{|ρ_perm| ≥ |ρ|} + 1) / (n_permutations + 1), never 0.
double spearman_permutation_p_value(std::span<const double> x, std::span<const double> y, int64_t n_permutations,
                                    uint64_t seed);

struct SpearmanTest {
  int64_t n = 0;
  double rho = 0;
  double p_parametric = 0;
  double p_permutation = 0;  // NaN when n_permutations = 0
};
SpearmanTest spearman_test(std::span<const double> x, std::span<const double> y, int64_t n_permutations,
                           uint64_t seed);

struct FdrResult {
  double q = 0;
  std::vector<double> adjusted_p_values;  // BH-adjusted, in the input order, monotone in p, ≤ 1
  std::vector<bool> rejected;             // adjusted p ≤ q: the discoveries
  int64_t n_rejected = 0;
};

// Benjamini–Hochberg step-up at level q: with p sorted ascending, reject the first k where k is the largest
// index with p_(k) ≤ k q / m; adjusted p_(i) = min_{j ≥ i} min(1, m p_(j) / j). Throws Error on p outside
// [0, 1] or q outside (0, 1).
FdrResult benjamini_hochberg(std::span<const double> p_values, double q);

// How much a model's communities share with those of a control over the same units (the residual-stream paper finds the
// mesoscale community structure partly architectural, present at initialisation): NMI per boundary of
// model[b] with control[b] (membership over the same d units), against the null of the control's units shuffled,
// which keeps both partitions' community sizes and breaks only which unit is in which community. Draw k shuffles
// every boundary (std::mt19937_64(seed)); p = (1 + #{null ≥ observed}) / (1 + permutations), per boundary and for
// the mean over boundaries. Throws Error on different boundary counts or unit counts, or permutations < 1.
struct CommunitySimilarity {
  std::vector<double> nmi, null_mean, p_value;  // per boundary
  double mean_nmi = 0, mean_null = 0;           // over boundaries
  double p_value_mean = 1;                      // of mean_nmi against the null of the mean
  int64_t permutations = 0;
};
CommunitySimilarity community_similarity(const std::vector<std::vector<int64_t>>& model,
                                         const std::vector<std::vector<int64_t>>& control, int64_t permutations, uint64_t seed);

}  // namespace tdyn::topology
