// Flags of the commands that run the shared sample pass (analysis/pass/source.h): --resume, which continues an
// interrupted pass after its last finished layer, and --from-pass, which takes the sums from a pass that
// `tdyn analyze` already ran.
#pragma once

#include <CLI/CLI.hpp>

#include "analysis/pass/source.h"

namespace tdyn::cli {

// `offer_from_pass`: also offer --from-pass (not for analyze, which makes the pass it hands over).
void add_pass_flags(CLI::App* cmd, PassSource& source, bool offer_from_pass = true);

// --ablate GLOB[:heads=H,...] (repeatable; model/ablation.h parses the specs): the analysis of the model with
// those sublayer parts set to 0 in every sample's forward pass.
void add_ablate_option(CLI::App* cmd, std::vector<std::string>& specs);

}  // namespace tdyn::cli
