// Flags of the commands that run the shared sample pass (analysis/sample_pass.h): --resume, which continues an
// interrupted pass after its last finished layer, and --from-pass, which takes the sums from a pass that
// `tdyn analyze` already ran.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "analysis/sample_pass.h"
#include "model/loader.h"

namespace tdyn::cli {

struct PassArgs {
  bool resume = false;
  std::string from_pass;
  // `offer_from_pass`: also offer --from-pass (not for analyze, which makes the pass it hands over).
  void add_to(CLI::App* cmd, bool offer_from_pass = true);
};

// The pass options for results.json.
nlohmann::json pass_options_json(const PassArgs& args);

// How a pass names its model in its identity: absolute path and architecture, so that the same checkpoint given
// by a relative or an absolute path is the same model.
nlohmann::json pass_model_identity(const std::string& path, const Model& model);

// The pass of `spec` over `samples`: --from-pass (which must be of this model and these samples, with at least
// these boundaries, sums and probes, at the same positions), else run here into `file` (e.g. DIR/pass.tdynpass,
// which --resume continues), kept when `keep` and otherwise removed once the returned PassFile is gone. `label`
// prefixes progress lines.
PassFile obtain_pass(const PassArgs& args, const Transformer& transformer, const JacobianModel* jacobians,
                     const std::vector<Sample>& samples, const PassSpec& spec, const nlohmann::json& model_identity,
                     const fs::path& file, bool keep, const std::string& label);

// Refuses what only one process can do when launched as several MPI ranks (e.g. --compare); `what` says which.
void require_single_rank(bool condition, const std::string& what);

}  // namespace tdyn::cli
