#include "cli_util.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <type_traits>

extern char** environ;

namespace tdyn::cli {

namespace {

// An item that std::from_chars reads as a T in full (and finite, for floating point).
template <typename T>
CLI::Validator whole_item(const std::string& expected, const std::string& name) {
  return CLI::Validator(
      [expected](std::string& item) {
        T v{};
        const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        bool ok = !item.empty() && ec == std::errc() && end == item.data() + item.size();
        if constexpr (std::is_floating_point_v<T>) ok = ok && std::isfinite(v);
        return ok ? std::string() : "expected comma-separated " + expected + ", got '" + item + "'";
      },
      name);
}

// A number read in full (as whole_item reads it) that is greater than 0, or with `zero_allowed` at least 0.
CLI::Validator sign_check(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& text) -> std::string {
        double value = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
          return "must be a number, got '" + text + "'";
        if (zero_allowed ? value >= 0 : value > 0) return "";
        return (zero_allowed ? "must be 0 or more, got " : "must be greater than 0, got ") + text;
      },
      zero_allowed ? "NONNEGATIVE" : "POSITIVE");
}

}  // namespace

const CLI::Validator finite_number = whole_item<double>("numbers", "NUMBER");
const CLI::Validator token_id = whole_item<int32_t>("integers", "INT");
const CLI::Validator positive_number = sign_check(false);
const CLI::Validator non_negative_number = sign_check(true);

int run_self(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The child is one process of its own: under mpirun it must not see the launcher's variables, or it would try
  // to join the MPI job (core/ranks.h).
  std::vector<char*> env;
  for (char** e = environ; *e; ++e) {
    const std::string_view v(*e);
    if (!v.starts_with("OMPI_") && !v.starts_with("PMI_") && !v.starts_with("PMIX_")) env.push_back(*e);
  }
  env.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, args.data(), env.data()) != 0) return 127;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void ModelArgs::add_to(CLI::App* cmd, bool headers_only) {
  cmd->add_option("MODEL", path,
                  "Hugging Face model directory (config.json + model.safetensors[.index.json], or else "
                  "pytorch_model.bin[.index.json] read without running its pickle), "
                  "a .gguf file, a llama2.c .bin checkpoint, or a hub cache directory models--ORG--NAME with an "
                  "optional @REVISION (a ref such as main or step1000, or a commit; default main)")
      ->required();
  cmd->add_flag("--allow-unknown-config-keys", allow_unknown_config_keys,
                "Warn about config.json keys tdyn does not know instead of refusing the model");
  check_weights = !headers_only;
  add_check_weights_flags(cmd, check_weights,
                          headers_only ? "Check every weight for NaN/Inf (reads the whole file once)"
                                       : "Check every weight for NaN/Inf at load (it reads each weight once: for a float32 "
                                         "checkpoint, the whole file)",
                          headers_only ? "Read only the headers"
                                       : "Skip that check (activations are still checked as the model runs)");
}

std::pair<CLI::Option*, CLI::Option*> add_check_weights_flags(CLI::App* cmd, bool& check_weights, const std::string& check_help,
                                                             const std::string& skip_help) {
  const bool by_default = check_weights;
  auto* check = cmd->add_flag_callback("--check-weights", [&check_weights] { check_weights = true; },
                                       check_help + (by_default ? " (the default)" : ""));
  auto* skip = cmd->add_flag_callback("--no-check-weights", [&check_weights] { check_weights = false; },
                                      skip_help + (by_default ? "" : " (the default)"));
  check->excludes(skip);
  return {check, skip};
}

LoadOptions ModelArgs::options() const {
  LoadOptions options;
  options.config.allow_unknown_keys = allow_unknown_config_keys;
  options.check_finite = check_weights;
  return options;
}

std::shared_ptr<const Model> ModelArgs::load() const { return load_model(path, options()); }

std::string default_corpus_help() {
  return "default: the WikiText-2 test split shipped with tdyn, " + default_corpus().string() + "; $TDYN_DATA overrides its directory";
}

void SampleArgs::add_to(CLI::App* cmd, int64_t default_samples, const std::string& why_that_default) {
  options.samples = default_samples;
  auto* data = cmd->add_option("--data", options.data,
                               "Input: a text file split into passages (paragraphs; " + default_corpus_help() +
                                   "), a .npy of token ids [T] or [S, T], or a .ids file (one sample per line)");
  auto* prompt = cmd->add_option("--prompt", options.prompt, "Input: one text sample");
  auto* ids = cmd->add_option("--ids", options.ids, "Input: one sample as comma-separated token ids (repeat --ids for more samples)")->delimiter(',')->check(token_id);
  data->excludes(prompt)->excludes(ids);
  prompt->excludes(ids);
  cmd->add_option("--samples", options.samples, "S: number of passages drawn from --data (" + why_that_default + ")")->capture_default_str()->check(positive_number);
  cmd->add_option("--max-len", options.max_len, "Tokens per sample (longer passages are truncated)")->capture_default_str()->check(positive_number);
  cmd->add_option("--min-len", options.min_len, "Skip passages shorter than this many tokens")->capture_default_str()->check(non_negative_number);
  cmd->add_option("--sample-seed", options.seed, "Seed of the uniform draw of passages (kept in corpus order)")->capture_default_str();
  cmd->add_option("--tokenizer", tokenizer, "Tokenizer file (default: the one shipped with MODEL)");
}

std::vector<Sample> SampleArgs::load(const std::string& model_path, int64_t d_vocab) const {
  return load_samples_for_model(options, model_path, d_vocab, tokenizer);
}

}  // namespace tdyn::cli
