#include "analysis/power/pass.h"

#include <map>

#include <fmt/format.h>

#include "analysis/power/spectra.h"
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
class LayerProbes : public LayerAccumulator {
 public:
  LayerProbes(const std::vector<TokenProbe>& probes, const std::vector<ResidualBoundary>& boundaries, int64_t layer,
              int64_t n_layers, int threads)
      : probes_(probes) {
    const std::vector<int64_t> made = boundaries_of_layer(boundaries, layer, n_layers);
    for (size_t p = 0; p < probes.size(); ++p)
      for (int64_t b : made)
        if (probes[p].hook == boundaries[b].hook) mine_.push_back({static_cast<int64_t>(p), &boundaries[b]});
    threads_.assign(threads, std::vector<BySample>(mine_.size()));
  }

  void add(const PassSample& sample, int thread) override {
    for (size_t q = 0; q < mine_.size(); ++q) {
      const TokenProbe& probe = probes_[mine_[q].probe];
      const Tensor& x = sample.at(*mine_[q].boundary);
      std::vector<double>& values = threads_[thread][q][sample.index];
      if (probe.covariance_layer >= 0) {
        const Matrix tokens =
            Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(x.ptr(), x.dim(0), x.dim(1)).cast<double>();
        values = token_covariance_alignments(tokens, probe.basis.cols(), token_covariance_seed(probe.covariance_layer, sample.index));
        continue;
      }
      for (int64_t r = 0; r < x.dim(0); ++r) {
        const Vector row = Eigen::Map<const Eigen::VectorXf>(x.row(r), x.dim(1)).cast<double>();
        values.push_back(probe.basis.size() == 0 ? row.norm() : alignment(row, probe.basis));
      }
    }
  }
  void merge_threads() override {
    values_.resize(mine_.size());
    for (auto& thread : threads_)
      for (size_t q = 0; q < mine_.size(); ++q) values_[q].merge(thread[q]);
    threads_.clear();
  }
  // Per probe a piece, of one piece per sample: its index, then its values.
  std::vector<double> serialise() const override {
    std::vector<double> out;
    for (const BySample& p : values_) {
      std::vector<double> probe;
      for (const auto& [sample, values] : p) {
        std::vector<double> entry = {static_cast<double>(sample)};
        entry.insert(entry.end(), values.begin(), values.end());
        append_piece(probe, entry);
      }
      append_piece(out, probe);
    }
    return out;
  }
  void merge(std::span<const double> other) override {
    const std::vector<std::span<const double>> probes = pieces(other);
    TDYN_CHECK(probes.size() == values_.size());
    for (size_t q = 0; q < values_.size(); ++q)
      for (std::span<const double> entry : pieces(probes[q])) {
        TDYN_CHECK(!entry.empty());
        const auto sample = static_cast<int64_t>(entry[0]);
        TDYN_CHECK(values_[q].emplace(sample, std::vector<double>(entry.begin() + 1, entry.end())).second);
      }
  }
  void write(PassWriter& writer) const override {
    for (size_t q = 0; q < mine_.size(); ++q) {
      std::vector<double> values;  // samples in order
      for (const auto& [sample, of_sample] : values_[q]) values.insert(values.end(), of_sample.begin(), of_sample.end());
      writer.section(kProbe, mine_[q].probe, values);
    }
  }

 private:
  // A probe's values by sample index: under MPI a rank's samples are every N-th chunk, so only the index puts the
  // ranks' values back in sample order.
  using BySample = std::map<int64_t, std::vector<double>>;
  struct Mine {
    int64_t probe;  // index into probes_
    const ResidualBoundary* boundary;
  };
  const std::vector<TokenProbe>& probes_;
  std::vector<Mine> mine_;                      // the probes at the layer's boundaries
  std::vector<std::vector<BySample>> threads_;  // [thread][probe of mine_]
  std::vector<BySample> values_;
};

class ProbeMeasurement : public PassMeasurement {
 public:
  ProbeMeasurement(const std::vector<TokenProbe>& probes, const std::vector<ResidualBoundary>& boundaries)
      : probes_(probes), boundaries_(boundaries) {}
  std::unique_ptr<LayerAccumulator> begin_layer(int64_t layer, int64_t n_layers, int threads) const override {
    return std::make_unique<LayerProbes>(probes_, boundaries_, layer, n_layers, threads);
  }

 private:
  const std::vector<TokenProbe>& probes_;
  const std::vector<ResidualBoundary>& boundaries_;
};

}  // namespace

std::unique_ptr<PassMeasurement> probe_measurement(const std::vector<TokenProbe>& probes, const std::vector<ResidualBoundary>& boundaries) {
  return std::make_unique<ProbeMeasurement>(probes, boundaries);
}

std::vector<double> probe_values(const PassFile& pass, const std::string& name) {
  return pass.section(kProbe, "token probe " + name, pass.probe_index(name));
}

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
    auto values = [&](int i) { return probe_values(pass, probes[kProbesPerLayer * t + i].name); };
    a.before_f.push_back(values(0)), a.before_if.push_back(values(1)), a.norm_before.push_back(values(2));
    a.after_f.push_back(values(3)), a.after_if.push_back(values(4)), a.norm_after.push_back(values(5));
    a.after_covariance.push_back(values(6));
  }
  const int64_t n_layers = static_cast<int64_t>(spectra.size());
  a.cross_alignment.resize(n_layers, n_layers);
  for (int64_t t = 0; t < n_layers; ++t)
    for (int64_t s = 0; s < n_layers; ++s)
      a.cross_alignment(t, s) = mean_of(s == t ? a.after_f[t] : probe_values(pass, cross_probe_name(t, s)));
  mark_repeated_states(samples, causal, &a);
  if (!a.before_f.empty() && a.before_f[0].size() != a.repeated.size())
    fail("token dynamics from a shared pass: the pass has {} tokens, the samples {}", a.before_f[0].size(), a.repeated.size());
  return summarize_token_dynamics(std::move(a), spectra, d_model, options);
}

}  // namespace tdyn
