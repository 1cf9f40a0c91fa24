// One pass over the samples, shared by the analyses that read the residual stream (the residual-stream paper).
// It runs the model layer by layer over all samples ("layer-major"): every sample crosses layer l, the sums of that layer's
// boundaries are finished and written to the pass file, and only then does layer l + 1 start. So whatever the
// depth, memory holds one layer's float64 weights (JacobianModel) and one layer's accumulators; the samples'
// residual states between layers ([tokens, d] float32 each) sit in a file-backed buffer beside the pass file.
// Per boundary the pass writes what its spec asks for, each the sums of one measurement (pass/accumulator.h) that
// lives with its analysis and reads its sections back:
//   * the Pearson correlation sums of the d units over all tokens (topology/correlation_sums.h),
//   * Σ J of the sublayer map leaving it over the chosen positions (jacobian/jacobian_sums.h; J̄ = Σ J / pairs is
//     the jacobian command's means and topology's coupling), and
//   * per-token probes, one value per token in sample order (power/pass.h: the token alignments).
// Each layer's sums are added in a fixed order (a rank's threads in thread order, then the ranks in rank order),
// so the result depends on neither timing nor interruptions:
//   * resume: the pass file holds finished layers; a resumed run continues after the last one and ends
//     bit-identical to an uninterrupted one (same thread count and rank count);
//   * MPI (core/ranks.h): rank r takes sample chunks r, r + N, r + 2N, ...; after each layer rank 0 adds the
//     ranks' sums in rank order, which equals one process up to float64 round-off.
// Within a chunk the samples cross each layer together, their rows (up to 2048) stacked into one product per
// projection (attention's and the MLP's), which runs near the machine's peak where one sample's 128 rows would not. A product of another
// shape may round its float32 sums differently, so another chunk size changes the results by float32 round-off.

#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/pass/file.h"
#include "analysis/samples.h"
#include "analysis/stream_points.h"
#include "core/files.h"
#include "linalg/dense.h"
#include "model/ablation.h"

namespace tdyn {

class JacobianModel;
class Transformer;

// A per-token measurement at a boundary: the alignment a(x; B) = ‖Bᵀx‖/‖x‖ of each residual vector x with an
// orthonormal basis B (d × k), or ‖x‖ itself when B is empty.
struct TokenProbe {
  std::string name;
  std::string hook;      // one of PassSpec::boundaries
  linalg::Matrix basis;  // d × k, or empty: the norm
  // ≥ 0: instead of the alignment with `basis`, the alignment with k = basis.cols() directions drawn from the
  // sample's own token states (power/spectra.h token_covariance_alignments, seeded by this layer and the sample).
  int64_t covariance_layer = -1;
};

struct PassSpec {
  std::vector<ResidualBoundary> boundaries;
  std::vector<TokenProbe> probes;
  bool correlations = true;  // correlation sums at every boundary
  bool jacobians = true;     // Σ J of the map leaving every boundary (needs a JacobianModel)
  PositionSpec positions;    // positions of each sample in Σ J (default: the last token, the paper's choice)
  int64_t chunk = 16;        // samples per chunk: the unit that MPI ranks take in turn, and that stacks its rows
  ZeroedParts zeroed;        // parts the forward pass sets to 0 (the JacobianModel's own, when there is one)

  nlohmann::json to_json() const;
};

// What the sums are of: the caller's description of the model and samples, the samples' token ids (hashed), the
// spec. A pass is resumed, and a pass file used, only when this matches exactly.
nlohmann::json pass_identity(const nlohmann::json& model, const std::vector<Sample>& samples, const PassSpec& spec);

struct PassControl {
  fs::path file;                // the pass file to write; "" = a temporary file, removed with the returned PassFile
  bool resume = false;          // continue the unfinished pass in `file` when there is one (else start afresh, with a note)
  double sync_seconds = 300;    // make the finished layers durable (fsync) at most this often (0: after every layer)
  std::function<void(int64_t)> progress;         // this rank finished one sample of one layer (argument: 1)
  std::function<void(const std::string&)> note;  // resume messages
};

// The samples this process runs: under MPI rank r takes chunks r, r + N, r + 2N, ... of the samples (sizes
// spec.chunk, the last one shorter); one process takes them all.
int64_t samples_of_this_rank(int64_t n_samples, const PassSpec& spec);

// Runs the pass over `samples` (on this rank's chunks under MPI), writes `control.file` and returns it opened.
// With PassSpec::jacobians, `jacobians` must be a JacobianModel of `transformer`; its layers are released as the
// pass leaves them. A worker rank (MPI rank > 0) delivers its share of every layer to rank 0 and returns a
// PassFile whose is_worker_share() is true, holding nothing: the caller ends the rank. The working buffers beside
// the file are removed once the pass completes. Throws Error when no sample gave 2 tokens (correlations) or no
// position (Jacobians).
PassFile run_pass(const Transformer& transformer, const JacobianModel* jacobians, const std::vector<Sample>& samples,
                  const PassSpec& spec, const nlohmann::json& identity, const PassControl& control = {});

}  // namespace tdyn
