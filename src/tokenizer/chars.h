// Character vocabularies (minGPT / nanoGPT "stoi"): vocab.json maps each single character to its id; one token
// per character, no special tokens.
//
// vocab.json: a JSON object {"a": 28, ...} whose keys are each exactly one Unicode code point.
#pragma once

#include "tokenizer/json_files.h"
#include "tokenizer/tokenizer.h"

namespace tdyn {

class CharTokenizer final : public Tokenizer {
 public:
  // Throws Error unless every key is one code point and ids are unique.
  CharTokenizer(const Json& vocab, const std::string& name_for_errors);

  std::string kind() const override { return "chars"; }
  int64_t vocab_size() const override { return vocab_.size(); }
  std::string decode_step(int32_t prev, int32_t id) const override;
  std::string piece(int32_t id) const override;

 private:
  // Throws Error naming the character and its position when it is not in the vocabulary.
  std::vector<int32_t> encode_utf8(std::string_view text, bool add_special) const override;
  std::string name_;
  Vocabulary vocab_;
};

// True when `vocab` is a JSON object whose keys are all single code points (a character vocabulary).
bool is_char_vocab(const Json& vocab);

}  // namespace tdyn
