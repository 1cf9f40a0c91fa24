#include "tokenizer/tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chars.h"
#include "tokenizer/gguf_tokenizer.h"
#include "io/hub_cache.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/llama2c_tokenizer.h"
#include "tokenizer/sentencepiece.h"
#include "tokenizer/unicode.h"
#include "tokenizer/wordpiece.h"

namespace tdyn {

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  if (auto why = unicode::why_not_utf8_text(text, /*allow_nul=*/true))
    fail("input text is {}; the {} tokenizer reads UTF-8 only", *why, kind());
  return encode_utf8(text, add_special);
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  int32_t prev = -1;
  for (int32_t id : ids) {
    text += decode_step(prev, id);
    prev = id;
  }
  return text;
}

namespace {

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

std::unique_ptr<Tokenizer> load_gpt2_pair(const fs::path& vocab, const fs::path& merges) {
  if (!is_file(vocab) || !is_file(merges))
    fail("GPT-2 BPE tokenizer needs both '{}' and '{}'", vocab.string(), merges.string());
  return load_gpt2_bpe(vocab, merges);
}

// A vocab.json with no merges.txt beside it: a character vocabulary, or an incomplete BPE tokenizer.
std::unique_ptr<Tokenizer> load_char_vocab(const fs::path& file) {
  Json vocab = read_json_file(file);
  if (!is_char_vocab(vocab))
    fail("'{}' is not a character vocabulary (its keys are not all single characters) and there is no merges.txt "
         "beside it for a BPE tokenizer",
         file.string());
  return std::make_unique<CharTokenizer>(vocab, file.string());
}

// True when `tokenizer_json` declares an added token the SentencePiece vocabulary does not have (a fine-tune's new
// chat tokens, say): then the .model is not the whole tokenizer and tokenizer.json is.
bool adds_tokens_beyond(const fs::path& tokenizer_json, int64_t vocab_size) {
  const Json root = read_json_file(tokenizer_json);
  if (!root.is_object() || !root.contains("added_tokens") || !root["added_tokens"].is_array()) return false;
  for (const Json& t : root["added_tokens"])
    if (t.is_object() && t.contains("id") && t["id"].is_number_integer() && t["id"].get<int64_t>() >= vocab_size)
      return true;
  return false;
}

// The tokenizer of a Hugging Face style directory, in order of preference; nullptr when there is none. A
// SentencePiece .model comes first: it is what the model was trained with, and tokenizer.json is a conversion of
// it (whose post-processor still supplies the special tokens, see SentencePieceTokenizer::load).
std::unique_ptr<Tokenizer> load_from_directory(const fs::path& dir) {
  for (const char* name : {"tokenizer.model", "spiece.model"}) {
    if (!is_file(dir / name)) continue;
    auto sp = SentencePieceTokenizer::load(dir / name);
    if (is_file(dir / "tokenizer.json") && adds_tokens_beyond(dir / "tokenizer.json", sp->vocab_size())) break;
    return sp;
  }
  if (is_file(dir / "tokenizer.json")) return load_tokenizer_json(dir / "tokenizer.json");
  if (is_file(dir / "vocab.json") && is_file(dir / "merges.txt")) return load_gpt2_bpe(dir / "vocab.json", dir / "merges.txt");
  if (is_file(dir / "encoder.json") && is_file(dir / "vocab.bpe")) return load_gpt2_bpe(dir / "encoder.json", dir / "vocab.bpe");
  if (is_file(dir / "vocab.txt")) return load_bert_vocab_txt(dir / "vocab.txt");
  if (is_file(dir / "vocab.json")) return load_char_vocab(dir / "vocab.json");
  return nullptr;
}

const char* const kDirectoryCandidates =
    "tokenizer.model, spiece.model, tokenizer.json, vocab.json + merges.txt, encoder.json + vocab.bpe, vocab.txt, "
    "vocab.json (characters)";

std::unique_ptr<Tokenizer> load_beside_llama2c_model(const fs::path& model_file) {
  fs::path dir = model_file.parent_path().empty() ? fs::path(".") : model_file.parent_path();
  if (is_file(dir / "tokenizer.bin")) return Llama2cTokenizer::load(dir / "tokenizer.bin");
  std::vector<fs::path> candidates;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.starts_with("tok") && name.ends_with(".bin") &&
        !fs::equivalent(entry.path(), model_file, ec))
      candidates.push_back(entry.path());
  }
  std::sort(candidates.begin(), candidates.end());
  if (candidates.size() == 1) return Llama2cTokenizer::load(candidates[0]);
  if (candidates.empty())
    fail("no tokenizer for llama2.c model '{}': looked for tokenizer.bin and tok*.bin in '{}'; pass --tokenizer",
         model_file.string(), dir.string());
  std::string names;
  for (const auto& c : candidates) names += (names.empty() ? "" : ", ") + c.filename().string();
  fail("several tokenizers beside llama2.c model '{}' ({}); choose one with --tokenizer", model_file.string(), names);
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& file) {
  std::error_code ec;
  if (fs::is_directory(file, ec)) return load_tokenizer_for_model(file);
  if (!is_file(file)) fail("tokenizer file '{}' does not exist", file.string());
  const std::string name = file.filename().string();
  const std::string ext = file.extension().string();
  const fs::path dir = file.parent_path();

  if (is_gguf_file(file)) return load_gguf_tokenizer(file);
  if (ext == ".bin") return Llama2cTokenizer::load(file);
  if (ext == ".model") return SentencePieceTokenizer::load(file);
  if (name == "tokenizer.json") return load_tokenizer_json(file);
  if (name == "merges.txt") return load_gpt2_pair(dir / "vocab.json", file);
  if (name == "vocab.bpe") return load_gpt2_pair(dir / "encoder.json", file);
  if (name == "encoder.json") return load_gpt2_pair(file, dir / "vocab.bpe");
  if (ext == ".txt") return load_bert_vocab_txt(file);
  if (ext == ".json") {
    Json root = read_json_file(file);
    if (root.is_object() && root.contains("model")) {
      std::optional<Json> config;
      if (is_file(dir / "tokenizer_config.json")) config = read_json_file(dir / "tokenizer_config.json");
      return tokenizer_from_json(root, file.string(), config ? &*config : nullptr);
    }
    if (is_file(dir / "merges.txt")) return load_gpt2_bpe(file, dir / "merges.txt");
    return load_char_vocab(file);
  }
  fail("cannot tell the tokenizer format of '{}' (expected tokenizer.json, a SentencePiece .model, a llama2.c .bin, "
       "vocab.txt, vocab.json, encoder.json, merges.txt or vocab.bpe)",
       file.string());
}

std::unique_ptr<Tokenizer> load_tokenizer_for_model(const fs::path& model_spec) {
  const fs::path model_path = resolve_checkpoint(model_spec.string());
  std::error_code ec;
  if (fs::is_directory(model_path, ec)) {
    if (auto tok = load_from_directory(model_path)) return tok;
    fail("no tokenizer in model directory '{}': looked for {}; pass --tokenizer", model_path.string(),
         kDirectoryCandidates);
  }
  if (!is_file(model_path)) fail("model '{}' does not exist", model_path.string());
  // A GGUF file that carries its tokenizer (tokenizer.ggml.*) uses it; one without looks beside it.
  if (is_gguf_file(model_path)) {
    TensorStore store;
    read_gguf(model_path, store);
    if (gguf_has_tokenizer(store.metadata())) return gguf_tokenizer(store.metadata(), model_path.string());
  }
  fs::path dir = model_path.parent_path().empty() ? fs::path(".") : model_path.parent_path();
  // A .bin in a Hugging Face directory (pytorch_model.bin) is not a llama2.c checkpoint.
  if (model_path.extension() == ".bin" && !is_file(dir / "config.json")) return load_beside_llama2c_model(model_path);
  if (auto tok = load_from_directory(dir)) return tok;
  fail("no tokenizer for model '{}': looked for {} in '{}'; pass --tokenizer", model_path.string(), kDirectoryCandidates,
       dir.string());
}

}  // namespace tdyn
