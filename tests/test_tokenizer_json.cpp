// SentencePiece-style tokenizer.json models (Unigram, BPE with byte fallback), written here with answers that
// follow from their scores and merge ranks by hand.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/json_files.h"
#include "tokenizer/tokenizer.h"

namespace tdyn {
namespace {

using Ids = std::vector<int32_t>;
const char* const kSpace = "\xE2\x96\x81";  // "▁"

std::string sp(const std::string& s) {  // "_hello" -> "▁hello"
  std::string out;
  for (char c : s) out += c == '_' ? std::string(kSpace) : std::string(1, c);
  return out;
}

std::unique_ptr<Tokenizer> write_and_load(const std::string& name, const Json& root) {
  fs::path dir = test::scratch_dir(name);
  write_file_atomic(dir / "tokenizer.json", root.dump());
  return load_tokenizer(dir / "tokenizer.json");
}

// ALBERT-like Unigram: lower-cased, split on whitespace, "▁" prefixed to every word, [CLS] .. [SEP].
Json unigram_json() {
  Json vocab = Json::array();
  for (auto [piece, score] : std::vector<std::pair<std::string, double>>{
           {"<pad>", 0}, {"<unk>", 0}, {"[CLS]", 0}, {"[SEP]", 0},   // 0-3
           {sp("_"), -2}, {sp("_hello"), -3}, {sp("_he"), -2.5}, {"llo", -2.5},  // 4-7
           {sp("_world"), -7}, {"w", -3}, {"o", -3}, {"r", -3}, {"l", -3}, {"d", -3}, {"h", -3}, {"e", -3},  // 8-15
           {sp("_w"), -3.5}, {"orld", -3}}) {  // 16-17
    vocab.push_back({piece, score});
  }
  return {
      {"added_tokens",
       {{{"id", 2}, {"content", "[CLS]"}, {"special", true}}, {{"id", 3}, {"content", "[SEP]"}, {"special", true}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Replace"}, {"pattern", {{"String", "``"}}}, {"content", "\""}}, {{"type", "Lowercase"}}}}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "WhitespaceSplit"}},
          {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "always"}, {"split", true}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}}},
        {"special_tokens",
         {{"[CLS]", {{"id", "[CLS]"}, {"ids", {2}}, {"tokens", {"[CLS]"}}}},
          {"[SEP]", {{"id", "[SEP]"}, {"ids", {3}}, {"tokens", {"[SEP]"}}}}}}}},
      {"decoder", {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "always"}, {"split", true}}},
      {"model", {{"type", "Unigram"}, {"unk_id", 1}, {"vocab", vocab}}},
  };
}

TEST(TokUnigram, ViterbiPicksTheBestScoringSegmentation) {
  auto tok = write_and_load("tok_unigram", unigram_json());
  EXPECT_EQ(tok->kind(), "unigram");
  EXPECT_EQ(tok->vocab_size(), 18);
  // "▁hello": whole piece -3 beats "▁he" + "llo" (-5) and single letters.
  // "▁world": "▁w" + "orld" (-6.5) beats the whole piece (-7) and "▁" + "w" + "orld" (-8).
  EXPECT_EQ(tok->encode("Hello   WORLD"), (Ids{2, 5, 16, 17, 3}));
  // "▁hellx": "▁he" "l" "l" then x is in no piece: unk costs min score - 10 = -17.
  EXPECT_EQ(tok->encode("hellx", false), (Ids{6, 12, 12, 1}));
  // Consecutive unknown characters give one unk.
  EXPECT_EQ(tok->encode("xyz", false), (Ids{4, 1}));
  // Special tokens in the text are matched before normalization (so not lower-cased).
  EXPECT_EQ(tok->encode("[SEP]hello", false), (Ids{3, 5}));
  EXPECT_EQ(tok->decode(Ids{5, 16, 17}), "hello world");
  EXPECT_EQ(tok->bos_id(), 2);
  EXPECT_EQ(tok->eos_id(), 3);
}

// Llama 2 style BPE: "▁" prepended and replacing spaces by the normalizer, no pre-tokenizer, byte fallback,
// <s> added by the template, a decoder that undoes it all.
Json sp_bpe_json() {
  Json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"<0xC3>", 3}, {"<0xA9>", 4}, {sp("_"), 5}, {"a", 6},
                {"b", 7},     {"c", 8},   {sp("_a"), 9}, {"ab", 10},   {sp("_ab"), 11}, {"bc", 12}};
  return {
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
        {{"id", 1}, {"content", "<s>"}, {"special", true}},
        {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", kSpace}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", {sp("_ a"), "b c", "a b", sp("_a b")}}}},
  };
}

TEST(TokSpBpe, MergesByRankWithByteFallback) {
  auto tok = write_and_load("tok_sp_bpe", sp_bpe_json());
  EXPECT_EQ(tok->kind(), "sp-bpe");
  // "▁abc": "▁ a" (rank 0) -> ▁a; then "b c" (1) beats "▁a b" (3) -> ▁a bc; no merge joins those two.
  EXPECT_EQ(tok->encode("abc"), (Ids{1, 9, 12}));
  // "▁ab▁é": ▁a, then "▁a b" -> ▁ab; "é" is not a piece -> its bytes <0xC3> <0xA9>.
  EXPECT_EQ(tok->encode("ab \xC3\xA9", false), (Ids{11, 5, 3, 4}));
  // "x" has neither a piece nor byte pieces: unk, and a run of them is one unk.
  EXPECT_EQ(tok->encode("xx", false), (Ids{5, 0}));
  EXPECT_EQ(tok->encode("", true), (Ids{1}));
  // Decoding: the dummy-prefix space goes at the start and after BOS, bytes are reassembled.
  EXPECT_EQ(tok->decode(Ids{11, 5, 3, 4}), "ab \xC3\xA9");
  EXPECT_EQ(tok->decode_step(1, 11), "ab");
  EXPECT_EQ(tok->decode_step(9, 11), " ab");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
}

TEST(TokSpBpe, ReportsWhatItDoesNotSupport) {
  Json root = sp_bpe_json();
  root["normalizer"] = {{"type", "Nmt"}};
  try {
    write_and_load("tok_sp_bpe_bad", root);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'Nmt' is not supported"), std::string::npos) << e.what();
  }
  root = sp_bpe_json();
  root["decoder"] = {{"type", "CTC"}};
  EXPECT_THROW(write_and_load("tok_sp_bpe_bad", root), Error);
}

// Replace and Split take any regex: here digits are dropped before the model sees the text, and runs of spaces
// collapse (ALBERT's " {2,}"), so the ids equal those of the text without them.
TEST(TokRegexStages, ReplaceAndSplitTakeAnyRegex) {
  Json root = unigram_json();
  auto replace = [](const char* regex, const char* content) {
    return Json::object({{"type", "Replace"}, {"pattern", Json::object({{"Regex", regex}})}, {"content", content}});
  };
  root["normalizer"]["normalizers"].push_back(replace("\\p{N}+", ""));
  root["normalizer"]["normalizers"].push_back(replace(" {2,}", " "));
  Json& pre = root["pre_tokenizer"]["pretokenizers"];
  pre.insert(pre.begin(), Json::object({{"type", "Split"}, {"pattern", Json::object({{"Regex", "[!?]"}})}, {"behavior", "Removed"}}));
  auto tok = write_and_load("tok_regex_stages", root);
  auto plain = write_and_load("tok_regex_plain", unigram_json());
  EXPECT_EQ(tok->encode("Hello 42   world!?", true), plain->encode("hello world", true));
  EXPECT_EQ(tok->encode("he2llo", true), plain->encode("hello", true));

  root["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "[unclosed";
  test::expect_error_contains([&] { write_and_load("tok_regex_bad", root); }, "pre_tokenizer");
  test::expect_error_contains([&] { write_and_load("tok_regex_bad", root); }, "cannot be compiled");
}

// Llama 3 features: ignore_merges, added tokens with rstrip, BOS/EOS named by tokenizer_config.json.
TEST(TokBpeOptions, IgnoreMergesAddedTokensAndConfig) {
  Json root = {
      {"added_tokens", {{{"id", 4}, {"content", "<|x|>"}, {"special", true}, {"rstrip", true}}}},
      {"model",
       {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}, {"abab", 3}}}, {"merges", Json::array({Json::array({"a", "b"})})}}},
  };
  EXPECT_EQ(write_and_load("tok_bpe_merges", root)->encode("abab"), (Ids{2, 2}));
  root["model"]["ignore_merges"] = true;
  fs::path dir = test::scratch_dir("tok_bpe_options");
  write_file_atomic(dir / "tokenizer.json", root.dump());
  write_file_atomic(dir / "tokenizer_config.json", R"({"bos_token": {"content": "<|x|>"}, "eos_token": "b"})");
  auto tok = load_tokenizer_for_model(dir);
  EXPECT_EQ(tok->encode("abab"), (Ids{3}));
  EXPECT_EQ(tok->encode("ab<|x|>  a"), (Ids{2, 4, 0}));  // rstrip swallows the spaces after the token
  EXPECT_EQ(tok->bos_id(), 4);
  EXPECT_EQ(tok->eos_id(), 1);
  EXPECT_EQ(tok->decode(Ids{2, 4}), "ab <|x|>");  // no decoder: pieces joined by spaces
  EXPECT_THROW(tok->encode(" "), Error);          // ' ' has no piece, no unk, no byte fallback
}

}  // namespace
}  // namespace tdyn
