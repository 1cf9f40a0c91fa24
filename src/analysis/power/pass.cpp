#include "analysis/power/pass.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tdyn {

namespace {
constexpr size_t kProbesPerLayer = 7;  // token_dynamics_probes' order

std::string cross_probe_name(int64_t t, int64_t s) { return fmt::format("power.{}.after.F.v1_of_layer_{}", t, s); }

double mean_of(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
}
}  // namespace

std::vector<TokenProbe> token_dynamics_probes(const std::vector<LayerSpectrum>& spectra) {
  const int64_t n_layers = static_cast<int64_t>(spectra.size());
  std::vector<TokenProbe> probes;
  for (int64_t t = 0; t < n_layers; ++t) {
    const std::string before = fmt::format("blocks.{}.hook_resid_pre", t);
    const std::string after = t + 1 < n_layers ? fmt::format("blocks.{}.hook_resid_pre", t + 1)
                                               : fmt::format("blocks.{}.hook_resid_post", t);
    const Matrix f = dominant_basis(spectra[t].f), identity_plus_f = dominant_basis(spectra[t].identity_plus_f);
    probes.push_back({fmt::format("power.{}.before.F", t), before, f});
    probes.push_back({fmt::format("power.{}.before.I+F", t), before, identity_plus_f});
    probes.push_back({fmt::format("power.{}.before.norm", t), before, {}});
    probes.push_back({fmt::format("power.{}.after.F", t), after, f});
    probes.push_back({fmt::format("power.{}.after.I+F", t), after, identity_plus_f});
    probes.push_back({fmt::format("power.{}.after.norm", t), after, {}});
    probes.push_back({fmt::format("power.{}.after.F.covariance", t), after, f, t});
  }
  // Then the alignment of the tokens leaving layer t with the dominant subspace of every other layer's F_s.
  for (int64_t t = 0; t < n_layers; ++t)
    for (int64_t s = 0; s < n_layers; ++s)
      if (s != t) probes.push_back({cross_probe_name(t, s), probes[kProbesPerLayer * t + 3].hook, dominant_basis(spectra[s].f)});
  return probes;
}

TokenDynamics token_dynamics_from_pass(const PassFile& pass, const std::vector<Sample>& samples, bool causal,
                                       const std::vector<LayerSpectrum>& spectra, int64_t d_model, const DynamicsOptions& options) {
  if (options.mode != DynamicsMode::Full || !options.residual)
    fail("token dynamics from a shared pass need the full mode with the residual (mode {} was asked for{})",
         to_string(options.mode), options.residual ? "" : ", without the residual");
  const std::vector<TokenProbe> probes = token_dynamics_probes(spectra);
  TokenAlignments a;
  a.samples = pass.n_samples();
  for (size_t t = 0; t < spectra.size(); ++t) {
    auto values = [&](int i) { return pass.probe(probes[kProbesPerLayer * t + i].name); };
    a.before_f.push_back(values(0)), a.before_if.push_back(values(1)), a.norm_before.push_back(values(2));
    a.after_f.push_back(values(3)), a.after_if.push_back(values(4)), a.norm_after.push_back(values(5));
    a.after_covariance.push_back(values(6));
  }
  const int64_t n_layers = static_cast<int64_t>(spectra.size());
  a.cross_alignment.resize(n_layers, n_layers);
  for (int64_t t = 0; t < n_layers; ++t)
    for (int64_t s = 0; s < n_layers; ++s)
      a.cross_alignment(t, s) = mean_of(s == t ? a.after_f[t] : pass.probe(cross_probe_name(t, s)));
  mark_repeated_states(samples, causal, &a);
  if (!a.before_f.empty() && a.before_f[0].size() != a.repeated.size())
    fail("token dynamics from a shared pass: the pass has {} tokens, the samples {}", a.before_f[0].size(), a.repeated.size());
  return summarize_token_dynamics(std::move(a), spectra, d_model, options);
}

}  // namespace tdyn
