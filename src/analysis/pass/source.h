// Where an analysis gets its shared sample pass (pass/run.h): run here (into a file an interrupted run can
// resume), or read from a finished pass that `tdyn analyze` wrote, after checking that it is of the same model,
// samples and measurements. Under MPI the pass is split across ranks; a worker rank's share goes to rank 0.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/pass/run.h"
#include "core/progress.h"
#include "model/loader.h"

namespace tdyn {

struct PassSource {
  bool resume = false;    // continue the unfinished pass in the run's pass file after its last finished layer
  std::string from_pass;  // a finished pass file to read instead of running the samples

  nlohmann::json to_json() const;  // results.json's "pass" options
};

// Thrown on an MPI worker rank once its share of the pass is with rank 0, which writes every output: the worker
// has nothing left to do. The program ends the rank normally when it catches it; the library never exits.
struct WorkerShareDone {};

// How a pass names its model in its identity: absolute path and architecture, so that the same checkpoint given
// by a relative or an absolute path is the same model.
nlohmann::json pass_model_identity(const std::string& path, const Model& model);

// The pass of `spec` over `samples`: source.from_pass (which must be of this model and these samples, with at
// least these boundaries, sums and probes, at the same positions), else run here into `file` (e.g.
// DIR/pass.tdynpass, which source.resume continues; "" = a temporary file), kept when `keep` and otherwise removed
// once the returned PassFile is gone. `label` names the loop in `progress`. Throws WorkerShareDone on a worker rank
// once its share is with rank 0 (at once when reading a finished pass, which rank 0 alone does).
PassFile obtain_pass(const PassSource& source, const Transformer& transformer, const JacobianModel* jacobians,
                     const std::vector<Sample>& samples, const PassSpec& spec, const nlohmann::json& model_identity,
                     const fs::path& file, bool keep, const std::string& label, ProgressSink& progress);

// What only one process can do, asked of a run launched as several MPI ranks. Every rank throws it at the same point
// (it follows from the options alone, checked before any work); the program prints it once and ends every rank
// with the usage exit code.
struct RefusedUnderRanks : Error {
  using Error::Error;
};

// Throws RefusedUnderRanks when `condition` holds under several ranks (e.g. comparing checkpoints); `what` says
// what was asked.
void require_single_rank(bool condition, const std::string& what);

}  // namespace tdyn
