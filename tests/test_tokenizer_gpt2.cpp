// GPT-2 byte-level BPE with the real GPT-2 files (shared/tokenizers/gpt2), the hand-written split regexes of
// GPT-2 and Llama 3, and the same tokenizer read from a tokenizer.json.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/json_files.h"
#include "tokenizer/pretokenize.h"

namespace tdyn {
namespace {

using test::shared_dir;

fs::path gpt2_dir() { return shared_dir() / "tokenizers" / "gpt2"; }

std::vector<std::string> split_words(std::string_view text, const char* pattern) {
  std::vector<std::string> words;
  for (const auto& [begin, end] : SplitRegex(pattern).matches(text)) words.emplace_back(text.substr(begin, end - begin));
  return words;
}

using Words = std::vector<std::string>;

TEST(TokSplitRegex, Gpt2Pattern) {
  EXPECT_EQ(split_words("Hello   world  \n\nDon't 1234 ok!!  ?", kGpt2SplitPattern),
            (Words{"Hello", "  ", " world", "  \n", "\n", "Don", "'t", " 1234", " ok", "!!", " ", " ?"}));
  EXPECT_EQ(split_words("I'M (hello) x\xC2\xB2 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC", kGpt2SplitPattern),
            (Words{"I", "'", "M", " (", "hello", ")", " x", "\xC2\xB2", " na\xC3\xAFve", " \xE6\x97\xA5\xE6\x9C\xAC"}));
  EXPECT_EQ(split_words("trailing  ", kGpt2SplitPattern), (Words{"trailing", "  "}));
  EXPECT_EQ(split_words(" ", kGpt2SplitPattern), (Words{" "}));
  // U+00A0 (no-break space) is whitespace for \s, but only a plain ' ' may lead a word.
  EXPECT_EQ(split_words("a\xC2\xA0\xC2\xA0" "b", kGpt2SplitPattern), (Words{"a", "\xC2\xA0", "\xC2\xA0", "b"}));
}

TEST(TokSplitRegex, Llama3Pattern) {
  EXPECT_EQ(split_words("Hello   world  \n\nDon't 1234 ok!!  ?", kLlama3SplitPattern),
            (Words{"Hello", "  ", " world", "  \n\n", "Don", "'t", " ", "123", "4", " ok", "!!", " ", " ?"}));
  EXPECT_EQ(split_words("I'M (hello) x\xC2\xB2 !!\n\nok", kLlama3SplitPattern),
            (Words{"I", "'M", " (", "hello", ")", " x", "\xC2\xB2", " !!\n\n", "ok"}));
  EXPECT_EQ(split_words("\tab  \n x", kLlama3SplitPattern), (Words{"\tab", "  \n", " x"}));
}

// \s is the White_Space property, as in the reference library's regex engine: vertical tab and U+0085 (NEL)
// included (were they not, ` ?[^\s\p{L}\p{N}]+` would take " \x85" and "\x0B\x0B" whole).
TEST(TokSplitRegex, WhitespaceIsTheUnicodeProperty) {
  EXPECT_EQ(split_words("a\x0B\x0B" "b \xC2\x85x", kGpt2SplitPattern), (Words{"a", "\x0B", "\x0B", "b", " ", "\xC2\x85", "x"}));
  // (?i:...) folds with Unicode case folding: U+017F (long s) is an 's'.
  EXPECT_EQ(split_words("it'\xC5\xBF", kLlama3SplitPattern), (Words{"it", "'\xC5\xBF"}));
}

// Any pattern ICU compiles is accepted: Qwen2's splits numbers into single digits.
TEST(TokSplitRegex, OtherPatternsAndErrors) {
  const char* qwen2 = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  EXPECT_EQ(split_words("abc 1234!", qwen2), (Words{"abc", " ", "1", "2", "3", "4", "!"}));
  EXPECT_EQ(split_words("a1b2", R"(\p{N})"), (Words{"1", "2"}));  // the matches only: split behaviours keep the rest
  EXPECT_EQ(split_words("", kGpt2SplitPattern), Words{});
  test::expect_error_contains([] { SplitRegex("(unclosed"); }, "cannot be compiled");
  test::expect_error_contains([] { SplitRegex(kGpt2SplitPattern).matches("ab\xFF"); }, "UTF-8");
}

TEST(TokByteLevel, MappingIsGpt2s) {
  EXPECT_EQ(bytes_to_unicode(" "), "\xC4\xA0");     // 'Ġ' = U+0120
  EXPECT_EQ(bytes_to_unicode("\n"), "\xC4\x8A");    // 'Ċ' = U+010A
  EXPECT_EQ(bytes_to_unicode("A!~"), "A!~");        // printable ASCII maps to itself
  EXPECT_EQ(bytes_to_unicode("\xAD"), "\xC5\x83");  // soft hyphen (not printable) -> U+0143
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(unicode_to_bytes(bytes_to_unicode(all)), all);
}

class TokGpt2 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(gpt2_dir() / "encoder.json")) GTEST_SKIP() << "shared test data not found: " << gpt2_dir();
    tok_ = load_tokenizer(gpt2_dir() / "encoder.json");
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(TokGpt2, KnownIds) {
  EXPECT_EQ(tok_->kind(), "gpt2-bpe");
  EXPECT_EQ(tok_->vocab_size(), 50257);
  EXPECT_EQ(tok_->bos_id(), 50256);
  EXPECT_EQ(tok_->eos_id(), 50256);
  using Ids = std::vector<int32_t>;
  struct Case {
    const char* text;
    Ids ids;
  };
  // Each derived by hand: pre-tokenize with the regex, map bytes, apply vocab.bpe merges by rank. E.g.
  // " 1234567": Ġ 1 (rank 97), Ġ1 2 (850), 4 5 (1976), 6 7 (2879), Ġ12 3 (16776) -> Ġ123 45 67.
  const Case cases[] = {
      {"Hello world", {15496, 995}},
      {"I don't", {40, 836, 470}},
      {"We're", {1135, 821}},
      {"a  b", {64, 220, 275}},
      {"cat  ", {9246, 220, 220}},
      {" 42!!!", {5433, 10185}},
      {"\n\n", {628}},
      {"2023", {1238, 1954}},
      {" 1234567", {17031, 2231, 3134}},
      {" na\xC3\xAFve caf\xC3\xA9", {41492, 40304}},
      {" \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", {10545, 245, 98, 17312, 105, 45739, 252}},  // " 日本語"
      {"<|endoftext|>", {50256}},
      {"a<|endoftext|>b", {64, 50256, 65}},
      {"", {}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(tok_->encode(c.text), c.ids) << "text: '" << c.text << "'";
    EXPECT_EQ(tok_->decode(c.ids), c.text);
  }
  EXPECT_EQ(tok_->piece(995), "\xC4\xA0world");
  EXPECT_THROW(tok_->decode_step(-1, 50257), Error);
  EXPECT_THROW(tok_->encode("\xFF"), Error);  // not UTF-8
}

// Several paragraphs of WikiText-2 (with its unicode, numbers " @-@ ", multiple spaces and newlines).
std::string wikitext_sample(size_t bytes) {
  std::string text = read_file(shared_dir() / "data/wikitext-2/wiki.test.raw");
  return text.substr(0, std::min(bytes, text.size()));
}

TEST_F(TokGpt2, WikitextRoundTrips) {
  TDYN_REQUIRE_SHARED("data/wikitext-2/wiki.test.raw");
  std::string text = wikitext_sample(60000);
  // Cut at a line end so the sample is whole UTF-8.
  text = text.substr(0, text.rfind('\n') + 1);
  std::vector<int32_t> ids = tok_->encode(text);
  EXPECT_EQ(tok_->decode(ids), text);
  EXPECT_LT(ids.size(), text.size() / 3);  // BPE compresses English about 4x
  // The byte-level pieces map back to the text piece by piece, so any split into steps gives the same bytes.
  std::string streamed;
  for (size_t i = 0; i < ids.size(); ++i) streamed += tok_->decode_step(i ? ids[i - 1] : -1, ids[i]);
  EXPECT_EQ(streamed, text);
  // Non-ASCII in the sample (WikiText has e.g. "–" and accented names).
  EXPECT_NE(text.find('\xE2'), std::string::npos);
}

// The same vocabulary and merges as a tokenizer.json must give the same ids; with the Llama 3 split the words
// (and so the ids of numbers) differ as the pattern says.
TEST_F(TokGpt2, TokenizerJsonGivesTheSameIds) {
  TDYN_REQUIRE_SHARED("data/wikitext-2/wiki.test.raw");
  Json vocab = read_json_file(gpt2_dir() / "encoder.json");
  MergeList merges = parse_merges_text(read_file(gpt2_dir() / "vocab.bpe"), "vocab.bpe");
  Json merges_json = Json::array();
  for (const auto& [a, b] : merges) merges_json.push_back(a + " " + b);
  Json root = {
      {"version", "1.0"},
      {"added_tokens", {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges_json}, {"unk_token", nullptr}}},
  };
  fs::path dir = test::scratch_dir("tok_gpt2_json");
  write_file_atomic(dir / "tokenizer.json", root.dump());
  auto from_json = load_tokenizer_for_model(dir);
  EXPECT_EQ(from_json->kind(), "gpt2-bpe");
  std::string text = wikitext_sample(20000);
  text = text.substr(0, text.rfind('\n') + 1);
  EXPECT_EQ(from_json->encode(text), tok_->encode(text));
  EXPECT_EQ(from_json->encode("a<|endoftext|>b"), (std::vector<int32_t>{64, 50256, 65}));

  // Llama 3 style: Split(regex, Isolated) then ByteLevel without its own regex.
  root["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers",
                            {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3SplitPattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  write_file_atomic(dir / "tokenizer.json", root.dump());
  auto llama3_split = load_tokenizer(dir / "tokenizer.json");
  // " 1234567" -> " ", "123", "456", "7"; "123": 1 2 (rank 810), 12 3 (9908); "456": 4 5 (1976), 45 6 (28973).
  EXPECT_EQ(llama3_split->encode(" 1234567"), (std::vector<int32_t>{220, 10163, 29228, 22}));
  EXPECT_EQ(llama3_split->decode(llama3_split->encode(text)), text);

  // Another pattern (Qwen2's) splits digits one by one: '1' .. '7' are ids 16 .. 22.
  root["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  write_file_atomic(dir / "tokenizer.json", root.dump());
  EXPECT_EQ(load_tokenizer(dir / "tokenizer.json")->encode(" 1234567"), (std::vector<int32_t>{220, 16, 17, 18, 19, 20, 21, 22}));
  // A pattern that does not compile is refused, naming where it is.
  root["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = R"((\w+)";
  write_file_atomic(dir / "tokenizer.json", root.dump());
  test::expect_error_contains([&] { load_tokenizer(dir / "tokenizer.json"); }, "pre_tokenizer");
}

}  // namespace
}  // namespace tdyn
