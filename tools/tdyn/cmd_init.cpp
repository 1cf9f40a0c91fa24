// tdyn init MODEL --seed S --out DIR: a random initialisation of MODEL's architecture with the family's published
// init rule (model/init.h), written as a Hugging Face checkpoint: the "step 0" null model of SPEC §3
// "Training vs architecture". The source's tokenizer files are copied when it has Hugging Face ones.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "command.h"
#include "core/error.h"
#include "core/files.h"
#include "model/init.h"

namespace tdyn::cli {
namespace {

struct InitArgs {
  ModelArgs model;
  std::string out;
  uint64_t seed = 0;
  double initializer_range = 0;  // 0: the source config's value (HF default 0.02)
};

int run(const InitArgs& a) {
  auto model = a.model.load();
  const ModelConfig& c = model->config;
  nlohmann::json hf_config;
  if (c.format == "hf") {
    hf_config = c.source;
    if (!hf_config.is_object() || !hf_config.contains("model_type")) {
      const fs::path config_json = fs::path(a.model.path) / "config.json";
      hf_config = nlohmann::json::parse(read_file(config_json));
    }
  } else if (c.family == "llama") {
    hf_config = llama_hf_config_json(c);  // llama2.c and GGUF Llama checkpoints
  } else {
    fail("tdyn init: cannot describe a {} {} checkpoint as a Hugging Face config", c.format, c.family);
  }
  if (a.initializer_range > 0) {
    if (hf_config.contains("text_config")) hf_config["text_config"]["initializer_range"] = a.initializer_range;
    hf_config["initializer_range"] = a.initializer_range;
  }
  write_random_init(hf_config, a.out, a.seed);

  // Tokenizer files of a Hugging Face source travel with the init so that it runs on text as the source does.
  std::vector<std::string> copied;
  if (c.format == "hf") {
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                             "merges.txt", "vocab.txt", "encoder.json", "vocab.bpe", "tokenizer.model"}) {
      const fs::path src = fs::path(a.model.path) / name;
      if (fs::is_regular_file(src)) {
        write_file_atomic(fs::path(a.out) / name, read_file(src));
        copied.push_back(name);
      }
    }
  }
  const nlohmann::json provenance = {{"source_model", a.model.path},
                                     {"source_format", c.format},
                                     {"family", c.family},
                                     {"seed", a.seed},
                                     {"initializer_range", hf_config.value("initializer_range", 0.02)},
                                     {"rule", "Hugging Face _init_weights: matrices and embeddings ~ N(0, initializer_range), "
                                              "biases 0, norm scales 1 (see src/model/init.h)"},
                                     {"tokenizer_files_copied", copied}};
  write_file_atomic(fs::path(a.out) / "tdyn_init.json", provenance.dump(2) + "\n");
  std::cerr << fmt::format("tdyn: wrote a random {} initialisation (seed {}) to {}{}\n", c.family, a.seed, a.out,
                           copied.empty() ? "; no tokenizer copied (pass --tokenizer to analyses)" : "");
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("init", "Write a random initialisation of MODEL's architecture (step-0 null model)");
  auto a = std::make_shared<InitArgs>();
  a->model.add_to(cmd);
  cmd->add_option("--out", a->out, "Output directory (config.json + model.safetensors)")->required();
  cmd->add_option("--seed", a->seed, "Seed of the std::mt19937_64 that draws the weights")->capture_default_str();
  cmd->add_option("--initializer-range", a->initializer_range,
                  "Standard deviation of the weights (default: the source config's initializer_range, else 0.02)")
      ->check(CLI::PositiveNumber);
  return [a] { return run(*a); };
}

TDYN_REGISTER_COMMAND("init", 36, setup);

}  // namespace
}  // namespace tdyn::cli
