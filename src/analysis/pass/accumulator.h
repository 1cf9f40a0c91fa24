// What the shared sample pass (pass/run.h) gathers, one measurement at a time: topology's correlation sums
// (topology/correlation_sums.h), jacobian's Σ J (jacobian/jacobian_sums.h), power's per-token probes (power/pass.h).
// Each lives with its analysis; the pass only drives them, the same way at every layer:
//   * begin a layer:  PassMeasurement::begin_layer makes empty sums with one part per thread of the layer's team;
//   * add a sample:   before_slice() for each slice of samples on the calling thread, then add() for each sample of
//                     the slice on the thread that runs it (each thread takes the same samples in every run);
//   * merge:          merge_threads() folds the threads' parts in thread order; under MPI rank 0 adds every other
//                     rank's serialise() to its own with merge(), in rank order;
//   * finish:         PassMeasurement::end_layer frees what the layer held (once the threads' parts are merged);
//                     write() puts the sums into the pass file as sections (pass/file.h), which the analysis reads
//                     back with its own reader.
// So the sums depend on neither timing nor interruptions (a resumed pass rewrites whole layers).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "analysis/stream_points.h"
#include "core/tensor.h"

namespace tdyn {

class PassWriter;
struct SequenceState;

// One of this rank's samples after it crossed a layer.
struct PassSample {
  int64_t index = 0;  // in the pass's samples
  int64_t layer = 0;
  const SequenceState* state = nullptr;  // that layer's entries filled (model/sequence_state.h)

  int64_t n_tokens() const;
  // The residual stream [tokens, d] at a boundary the layer makes: its resid_pre or resid_mid, or after the last
  // layer the final resid_post.
  const Tensor& at(const ResidualBoundary& boundary) const;
};

// One measurement's sums over this rank's samples at one layer.
class LayerAccumulator {
 public:
  virtual ~LayerAccumulator() = default;
  // Before the samples of a slice are added, on the calling thread, where products may use every core.
  virtual void before_slice(std::span<const PassSample> slice) { (void)slice; }
  // Adds one sample, on thread `thread` of the layer's team; one thread's samples come in sample order.
  virtual void add(const PassSample& sample, int thread) = 0;
  virtual void merge_threads() = 0;
  virtual std::vector<double> serialise() const = 0;
  virtual void merge(std::span<const double> other_rank) = 0;
  virtual void write(PassWriter& writer) const = 0;
};

// A measurement the pass makes at every layer.
class PassMeasurement {
 public:
  virtual ~PassMeasurement() = default;
  // Empty sums of layer `layer` (of `n_layers`) with a part for each of `threads` threads.
  virtual std::unique_ptr<LayerAccumulator> begin_layer(int64_t layer, int64_t n_layers, int threads) const = 0;
  // Once the layer's sums are merged over the threads; `more` says whether a layer follows.
  virtual void end_layer(int64_t layer, bool more) const {
    (void)layer;
    (void)more;
  }
};

// The numbers that serialise() gives and merge() takes, as pieces each prefixed with its length: append_piece adds
// one, pieces() splits them again (a share that does not split exactly is a bug of its writer: TDYN_CHECK).
void append_piece(std::vector<double>& out, std::span<const double> piece);
std::vector<std::span<const double>> pieces(std::span<const double> numbers);

// The boundaries of `boundaries` that layer `layer` of `n_layers` makes (indices): its resid_pre and resid_mid,
// and after the last layer also the final resid_post.
std::vector<int64_t> boundaries_of_layer(const std::vector<ResidualBoundary>& boundaries, int64_t layer, int64_t n_layers);

}  // namespace tdyn
