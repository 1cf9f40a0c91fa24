// One pass over the samples, shared by the analyses that read the residual stream (seed 003). Each sample runs
// through the model once — JacobianModel::run keeps the residual stream at every boundary and the state the
// structured Jacobians need — and feeds
//   * per boundary, the Pearson correlation sums of the d units over all tokens (topology), and
//   * per boundary that a sublayer map leaves, Σ J of that map over the chosen positions (J̄ = Σ J / pairs: the
//     jacobian command's means and topology's coupling), and
//   * per-token probes, kept for every token in sample order (the power analysis's token alignments).
// Only sums are kept, so the pass splits. Samples go in fixed chunks; a chunk's sums (its threads merged in
// thread order) are added to the running total in chunk order. The result therefore depends on neither timing
// nor interruptions:
//   * checkpoints: after whole chunks the running total is written atomically; a resumed run ends bit-identical
//     to an uninterrupted one (same thread count);
//   * MPI (core/ranks.h): rank r takes chunks r, r + N, r + 2N, ...; rank 0 adds the ranks' totals in rank order,
//     which equals one process up to float64 round-off (the additions are grouped differently).
// The sums are also a file (save_pass / load_pass, with a checksum and the identity of what was summed):
// `tdyn analyze` runs the pass once and hands it to `tdyn jacobian --from-pass` and `tdyn topology --from-pass`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/jacobian.h"
#include "analysis/jacobian_analysis.h"
#include "analysis/samples.h"
#include "analysis/topology_analysis.h"
#include "core/files.h"

namespace tdyn {

// A per-token measurement at a boundary: the alignment a(x; B) = ‖Bᵀx‖/‖x‖ of each residual vector x with an
// orthonormal basis B (d × k), or ‖x‖ itself when B is empty.
struct TokenProbe {
  std::string name;
  std::string hook;      // one of PassSpec::boundaries
  linalg::Matrix basis;  // d × k, or empty: the norm
};

struct PassSpec {
  std::vector<ResidualBoundary> boundaries;
  std::vector<TokenProbe> probes;
  bool correlations = true;  // correlation sums at every boundary
  bool jacobians = true;     // Σ J of the map leaving every boundary (needs a JacobianModel)
  PositionSpec positions;    // positions of each sample in Σ J (default: the last token, the paper's choice)
  int64_t chunk = 16;        // samples per chunk: the unit of the reduction order and of checkpoints

  nlohmann::json to_json() const;
};

// Sums over a set of samples.
struct PassSums {
  int64_t n_samples = 0;  // samples summed
  int64_t n_tokens = 0;   // rows of every correlation accumulator
  int64_t n_pairs = 0;    // (sample, position) pairs in every Σ J
  std::vector<topology::CorrelationAccumulator> correlations;  // per boundary (none without PassSpec::correlations)
  std::vector<linalg::Matrix> jacobian_sums;  // per boundary: Σ J of the map leaving it; [0 × 0] for the final boundary
                                              //   and without PassSpec::jacobians
  std::vector<std::vector<double>> probe_values;  // per probe: one value per token, all samples in order

  // Adds the sums of later samples (correlations merge exactly; Σ J adds; probe values append).
  void add(const PassSums& other);
  // Σ J / n_pairs per boundary ([0 × 0] where there is no sum). Throws Error when no pair was summed.
  std::vector<linalg::Matrix> mean_jacobians() const;

  // One flat float64 buffer (counts, each accumulator's to_buffer, each Σ J with its shape, each probe's values),
  // and back;
  // from_buffer throws Error on any inconsistency.
  std::vector<double> to_buffer() const;
  static PassSums from_buffer(const std::vector<double>& buffer);
};

// What the sums are of: the caller's description of the model and samples, the samples' token ids (hashed), the
// spec. A checkpoint is resumed, and a pass file used, only when this matches exactly.
nlohmann::json pass_identity(const nlohmann::json& model, const std::vector<Sample>& samples, const PassSpec& spec);

struct PassControl {
  fs::path checkpoint;              // file of the running total ("" = no checkpoints)
  bool resume = false;              // continue from `checkpoint` when it exists (else start afresh, with a note)
  int64_t checkpoint_samples = 0;   // write after at least this many new samples (0: only by time)
  double checkpoint_seconds = 300;  // ... or after this many seconds since the last write (0: only by count)
  std::function<void(int64_t samples)> progress;  // samples just finished on this rank
  std::function<void(const std::string&)> note;  // resume messages
};

// The samples this process runs: under MPI rank r takes chunks r, r + N, r + 2N, ... of the samples (sizes
// spec.chunk, the last one shorter); one process takes them all.
int64_t samples_of_this_rank(int64_t n_samples, const PassSpec& spec);

// Runs the pass over `samples` (on this rank's chunks under MPI) and returns the total over all samples. With
// PassSpec::jacobians, `jacobians` must be a JacobianModel of `transformer`. On a worker rank (MPI rank > 0) it
// delivers its share to rank 0 and ends the process. The checkpoint is removed once the pass completes.
// Throws Error when no sample gave 2 tokens (correlations) or no position (Jacobians).
PassSums run_pass(const Transformer& transformer, const JacobianModel* jacobians, const std::vector<Sample>& samples,
                  const PassSpec& spec, const nlohmann::json& identity, const PassControl& control = {});

// The pass file: "TDYNPASS", a JSON header (identity, chunks done, totals), the sums' buffer and an FNV-1a
// checksum of everything before it. Written atomically.
struct PassFile {
  nlohmann::json header;
  PassSums sums;
};
void save_pass(const fs::path& path, const PassFile& file);
// Throws Error naming the file on a wrong magic, version, size or checksum.
PassFile load_pass(const fs::path& path);

}  // namespace tdyn
