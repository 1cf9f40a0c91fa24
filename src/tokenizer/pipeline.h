// The Hugging Face tokenizer pipeline, shared by every tokenizer that is not llama2.c's or a character vocabulary:
//   text -> split out added/special tokens -> normalize -> pre-tokenize into words -> subword model per word
//        -> post-process (add BOS / [CLS] .. [SEP])
// and, per token, a decoder back to bytes. A tokenizer.json describes each stage; the classic file sets
// (vocab.json + merges.txt, vocab.txt) are assembled from the same stages by their loaders.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tdyn {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using PieceIds = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Pieces by id and ids by piece, checked when built: ids non-negative, unique, and dense enough that
// vocab_size() = max id + 1 is not a huge allocation driven by one bad id.
class Vocabulary {
 public:
  Vocabulary() = default;
  Vocabulary(std::vector<std::pair<std::string, int64_t>> entries, const std::string& name_for_errors);

  std::optional<int32_t> find(std::string_view piece) const;
  const std::string* piece(int32_t id) const;  // nullptr when no piece has this id
  int64_t size() const { return static_cast<int64_t>(pieces_.size()); }

 private:
  std::vector<std::string> pieces_;
  std::vector<bool> present_;
  PieceIds ids_;
};

// A subword model: turns one pre-tokenized word into ids.
class SubwordModel {
 public:
  virtual ~SubwordModel() = default;
  virtual void tokenize(std::string_view word, std::vector<int32_t>& ids) const = 0;
  const Vocabulary& vocab() const { return vocab_; }

 protected:
  explicit SubwordModel(Vocabulary vocab) : vocab_(std::move(vocab)) {}
  Vocabulary vocab_;
};

// A token matched verbatim in the raw text before the model runs (HF added_tokens).
struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;  // also swallow the whitespace before / after the match
  bool rstrip = false;
};

using TextNormalizer = std::function<std::string(std::string_view)>;
// Splits one word further; `at_text_start` is true for the word that begins the input text.
using PreTokenizer = std::function<void(std::string_view word, bool at_text_start, std::vector<std::string>& out)>;

// How one token's piece becomes bytes while streaming.
struct TokenDecoder {
  enum class Kind {
    Plain,      // pieces separated by spaces (HF without a decoder)
    ByteLevel,  // GPT-2's byte <-> character mapping
    WordPiece,  // "##" pieces join the previous one, others get a space before them
    Metaspace,  // "▁" -> ' ', <0xXX> byte pieces -> raw bytes, the dummy-prefix space dropped at the start
  };
  Kind kind = Kind::Plain;
  std::string marker;        // WordPiece: continuation prefix; Metaspace: the space replacement
  bool byte_fallback = false;
  bool strip_leading_space = false;  // Metaspace: at the start and after a special token
};

struct PipelineParts {
  std::string kind;  // "gpt2-bpe", "wordpiece", "unigram", "sp-bpe"
  std::string name;  // the file(s), for messages
  std::unique_ptr<SubwordModel> model;
  std::vector<AddedToken> added_tokens;
  std::vector<TextNormalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  std::vector<int32_t> special_prefix, special_suffix;  // the post-processor's template around the ids
  TokenDecoder decoder;
  std::optional<int32_t> bos, eos;
};

class PipelineTokenizer final : public Tokenizer {
 public:
  explicit PipelineTokenizer(PipelineParts parts);

  std::string kind() const override { return p_.kind; }
  int64_t vocab_size() const override { return vocab_size_; }
  std::string decode_step(int32_t prev, int32_t id) const override;
  std::optional<int32_t> bos_id() const override { return p_.bos; }
  std::optional<int32_t> eos_id() const override { return p_.eos; }
  std::string piece(int32_t id) const override;

 private:
  std::vector<int32_t> encode_utf8(std::string_view text, bool add_special) const override;
  const std::string& checked_piece(int32_t id) const;
  bool is_special(int32_t id) const;
  void encode_plain(std::string_view text, bool at_text_start, std::vector<int32_t>& ids) const;

  PipelineParts p_;
  int64_t vocab_size_ = 0;
  std::unordered_map<int32_t, const AddedToken*> added_by_id_;
};

}  // namespace tdyn
