// SentencePiece .model files and tokenizer.json's Precompiled normalizer. The models are trained here, with the
// library's own trainer, on a slice of WikiText-2 (a Unigram and a byte-fallback BPE model, small vocabularies); tdyn's
// ids must equal the library's own encoding (and Python's sentencepiece, when /usr/bin/python3 has it) on unseen
// WikiText-2 passages, and a tokenizer.json converted from the Unigram model the way Hugging Face converts ALBERT's
// (Precompiled + whitespace cleanup + Metaspace + Unigram, run by tdyn's own pipeline) must give the same ids.
// Corrupt .model files and charsmaps must give clear errors.
#include <cstring>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "core/base64.h"
#include "core/error.h"
#include "generated_fixtures.h"
#include "test_util.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/sentencepiece.h"
#include "tokenizer/tokenizer.h"

namespace tdyn {
namespace {

using Json = nlohmann::json;

fs::path wikitext() { return test::shared_dir() / "data" / "wikitext-2" / "wiki.test.raw"; }

std::vector<std::string> wikitext_lines() {
  std::ifstream in(wikitext());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Texts to compare on: WikiText-2 passages the models were not trained on (lines from 3000 on; each keeps its
// leading space and trailing newline as in the file), and strings that exercise whitespace, normalization,
// unknown characters and bytes.
std::vector<std::string> passages() {
  std::vector<std::string> lines = wikitext_lines(), out;
  for (size_t i = 3000; i < lines.size() && out.size() < 200; ++i)
    if (lines[i].size() > 1) out.push_back(lines[i] + "\n");
  for (const char* s : {"", " ", "   leading and trailing   ", "tab\tand\nnewline", "multiple    spaces  here",
                        "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３ and ﬁ ligature", "Café naïve résumé", "汉字 and 日本語のテキスト",
                        "emoji 😀🎉 done", "<unk> <s> </s> literal", "\xC2\xA0non-breaking\xE2\x80\x83spaces",
                        "a", "@-@ 1 @,@ 000 @.@ 5"})
    out.push_back(s);
  return out;
}

// The models the suite compares on: name, model type, vocabulary size and further trainer flags.
struct Training {
  const char* name;
  const char* type;
  int vocab;
  const char* extra;
};
constexpr Training kTrainings[] = {
    {"unigram", "unigram", 400, ""},
    {"bpe", "bpe", 400, " --byte_fallback=true"},
    {"word", "word", 400, ""},
    {"char", "char", 100, " --hard_vocab_limit=false"},  // as many pieces as the text has characters
    // Three custom rules (rules.tsv): a charsmap of 1 kB instead of nmt_nfkc's 240 kB, cheap enough to break in
    // hundreds of ways.
    {"rules", "unigram", 100, " --hard_vocab_limit=false --normalization_rule_tsv={dir}/rules.tsv"},
};
// Ａ -> A, ﬁ -> fi, ideographic space -> space.
constexpr const char* kRules = "FF21\t41\nFB01\t66 69\n3000\t20\n";

// A Unigram, a BPE, a word and a char model, trained once (generated_fixtures.h) on a slice of WikiText-2.
class SentencePieceModels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(wikitext())) return;
    std::vector<std::string> lines = wikitext_lines();
    std::string slice;
    for (size_t i = 0; i < lines.size() && slice.size() < 150000; ++i) slice += lines[i] + "\n";
    std::string key = slice + kRules;
    for (const Training& t : kTrainings) key += fmt::format("\n{} {} {} {}", t.name, t.type, t.vocab, t.extra);
    std::string why;
    models_ = new fs::path(test::made_once("sentencepiece_models", key, [&](const fs::path& dir, std::string*) {
      write_file_atomic(dir / "train.txt", slice);
      write_file_atomic(dir / "rules.tsv", kRules);
      for (const Training& t : kTrainings) train(dir, t);
      return true;
    }, &why));
    dir_ = new fs::path(test::scratch_dir("sentencepiece"));
  }
  static void TearDownTestSuite() {
    if (dir_) fs::remove_all(*dir_);
    delete dir_;
    delete models_;
    dir_ = models_ = nullptr;
  }
  static void train(const fs::path& dir, const Training& t) {
    std::string extra = t.extra;
    if (const size_t at = extra.find("{dir}"); at != std::string::npos) extra.replace(at, 5, dir.string());
    const std::string args = fmt::format(
        "--input={} --model_prefix={} --model_type={} --vocab_size={} --num_threads=2 --minloglevel=2{}",
        (dir / "train.txt").string(), (dir / t.name).string(), t.type, t.vocab, extra);
    const auto status = sentencepiece::SentencePieceTrainer::Train(args);
    if (!status.ok()) throw Error("training the SentencePiece model " + std::string(t.name) + ": " + status.ToString());
  }
  void SetUp() override {
    if (!dir_) GTEST_SKIP() << "shared test data not found: " << wikitext();
  }
  static fs::path model(const std::string& name) { return *models_ / (name + ".model"); }
  static std::unique_ptr<sentencepiece::SentencePieceProcessor> library(const std::string& type) {
    auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = sp->Load(model(type).string());
    EXPECT_TRUE(status.ok()) << status.ToString();
    return sp;
  }
  static std::vector<int32_t> library_ids(const sentencepiece::SentencePieceProcessor& sp, const std::string& text) {
    std::vector<int> ids;
    const auto status = sp.Encode(text, &ids);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  static inline fs::path* models_ = nullptr;  // the trained models (shared, read only)
  static inline fs::path* dir_ = nullptr;     // this process's scratch directory
};

TEST_F(SentencePieceModels, IdsEqualTheLibrarysOwnEncoding) {
  for (const std::string type : {"unigram", "bpe"}) {
    auto sp = library(type);
    auto tok = load_tokenizer(model(type));
    EXPECT_EQ(tok->kind(), "sentencepiece-" + type);
    EXPECT_EQ(tok->vocab_size(), 400);
    ASSERT_EQ(tok->bos_id(), std::optional<int32_t>(sp->bos_id()));
    ASSERT_EQ(tok->eos_id(), std::optional<int32_t>(sp->eos_id()));
    int64_t tokens = 0, unknown = 0;
    for (const std::string& text : passages()) {
      const std::vector<int32_t> expected = library_ids(*sp, text);
      ASSERT_EQ(tok->encode(text, false), expected) << type << ": '" << text << "'";
      // With special tokens: the model's BOS in front (no tokenizer files beside it), nothing after.
      std::vector<int32_t> with_bos{sp->bos_id()};
      with_bos.insert(with_bos.end(), expected.begin(), expected.end());
      ASSERT_EQ(tok->encode(text), with_bos) << type << ": '" << text << "'";
      // Decoding, piece by piece as generation streams it, gives the library's DecodeIds.
      std::string decoded;
      ASSERT_TRUE(sp->Decode(std::vector<int>(with_bos.begin(), with_bos.end()), &decoded).ok());
      EXPECT_EQ(tok->decode(with_bos), decoded) << type << ": '" << text << "'";
      for (int32_t id : expected) {
        EXPECT_EQ(tok->piece(id), sp->IdToPiece(id));
        unknown += sp->IsUnknown(id);
      }
      tokens += static_cast<int64_t>(expected.size());
    }
    EXPECT_GT(tokens, 5000) << type;
    if (type == "unigram") EXPECT_GT(unknown, 0) << "the texts should include characters outside the vocabulary";
  }
}

// Word and char models (model_type word / char): the library's own ids and decoding, as for Unigram and BPE.
TEST_F(SentencePieceModels, WordAndCharModelsEqualTheLibrary) {
  for (const std::string type : {"word", "char"}) {
    auto sp = library(type);
    auto tok = load_tokenizer(model(type));
    EXPECT_EQ(tok->kind(), "sentencepiece-" + type);
    EXPECT_EQ(tok->vocab_size(), sp->GetPieceSize());
    int64_t tokens = 0;
    for (const std::string& text : passages()) {
      const std::vector<int32_t> expected = library_ids(*sp, text);
      ASSERT_EQ(tok->encode(text, false), expected) << type << ": '" << text << "'";
      std::string decoded;
      ASSERT_TRUE(sp->Decode(std::vector<int>(expected.begin(), expected.end()), &decoded).ok());
      EXPECT_EQ(tok->decode(expected), decoded) << type << ": '" << text << "'";
      tokens += static_cast<int64_t>(expected.size());
    }
    EXPECT_GT(tokens, 5000) << type;
  }
}

// Python's sentencepiece (Debian python3-sentencepiece, the same library behind another binding): the same ids.
TEST_F(SentencePieceModels, IdsEqualPythonSentencePiece) {
  if (std::system("/usr/bin/python3 -c 'import sentencepiece' 2>/dev/null") != 0)
    GTEST_SKIP() << "/usr/bin/python3 has no sentencepiece module (apt-get install python3-sentencepiece)";
  Json texts = passages();
  write_file_atomic(*dir_ / "texts.json", texts.dump());
  for (const std::string type : {"unigram", "bpe"}) {
    const fs::path out = *dir_ / (type + "_python_ids.json");
    const std::string script = fmt::format(
        "import json, sentencepiece as spm; sp = spm.SentencePieceProcessor(model_file='{}'); "
        "json.dump([sp.encode(t) for t in json.load(open('{}'))], open('{}', 'w'))",
        model(type).string(), (*dir_ / "texts.json").string(), out.string());
    ASSERT_EQ(std::system(("/usr/bin/python3 -c " + test::shell_quote(script)).c_str()), 0);
    const Json python = Json::parse(read_file(out));
    auto tok = load_tokenizer(model(type));
    ASSERT_EQ(python.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i)
      ASSERT_EQ(tok->encode(texts[i].get<std::string>(), false), python[i].get<std::vector<int32_t>>())
          << type << ": '" << texts[i].get<std::string>() << "'";
  }
}

// In a model directory the .model is found, and the special tokens follow the files beside it.
TEST_F(SentencePieceModels, FoundInModelDirectoriesWithTheirSpecialTokens) {
  auto sp = library("unigram");
  const std::string text = "The game began development in 2010.";
  const std::vector<int32_t> ids = library_ids(*sp, text);
  auto around = [&](std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
    prefix.insert(prefix.end(), ids.begin(), ids.end());
    prefix.insert(prefix.end(), suffix.begin(), suffix.end());
    return prefix;
  };
  // Llama 2 layout: tokenizer.model alone -> BOS.
  fs::path llama = *dir_ / "llama";
  fs::create_directories(llama);
  fs::copy_file(model("unigram"), llama / "tokenizer.model");
  EXPECT_EQ(load_tokenizer_for_model(llama)->encode(text), around({sp->bos_id()}, {}));
  // The same through `tdyn tokenize`.
  std::string out, err;
  ASSERT_EQ(test::run_cli("tokenize " + llama.string() + " --text " + test::shell_quote(text), &out, &err), 0) << err;
  std::string expected_line;
  for (int32_t id : around({sp->bos_id()}, {})) expected_line += (expected_line.empty() ? "" : " ") + std::to_string(id);
  EXPECT_EQ(out, expected_line + "\n");
  // tokenizer_config.json asking for EOS too and no BOS.
  write_file_atomic(llama / "tokenizer_config.json", R"({"add_bos_token": false, "add_eos_token": true})");
  EXPECT_EQ(load_tokenizer_for_model(llama)->encode(text), around({}, {sp->eos_id()}));
  // ALBERT layout: spiece.model with a tokenizer.json whose template is [CLS] $A [SEP] (here ids 1 and 2).
  fs::path albert = *dir_ / "albert";
  fs::create_directories(albert);
  fs::copy_file(model("unigram"), albert / "spiece.model");
  Json vocab = Json::array({Json::array({"<unk>", 0.0}), Json::array({"[CLS]", 0.0}), Json::array({"[SEP]", 0.0})});
  Json tj = {{"model", {{"type", "Unigram"}, {"vocab", vocab}}},
             {"post_processor",
              {{"type", "TemplateProcessing"},
               {"single", Json::array({{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}},
                                       {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                       {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}})},
               {"special_tokens", {{"[CLS]", {{"id", "[CLS]"}, {"ids", {1}}}}, {"[SEP]", {{"id", "[SEP]"}, {"ids", {2}}}}}}}}};
  write_file_atomic(albert / "tokenizer.json", tj.dump());
  auto albert_tok = load_tokenizer_for_model(albert);
  EXPECT_EQ(albert_tok->kind(), "sentencepiece-unigram");
  EXPECT_EQ(albert_tok->encode(text), around({1}, {2}));
  // A tokenizer.json that adds a token beyond the .model's vocabulary is the whole tokenizer: it wins.
  tj["added_tokens"] = Json::array({{{"id", 400}, {"content", "<extra>"}, {"special", true}}});
  write_file_atomic(albert / "tokenizer.json", tj.dump());
  EXPECT_EQ(load_tokenizer_for_model(albert)->kind(), "unigram");
}

// --- Precompiled normalizer ---

TEST(Base64, Rfc4648VectorsAndMalformedInput) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},  {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(encode_base64(plain), encoded);
    EXPECT_EQ(decode_base64(encoded), std::optional<std::string>(plain));
  }
  const std::string all_bytes = [] {
    std::string s;
    for (int b = 0; b < 256; ++b) s += static_cast<char>(b);
    return s;
  }();
  EXPECT_EQ(decode_base64(encode_base64(all_bytes)), std::optional<std::string>(all_bytes));
  for (const char* bad : {"Zg=", "Zg=a", "Z===", "Zm9v!A==", "Zg==Zg==", "Zm 9"}) EXPECT_FALSE(decode_base64(bad)) << bad;
}

// The tokenizer.json Hugging Face's converter makes of a Unigram .model (transformers' SpmConverter / AlbertConverter
// without ALBERT's own quote and lower-case steps): the Precompiled charsmap, then SentencePiece's
// remove_extra_whitespaces (strip, collapse runs of spaces), Metaspace with the dummy prefix, and the Unigram pieces
// and scores. Control and unknown pieces are not added tokens here: SentencePiece never matches them in the text.
Json converted_tokenizer_json(const fs::path& model_file) {
  sentencepiece::SentencePieceProcessor sp;
  EXPECT_TRUE(sp.Load(model_file.string()).ok());
  const SentencePieceModelInfo info = read_sentencepiece_model_info(read_file(model_file), model_file.string());
  EXPECT_FALSE(info.precompiled_charsmap.empty());
  Json vocab = Json::array();
  for (int id = 0; id < sp.GetPieceSize(); ++id) vocab.push_back(Json::array({sp.IdToPiece(id), sp.GetScore(id)}));
  return {{"normalizer",
           {{"type", "Sequence"},
            {"normalizers", Json::array({{{"type", "Precompiled"}, {"precompiled_charsmap", encode_base64(info.precompiled_charsmap)}},
                                         {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                                         {{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}}})}}},
          {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}, {"split", true}}},
          {"model", {{"type", "Unigram"}, {"unk_id", sp.unk_id()}, {"vocab", vocab}}},
          {"decoder", {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}}}};
}

TEST_F(SentencePieceModels, PrecompiledNormalizerGivesTheModelsIds) {
  auto sp = library("unigram");
  const Json tj = converted_tokenizer_json(model("unigram"));
  write_file_atomic(*dir_ / "converted.json", tj.dump());
  auto tok = load_tokenizer(*dir_ / "converted.json");
  EXPECT_EQ(tok->kind(), "unigram");
  int compared = 0;
  for (std::string text : passages()) {
    // The control pieces' text (WikiText-2's "<unk>" placeholder, "<s>", "</s>"): a Hugging Face tokenizer.json lists
    // them as special added tokens and matches them in the text, and its Unigram model would match them as pieces,
    // which SentencePiece never does; that difference is not the normalizer's, so they lose their brackets here.
    for (const std::string control : {"<unk>", "<s>", "</s>"})
      for (size_t at; (at = text.find(control)) != std::string::npos;)
        text.replace(at, control.size(), control.substr(1, control.size() - 2));
    ASSERT_EQ(tok->encode(text, false), library_ids(*sp, text)) << "'" << text << "'";
    ++compared;
  }
  EXPECT_GT(compared, 200);
}

TEST_F(SentencePieceModels, PrecompiledNormalizerAppliesNfkc) {
  const std::string charsmap = read_sentencepiece_model_info(read_file(model("bpe")), "bpe").precompiled_charsmap;
  TextNormalizer normalize = make_precompiled_normalizer(charsmap, "nmt_nfkc");
  // NFKC: full-width forms and the fi ligature fold; nmt_nfkc keeps spaces as they are here (no dummy prefix, no
  // whitespace cleanup: those are separate steps of a tokenizer.json).
  EXPECT_EQ(normalize("ＡＢＣ１２３ ﬁne  x "), "ABC123 fine  x ");
  EXPECT_EQ(normalize("plain ascii"), "plain ascii");
  EXPECT_EQ(normalize(""), "");
  EXPECT_EQ(normalize("Café"), "Café");  // NFC form kept (NFKC composes)
  EXPECT_EQ(normalize("Cafe\xCC\x81"), "Café");
}

// --- corrupt inputs ---

void expect_error(const std::function<void()>& f, const std::string& phrase, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << what << ": " << e.what();
  }
}

TEST_F(SentencePieceModels, CorruptModelFilesGiveClearErrors) {
  const std::string good = read_file(model("unigram"));
  auto load_bytes = [&](const std::string& name, const std::string& bytes) {
    write_file_atomic(*dir_ / name, bytes);
    return load_tokenizer(*dir_ / name);
  };
  expect_error([&] { load_bytes("empty.model", ""); }, "no pieces", "empty file");
  expect_error([&] { load_bytes("json.model", R"({"model": {}})"); }, "SentencePiece model", "JSON named .model");
  // Truncated anywhere: an error (never a crash); most cuts break the wire format itself.
  int wire_errors = 0;
  for (size_t cut : {size_t{1}, size_t{2}, size_t{3}, size_t{10}, good.size() / 3, good.size() / 2, good.size() - 1}) {
    try {
      load_bytes("cut.model", good.substr(0, cut));
      ADD_FAILURE() << "cut at " << cut << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cut.model"), std::string::npos) << e.what();
      wire_errors += std::string(e.what()).find("truncated") != std::string::npos ||
                     std::string(e.what()).find("claims") != std::string::npos;
    }
  }
  EXPECT_GE(wire_errors, 4);
  // A piece field with the wrong wire type; a model type that does not exist; an unknown wire type.
  expect_error([&] { load_bytes("type.model", std::string("\x08\x01", 2) + good); }, "should be a string", "varint piece");
  expect_error([&] { load_bytes("kind.model", good + std::string("\x12\x02\x18\x09", 4)); }, "model_type 9", "model type");
  expect_error([&] { load_bytes("wire.model", good + std::string("\x1B", 1)); }, "wire type 3", "group");
}

// Breaks a valid charsmap in one way per case, then at random.
TEST_F(SentencePieceModels, CorruptCharsmapsAreRefusedBeforeTheLibrarySeesThem) {
  const std::string nfkc = read_sentencepiece_model_info(read_file(model("unigram")), "unigram").precompiled_charsmap;
  const std::string rules = read_sentencepiece_model_info(read_file(model("rules")), "rules").precompiled_charsmap;
  ASSERT_GT(nfkc.size(), 100000u);
  ASSERT_GT(rules.size(), 1024u);
  ASSERT_LT(rules.size(), 4096u);
  EXPECT_EQ(make_precompiled_normalizer(rules, "rules")("\xEF\xBC\xA1 \xEF\xAC\x81\xE3\x80\x80x"), "A fi x");
  for (const std::string& good : {nfkc, rules}) {
    check_precompiled_charsmap(good, "good");
    uint32_t trie_bytes = 0;
    std::memcpy(&trie_bytes, good.data(), 4);
    auto with_size = [&](uint32_t size) { return std::string(reinterpret_cast<const char*>(&size), 4) + good.substr(4); };
    auto with_unit = [&](size_t index, uint32_t value) {
      std::string s = good;
      std::memcpy(s.data() + 4 + 4 * index, &value, 4);
      return s;
    };
    expect_error([&] { check_precompiled_charsmap("ab", "c"); }, "too short", "short");
    expect_error([&] { check_precompiled_charsmap(with_size(static_cast<uint32_t>(good.size())), "c"); }, "that fits", "size");
    expect_error([&] { check_precompiled_charsmap(with_size(6), "c"); }, "multiple of 4", "odd size");
    expect_error([&] { check_precompiled_charsmap(good.substr(0, good.size() - 1) + "x", "c"); }, "NUL", "no NUL");
    expect_error([&] { check_precompiled_charsmap(good.substr(0, 4 + trie_bytes), "c"); }, "NUL", "no strings");
    // The root's offset pointing far past the units.
    expect_error([&] { check_precompiled_charsmap(with_unit(0, 0xFFFFFC00u), "c"); }, "points past", "root offset");
    // Random units overwritten: each result is either accepted or refused, never a crash, and an accepted charsmap
    // normalizes text without error. (Hundreds of cases on the small map; a few on the large one, whose 60k units
    // take longer to check.)
    const int trials = good.size() < 4096 ? 400 : 15;
    uint64_t state = 12345;
    int refused = 0;
    for (int trial = 0; trial < trials; ++trial) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const size_t index = (state >> 33) % (trie_bytes / 4);
      const uint32_t value = static_cast<uint32_t>(state >> 7);
      try {
        TextNormalizer n = make_precompiled_normalizer(with_unit(index, value), "c");
        n("\xEF\xBC\xA6ullwidth text with \xEF\xAC\x81 and \xE6\xB1\x89\xE5\xAD\x97\xE3\x80\x80");
      } catch (const Error&) {
        ++refused;
      }
    }
    EXPECT_GT(refused, 0);
  }
  // In a tokenizer.json: not base64, and base64 of a broken charsmap.
  auto json_with = [&](const Json& normalizer) {
    Json tj = {{"normalizer", normalizer}, {"model", {{"type", "Unigram"}, {"vocab", Json::array({Json::array({"a", 0.0})})}}}};
    return tokenizer_from_json(tj, "t.json", nullptr);
  };
  expect_error([&] { json_with({{"type", "Precompiled"}, {"precompiled_charsmap", "not base64!"}}); }, "not valid base64", "b64");
  expect_error([&] { json_with({{"type", "Precompiled"}, {"precompiled_charsmap", "YWJj"}}); }, "too short", "short map");
  expect_error([&] { json_with({{"type", "Precompiled"}, {"precompiled_charsmap", 5}}); }, "base64 string", "number");
  expect_error([&] { json_with({{"type", "Precompiled"}}); }, "'precompiled_charsmap' is missing", "missing");
}

}  // namespace
}  // namespace tdyn
