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
    {"sentencepiece_model", fuzz::sentencepiece_model}, {"torch", fuzz::torch_checkpoint},
    {"hub_cache", fuzz::hub_cache}};

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

// The hub cache target's entry point (fuzz/fuzz_hub_cache.cpp) on its committed seeds, which must resolve, and on
// the broken caches the reader has to refuse: a missing revision, a ref holding no commit, a snapshot file whose
// blob is missing. Entries that would leave the scratch cache are skipped, so a cache built from them resolves.
TEST(FuzzHubCache, SeedsResolveAndBrokenCachesAreErrors) {
  const fs::path seeds = test::source_dir() / "fuzz/corpus/hub_cache";
  int resolved = 0;
  for (const auto& file : fs::directory_iterator(seeds)) {
    SCOPED_TRACE(file.path().string());
    EXPECT_NO_THROW(fuzz::hub_cache(read_file(file.path())));
    ++resolved;
  }
  EXPECT_GE(resolved, 3);
  const std::string commit = "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432";
  const std::vector<std::string> good = {"file refs/main\n" + commit, "file blobs/b1\n{}",
                                         "link snapshots/" + commit + "/config.json\n../../blobs/b1"};
  auto cache = [&](const std::string& revision, std::vector<std::string> extra) {  // extra entries come last, so win
    std::vector<std::string> parts = {revision};
    parts.insert(parts.end(), good.begin(), good.end());
    parts.insert(parts.end(), extra.begin(), extra.end());
    return fuzz::join_parts(parts);
  };
  auto expect_error = [](const std::string& input, const std::string& message) {
    try {
      fuzz::hub_cache(input);
      ADD_FAILURE() << "no error; expected one containing '" << message << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  EXPECT_NO_THROW(fuzz::hub_cache(cache("main", {})));
  expect_error(cache("step2000", {}), "no revision 'step2000'");
  expect_error(cache("main", {"file refs/main\nnot a hash"}), "should hold a commit hash");
  expect_error(cache("main", {"link snapshots/" + commit + "/model.safetensors\n../../blobs/missing"}),
               "which does not exist");
  expect_error(cache("../main", {}), "is not a revision name");
  // Escapes are not made: the cache still resolves, and nothing appears outside it.
  EXPECT_NO_THROW(fuzz::hub_cache(cache("main", {"file ../outside\nx", "link snapshots/up\n../../..",
                                                 "file /tmp/tdyn_fuzz_absolute\nx"})));
  EXPECT_FALSE(fs::exists("/tmp/tdyn_fuzz_absolute"));
}

}  // namespace
}  // namespace tdyn
