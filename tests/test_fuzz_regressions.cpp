// Inputs that once crashed, hung or tripped a sanitizer in a reader, found by the fuzz targets (fuzz/). Each
// file tests/data/corrupt/<target>/<name> goes through the entry point of fuzz target <target> — the same code
// the fuzzer ran — and must now be rejected with a tdyn::Error.
#include <map>

#include "../fuzz/entry_points.h"
#include "test_util.h"

namespace tdyn {
namespace {

using Entry = void (*)(std::string_view);

const std::map<std::string, Entry> kEntries = {
    {"safetensors", fuzz::safetensors},       {"safetensors_index", fuzz::safetensors_index},
    {"gguf", fuzz::gguf},                     {"llama2c", fuzz::llama2c},
    {"config", fuzz::config},                 {"npy", fuzz::npy},
    {"tokenizer_json", fuzz::tokenizer_json}, {"tokenizer_llama2c", fuzz::tokenizer_llama2c},
    {"vocab_txt", fuzz::vocab_txt},           {"gpt2_bpe", fuzz::gpt2_bpe},
    {"char_vocab", fuzz::char_vocab},         {"model", fuzz::model},
    {"sentencepiece_model", fuzz::sentencepiece_model}, {"torch", fuzz::torch_checkpoint}};

TEST(FuzzRegression, EveryFoundInputIsAnError) {
  const fs::path root = test::source_dir() / "tests/data/corrupt";
  if (!fs::exists(root)) GTEST_SKIP() << "no fuzz regression inputs";
  int checked = 0;
  for (const auto& dir : fs::directory_iterator(root)) {
    if (!dir.is_directory()) continue;
    const std::string target = dir.path().filename().string();
    auto entry = kEntries.find(target);
    ASSERT_NE(entry, kEntries.end()) << "tests/data/corrupt/" << target << " names no fuzz target";
    for (const auto& file : fs::directory_iterator(dir.path())) {
      SCOPED_TRACE(file.path().string());
      const std::string bytes = read_file(file.path());
      EXPECT_THROW(entry->second(bytes), Error);
      ++checked;
    }
  }
  std::cout << "[fuzz regressions] " << checked << " input(s) checked\n";
}

}  // namespace
}  // namespace tdyn
