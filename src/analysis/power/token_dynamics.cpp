#include "analysis/power/token_dynamics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <boost/math/distributions/binomial.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_number.h"

namespace tdyn {
namespace {

double quantile_of_sorted(const std::vector<double>& sorted, double level) {
  if (sorted.empty()) return 0;
  const double position = level * (sorted.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (position - below) * (sorted[above] - sorted[below]);
}

// `sample` and `repeated` as in TokenAlignments (both empty when unknown: every token new, one sample each).
AlignmentStats alignment_stats(const std::vector<double>& before, const std::vector<double>& after, double baseline,
                               const std::vector<int64_t>& sample, const std::vector<char>& repeated) {
  TDYN_CHECK(before.size() == after.size());
  TDYN_CHECK(sample.size() == repeated.size() && (sample.empty() || sample.size() == after.size()));
  AlignmentStats s;
  s.tokens = static_cast<int64_t>(after.size());
  s.baseline = baseline;
  if (s.tokens == 0) return s;
  for (size_t i = 0; i < after.size(); ++i) {
    s.gamma += after[i];
    s.gamma_before += before[i];
    s.increases += after[i] > before[i];
  }
  s.gamma /= s.tokens;
  s.gamma_before /= s.tokens;
  s.rho = static_cast<double>(s.increases) / s.tokens;
  s.p_value = binomial_upper_tail(s.increases, s.tokens);

  // New states only, and the sign of ρ_s − 1/2 per sample.
  std::map<int64_t, std::pair<int64_t, int64_t>> per_sample;  // sample → (new tokens, increases among them)
  int64_t unique_increases = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    if (!repeated.empty() && repeated[i]) continue;
    auto& [n, up] = per_sample[sample.empty() ? static_cast<int64_t>(i) : sample[i]];
    ++n, ++s.unique_tokens;
    const bool increase = after[i] > before[i];
    up += increase, unique_increases += increase;
  }
  s.rho_unique = s.unique_tokens ? static_cast<double>(unique_increases) / s.unique_tokens : 0;
  for (const auto& [index, counts] : per_sample) {
    s.samples_above += 2 * counts.second > counts.first;
    s.samples_below += 2 * counts.second < counts.first;
  }
  s.p_value_samples = binomial_upper_tail(s.samples_above, s.samples_above + s.samples_below);

  std::vector<double> sorted = after;
  std::sort(sorted.begin(), sorted.end());
  for (double level : kQuantileLevels) s.quantiles.push_back(quantile_of_sorted(sorted, level));
  s.histogram.assign(kHistogramBins, 0);
  for (double a : after) ++s.histogram[std::clamp(static_cast<int>(a * kHistogramBins), 0, kHistogramBins - 1)];
  return s;
}

}  // namespace

double binomial_upper_tail(int64_t successes, int64_t trials) {
  if (successes <= 0) return 1.0;
  if (successes > trials) return 0.0;
  boost::math::binomial_distribution<double> binomial(static_cast<double>(trials), 0.5);
  return boost::math::cdf(boost::math::complement(binomial, static_cast<double>(successes - 1)));
}

// ---- Token dynamics --------------------------------------------------------------------------------------------

nlohmann::json AlignmentStats::to_json() const {
  nlohmann::json q = nlohmann::json::object();
  for (size_t i = 0; i < quantiles.size(); ++i) q[fmt::format("{:g}", kQuantileLevels[i])] = quantiles[i];
  return {{"tokens", tokens},   {"gamma", gamma},         {"gamma_before", gamma_before},
          {"baseline", baseline},
          {"gamma_covariance", finite_or_null(gamma_covariance)},
          {"rho", rho},           {"increases", increases},
          {"p_value", p_value}, {"quantiles", q},         {"histogram", histogram},
          {"unique_tokens", unique_tokens}, {"rho_unique", rho_unique}, {"samples_above", samples_above},
          {"samples_below", samples_below}, {"p_value_samples", p_value_samples}};
}

AlignmentStats AlignmentStats::from_json(const nlohmann::json& j) {
  AlignmentStats a;
  a.tokens = integer_at(j, "tokens"), a.gamma = number_at(j, "gamma"), a.gamma_before = number_at(j, "gamma_before");
  a.baseline = number_at(j, "baseline"), a.gamma_covariance = number_at(j, "gamma_covariance");
  a.rho = number_at(j, "rho"), a.increases = integer_at(j, "increases"), a.p_value = number_at(j, "p_value");
  const nlohmann::json& q = object_at(j, "quantiles");
  for (double level : kQuantileLevels) a.quantiles.push_back(number_at(q, fmt::format("{:g}", level).c_str()));
  a.histogram = integers_at(j, "histogram");
  a.unique_tokens = integer_at(j, "unique_tokens"), a.rho_unique = number_at(j, "rho_unique");
  a.samples_above = integer_at(j, "samples_above"), a.samples_below = integer_at(j, "samples_below");
  a.p_value_samples = number_at(j, "p_value_samples");
  return a;
}

TokenDynamics token_dynamics(const Transformer& model, const std::vector<Sample>& samples,
                             const std::vector<LayerSpectrum>& spectra, const DynamicsOptions& options,
                             ProgressSink& progress) {
  const int64_t n_layers = model.config().n_layers;
  TDYN_CHECK(static_cast<int64_t>(spectra.size()) == n_layers);
  std::vector<Matrix> basis_f, basis_if;  // dominant subspaces of F_t and I + F_t
  for (const auto& s : spectra) {
    basis_f.push_back(dominant_basis(s.f));
    basis_if.push_back(dominant_basis(s.identity_plus_f));
  }
  TokenAlignments a;
  a.samples = static_cast<int64_t>(samples.size());
  for (auto* v : {&a.before_f, &a.after_f, &a.before_if, &a.after_if, &a.norm_before, &a.norm_after, &a.after_covariance})
    v->assign(n_layers, {});
  a.cross_alignment = Matrix::Zero(n_layers, n_layers);  // sums, divided by the token count below
  ProgressLoop loop(progress, "token dynamics", a.samples, "samples");
  for (size_t si = 0; si < samples.size(); ++si) {
    TokenState state = initial_state(model, samples[si].ids, options);
    const int64_t n = state.x.dim(0);
    for (int64_t t = 0; t < n_layers; ++t) {
      for (int64_t i = 0; i < n; ++i) {
        const Vector x = token_state(state.x, i);
        a.before_f[t].push_back(alignment(x, basis_f[t]));
        a.before_if[t].push_back(alignment(x, basis_if[t]));
        a.norm_before[t].push_back(x.norm());
      }
      apply_layer(model, t, state, options);
      Matrix after(n, state.x.dim(1));
      for (int64_t i = 0; i < n; ++i) {
        const Vector x = token_state(state.x, i);
        after.row(i) = x.transpose();
        a.after_f[t].push_back(alignment(x, basis_f[t]));
        a.after_if[t].push_back(alignment(x, basis_if[t]));
        a.norm_after[t].push_back(x.norm());
        for (int64_t s = 0; s < n_layers; ++s) a.cross_alignment(t, s) += alignment(x, basis_f[s]);
      }
      const std::vector<double> covariance = token_covariance_alignments(after, basis_f[t].cols(), token_covariance_seed(t, si));
      a.after_covariance[t].insert(a.after_covariance[t].end(), covariance.begin(), covariance.end());
    }
    loop.advance();
  }
  if (n_layers > 0 && !a.after_f[0].empty()) a.cross_alignment /= static_cast<double>(a.after_f[0].size());
  mark_repeated_states(samples, model.config().causal, &a);
  return summarize_token_dynamics(std::move(a), spectra, model.config().d_model, options);
}

void mark_repeated_states(const std::vector<Sample>& samples, bool causal, TokenAlignments* a) {
  a->sample_of_token.clear();
  a->repeated.clear();
  // A trie of the prefixes seen so far: (node, token id) → child node; node 0 is the empty prefix.
  std::map<std::pair<int64_t, int32_t>, int64_t> children;
  std::set<std::vector<int32_t>> sequences;
  for (size_t si = 0; si < samples.size(); ++si) {
    const auto& ids = samples[si].ids;
    const bool seen_sequence = !causal && !sequences.insert(ids).second;
    int64_t node = 0;
    for (int32_t id : ids) {
      bool seen = seen_sequence;
      if (causal) {
        auto [it, inserted] = children.try_emplace({node, id}, static_cast<int64_t>(children.size()) + 1);
        seen = !inserted;
        node = it->second;
      }
      a->sample_of_token.push_back(static_cast<int64_t>(si));
      a->repeated.push_back(seen);
    }
  }
}

TokenDynamics summarize_token_dynamics(TokenAlignments a, const std::vector<LayerSpectrum>& spectra, int64_t d,
                                       const DynamicsOptions& options) {
  const int64_t n_layers = static_cast<int64_t>(spectra.size());
  TDYN_CHECK(static_cast<int64_t>(a.before_f.size()) == n_layers);
  TokenDynamics out;
  out.options = options;
  out.samples = a.samples;
  out.tokens = n_layers > 0 ? static_cast<int64_t>(a.before_f[0].size()) : 0;
  for (int64_t t = 0; t < n_layers; ++t) {
    const auto& s = spectra[t];
    LayerDynamics l;
    l.layer = t;
    l.f = alignment_stats(a.before_f[t], a.after_f[t], random_alignment_baseline(d, dominant_basis(s.f).cols()), a.sample_of_token,
                          a.repeated);
    if (!a.after_covariance.empty()) {
      double sum = 0;
      int64_t counted = 0;
      for (double v : a.after_covariance[t])
        if (!std::isnan(v)) sum += v, ++counted;
      l.f.gamma_covariance = counted ? sum / counted : std::numeric_limits<double>::quiet_NaN();
    }
    l.identity_plus_f = alignment_stats(a.before_if[t], a.after_if[t], random_alignment_baseline(d, dominant_basis(s.identity_plus_f).cols()),
                                        a.sample_of_token, a.repeated);
    double before = 0, after = 0;  // summed in token order
    for (double v : a.norm_before[t]) before += v;
    for (double v : a.norm_after[t]) after += v;
    l.mean_norm_before = out.tokens ? before / out.tokens : 0;
    l.mean_norm_after = out.tokens ? after / out.tokens : 0;
    out.layers.push_back(std::move(l));
  }
  out.before = std::move(a.before_f);
  out.after = std::move(a.after_f);
  out.cross_alignment = std::move(a.cross_alignment);
  out.sample_of_token = std::move(a.sample_of_token);
  out.repeated = std::move(a.repeated);
  out.after_covariance = std::move(a.after_covariance);
  return out;
}

}  // namespace tdyn
