// The tokenizer a GGUF file carries (tokenizer.ggml.*), written with tdyn's GGUF writer the way llama.cpp's converter
// writes it from real tokenizers, must give the ids of the tokenizer it was converted from on WikiText-2 passages:
//   - GPT-2's encoder.json + vocab.bpe ("gpt2": tokens + merges) against tdyn's GPT-2 BPE (itself checked against
//     the reference ids in test_tokenizer_gpt2);
//   - a byte-fallback SentencePiece BPE model trained here ("llama": tokens + scores + token types) against the
//     SentencePiece library's own encoding (identity normalization and kept whitespace, which is what llama.cpp's
//     SPM tokenizer does);
//   - llama2.c's tok512.bin of stories260K ("llama") against run.c's encoding (tdyn's Llama2cTokenizer, and run.c's
//     own ids in tokenize.json through `tdyn tokenize model.gguf`);
//   - BERT's vocab.txt ("bert", llama.cpp's phantom-space form) against tdyn's BERT WordPiece.
// Corrupt tokenizer metadata must give clear errors.
#include <cmath>
#include <fstream>
#include <sstream>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_writer.h"
#include "test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/json_files.h"
#include "tokenizer/llama2c_tokenizer.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/wordpiece.h"

namespace tdyn {
namespace {

constexpr int kNormal = 1, kUnknown = 2, kControl = 3, kUnused = 5, kByte = 6;

fs::path wikitext() { return test::shared_dir() / "data" / "wikitext-2" / "wiki.test.raw"; }

// WikiText-2 test lines with their leading space and newline (lines from 3000 on: unseen by the trained model),
// and strings with runs of spaces, tabs, characters outside small vocabularies and emoji.
std::vector<std::string> passages(size_t count = 200) {
  std::ifstream in(wikitext());
  std::vector<std::string> lines, out;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (size_t i = 3000; i < lines.size() && out.size() < count; ++i)
    if (lines[i].size() > 1) out.push_back(lines[i] + "\n");
  for (const char* s : {" ", "a", "   leading and trailing   ", "tab\tand\nnewline", "multiple    spaces  here",
                        "Café naïve résumé", "汉字 and 日本語", "emoji 😀🎉 done", "@-@ 1 @,@ 000 @.@ 5"})
    out.push_back(s);
  return out;
}

fs::path write_tokenizer_gguf(const fs::path& dir, const std::string& name, const GgufMetadata& tokenizer) {
  GgufMetadata m = {{"general.architecture", GgufValue::string("llama")}};
  m.insert(m.end(), tokenizer.begin(), tokenizer.end());
  const fs::path file = dir / name;
  write_gguf(file, m, {});
  return file;
}

void expect_same_ids(const Tokenizer& gguf, const Tokenizer& reference, bool add_special, const std::string& what,
                     int64_t min_tokens) {
  int64_t tokens = 0;
  for (const std::string& text : passages()) {
    const std::vector<int32_t> expected = reference.encode(text, add_special);
    ASSERT_EQ(gguf.encode(text, add_special), expected) << what << ": '" << text << "'";
    tokens += static_cast<int64_t>(expected.size());
  }
  EXPECT_GT(tokens, min_tokens) << what;
}

class GgufTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(wikitext())) GTEST_SKIP() << "shared test data not found: " << wikitext();
    dir_ = test::scratch_dir("gguf_tokenizer");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

// tokenizer.ggml.* of GPT-2 as convert_hf_to_gguf.py writes them: tokens by id, merges "left right", token types
// NORMAL except the added <|endoftext|> (CONTROL), pre "gpt-2", BOS = EOS = <|endoftext|>.
GgufMetadata gpt2_metadata() {
  const fs::path dir = test::shared_dir() / "tokenizers" / "gpt2";
  const Json encoder = read_json_file(dir / "encoder.json");
  std::vector<std::string> tokens(encoder.size());
  for (const auto& [piece, id] : encoder.items()) tokens.at(id.get<size_t>()) = piece;
  std::vector<std::string> merges;
  for (const auto& [left, right] : parse_merges_text(read_file(dir / "vocab.bpe"), "vocab.bpe"))
    merges.push_back(left + " " + right);
  std::vector<int32_t> types(tokens.size(), kNormal);
  const uint32_t end_of_text = encoder.at("<|endoftext|>").get<uint32_t>();
  types.at(end_of_text) = kControl;
  return {{"tokenizer.ggml.model", GgufValue::string("gpt2")},
          {"tokenizer.ggml.pre", GgufValue::string("gpt-2")},
          {"tokenizer.ggml.tokens", GgufValue::strings(tokens)},
          {"tokenizer.ggml.token_type", GgufValue::int32s(types)},
          {"tokenizer.ggml.merges", GgufValue::strings(merges)},
          {"tokenizer.ggml.bos_token_id", GgufValue::uint32(end_of_text)},
          {"tokenizer.ggml.eos_token_id", GgufValue::uint32(end_of_text)}};
}

TEST_F(GgufTokenizer, Gpt2IdsEqualTheVocabAndMergesFiles) {
  TDYN_REQUIRE_SHARED("tokenizers/gpt2/encoder.json");
  const fs::path dir = test::shared_dir() / "tokenizers" / "gpt2";
  auto reference = load_gpt2_bpe(dir / "encoder.json", dir / "vocab.bpe");
  const fs::path file = write_tokenizer_gguf(dir_, "gpt2.gguf", gpt2_metadata());
  // The model's own tokenizer, found from the model path, and the file named as --tokenizer.
  std::vector<std::unique_ptr<Tokenizer>> loaded;
  loaded.push_back(load_tokenizer_for_model(file));
  loaded.push_back(load_tokenizer(file));
  for (const auto& tok : loaded) {
    EXPECT_EQ(tok->kind(), "gguf-gpt2");
    EXPECT_EQ(tok->vocab_size(), 50257);
    EXPECT_EQ(tok->bos_id(), std::optional<int32_t>(50256));
    EXPECT_EQ(tok->eos_id(), std::optional<int32_t>(50256));
    expect_same_ids(*tok, *reference, true, "gpt2", 5000);
    for (const std::string& text : passages(20)) EXPECT_EQ(tok->decode(tok->encode(text)), text);
    EXPECT_EQ(tok->encode("a<|endoftext|>b"), reference->encode("a<|endoftext|>b"));
  }
}

// A byte-fallback SentencePiece BPE model with no normalization: what llama.cpp's SPM tokenizer reproduces.
TEST_F(GgufTokenizer, LlamaIdsEqualTheSentencePieceLibrary) {
  std::ifstream in(wikitext());
  std::string slice;
  for (std::string line; std::getline(in, line) && slice.size() < 150000;) slice += line + "\n";
  write_file_atomic(dir_ / "train.txt", slice);
  const auto status = sentencepiece::SentencePieceTrainer::Train(fmt::format(
      "--input={} --model_prefix={} --model_type=bpe --vocab_size=400 --byte_fallback=true "
      "--normalization_rule_name=identity --remove_extra_whitespaces=false --num_threads=2 --minloglevel=2",
      (dir_ / "train.txt").string(), (dir_ / "spm").string()));
  ASSERT_TRUE(status.ok()) << status.ToString();
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load((dir_ / "spm.model").string()).ok());

  // As convert_hf_to_gguf.py's _create_vocab_sentencepiece: piece, score and type of every id.
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  int bytes = 0;
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    tokens.push_back(sp.IdToPiece(id));
    scores.push_back(sp.GetScore(id));
    types.push_back(sp.IsUnknown(id) ? kUnknown : sp.IsControl(id) ? kControl : sp.IsUnused(id) ? kUnused
                    : sp.IsByte(id) ? kByte : kNormal);
    bytes += sp.IsByte(id);
  }
  ASSERT_EQ(bytes, 256);
  const fs::path file = write_tokenizer_gguf(
      dir_, "spm.gguf",
      {{"tokenizer.ggml.model", GgufValue::string("llama")}, {"tokenizer.ggml.tokens", GgufValue::strings(tokens)},
       {"tokenizer.ggml.scores", GgufValue::float32s(scores)}, {"tokenizer.ggml.token_type", GgufValue::int32s(types)},
       {"tokenizer.ggml.bos_token_id", GgufValue::uint32(sp.bos_id())},
       {"tokenizer.ggml.eos_token_id", GgufValue::uint32(sp.eos_id())},
       {"tokenizer.ggml.unknown_token_id", GgufValue::uint32(sp.unk_id())},
       {"tokenizer.ggml.add_bos_token", GgufValue::boolean(true)},
       {"tokenizer.ggml.add_eos_token", GgufValue::boolean(false)}});
  auto tok = load_tokenizer_for_model(file);
  EXPECT_EQ(tok->kind(), "gguf-llama");
  EXPECT_EQ(tok->vocab_size(), 400);
  int64_t total = 0, byte_tokens = 0;
  for (const std::string& text : passages()) {
    std::vector<int> ids;
    ASSERT_TRUE(sp.Encode(text, &ids).ok());
    const std::vector<int32_t> expected(ids.begin(), ids.end());
    ASSERT_EQ(tok->encode(text, false), expected) << "'" << text << "'";
    std::vector<int32_t> with_bos{sp.bos_id()};
    with_bos.insert(with_bos.end(), expected.begin(), expected.end());
    ASSERT_EQ(tok->encode(text), with_bos) << "'" << text << "'";
    std::string decoded;
    ASSERT_TRUE(sp.Decode(ids, &decoded).ok());
    EXPECT_EQ(tok->decode(expected), decoded) << "'" << text << "'";
    total += static_cast<int64_t>(ids.size());
    for (int id : ids) byte_tokens += sp.IsByte(id);
  }
  EXPECT_GT(total, 5000);
  EXPECT_GT(byte_tokens, 0) << "the texts should need byte fallback";
  // Control tokens in the text are matched as llama.cpp does with parse_special; the text after one gets its
  // leading space again.
  std::vector<int> hello;
  ASSERT_TRUE(sp.Encode("hello", &hello).ok());
  std::vector<int32_t> expected{sp.bos_id(), sp.eos_id()};
  expected.insert(expected.end(), hello.begin(), hello.end());
  EXPECT_EQ(tok->encode(sp.IdToPiece(sp.eos_id()) + "hello"), expected);
}

// llama2.c's tokenizer.bin holds a SentencePiece vocabulary with "▁" written as ' ' and its special pieces
// dressed as "\n<s>\n"; back in GGUF form (as llama.cpp stores Llama 2's) the ids must equal run.c's.
TEST_F(GgufTokenizer, LlamaIdsEqualLlama2cRunC) {
  TDYN_REQUIRE_SHARED("models/stories260K/tok512.bin");
  auto reference = Llama2cTokenizer::load(test::shared_dir() / "models" / "stories260K" / "tok512.bin");
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int32_t id = 0; id < reference->vocab_size(); ++id) {
    std::string piece = reference->piece(id);
    int type = kNormal;
    if (id == 0) type = kUnknown;
    else if (id == Llama2cTokenizer::kBos || id == Llama2cTokenizer::kEos) type = kControl, piece = id == 1 ? "<s>" : "</s>";
    else if (id < Llama2cTokenizer::kFirstByteId + 256) type = kByte;
    else piece = replace_all(piece, " ", "\xE2\x96\x81");
    tokens.push_back(piece);
    scores.push_back(reference->score(id));
    types.push_back(type);
  }
  const fs::path file = write_tokenizer_gguf(
      dir_, "stories.gguf",
      {{"tokenizer.ggml.model", GgufValue::string("llama")}, {"tokenizer.ggml.tokens", GgufValue::strings(tokens)},
       {"tokenizer.ggml.scores", GgufValue::float32s(scores)}, {"tokenizer.ggml.token_type", GgufValue::int32s(types)},
       {"tokenizer.ggml.bos_token_id", GgufValue::uint32(1)}, {"tokenizer.ggml.eos_token_id", GgufValue::uint32(2)},
       {"tokenizer.ggml.unknown_token_id", GgufValue::uint32(0)}});
  auto tok = load_tokenizer(file);
  expect_same_ids(*tok, *reference, true, "stories260K", 5000);
  expect_same_ids(*tok, *reference, false, "stories260K", 5000);
  // `tdyn tokenize model.gguf` needs no tokenizer file: run.c's own ids (tokenize.json) through the CLI.
  const auto cases = Json::parse(read_file(test::shared_dir() / "models" / "stories260K" / "tokenize.json"));
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    std::string out, err;
    ASSERT_EQ(test::run_cli("tokenize " + test::shell_quote(file.string()) + " --text " + test::shell_quote(text), &out, &err), 0)
        << err;
    std::vector<int32_t> ids;
    std::istringstream in(out);
    for (int32_t id; in >> id;) ids.push_back(id);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << "text: '" << text << "'";
  }
}

// BERT's vocab.txt as llama.cpp stores it ("▁" marks word starts, "##" dropped, control tokens kept).
TEST_F(GgufTokenizer, BertIdsEqualVocabTxt) {
  TDYN_REQUIRE_SHARED("tokenizers/bert-base-uncased/vocab.txt");
  const fs::path vocab = test::shared_dir() / "tokenizers" / "bert-base-uncased" / "vocab.txt";
  auto reference = load_bert_vocab_txt(vocab);
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::ifstream in(vocab);
  for (std::string line; std::getline(in, line);) {
    // convert_hf_to_gguf.py's get_vocab_base marks the tokenizer's special tokens CONTROL; [unused0] and the
    // like are ordinary pieces and get the phantom space too.
    const bool special = line == "[PAD]" || line == "[UNK]" || line == "[CLS]" || line == "[SEP]" || line == "[MASK]";
    tokens.push_back(special ? line : line.starts_with("##") ? line.substr(2) : "\xE2\x96\x81" + line);
    types.push_back(special ? kControl : kNormal);
  }
  const fs::path file = write_tokenizer_gguf(
      dir_, "bert.gguf",
      {{"tokenizer.ggml.model", GgufValue::string("bert")}, {"tokenizer.ggml.tokens", GgufValue::strings(tokens)},
       {"tokenizer.ggml.token_type", GgufValue::int32s(types)},
       {"tokenizer.ggml.unknown_token_id", GgufValue::uint32(100)},
       {"tokenizer.ggml.seperator_token_id", GgufValue::uint32(102)},
       {"tokenizer.ggml.padding_token_id", GgufValue::uint32(0)}});
  auto tok = load_tokenizer(file);
  expect_same_ids(*tok, *reference, true, "bert", 5000);
}

// A small "llama" tokenizer to break: <unk> <s> </s> ▁ a b ▁a ab, and a "gpt2" one: a b ab.
GgufMetadata small_llama() {
  return {{"tokenizer.ggml.model", GgufValue::string("llama")},
          {"tokenizer.ggml.tokens", GgufValue::strings({"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab"})},
          {"tokenizer.ggml.scores", GgufValue::float32s({0, 0, 0, -1, -2, -3, -4, -5})},
          {"tokenizer.ggml.token_type", GgufValue::int32s({kUnknown, kControl, kControl, 1, 1, 1, 1, 1})},
          {"tokenizer.ggml.bos_token_id", GgufValue::uint32(1)},
          {"tokenizer.ggml.eos_token_id", GgufValue::uint32(2)}};
}
GgufMetadata small_gpt2() {
  return {{"tokenizer.ggml.model", GgufValue::string("gpt2")}, {"tokenizer.ggml.pre", GgufValue::string("gpt-2")},
          {"tokenizer.ggml.tokens", GgufValue::strings({"a", "b", "ab"})},
          {"tokenizer.ggml.merges", GgufValue::strings({"a b"})}};
}
GgufMetadata with(GgufMetadata m, const std::string& key, GgufValue value) {
  for (auto& [k, v] : m)
    if (k == key) {
      v = std::move(value);
      return m;
    }
  m.emplace_back(key, std::move(value));
  return m;
}

GgufMetadata without(GgufMetadata m, const std::string& key) {
  std::erase_if(m, [&](const auto& kv) { return kv.first == key; });
  return m;
}

TEST_F(GgufTokenizer, SmallTokenizersEncodeByScoreAndByRank) {
  auto llama = load_tokenizer(write_tokenizer_gguf(dir_, "l.gguf", small_llama()));
  // "▁ab": ▁a (score -4) beats ab (-5); the unknown 'c' has no byte token and becomes <unk>.
  EXPECT_EQ(llama->encode("ab c"), (std::vector<int32_t>{1, 6, 5, 3, 0}));
  auto gpt2 = load_tokenizer(write_tokenizer_gguf(dir_, "g.gguf", small_gpt2()));
  EXPECT_EQ(gpt2->encode("abab"), (std::vector<int32_t>{2, 2}));
}

TEST_F(GgufTokenizer, CorruptMetadataGivesClearErrors) {
  struct Case {
    const char* what;
    GgufMetadata metadata;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"scores shorter than tokens", with(small_llama(), "tokenizer.ggml.scores", GgufValue::float32s({0, 0})),
       "'tokenizer.ggml.scores' has 2 elements but tokenizer.ggml.tokens has 8"},
      {"token types longer than tokens", with(small_llama(), "tokenizer.ggml.token_type", GgufValue::int32s(std::vector<int32_t>(9, 1))),
       "'tokenizer.ggml.token_type' has 9 elements"},
      {"scores of strings", with(small_llama(), "tokenizer.ggml.scores", GgufValue::strings(std::vector<std::string>(8, "x"))),
       "'tokenizer.ggml.scores': element 0 must be a finite float32 number"},
      {"a NaN score", with(small_llama(), "tokenizer.ggml.scores", GgufValue::float32s({0, 0, 0, 0, 0, NAN, 0, 0})),
       "'tokenizer.ggml.scores': element 5 must be a finite float32 number"},
      {"tokens of numbers", with(small_llama(), "tokenizer.ggml.tokens", GgufValue::int32s({1, 2, 3, 4, 5, 6, 7, 8})),
       "'tokenizer.ggml.tokens': element 0 must be a string"},
      {"tokens not an array", with(small_llama(), "tokenizer.ggml.tokens", GgufValue::string("a")),
       "'tokenizer.ggml.tokens' must be an array of a string, got a string"},
      {"token type 9", with(small_llama(), "tokenizer.ggml.token_type", GgufValue::int32s({1, 1, 1, 1, 1, 1, 1, 9})),
       "element 7 must be an integer token type 0..6"},
      {"repeated token", with(small_llama(), "tokenizer.ggml.tokens", GgufValue::strings({"<unk>", "<s>", "</s>", "a", "a", "b", "c", "d"})),
       "has 'a' twice (ids 3 and 4)"},
      {"no scores", without(small_llama(), "tokenizer.ggml.scores"), "GGUF metadata has no 'tokenizer.ggml.scores'"},
      {"model name a number", with(small_llama(), "tokenizer.ggml.model", GgufValue::int32(1)),
       "GGUF key 'tokenizer.ggml.model' must be a string, got an integer (1)"},
      {"BOS out of range", with(small_llama(), "tokenizer.ggml.bos_token_id", GgufValue::uint32(8)),
       "'tokenizer.ggml.bos_token_id' = 8 is not a token id (the vocabulary has 8 tokens)"},
      {"negative EOS", with(small_llama(), "tokenizer.ggml.eos_token_id", GgufValue::int32(-1)),
       "'tokenizer.ggml.eos_token_id' = -1 is not a token id"},
      {"padding id out of range", with(small_llama(), "tokenizer.ggml.padding_token_id", GgufValue::uint32(1000)),
       "'tokenizer.ggml.padding_token_id' = 1000 is not a token id"},
      {"BOS id a string", with(small_llama(), "tokenizer.ggml.bos_token_id", GgufValue::string("1")),
       "'tokenizer.ggml.bos_token_id' must be an integer token id"},
      {"add_eos without EOS", with(small_gpt2(), "tokenizer.ggml.add_eos_token", GgufValue::boolean(true)),
       "add_eos_token is true but there is no tokenizer.ggml.eos_token_id"},
      {"merge of an unknown token", with(small_gpt2(), "tokenizer.ggml.merges", GgufValue::strings({"a b", "a c"})),
       "merge 1 ('a' 'c') uses a piece that is not in the vocabulary ('c')"},
      {"merge that is no pair", with(small_gpt2(), "tokenizer.ggml.merges", GgufValue::strings({"ab"})),
       "tokenizer.ggml.merges[0] is 'ab', expected two pieces separated by one space"},
      {"merges of numbers", with(small_gpt2(), "tokenizer.ggml.merges", GgufValue::int32s({1})),
       "'tokenizer.ggml.merges': element 0 must be a string"},
      {"unknown pre-tokenizer", with(small_gpt2(), "tokenizer.ggml.pre", GgufValue::string("deepseek-llm")),
       "tokenizer.ggml.pre 'deepseek-llm' is not supported"},
      {"unknown model", with(small_gpt2(), "tokenizer.ggml.model", GgufValue::string("t5")),
       "tokenizer.ggml.model 't5' is not supported (tdyn reads llama, gpt2 and bert)"},
      {"model not a string", with(small_gpt2(), "tokenizer.ggml.model", GgufValue::uint32(1)),
       "'tokenizer.ggml.model' must be a string"},
  };
  for (const Case& c : cases) {
    const fs::path file = write_tokenizer_gguf(dir_, "bad.gguf", c.metadata);
    try {
      load_tokenizer(file);
      ADD_FAILURE() << c.what << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << c.what << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.gguf"), std::string::npos) << c.what << ": " << e.what();
    }
  }
}

// A GGUF without tokenizer metadata still finds the tokenizer files beside it; a named --tokenizer GGUF without
// one says so.
TEST_F(GgufTokenizer, WithoutTokenizerMetadataTheFilesBesideItAreUsed) {
  const fs::path file = write_tokenizer_gguf(dir_, "bare.gguf", {});
  try {
    load_tokenizer(file);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("carries no tokenizer"), std::string::npos) << e.what();
  }
  write_file_atomic(dir_ / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n");
  auto tok = load_tokenizer_for_model(file);
  EXPECT_EQ(tok->kind(), "wordpiece");
  // With tokenizer metadata, the GGUF's own tokenizer wins over the files beside it.
  EXPECT_EQ(load_tokenizer_for_model(write_tokenizer_gguf(dir_, "own.gguf", small_gpt2()))->kind(), "gguf-gpt2");
}

}  // namespace
}  // namespace tdyn
