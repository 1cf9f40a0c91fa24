// tdyn init MODEL --seed S --out DIR: a random initialisation of MODEL's architecture with the family's published
// init rule (model/init.h), written as a Hugging Face checkpoint: the "step 0" null model of SPEC §3
// "Training vs architecture". The source's tokenizer files are copied when it has Hugging Face ones.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "command.h"
#include "pipeline/parts.h"

namespace tdyn::cli {
namespace {

struct InitArgs {
  ModelArgs model;
  std::string out;
  uint64_t seed = 0;
  double initializer_range = 0;  // 0: the source config's value (HF default 0.02)
  bool match_scales = false;
};

int run(const InitArgs& a) {
  auto model = a.model.load();
  const TensorMoments moments = a.match_scales ? tensor_moments(*model) : TensorMoments{};
  const nlohmann::json provenance =
      write_init_checkpoint(*model, a.model.path, a.out, a.seed, a.initializer_range, a.match_scales ? &moments : nullptr);
  std::cerr << fmt::format("tdyn: wrote a random {} initialisation (seed {}) to {}{}\n", model->config.family, a.seed, a.out,
                           provenance["tokenizer_files_copied"].empty() ? "; no tokenizer copied (pass --tokenizer to analyses)" : "");
  return 0;
}

std::function<int()> setup_init(CLI::App& app) {
  auto* cmd = app.add_subcommand("init", "Write a random initialisation of MODEL's architecture (step-0 null model)");
  auto a = std::make_shared<InitArgs>();
  a->model.add_to(cmd);
  cmd->add_option("--out", a->out, "Output directory (config.json + model.safetensors)")->required();
  cmd->add_option("--seed", a->seed, "Seed of the random streams that draw the weights (std::mt19937_64, one per block of 2^16 values of a tensor)")->capture_default_str();
  cmd->add_option("--initializer-range", a->initializer_range,
                  "Standard deviation of the weights (default: the source config's initializer_range, else 0.02)")
      ->check(positive_number);
  cmd->add_flag("--match-scales", a->match_scales,
                "Draw every kind of tensor (each role's matrices, biases, norm scales, embeddings) from a normal distribution "
                "with MODEL's own mean and spread of that kind instead: random weights at the model's scales, the null "
                "that analyze judges claims about training against")
      ->excludes("--initializer-range");
  return [a] { return run(*a); };
}

TDYN_REGISTER_COMMAND("init", 36, setup_init);

}  // namespace
}  // namespace tdyn::cli
