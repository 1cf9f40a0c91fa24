// Topology's share of the shared sample pass (pass/accumulator.h): the Pearson correlation sums of the d units over
// every token at each boundary, one pass file section per boundary.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "analysis/pass/accumulator.h"
#include "analysis/pass/file.h"
#include "analysis/topology/correlation.h"

namespace tdyn {

std::unique_ptr<PassMeasurement> correlation_measurement(const std::vector<ResidualBoundary>& boundaries, int64_t d_model);

// The sums at `hook` in a finished pass; throws Error when the pass does not hold them or their section is damaged.
topology::CorrelationAccumulator correlation_sums(const PassFile& pass, const std::string& hook);

}  // namespace tdyn
