// BERT WordPiece with the real bert-base-uncased vocabulary, and the same tokenizer read from a tokenizer.json.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/json_files.h"
#include "tokenizer/tokenizer.h"

namespace tdyn {
namespace {

using test::shared_dir;
using Ids = std::vector<int32_t>;

fs::path bert_vocab() { return shared_dir() / "tokenizers/bert-base-uncased/vocab.txt"; }

class TokBert : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(bert_vocab())) GTEST_SKIP() << "shared test data not found: " << bert_vocab();
    tok_ = load_tokenizer(bert_vocab());
  }
  std::unique_ptr<Tokenizer> tok_;
};

// Ids are line numbers of vocab.txt: [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103.
TEST_F(TokBert, KnownIds) {
  EXPECT_EQ(tok_->kind(), "wordpiece");
  EXPECT_EQ(tok_->vocab_size(), 30522);
  EXPECT_EQ(tok_->bos_id(), 101);
  EXPECT_EQ(tok_->eos_id(), 102);
  // hello 7592, "," 1010, world 2088, "!" 999: lower-cased, punctuation split off.
  EXPECT_EQ(tok_->encode("Hello, World!"), (Ids{101, 7592, 1010, 2088, 999, 102}));
  EXPECT_EQ(tok_->encode("Hello, World!", false), (Ids{7592, 1010, 2088, 999}));
  // Greedy longest match: "una" (14477; no "unaf"), "##ffa" (20961; no "##ffable"), "##ble" (3468).
  EXPECT_EQ(tok_->encode("unaffable", false), (Ids{14477, 20961, 3468}));
  EXPECT_EQ(tok_->encode("tokenization", false), (Ids{19204, 3989}));  // token ##ization
  // Accents stripped after NFD: cafe 7668, naive 15743, ecole 12431 (upper-case É lower-cased first).
  EXPECT_EQ(tok_->encode("Caf\xC3\xA9 na\xC3\xAFve \xC3\x89" "COLE", false), (Ids{7668, 15743, 12431}));
  // Every ASCII symbol is punctuation: $ 1002, 5 1019, . 1012, 00 4002.
  EXPECT_EQ(tok_->encode("$5.00", false), (Ids{1002, 1019, 1012, 4002}));
  // CJK ideographs are split into single characters: 日 1864, 本 1876.
  EXPECT_EQ(tok_->encode("\xE6\x97\xA5\xE6\x9C\xAC", false), (Ids{1864, 1876}));
  // A word no piece sequence covers, and one longer than 100 characters, become [UNK].
  EXPECT_EQ(tok_->encode("snowman\xE2\x98\x83 a", false), (Ids{100, 1037}));
  EXPECT_EQ(tok_->encode(std::string(101, 'a'), false), (Ids{100}));
  // Control characters are dropped, tabs and newlines are spaces: ab 11113, a 1037, b 1038.
  EXPECT_EQ(tok_->encode("a\x01" "b a\tb", false), (Ids{11113, 1037, 1038}));
  // Special tokens written in the text are kept whole (not lower-cased and split as "[", "mask", "]").
  EXPECT_EQ(tok_->encode("hello [MASK]!", false), (Ids{7592, 103, 999}));
  EXPECT_EQ(tok_->encode("", true), (Ids{101, 102}));
}

TEST_F(TokBert, DecodeJoinsContinuationPieces) {
  EXPECT_EQ(tok_->decode(Ids{14477, 20961, 3468, 2088}), "unaffable world");
  EXPECT_EQ(tok_->decode(Ids{101, 7592, 102}), "[CLS] hello [SEP]");
  EXPECT_EQ(tok_->piece(20961), "##ffa");
  EXPECT_THROW(tok_->decode(Ids{30522}), Error);
}

// The example of the BERT paper's README, with a vocabulary that has its pieces.
TEST(TokBertSmall, UnaffableFromItsOwnVocab) {
  fs::path dir = test::scratch_dir("tok_bert_small");
  write_file_atomic(dir / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nun\n##aff\n##able\nrunning\n");
  write_file_atomic(dir / "tokenizer_config.json", R"({"do_lower_case": false})");
  auto tok = load_tokenizer_for_model(dir);
  EXPECT_EQ(tok->encode("unaffable"), (Ids{2, 5, 6, 7, 3}));
  // do_lower_case false: "Running" is not lower-cased, so it is unknown.
  EXPECT_EQ(tok->encode("Running running", false), (Ids{1, 8}));
}

TEST_F(TokBert, TokenizerJsonMatchesVocabTxt) {
  TDYN_REQUIRE_SHARED("data/wikitext-2/wiki.test.raw");
  Json vocab = Json::object();
  std::string lines = read_file(bert_vocab());
  int64_t id = 0;
  for (size_t pos = 0; pos < lines.size(); ++id) {
    size_t end = lines.find('\n', pos);
    vocab[lines.substr(pos, end - pos)] = id;
    pos = end + 1;
  }
  Json root = {
      {"added_tokens",
       {{{"id", 0}, {"content", "[PAD]"}, {"special", true}},
        {{"id", 100}, {"content", "[UNK]"}, {"special", true}},
        {{"id", 101}, {"content", "[CLS]"}, {"special", true}},
        {{"id", 102}, {"content", "[SEP]"}, {"special", true}},
        {{"id", 103}, {"content", "[MASK]"}, {"special", true}}}},
      {"normalizer",
       {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true}, {"strip_accents", nullptr},
        {"lowercase", true}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor", {{"type", "BertProcessing"}, {"sep", {"[SEP]", 102}}, {"cls", {"[CLS]", 101}}}},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
      {"model",
       {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
        {"max_input_chars_per_word", 100}, {"vocab", vocab}}},
  };
  fs::path dir = test::scratch_dir("tok_bert_json");
  write_file_atomic(dir / "tokenizer.json", root.dump());
  auto from_json = load_tokenizer_for_model(dir);
  EXPECT_EQ(from_json->kind(), "wordpiece");
  std::string text = read_file(shared_dir() / "data/wikitext-2/wiki.test.raw").substr(0, 30000);
  text = text.substr(0, text.rfind('\n'));
  Ids ids = tok_->encode(text);
  EXPECT_EQ(from_json->encode(text), ids);
  EXPECT_EQ(ids.front(), 101);
  EXPECT_EQ(ids.back(), 102);
  EXPECT_GT(ids.size(), 5000u);
}

}  // namespace
}  // namespace tdyn
