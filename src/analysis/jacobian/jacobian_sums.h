// Jacobian's share of the shared sample pass (pass/accumulator.h): Σ J of the sublayer map leaving each boundary
// over the chosen positions of every sample, in the structured form (StructuredMean) until the layer ends, one pass
// file section of d × d values per boundary. J̄ = Σ J / pairs is the jacobian command's mean and topology's coupling.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "analysis/pass/accumulator.h"
#include "analysis/pass/file.h"
#include "analysis/pass/run.h"
#include "linalg/dense.h"

namespace tdyn {

class JacobianModel;

// Σ J at spec's boundaries and positions, of a pass of `transformer` with spec's ablations, which `model` must be
// of. The model's float64 copy of each layer is made when the layer begins and released when it ends.
std::unique_ptr<PassMeasurement> jacobian_measurement(const JacobianModel& model, const Transformer& transformer, const PassSpec& spec);

// Σ J [d, d] and J̄ = Σ J / n_pairs at `hook` in a finished pass; each throws Error when the pass does not hold it
// (the final boundary has no map leaving it) or its section is damaged.
linalg::Matrix jacobian_sum(const PassFile& pass, const std::string& hook);
linalg::Matrix mean_jacobian(const PassFile& pass, const std::string& hook);

}  // namespace tdyn
