// Flag helpers shared by the subcommands: model loading options and list parsing.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "analysis/samples.h"
#include "model/loader.h"

namespace tdyn::cli {

// "1,2,3" -> {1, 2, 3}; throws CLI::ValidationError naming the flag on anything else.
std::vector<int32_t> parse_int_list(const std::string& text, const std::string& flag);
// "0,0.25,1e3" -> {0, 0.25, 1000}; finite numbers only.
std::vector<double> parse_double_list(const std::string& text, const std::string& flag);

// Runs this executable (/proc/self/exe) with `argv` (argv[0] included) and waits; returns the exit status
// (128 + signal if killed, 127 if it could not start). Used to run one subcommand from another so that each
// part keeps a command line that reproduces it alone.
int run_self(const std::vector<std::string>& argv);

// Adds the model argument and loading flags (--allow-unknown-config-keys, and --no-check-weights, or for a command
// that only describes the checkpoint, `headers_only`, --check-weights) to a subcommand.
struct ModelArgs {
  std::string path;
  bool allow_unknown_config_keys = false;
  bool no_check_weights = false;
  bool headers_only = false, check_weights = false;  // --check-weights of a headers-only command
  void add_to(CLI::App* cmd, bool headers_only = false);
  LoadOptions options() const;  // the flags as load options, for loading further checkpoints (--compare)
  std::shared_ptr<const Model> load() const;
};

// The inputs of an analysis: --data FILE | --prompt TEXT | --ids LIST, --samples, --max-len, --min-len,
// --sample-seed, --tokenizer. Defaults follow the residual-stream paper (S = 1000 WikiText-2 test passages).
struct SampleArgs {
  SampleOptions options;
  std::string tokenizer;
  void add_to(CLI::App* cmd, int64_t default_samples = 1000);
  // Loads the samples for `model` (its own tokenizer unless --tokenizer).
  std::vector<Sample> load(const std::string& model_path, int64_t d_vocab) const;
};

}  // namespace tdyn::cli
