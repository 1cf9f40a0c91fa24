#include "analysis/topology/correlation_sums.h"

#include "core/error.h"

namespace tdyn {
namespace {

using topology::CorrelationAccumulator;

class LayerCorrelations : public LayerAccumulator {
 public:
  LayerCorrelations(const std::vector<ResidualBoundary>& boundaries, std::vector<int64_t> mine, int64_t d, int threads)
      : boundaries_(boundaries), mine_(std::move(mine)), d_(d),
        threads_(threads, std::vector<CorrelationAccumulator>(mine_.size(), CorrelationAccumulator(d))) {}

  void add(const PassSample& sample, int thread) override {
    for (size_t s = 0; s < mine_.size(); ++s) {
      const Tensor& x = sample.at(boundaries_[mine_[s]]);
      threads_[thread][s].add_rows(std::span<const float>(x.ptr(), x.data.size()));
    }
  }
  void merge_threads() override {
    sums_.assign(mine_.size(), CorrelationAccumulator(d_));
    for (const auto& thread : threads_)
      for (size_t s = 0; s < mine_.size(); ++s) sums_[s].merge(thread[s]);
    threads_.clear();
  }
  std::vector<double> serialise() const override {
    std::vector<double> out;
    for (const CorrelationAccumulator& c : sums_) append_piece(out, c.to_buffer());
    return out;
  }
  void merge(std::span<const double> other) override {
    const std::vector<std::span<const double>> shares = pieces(other);
    TDYN_CHECK(shares.size() == sums_.size());
    for (size_t s = 0; s < sums_.size(); ++s) sums_[s].merge(CorrelationAccumulator::from_buffer(shares[s]));
  }
  void write(PassWriter& writer) const override {
    for (size_t s = 0; s < mine_.size(); ++s) writer.section(kCorrelation, mine_[s], sums_[s].to_buffer());
  }

 private:
  const std::vector<ResidualBoundary>& boundaries_;
  std::vector<int64_t> mine_;  // the layer's boundaries (indices into boundaries_)
  int64_t d_;
  std::vector<std::vector<CorrelationAccumulator>> threads_;  // [thread][boundary of the layer]
  std::vector<CorrelationAccumulator> sums_;
};

class CorrelationMeasurement : public PassMeasurement {
 public:
  CorrelationMeasurement(const std::vector<ResidualBoundary>& boundaries, int64_t d) : boundaries_(boundaries), d_(d) {}
  std::unique_ptr<LayerAccumulator> begin_layer(int64_t layer, int64_t n_layers, int threads) const override {
    return std::make_unique<LayerCorrelations>(boundaries_, boundaries_of_layer(boundaries_, layer, n_layers), d_, threads);
  }

 private:
  const std::vector<ResidualBoundary>& boundaries_;
  int64_t d_;
};

}  // namespace

std::unique_ptr<PassMeasurement> correlation_measurement(const std::vector<ResidualBoundary>& boundaries, int64_t d_model) {
  return std::make_unique<CorrelationMeasurement>(boundaries, d_model);
}

CorrelationAccumulator correlation_sums(const PassFile& pass, const std::string& hook) {
  const std::vector<double> values = pass.section(kCorrelation, "correlation sums at " + hook, pass.boundary_index(hook));
  try {
    return CorrelationAccumulator::from_buffer(values);
  } catch (const Error& e) {
    fail("{}: correlation sums at {}: {}", pass.path().string(), hook, e.what());
  }
}

}  // namespace tdyn
