#include "tokenizer/gguf_tokenizer.h"

#include <cfloat>
#include <cmath>
#include <queue>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_keys.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/stages.h"
#include "tokenizer/unicode.h"
#include "tokenizer/wordpiece.h"

namespace tdyn {
namespace {

using Json = nlohmann::json;

const char* const kSpace = "\xE2\x96\x81";  // "▁"

// llama.cpp's token types (gguf-py TokenType, the same numbers as SentencePiece's piece types).
enum TokenType : int { kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// One of the arrays with an element per token (tokenizer.ggml.tokens has n; n < 0: any length).
template <typename Check>
const Json& per_token_array(const GgufKeys& keys, const std::string& key, int64_t n, const char* element, Check ok) {
  const Json& v = keys.array(key, element, ok);
  if (n >= 0 && static_cast<int64_t>(v.size()) != n)
    fail("{}: GGUF key '{}' has {} elements but tokenizer.ggml.tokens has {}; they must have one per token", keys.origin(),
         key, v.size(), n);
  return v;
}

// The arrays every tokenizer model shares: pieces (unique, indexed by id) and their types.
struct TokenTable {
  std::vector<std::string> tokens;
  std::vector<int> types;  // kNormal when the file has no token_type

  Vocabulary vocabulary(const std::string& name) const {
    std::vector<std::pair<std::string, int64_t>> entries;
    entries.reserve(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) entries.emplace_back(tokens[i], static_cast<int64_t>(i));
    return Vocabulary(std::move(entries), name);
  }
};

TokenTable read_token_table(const GgufKeys& keys) {
  TokenTable t;
  const Json& tokens = per_token_array(keys, "tokenizer.ggml.tokens", -1, "a string", [](const Json& e) { return e.is_string(); });
  if (tokens.empty()) fail("{}: GGUF key 'tokenizer.ggml.tokens' is empty", keys.origin());
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) fail("{}: GGUF tokenizer has too many tokens", keys.origin());
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string piece = tokens[i].get<std::string>();
    if (auto bad = unicode::find_invalid_utf8(piece))
      fail("{}: GGUF tokenizer.ggml.tokens[{}] is not valid UTF-8 (byte {})", keys.origin(), i, *bad);
    // llama.cpp refuses a repeated piece too: text -> id would be ambiguous.
    if (auto [it, fresh] = seen.emplace(piece, i); !fresh)
      fail("{}: GGUF tokenizer.ggml.tokens has '{}' twice (ids {} and {})", keys.origin(), piece, it->second, i);
    t.tokens.push_back(std::move(piece));
  }
  const int64_t n = static_cast<int64_t>(t.tokens.size());
  t.types.assign(t.tokens.size(), kNormal);
  if (keys.has("tokenizer.ggml.token_type")) {
    const Json& types = per_token_array(keys, "tokenizer.ggml.token_type", n, "an integer token type 0..6", [](const Json& e) {
      return e.is_number_integer() && e.get<int64_t>() >= kUndefined && e.get<int64_t>() <= kByte;
    });
    for (size_t i = 0; i < types.size(); ++i) t.types[i] = types[i].get<int>();
  }
  return t;
}

// Control, user-defined and unknown tokens are matched verbatim in the text, as llama.cpp does with parse_special.
std::vector<AddedToken> special_tokens(const TokenTable& t, bool include_unknown) {
  std::vector<AddedToken> added;
  for (size_t i = 0; i < t.tokens.size(); ++i) {
    const int type = t.types[i];
    if (t.tokens[i].empty()) continue;
    if (type == kControl || type == kUserDefined || (include_unknown && type == kUnknown))
      added.push_back({t.tokens[i], static_cast<int32_t>(i), type != kUserDefined, false, false});
  }
  return added;
}

// llama.cpp's SPM tokenizer (llm_tokenizer_spm_session): the symbols start as the word's characters; the adjacent
// pair whose concatenation is a token with the highest score is merged first (leftmost among equal scores), until
// no adjacent pair forms a token. Every merged symbol is a token; a character that is not one becomes its <0xXX>
// byte tokens, else the unknown token.
class ScoredMergeModel final : public SubwordModel {
 public:
  ScoredMergeModel(Vocabulary vocab, std::vector<float> scores, std::optional<int32_t> unk_id, const std::string& name)
      : SubwordModel(std::move(vocab)), name_(name), scores_(std::move(scores)), unk_id_(unk_id) {
    for (int b = 0; b < 256; ++b) byte_ids_[b] = vocab_.find(fmt::format("<0x{:02X}>", b)).value_or(-1);
  }

  void tokenize(std::string_view word, std::vector<int32_t>& ids) const override {
    struct Symbol {
      size_t begin, length;
      int prev, next;
    };
    std::vector<Symbol> symbols;
    for (const auto& cp : unicode::decode_utf8(word, "tokenizer input")) {
      const int index = static_cast<int>(symbols.size());
      symbols.push_back({cp.offset, cp.length, index - 1, -1});
      if (index > 0) symbols[index - 1].next = index;
    }
    struct Bigram {
      float score;
      int left, right;
      size_t length;
      bool operator<(const Bigram& o) const { return score != o.score ? score < o.score : left > o.left; }
    };
    std::priority_queue<Bigram> queue;
    auto consider = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const size_t length = symbols[left].length + symbols[right].length;
      if (auto id = vocab_.find(word.substr(symbols[left].begin, length))) queue.push({scores_[*id], left, right, length});
    };
    for (size_t i = 1; i < symbols.size(); ++i) consider(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& left = symbols[b.left];
      Symbol& right = symbols[b.right];
      // Stale: one side was merged away or grew since this pair was queued.
      if (left.length == 0 || right.length == 0 || left.length + right.length != b.length) continue;
      left.length += right.length;
      right.length = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = b.left;
      consider(left.prev, b.left);
      consider(b.left, left.next);
    }
    for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
      std::string_view text = word.substr(symbols[i].begin, symbols[i].length);
      if (auto id = vocab_.find(text)) {
        ids.push_back(*id);
        continue;
      }
      for (unsigned char byte : text) {
        if (byte_ids_[byte] >= 0) ids.push_back(byte_ids_[byte]);
        else if (unk_id_) ids.push_back(*unk_id_);
        else fail("tokenizer '{}': '{}' is not in the vocabulary, which has neither its byte tokens nor an unknown token",
                  name_, text);
      }
    }
  }

 private:
  std::string name_;
  std::vector<float> scores_;
  std::optional<int32_t> unk_id_;
  std::array<int32_t, 256> byte_ids_{};
};

void set_bos_eos(const GgufKeys& keys, int64_t n, bool add_bos_default, PipelineParts& parts) {
  parts.bos = keys.token_id("tokenizer.ggml.bos_token_id", n);
  parts.eos = keys.token_id("tokenizer.ggml.eos_token_id", n);
  keys.token_id("tokenizer.ggml.padding_token_id", n);  // checked, not used
  const bool add_bos = keys.boolean("tokenizer.ggml.add_bos_token", add_bos_default);
  const bool add_eos = keys.boolean("tokenizer.ggml.add_eos_token", false);
  if (add_bos && !parts.bos) {
    if (keys.has("tokenizer.ggml.add_bos_token"))
      fail("{}: GGUF tokenizer.ggml.add_bos_token is true but there is no tokenizer.ggml.bos_token_id", keys.origin());
  } else if (add_bos) {
    parts.special_prefix = {*parts.bos};
  }
  if (add_eos && !parts.eos)
    fail("{}: GGUF tokenizer.ggml.add_eos_token is true but there is no tokenizer.ggml.eos_token_id", keys.origin());
  if (add_eos) parts.special_suffix = {*parts.eos};
}

std::unique_ptr<Tokenizer> spm_tokenizer(const GgufKeys& keys) {
  TokenTable t = read_token_table(keys);
  const int64_t n = static_cast<int64_t>(t.tokens.size());
  // Finite and within float range: scores order the merges, and NaN has no order.
  const Json& raw_scores = per_token_array(keys, "tokenizer.ggml.scores", n, "a finite float32 number", [](const Json& e) {
    return e.is_number() && std::isfinite(e.get<double>()) && std::abs(e.get<double>()) <= FLT_MAX;
  });
  std::vector<float> scores;
  for (const Json& s : raw_scores) scores.push_back(s.get<float>());

  PipelineParts parts;
  parts.kind = "gguf-llama";
  parts.name = keys.origin();
  parts.added_tokens = special_tokens(t, true);
  // The unknown token: the key, else the token typed unknown (llama.cpp's default for SPM is id 0, <unk>).
  std::optional<int32_t> unk = keys.token_id("tokenizer.ggml.unknown_token_id", n);
  for (size_t i = 0; i < t.types.size() && !unk; ++i)
    if (t.types[i] == kUnknown) unk = static_cast<int32_t>(i);
  set_bos_eos(keys, n, true, parts);
  // llama.cpp: a space in front of every stretch of text that starts the input or follows a special token (each
  // stretch the pipeline hands over is one of those), then ' ' -> "▁"; the whole stretch is one word.
  const bool add_space_prefix = keys.boolean("tokenizer.ggml.add_space_prefix", true);
  parts.pre_tokenizers.push_back([add_space_prefix](std::string_view text, bool, std::vector<std::string>& out) {
    out.push_back(replace_all(add_space_prefix ? " " + std::string(text) : std::string(text), " ", kSpace));
  });
  parts.model = std::make_unique<ScoredMergeModel>(t.vocabulary(keys.origin()), std::move(scores), unk, keys.origin());
  parts.decoder.kind = TokenDecoder::Kind::Metaspace;
  parts.decoder.marker = kSpace;
  parts.decoder.byte_fallback = true;
  parts.decoder.strip_leading_space = add_space_prefix;
  return std::make_unique<PipelineTokenizer>(std::move(parts));
}

std::unique_ptr<Tokenizer> byte_level_bpe_tokenizer(const GgufKeys& keys) {
  TokenTable t = read_token_table(keys);
  const int64_t n = static_cast<int64_t>(t.tokens.size());
  const Json& raw_merges =
      per_token_array(keys, "tokenizer.ggml.merges", -1, "a string \"left right\"", [](const Json& e) { return e.is_string(); });
  MergeList merges;
  for (size_t i = 0; i < raw_merges.size(); ++i) {
    auto merge = split_merge(raw_merges[i].get<std::string>());
    if (!merge)
      fail("{}: GGUF tokenizer.ggml.merges[{}] is '{}', expected two pieces separated by one space", keys.origin(), i,
           raw_merges[i].get<std::string>());
    merges.push_back(std::move(*merge));
  }
  // The pre-tokenizers tdyn implements, by llama.cpp's names for them (llama-vocab.cpp maps each name to a regex).
  const std::string pre = keys.has("tokenizer.ggml.pre") ? keys.text("tokenizer.ggml.pre") : "(none)";
  PipelineParts parts;
  BpeOptions options;
  bool add_bos_default = false;
  if (pre == "gpt-2" || pre == "phi-2" || pre == "roberta-bpe") {
    parts.pre_tokenizers.push_back(make_byte_level_pre_tokenizer(false, true));
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    parts.pre_tokenizers.push_back(make_regex_split_pre_tokenizer(SplitRegex(kLlama3SplitPattern), SplitBehavior::Isolated, false));
    parts.pre_tokenizers.push_back(make_byte_level_pre_tokenizer(false, false));
    options.ignore_merges = true;  // as llama.cpp does for Llama 3
    add_bos_default = true;
  } else {
    fail("{}: GGUF tokenizer.ggml.pre '{}' is not supported (tdyn implements gpt-2, phi-2, roberta-bpe and llama-bpe); pass --tokenizer",
         keys.origin(), pre);
  }
  parts.kind = "gguf-gpt2";
  parts.name = keys.origin();
  parts.added_tokens = special_tokens(t, false);
  set_bos_eos(keys, n, add_bos_default, parts);
  parts.model = std::make_unique<BpeModel>(t.vocabulary(keys.origin()), merges, options, keys.origin());
  parts.decoder.kind = TokenDecoder::Kind::ByteLevel;
  return std::make_unique<PipelineTokenizer>(std::move(parts));
}

// llama.cpp's converter stores BERT's WordPiece vocabulary with a "phantom space": a word-initial piece "foo" as
// "▁foo", a continuation "##foo" as "foo", control tokens ("[CLS]") as they are (an unknown-typed "[UNK]" too). Undone here, the vocabulary is
// vocab.txt again and BERT's own (uncased, as llama.cpp's WPM tokenizer always is) pipeline runs on it.
std::unique_ptr<Tokenizer> wordpiece_tokenizer(const GgufKeys& keys) {
  TokenTable t = read_token_table(keys);
  const int64_t n = static_cast<int64_t>(t.tokens.size());
  std::string vocab_txt;
  for (size_t i = 0; i < t.tokens.size(); ++i) {
    const std::string& tok = t.tokens[i];
    if (tok.find('\n') != std::string::npos || tok.find('\r') != std::string::npos)
      fail("{}: GGUF tokenizer.ggml.tokens[{}] contains a line break, impossible in a WordPiece vocabulary", keys.origin(), i);
    if (t.types[i] == kControl || t.types[i] == kUnknown) vocab_txt += tok;
    else if (tok.starts_with(kSpace)) vocab_txt += tok.substr(3);
    else vocab_txt += "##" + tok;
    vocab_txt += '\n';
  }
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                          "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.padding_token_id"})
    keys.token_id(key, n);
  const Json config = {{"do_lower_case", true}};
  return bert_tokenizer_from_vocab_txt(vocab_txt, keys.origin(), &config, keys.origin());
}

std::string model_name(const Json& metadata) {
  auto it = metadata.find("tokenizer.ggml.model");
  return it != metadata.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

bool gguf_has_tokenizer(const Json& metadata) {
  if (!metadata.contains("tokenizer.ggml.model")) return false;
  const std::string model = model_name(metadata);
  return model != "no_vocab" && model != "none";
}

std::unique_ptr<Tokenizer> gguf_tokenizer(const Json& metadata, const std::string& name) {
  GgufKeys keys(metadata, name);
  if (!gguf_has_tokenizer(metadata)) fail("{}: the GGUF file carries no tokenizer (no tokenizer.ggml.model); pass --tokenizer", name);
  const std::string model = keys.text("tokenizer.ggml.model");
  if (model == "llama") return spm_tokenizer(keys);
  if (model == "gpt2") return byte_level_bpe_tokenizer(keys);
  if (model == "bert") return wordpiece_tokenizer(keys);
  fail("{}: GGUF tokenizer.ggml.model '{}' is not supported (tdyn reads llama, gpt2 and bert); pass --tokenizer", name,
       model);
}

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const fs::path& file) {
  TensorStore store;
  read_gguf(file, store);
  return gguf_tokenizer(store.metadata(), file.string());
}

}  // namespace tdyn
