// Character vocabularies, how a model's tokenizer is found, and broken tokenizer files (each must give a
// tdyn::Error naming the file, never a crash).
#include <cstring>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/npy.h"
#include "test_util.h"
#include "tokenizer/json_files.h"
#include "tokenizer/llama2c_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace tdyn {
namespace {

using test::shared_dir;
using Ids = std::vector<int32_t>;

TEST(TokChars, Slm4096PromptMatchesItsTokens) {
  TDYN_REQUIRE_SHARED("models/slm4096/golden.json");
  fs::path dir = shared_dir() / "models/slm4096";
  auto tok = load_tokenizer_for_model(dir);  // a directory with only a character vocab.json
  EXPECT_EQ(tok->kind(), "chars");
  EXPECT_EQ(tok->vocab_size(), 54);
  EXPECT_FALSE(tok->bos_id());
  int checked = 0;
  for (const Json& entry : read_json_file(dir / "golden.json")) {
    if (entry.value("kind", "") != "input_tokens") continue;
    std::vector<int64_t> expected64 = read_npy(dir / entry["file"].get<std::string>()).as_int64();
    Ids expected(expected64.begin(), expected64.end());
    std::string prompt = entry["prompt"].get<std::string>();
    EXPECT_EQ(tok->encode(prompt), expected) << entry["file"];
    EXPECT_EQ(tok->decode(expected), prompt);
    ++checked;
  }
  EXPECT_GE(checked, 2);  // tokens_q_cats.npy and tokens_corpus128.npy

  try {
    tok->encode("Q: Zebra?");
    FAIL() << "expected an Error for 'Z'";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("'Z'"), std::string::npos) << message;
    EXPECT_NE(message.find("character 3"), std::string::npos) << message;
  }
  EXPECT_THROW(tok->decode(Ids{54}), Error);
}

TEST(TokSelect, PicksTheModelsTokenizer) {
  TDYN_REQUIRE_SHARED("tokenizers/gpt2/encoder.json");
  EXPECT_EQ(load_tokenizer_for_model(shared_dir() / "tokenizers/gpt2")->kind(), "gpt2-bpe");
  EXPECT_EQ(load_tokenizer_for_model(shared_dir() / "tokenizers/bert-base-uncased")->kind(), "wordpiece");
  EXPECT_EQ(load_tokenizer(shared_dir() / "tokenizers/gpt2/vocab.bpe")->kind(), "gpt2-bpe");
  EXPECT_EQ(load_tokenizer(shared_dir() / "models/slm4096/vocab.json")->kind(), "chars");
  EXPECT_EQ(load_tokenizer(shared_dir() / "models/stories260K/tok512.bin")->kind(), "llama2c");
}

TEST(TokSelect, Llama2cTokenizerBesideTheModel) {
  TDYN_REQUIRE_SHARED("models/stories260K/tok512.bin");
  std::string tokenizer_bytes = read_file(shared_dir() / "models/stories260K/tok512.bin");
  fs::path dir = test::scratch_dir("tok_select_llama2c");
  write_file_atomic(dir / "model.bin", "not read");
  // No tokenizer at all: the message says what was looked for.
  try {
    load_tokenizer_for_model(dir / "model.bin");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.bin"), std::string::npos) << e.what();
  }
  write_file_atomic(dir / "tok512.bin", tokenizer_bytes);
  EXPECT_EQ(load_tokenizer_for_model(dir / "model.bin")->vocab_size(), 512);
  // Two candidates: ambiguous, asks for --tokenizer.
  write_file_atomic(dir / "tok4096.bin", tokenizer_bytes);
  try {
    load_tokenizer_for_model(dir / "model.bin");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tokenizer"), std::string::npos) << e.what();
  }
  // tokenizer.bin wins over tok*.bin.
  write_file_atomic(dir / "tokenizer.bin", tokenizer_bytes);
  EXPECT_EQ(load_tokenizer_for_model(dir / "model.bin")->kind(), "llama2c");
}

TEST(TokSelect, EmptyDirectoryNamesTheFilesLookedFor) {
  fs::path dir = test::scratch_dir("tok_select_empty");
  try {
    load_tokenizer_for_model(dir);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    std::string message = e.what();
    for (const char* name : {"tokenizer.json", "merges.txt", "vocab.txt", "vocab.json"})
      EXPECT_NE(message.find(name), std::string::npos) << message;
  }
  EXPECT_THROW(load_tokenizer(dir / "missing.json"), Error);
}

// A llama2.c tokenizer.bin: max_token_length, then (score, len, bytes) per token.
std::string llama2c_bin(int32_t max_length, const std::vector<std::pair<float, std::string>>& tokens) {
  std::string out(reinterpret_cast<const char*>(&max_length), 4);
  for (const auto& [score, piece] : tokens) {
    int32_t length = static_cast<int32_t>(piece.size());
    out.append(reinterpret_cast<const char*>(&score), 4);
    out.append(reinterpret_cast<const char*>(&length), 4);
    out += piece;
  }
  return out;
}

std::string with_int32_at(std::string bytes, size_t offset, int32_t value) {
  std::memcpy(bytes.data() + offset, &value, 4);
  return bytes;
}

TEST(TokCorrupt, EveryBrokenFileIsAnError) {
  fs::path dir = test::scratch_dir("tok_corrupt");
  const std::string good_bin = llama2c_bin(8, {{0, "<unk>"}, {0, "\n<s>\n"}, {0, "\n</s>\n"}, {-1, " "}, {-2, "a"}});
  const Json good_bpe = {
      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
  };
  auto bpe_without = [&](auto edit) {
    Json j = good_bpe;
    edit(j);
    return j.dump();
  };
  struct Broken {
    const char* file;
    std::string contents;
    const char* why;
  };
  const std::vector<Broken> broken = {
      {"tokenizer.bin", good_bin.substr(0, good_bin.size() - 3), "truncated in the last piece"},
      {"tokenizer.bin", good_bin.substr(0, 4 + 5), "truncated in an entry header"},
      {"tokenizer.bin", "\x08\x00", "shorter than the header"},
      {"tokenizer.bin", with_int32_at(good_bin, 4 + 4, -5), "negative piece length"},
      {"tokenizer.bin", with_int32_at(good_bin, good_bin.size() - 1 - 4, 5), "length past EOF"},
      {"tokenizer.bin", with_int32_at(good_bin, 0, 1 << 30), "max_token_length beyond the file"},
      {"tokenizer.bin", with_int32_at(good_bin, 0, -1), "negative max_token_length"},
      {"tokenizer.bin", with_int32_at(good_bin, 4 + 4, 9), "length above max_token_length"},
      {"tokenizer.bin", llama2c_bin(8, {{0, "<unk>"}}), "too few tokens for BOS/EOS"},
      {"tokenizer.json", "{\"model\": {\"type\": \"BPE\", ", "invalid JSON"},
      {"tokenizer.json", "[1, 2]", "not an object"},
      {"tokenizer.json", "{\"model\": {\"type\": \"WordLevel\", \"vocab\": {}}}", "unknown model type"},
      {"tokenizer.json", bpe_without([](Json& j) { j["model"].erase("merges"); }), "missing merges"},
      {"tokenizer.json", bpe_without([](Json& j) { j["model"]["merges"] = {"a c"}; }), "merge of an unknown piece"},
      {"tokenizer.json", bpe_without([](Json& j) { j["model"]["merges"] = {"abc"}; }), "merge without a space"},
      {"tokenizer.json", bpe_without([](Json& j) { j["model"]["vocab"]["c"] = -4; }), "negative id"},
      {"tokenizer.json", bpe_without([](Json& j) { j["model"]["vocab"]["c"] = 2000000000; }), "huge id"},
      {"tokenizer.json", bpe_without([](Json& j) { j["model"]["vocab"]["c"] = 1; }), "duplicate id"},
      {"tokenizer.json", bpe_without([](Json& j) { j["model"]["vocab"]["c"] = "3"; }), "id not an integer"},
      {"tokenizer.json", bpe_without([](Json& j) { j["model"]["unk_token"] = "<unk>"; }), "unk not in vocab"},
      {"tokenizer.json", bpe_without([](Json& j) { j["normalizer"] = {{"type", "Precompiled"}}; }), "unsupported normalizer"},
      {"tokenizer.json", bpe_without([](Json& j) { j["added_tokens"] = {{{"id", -1}, {"content", "x"}}}; }), "bad added token"},
      {"tokenizer.json", "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", \"x\"]]}}", "Unigram score not a number"},
      {"tokenizer.json", "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 7, \"vocab\": [[\"a\", -1.0]]}}", "unk_id out of range"},
      {"vocab.txt", "[PAD]\n[UNK]\n[CLS]\n\xFF\xFE\n[SEP]\n", "not UTF-8"},
      {"vocab.txt", "a\nb\n", "no [UNK] / [CLS] / [SEP]"},
      {"vocab.json", "{\"ab\": 0, \"c\": 1}", "not a character vocabulary and no merges.txt"},
      {"weird.dat", "????", "unknown format"},
  };
  for (const Broken& b : broken) {
    fs::path file = dir / b.file;
    write_file_atomic(file, b.contents);
    try {
      load_tokenizer(file);
      ADD_FAILURE() << "no Error for: " << b.why;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos)
          << b.why << ": message does not name the file: " << e.what();
    }
    fs::remove(file);
  }
  // merges.txt beside a vocab.json with a malformed line.
  write_file_atomic(dir / "vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  write_file_atomic(dir / "merges.txt", "#version: 0.2\na b c\n");
  EXPECT_THROW(load_tokenizer(dir / "vocab.json"), Error);
  write_file_atomic(dir / "merges.txt", "#version: 0.2\na b\n");
  auto ok = load_tokenizer(dir / "vocab.json");
  EXPECT_EQ(ok->encode("ab"), Ids{2});
  // Text that cannot be encoded: a character neither in the vocabulary nor covered by unk / byte fallback.
  EXPECT_THROW(ok->encode("c"), Error);
}

// Every prefix of a real tokenizer.bin either loads (it ends between entries) or is an Error; what loads
// encodes text or reports the byte-fallback id it lacks.
TEST(TokCorrupt, EveryTruncationOfTokenizerBin) {
  TDYN_REQUIRE_SHARED("models/stories260K/tok512.bin");
  std::string bytes = read_file(shared_dir() / "models/stories260K/tok512.bin");
  int loaded = 0;
  for (size_t length = 0; length < bytes.size(); ++length) {
    try {
      auto tok = Llama2cTokenizer::parse(std::string_view(bytes).substr(0, length), "prefix");
      ++loaded;
      try {
        tok->encode("Once upon a time \xC3\xA9");
      } catch (const Error&) {
      }
    } catch (const Error&) {
    }
  }
  EXPECT_GT(loaded, 400);
}

// Text that is not UTF-8 is refused by every tokenizer with the byte where it stops being UTF-8; llama2.c's, which
// run.c reads as a C string, also refuses a NUL rather than cutting the text there.
TEST(TokCorrupt, EveryTokenizerRefusesTextThatIsNotUtf8) {
  TDYN_REQUIRE_SHARED("tokenizers/gpt2/encoder.json");
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  tokenizers.push_back(load_tokenizer(shared_dir() / "tokenizers/gpt2/encoder.json"));
  tokenizers.push_back(load_tokenizer(shared_dir() / "tokenizers/bert-base-uncased/vocab.txt"));
  tokenizers.push_back(load_tokenizer(shared_dir() / "models/stories260K/tok512.bin"));
  tokenizers.push_back(load_tokenizer(shared_dir() / "models/slm4096/vocab.json"));
  const std::string utf16 = std::string("\xFF\xFEO\0n\0c\0e\0", 10);
  for (const auto& tok : tokenizers) {
    SCOPED_TRACE(tok->kind());
    test::expect_error_contains([&] { tok->encode("abc\xC3("); }, "not valid UTF-8 (byte 3)");
    test::expect_error_contains([&] { tok->encode(utf16); }, "not valid UTF-8 (byte 0): it starts with a UTF-16 byte-order mark");
  }
  test::expect_error_contains([&] { tokenizers[2]->encode(std::string("O\0n\0c\0e\0", 8)); },
                              "NUL character at byte 1 (is it UTF-16?)");
  // GPT-2's byte-level BPE has a token for every byte, NUL included.
  EXPECT_EQ(tokenizers[0]->encode(std::string("a\0b", 3)).size(), 3u);
}

// Random bytes as text: each tokenizer encodes them or rejects them with an Error (invalid UTF-8).
TEST(TokCorrupt, RandomTextNeverCrashes) {
  TDYN_REQUIRE_SHARED("tokenizers/gpt2/encoder.json");
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  tokenizers.push_back(load_tokenizer(shared_dir() / "tokenizers/gpt2/encoder.json"));
  tokenizers.push_back(load_tokenizer(shared_dir() / "tokenizers/bert-base-uncased/vocab.txt"));
  tokenizers.push_back(load_tokenizer(shared_dir() / "models/stories260K/tok512.bin"));
  tokenizers.push_back(load_tokenizer(shared_dir() / "models/slm4096/vocab.json"));
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(rng() % 64, '\0');
    for (char& c : text) c = static_cast<char>(trial % 2 ? rng() % 256 : 0x20 + rng() % 0x60);
    for (const auto& tok : tokenizers) {
      try {
        std::vector<int32_t> ids = tok->encode(text);
        for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < tok->vocab_size());
        tok->decode(ids);
      } catch (const Error&) {
      }
    }
  }
}

}  // namespace
}  // namespace tdyn
