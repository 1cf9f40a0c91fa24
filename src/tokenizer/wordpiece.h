// BERT WordPiece: greedy longest-match-first segmentation of each word into a first piece and "##" continuation
// pieces, plus the loader for BERT's vocab.txt.
//
// vocab.txt: one piece per line, UTF-8; the id is the line number (from 0). Optional tokenizer_config.json
// beside it sets do_lower_case (default true), strip_accents (default: = do_lower_case) and
// tokenize_chinese_chars (default true).
#pragma once

#include "tokenizer/json_files.h"
#include "tokenizer/pipeline.h"

namespace tdyn {

class WordPieceModel final : public SubwordModel {
 public:
  WordPieceModel(Vocabulary vocab, const std::string& unk_token, std::string continuing_prefix,
                 int64_t max_input_chars_per_word, const std::string& name_for_errors);
  // A word longer than max_input_chars_per_word characters, or one that cannot be covered, becomes one unk.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const override;

 private:
  int32_t unk_id_;
  std::string prefix_;
  int64_t max_chars_;
};

// The BERT tokenizer from vocab.txt: BasicTokenizer (clean text, CJK split, lower-case / strip accents,
// whitespace and punctuation split) + WordPiece; encode adds [CLS] .. [SEP].
std::unique_ptr<Tokenizer> load_bert_vocab_txt(const fs::path& vocab_file);
// The same from the text of vocab.txt (`name` for errors) and its tokenizer_config.json (may be null).
std::unique_ptr<Tokenizer> bert_tokenizer_from_vocab_txt(std::string_view text, const std::string& name,
                                                         const Json* tokenizer_config, const std::string& config_name);

}  // namespace tdyn
