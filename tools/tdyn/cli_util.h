// Flag helpers shared by the subcommands: model loading options, samples and list items.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "analysis/samples.h"
#include "model/loader.h"

namespace tdyn::cli {

// Item checks of comma-separated list options (add_option(...)->delimiter(',')->check(...)): what std::from_chars
// reads in full, so CLI11's own conversion never sees "", "+1", "0x10" or "nan".
extern const CLI::Validator finite_number;  // a finite double
extern const CLI::Validator token_id;       // an int32
// Checks of one number that must be greater than 0, or at least 0, also read in full: "--samples: must be greater
// than 0, got 0" (CLI11's own PositiveNumber and NonNegativeNumber name the whole range of double instead).
extern const CLI::Validator positive_number;
extern const CLI::Validator non_negative_number;

// Runs this executable (/proc/self/exe) with `argv` (argv[0] included) and waits; returns the exit status
// (128 + signal if killed, 127 if it could not start). Used to run one subcommand from another so that each
// part keeps a command line that reproduces it alone.
int run_self(const std::vector<std::string>& argv);

// "default: ..." for a --data flag's help: the WikiText-2 test split shipped with tdyn, and where it is.
std::string default_corpus_help();

// Adds the model argument and loading flags (--allow-unknown-config-keys, --check-weights / --no-check-weights) to a
// subcommand. The weights are checked by default, except by a command that only describes the checkpoint
// (`headers_only`), which reads no weight byte unless asked.
struct ModelArgs {
  std::string path;
  bool allow_unknown_config_keys = false;
  bool check_weights = true;
  void add_to(CLI::App* cmd, bool headers_only = false);
  LoadOptions options() const;  // the flags as load options, for loading further checkpoints (--compare)
  std::shared_ptr<const Model> load() const;
};

// --check-weights and --no-check-weights (exclusive) setting `check_weights`, whose value is the default.
std::pair<CLI::Option*, CLI::Option*> add_check_weights_flags(CLI::App* cmd, bool& check_weights, const std::string& check_help,
                                                             const std::string& skip_help);

// The inputs of an analysis: --data FILE | --prompt TEXT | --ids LIST, --samples, --max-len, --min-len,
// --sample-seed, --tokenizer. Each command's default S comes with its reason, which --help shows.
struct SampleArgs {
  SampleOptions options;
  std::string tokenizer;
  void add_to(CLI::App* cmd, int64_t default_samples, const std::string& why_that_default);
  // Loads the samples for `model` (its own tokenizer unless --tokenizer).
  std::vector<Sample> load(const std::string& model_path, int64_t d_vocab) const;
};

}  // namespace tdyn::cli
