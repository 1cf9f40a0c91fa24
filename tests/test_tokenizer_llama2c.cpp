// llama2.c tokenizer.bin against the goldens of run.c (tokenize.json, prompt_tokens_*.npy, gen_*.txt) for the
// three llama2.c models in shared/models.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/npy.h"
#include "core/error.h"
#include "test_util.h"
#include "tokenizer/json_files.h"
#include "tokenizer/llama2c_tokenizer.h"

namespace tdyn {
namespace {

using test::shared_dir;

class TokLlama2c : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path dir() const { return shared_dir() / "models" / GetParam(); }
};

std::vector<int32_t> to_int32(const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

TEST_P(TokLlama2c, EncodesEveryTokenizeJsonCase) {
  TDYN_REQUIRE_SHARED("models/" + GetParam() + "/tokenize.json");
  auto tok = Llama2cTokenizer::load(dir() / "tok512.bin");
  EXPECT_EQ(tok->vocab_size(), 512);
  Json cases = read_json_file(dir() / "tokenize.json");
  ASSERT_GE(cases.size(), 10u);
  for (const Json& c : cases) {
    std::string text = c["text"].get<std::string>();
    std::vector<int32_t> expected = c["ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> ids = tok->encode(text);
    EXPECT_EQ(ids, expected) << "text: '" << text << "'";
    std::vector<std::string> pieces = c["pieces"].get<std::vector<std::string>>();
    ASSERT_EQ(pieces.size(), expected.size());
    for (size_t i = 0; i < pieces.size(); ++i) EXPECT_EQ(tok->piece(expected[i]), pieces[i]) << "text: '" << text << "'";
  }
}

TEST_P(TokLlama2c, EncodesPromptTokensNpy) {
  TDYN_REQUIRE_SHARED("models/" + GetParam() + "/golden.json");
  auto tok = Llama2cTokenizer::load(dir() / "tok512.bin");
  int checked = 0;
  for (const Json& entry : read_json_file(dir() / "golden.json")) {
    if (entry.value("kind", "") != "prompt_tokens") continue;
    std::vector<int32_t> expected = to_int32(read_npy(dir() / entry["file"].get<std::string>()).as_int64());
    EXPECT_EQ(tok->encode(entry["prompt"].get<std::string>()), expected) << entry["file"];
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

// gen_*.txt: line 1 is the command, the rest is run.c's stdout = the prompt decoded from its tokens, the
// continuation, then "\n". Where the fed tokens are stored (input_tokens_*.npy, all positions but the last
// sampled token) the whole stdout is checked: decode(fed tokens) is its prefix and exactly one more token,
// or nothing when generation stopped on BOS, completes it.
TEST_P(TokLlama2c, DecodeReproducesGenerationStdout) {
  TDYN_REQUIRE_SHARED("models/" + GetParam() + "/golden.json");
  auto tok = Llama2cTokenizer::load(dir() / "tok512.bin");
  Json golden = read_json_file(dir() / "golden.json");
  int generations = 0, full_checks = 0;
  for (const Json& gen : golden) {
    if (gen.value("kind", "") != "generation") continue;
    std::string file = read_file(dir() / gen["file"].get<std::string>());
    std::string stdout_text = file.substr(file.find('\n') + 1);
    ASSERT_EQ(stdout_text, gen["expected_stdout"].get<std::string>());
    std::vector<int32_t> prompt = gen["prompt_tokens"].get<std::vector<int32_t>>();
    std::string prompt_text = tok->decode(prompt);
    EXPECT_TRUE(stdout_text.starts_with(prompt_text)) << gen["file"] << ": decoded prompt '" << prompt_text << "'";
    ++generations;

    for (const Json& inputs : golden) {
      if (inputs.value("kind", "") != "input_tokens" || inputs["command"] != gen["command"]) continue;
      std::vector<int32_t> fed = to_int32(read_npy(dir() / inputs["file"].get<std::string>()).as_int64());
      std::string decoded = tok->decode(fed);
      ASSERT_TRUE(stdout_text.starts_with(decoded)) << gen["file"] << ":\n got      '" << decoded << "'\n expected '"
                                                    << stdout_text << "'";
      std::string rest = stdout_text.substr(decoded.size());
      bool completed = false;
      if (gen["stopped_on_bos"].get<bool>()) {
        completed = rest == "\n";
      } else {
        for (int32_t id = 0; id < tok->vocab_size() && !completed; ++id)
          completed = tok->decode_step(fed.back(), id) + "\n" == rest;
      }
      EXPECT_TRUE(completed) << gen["file"] << ": no final token prints '" << rest << "'";
      ++full_checks;
    }
  }
  EXPECT_GE(generations, 6);
  EXPECT_GE(full_checks, 2);
}

TEST_P(TokLlama2c, FoundBesideTheModel) {
  TDYN_REQUIRE_SHARED("models/" + GetParam() + "/tok512.bin");
  fs::path model;
  for (const auto& entry : fs::directory_iterator(dir()))
    if (entry.path().extension() == ".bin" && !entry.path().filename().string().starts_with("tok")) model = entry.path();
  ASSERT_FALSE(model.empty());
  auto tok = load_tokenizer_for_model(model);
  EXPECT_EQ(tok->kind(), "llama2c");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->encode("Lily and Tom"), Llama2cTokenizer::load(dir() / "tok512.bin")->encode("Lily and Tom"));
}

INSTANTIATE_TEST_SUITE_P(TokLlama2cModels, TokLlama2c, ::testing::Values("stories260K", "llama2xs", "aidreams260K"));

TEST(TokLlama2cSemantics, DecodeRules) {
  TDYN_REQUIRE_SHARED("models/stories260K/tok512.bin");
  auto tok = Llama2cTokenizer::load(shared_dir() / "models/stories260K/tok512.bin");
  const int32_t once = tok->encode("Once")[1];
  ASSERT_EQ(tok->piece(once), " Once");
  EXPECT_EQ(tok->decode_step(1, once), "Once");    // leading space stripped after BOS
  EXPECT_EQ(tok->decode_step(13, once), " Once");  // kept elsewhere
  EXPECT_EQ(tok->decode_step(once, 13), "\n");     // <0x0A> is the raw byte
  EXPECT_EQ(tok->decode_step(once, 3 + 0x07), "");  // a lone control byte is not printed
  EXPECT_EQ(tok->decode_step(once, 3 + 0xC3), "");  // nor a lone non-ASCII byte (C locale isprint)
  EXPECT_EQ(tok->decode_step(once, 2), "\n</s>\n");  // EOS prints its piece
  EXPECT_EQ(tok->decode_step(-1, 1), "");          // the BOS starting a prompt prints nothing
  EXPECT_EQ(tok->encode("", false), std::vector<int32_t>{});
  EXPECT_EQ(tok->encode("Once", false), std::vector<int32_t>{once});
  EXPECT_THROW(tok->decode_step(once, 512), Error);
  EXPECT_THROW(tok->decode_step(once, -1), Error);
  EXPECT_THROW(tok->piece(100000), Error);
}

}  // namespace
}  // namespace tdyn
