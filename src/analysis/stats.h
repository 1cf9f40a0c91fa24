// Statistics that judge a claim against its controls (report/verdicts.cpp): how far one value lies beyond a
// sample of control values, and Holm's family-wise adjustment of the p-values of every verdict of a run.
#pragma once

#include <span>
#include <utility>
#include <vector>

namespace tdyn {

// One-sided p-value that `x` lies beyond the controls in `direction` (+1: larger, −1: smaller), treating x as one
// more draw from the controls' distribution: t = direction (x − mean) / (s √(1 + 1/K)) against Student's t with
// K − 1 degrees of freedom (the prediction interval of a normal sample of K). `resolution` is the smallest spread
// the statistic can resolve (1/2 for a count, whose K controls may all be equal): s is at least it, so that K equal
// controls do not make any difference infinitely significant. NaN with fewer than 2 controls or a non-finite x.
double prediction_p_value(double x, std::span<const double> controls, int direction, double resolution);

// Holm's step-down adjustment: with the m finite p-values sorted ascending, p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j)).
// Rejecting p̃ < α keeps the family-wise error rate at α whatever the dependence. NaN entries (verdicts without
// a test) stay NaN and do not count in m.
std::vector<double> holm_adjusted(std::span<const double> p_values);

// The 95 % interval of an estimate over all samples from its values on G ≥ 2 disjoint subsets of them (the method of
// random groups): estimate ± t_{0.975, G−1} s / √G, s the subsets' standard deviation, since an estimate from all
// the samples varies about as an average of the G subsets' does. {NaN, NaN} with fewer than 2 finite values.
std::pair<double, double> subset_interval(double estimate, std::span<const double> subset_values);

// Kendall's τ of `values` with their order 1, 2, …, n: (concordant − discordant pairs) / (n (n − 1) / 2), ties counting
// as neither; the trend of a quantity over a training run's checkpoints. NaN with fewer than 2 values.
double order_tau(std::span<const double> values);

// One-sided p-value of at least `successes` of `trials` fair coin flips: P(X ≥ successes), X ~ Binomial(trials, 1/2).
double sign_test_p_value(long successes, long trials);

}  // namespace tdyn
