#include "pass_args.h"

namespace tdyn::cli {

void add_pass_flags(CLI::App* cmd, PassSource& source, bool offer_from_pass) {
  auto* resume_flag = cmd->add_flag("--resume", source.resume,
                                    "Continue the pass that an interrupted run left in the output directory (pass.tdynpass) after "
                                    "its last finished layer; the result is identical to an uninterrupted run with the same thread count");
  if (offer_from_pass)
    cmd->add_option("--from-pass", source.from_pass,
                    "Take the forward-pass sums from this pass file (written by tdyn analyze as DIR/pass/pass.tdynpass) "
                    "instead of running the samples; it must be of the same model, samples and positions")
        ->excludes(resume_flag);
}

void add_ablate_option(CLI::App* cmd, std::vector<std::string>& specs) {
  cmd->add_option("--ablate", specs,
                  "Analyse the model with these parts set to 0 in every sample's forward pass (a constant: their derivatives "
                  "drop out of every Jacobian, a zeroed head's block out of every layer matrix F = O V): blocks.{l}.attn.hook_z (:heads=H,H,... for some heads only), hook_attn_out, "
                  "mlp.hook_post, hook_mlp_out; e.g. 'blocks.3.attn.hook_z:heads=5'. Repeatable")
      ->type_name("GLOB[:heads=H,...]");
}

}  // namespace tdyn::cli
