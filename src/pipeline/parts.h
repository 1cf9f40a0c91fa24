// Each analysis of the three papers from its inputs (inputs.h) to a results directory (report/results.h): the
// analysis (analysis/<part>/run.h) and its writer (report/<part>_output.h), with what results.json records of the
// inputs. `tdyn power|jacobian|topology|particles|init` parse their flags and call one of these; `tdyn analyze`
// (analyze.h) calls them in turn on one model, and the Python functions (tdyn.power, ...) call them too, where `out`
// may be null: the analysis then writes nothing.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/jacobian/run.h"
#include "analysis/particles/run.h"
#include "analysis/power/run.h"
#include "analysis/topology/run.h"
#include "pipeline/inputs.h"
#include "model/init.h"
#include "report/results.h"

namespace tdyn {

// The power-method paper (Li & Altafini): spectra, token dynamics over the samples (from in.pass.from_pass when
// given), iteration and steering. `out`: where to write them (null: nowhere).
PowerResult power_to(ResultsDir* out, const AnalysisInputs& in, const PowerOptions& options, ProgressSink& progress);

// The residual-stream paper's Jacobians of in.model and of the `compare` checkpoints (same architecture) on the same
// samples; the pass file (run, resumed or read per in.pass) is DIR/pass.tdynpass. `out` null: nothing is written (the
// pass goes to a temporary file), which per-sample Jacobians (options.save_per_sample) cannot do without.
JacobianResult jacobian_to(ResultsDir* out, const AnalysisInputs& in, const std::vector<JacobianCheckpoint>& compare,
                           const JacobianOptions& options, ProgressSink& progress);
// The checkpoints at `paths`, loaded as `load` says: the comparisons of a jacobian_to.
std::vector<JacobianCheckpoint> load_checkpoints(const std::vector<std::string>& paths, const LoadOptions& load);
// An MPI worker rank's side of a jacobian_to that rank 0 runs on a finished pass with options.ranks_share_metrics:
// its share of the depths' metrics, whose operators rank 0 sends. It needs in.model's architecture, in.samples and
// the same options; it reads no pass and writes nothing.
void take_jacobian_metrics_share(const AnalysisInputs& in, const JacobianOptions& options);
// What jacobian_to refuses under several MPI ranks (RefusedUnderRanks): all but the structured mean of one
// checkpoint, whose pass is what the ranks split. Also called by the CLI before it loads anything.
void check_jacobian_ranks(bool comparing, const JacobianOptions& options);

// Further checkpoints of a topology run, each analysed the same way in DIR/compare/LABEL.
struct TopologyComparisons {
  std::vector<JacobianCheckpoint> compare;  // checkpoints of the same architecture (load_checkpoints)
  std::optional<uint64_t> random_init;      // seed of a random initialisation of in.model's architecture
  bool any() const { return !compare.empty() || random_init.has_value(); }
  nlohmann::json to_json() const;
};

// The residual-stream paper's topology of in.model (named `model_label`; "" = its file's stem) and of the
// comparisons', with the comparison of all checkpoints. Returns every checkpoint's result: in.model's first, then the
// compared ones in their order, then the random initialisation's. `out` null: nothing is written (the pass goes to a
// temporary file), which comparisons, each in a directory of its own, cannot do without.
std::vector<TopologyResult> topology_to(ResultsDir* out, const AnalysisInputs& in, const TopologyComparisons& comparisons,
                                        const TopologyOptions& options, ProgressSink& progress, const std::string& model_label = "");
// The options topology_to analyses the comparisons with: `options` less communities_control, which is compared with
// the first checkpoint's communities only.
TopologyOptions compared_options(const TopologyOptions& options);
// What topology_to refuses under several MPI ranks (RefusedUnderRanks): comparisons. Also called by the CLI first.
void check_topology_ranks(bool comparing);

// The clustering paper's particles from a real layer of `model` (loaded from `path` as `load` says, which results.json
// records): its layer and head (head.head < 0: the whole layer), started from the first sample of `tokens` (whose
// samples, min_len and max_len are set here), or from spec.initial when `tokens` is empty. `out` null: nothing is
// written.
particles::ParticlesResult particles_to(ResultsDir* out, const std::string& path, const Model& model, const LoadOptions& load,
                                        const ModelHeadOptions& head, const std::optional<SampleOptions>& tokens,
                                        const std::string& tokenizer, const particles::ExperimentSpec& spec,
                                        const particles::ParticlesOptions& options);

// A random initialisation of `source`'s architecture with the family's published rule (model/init.h), written to
// `dir` as a Hugging Face checkpoint with the source's tokenizer files and tdyn_init.json (which this returns).
// initializer_range 0: the source config's (else 0.02). moments (tensor_moments of the source): every kind of tensor
// at the source's own mean and spread instead, the scale-matched initialisation that analyze judges claims about
// training against, so that what the weights' scales alone give does not pass.
nlohmann::json write_init_checkpoint(const Model& source, const std::string& source_path, const fs::path& dir, uint64_t seed,
                                     double initializer_range = 0, const TensorMoments* moments = nullptr);

// The mean and standard deviation of each kind of tensor of `model` (role and part: the attention and MLP matrices
// and biases, the norms' scales and biases, the embeddings), over all its layers, from the stored values.
TensorMoments tensor_moments(const Model& model);

}  // namespace tdyn
