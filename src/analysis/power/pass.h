// Power's token dynamics (the power-method paper) from the shared sample pass (pass/run.h) instead of a loop of its own. In
// the full mode with the residual (power's default) the tokens entering layer t, x^t, are the residual stream
// blocks.{t}.hook_resid_pre and those leaving it, x^{t+1}, the next layer's resid_pre (the last layer's
// resid_post): their alignments with the dominant subspaces of F_t and I + F_t, and their norms, are per-token
// probes of the pass at those boundaries. `tdyn analyze` adds the probes to the pass it shares with jacobian and
// topology, so that every sample runs through the model once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "analysis/power/token_dynamics.h"
#include "analysis/pass/accumulator.h"
#include "analysis/pass/run.h"

namespace tdyn {

// Seven probes per layer t, in this order: F before, I + F before, norm before, F after, I + F after, norm after, and
// the alignment after with directions drawn from the tokens themselves (token_covariance_alignments, F's k). Then,
// for every layer t and every other layer s, the alignment after layer t with the dominant subspace of F_s (the
// cross-layer alignment of layers.h).
std::vector<TokenProbe> token_dynamics_probes(const std::vector<LayerSpectrum>& spectra);

// The pass's per-token probes (pass/accumulator.h): at the layer that makes each probe's boundary, one value per
// token of every sample, one pass file section per probe with the samples in order.
std::unique_ptr<PassMeasurement> probe_measurement(const std::vector<TokenProbe>& probes, const std::vector<ResidualBoundary>& boundaries);

// A probe's values in a finished pass (one per token, samples in order); throws Error when the pass does not hold
// it or its section is damaged.
std::vector<double> probe_values(const PassFile& pass, const std::string& name);

// TokenDynamics from the probe values of a pass that holds the probes token_dynamics_probes gives. Equals
// token_dynamics() in the full mode with the residual; throws Error for the other modes.
// `samples` are the pass's samples, in its order, and `causal` the model's: they say which tokens repeat a state.
TokenDynamics token_dynamics_from_pass(const PassFile& pass, const std::vector<Sample>& samples, bool causal,
                                       const std::vector<LayerSpectrum>& spectra, int64_t d_model, const DynamicsOptions& options);

}  // namespace tdyn
