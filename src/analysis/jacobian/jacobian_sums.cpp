#include "analysis/jacobian/jacobian_sums.h"

#include <array>
#include <cmath>
#include <map>

#include "analysis/jacobian/jacobian_model.h"
#include "core/error.h"

namespace tdyn {
namespace {

Sublayer sublayer_of(const ResidualBoundary& b) { return b.sublayer % 2 == 0 ? Sublayer::Attention : Sublayer::Mlp; }

class LayerJacobians : public LayerAccumulator {
 public:
  LayerJacobians(const JacobianModel& model, const std::vector<ResidualBoundary>& boundaries, const PositionSpec& positions,
                 int64_t layer, int64_t n_layers, int threads)
      : model_(model), boundaries_(boundaries), positions_(positions), layer_(layer) {
    for (int64_t b : boundaries_of_layer(boundaries, layer, n_layers))
      if (boundaries[b].sublayer >= 0) mine_.push_back(b);  // no map leaves the final boundary
    threads_.assign(threads, std::vector<StructuredMean>(mine_.size()));
  }

  // The input projections of the slice's positions, one product per projection and sublayer kind, in the order
  // samples then positions.
  void before_slice(std::span<const PassSample> slice) override {
    first_pair_.clear();
    std::vector<StatePosition> at;
    for (const PassSample& s : slice) {
      first_pair_[s.index] = static_cast<int64_t>(at.size());
      for (int64_t pos : positions_.resolve(s.n_tokens())) at.push_back({s.state, pos});
    }
    for (auto& of : projected_) of.clear();
    for (int64_t b : mine_) {
      const Sublayer which = sublayer_of(boundaries_[b]);
      std::vector<StepProjections>& of = projected_[static_cast<int>(which)];
      if (of.empty() && !at.empty()) of = model_.project_inputs(at, layer_, which);
    }
  }
  void add(const PassSample& sample, int thread) override {
    int64_t pair = first_pair_.at(sample.index);
    for (int64_t pos : positions_.resolve(sample.n_tokens())) {
      for (size_t s = 0; s < mine_.size(); ++s) {
        const Sublayer which = sublayer_of(boundaries_[mine_[s]]);
        threads_[thread][s].add(model_.structure(*sample.state, layer_, which, pos, &projected_[static_cast<int>(which)][pair]));
      }
      ++pair;
    }
  }
  void merge_threads() override {
    const int64_t d = model_.d_model();
    for (size_t s = 0; s < mine_.size(); ++s) {
      StructuredMean mean;
      for (const auto& thread : threads_) mean.merge(thread[s]);
      sums_.push_back(mean.count() > 0 ? mean.sum() : linalg::Matrix::Zero(d, d));
    }
    threads_.clear();
  }
  std::vector<double> serialise() const override {
    std::vector<double> out;
    for (const linalg::Matrix& m : sums_) append_piece(out, {m.data(), static_cast<size_t>(m.size())});
    return out;
  }
  void merge(std::span<const double> other) override {
    const std::vector<std::span<const double>> shares = pieces(other);
    TDYN_CHECK(shares.size() == sums_.size());
    for (size_t s = 0; s < sums_.size(); ++s) {
      linalg::Matrix& m = sums_[s];
      TDYN_CHECK(static_cast<int64_t>(shares[s].size()) == m.size());
      m += Eigen::Map<const linalg::Matrix>(shares[s].data(), m.rows(), m.cols());
    }
  }
  void write(PassWriter& writer) const override {
    for (size_t s = 0; s < mine_.size(); ++s) writer.section(kJacobianSum, mine_[s], {sums_[s].data(), static_cast<size_t>(sums_[s].size())});
  }

 private:
  const JacobianModel& model_;
  const std::vector<ResidualBoundary>& boundaries_;
  const PositionSpec& positions_;
  int64_t layer_;
  std::vector<int64_t> mine_;                       // the layer's boundaries with a map leaving them
  std::vector<std::vector<StructuredMean>> threads_;  // [thread][boundary of mine_]
  std::vector<linalg::Matrix> sums_;
  std::array<std::vector<StepProjections>, 2> projected_;  // the slice's, per Sublayer
  std::map<int64_t, int64_t> first_pair_;                  // a sample of the slice's first entry in projected_
};

class JacobianMeasurement : public PassMeasurement {
 public:
  JacobianMeasurement(const JacobianModel& model, const std::vector<ResidualBoundary>& boundaries, const PositionSpec& positions)
      : model_(model), boundaries_(boundaries), positions_(positions) {}
  std::unique_ptr<LayerAccumulator> begin_layer(int64_t layer, int64_t n_layers, int threads) const override {
    model_.prepare_layer(layer);
    return std::make_unique<LayerJacobians>(model_, boundaries_, positions_, layer, n_layers, threads);
  }
  void end_layer(int64_t layer, bool more) const override { model_.release_layer(layer, more); }

 private:
  const JacobianModel& model_;
  const std::vector<ResidualBoundary>& boundaries_;
  const PositionSpec& positions_;
};

}  // namespace

std::unique_ptr<PassMeasurement> jacobian_measurement(const JacobianModel& model, const Transformer& transformer, const PassSpec& spec) {
  TDYN_CHECK(&model.transformer() == &transformer);
  TDYN_CHECK(model.zeroed().to_json() == spec.zeroed.to_json());
  return std::make_unique<JacobianMeasurement>(model, spec.boundaries, spec.positions);
}

linalg::Matrix jacobian_sum(const PassFile& pass, const std::string& hook) {
  const std::vector<double> values = pass.section(kJacobianSum, "Jacobian sum at " + hook, pass.boundary_index(hook));
  const auto d = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(values.size()))));
  if (d * d != static_cast<int64_t>(values.size())) fail("{}: the Jacobian sum at {} is not square", pass.path().string(), hook);
  return Eigen::Map<const linalg::Matrix>(values.data(), d, d);
}

linalg::Matrix mean_jacobian(const PassFile& pass, const std::string& hook) {
  if (pass.n_pairs() == 0) fail("{}: no (sample, position) pair was summed, so there are no mean Jacobians", pass.path().string());
  return jacobian_sum(pass, hook) / static_cast<double>(pass.n_pairs());
}

}  // namespace tdyn
