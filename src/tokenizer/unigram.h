// SentencePiece Unigram (ALBERT, T5, XLNet): each word is segmented into the sequence of pieces with the highest
// total log-probability score (Viterbi over all segmentations).
#pragma once

#include <array>
#include <optional>

#include "tokenizer/pipeline.h"

namespace tdyn {

class UnigramModel final : public SubwordModel {
 public:
  // `scores[i]` is the log-probability of piece i; `unk_id` stands for characters no piece covers.
  UnigramModel(Vocabulary vocab, std::vector<double> scores, std::optional<int32_t> unk_id, bool byte_fallback,
               const std::string& name_for_errors);
  // A character that no piece covers costs (lowest score - 10), as in SentencePiece; consecutive unknown
  // characters give one unk (or, with byte_fallback, their <0xXX> pieces). Among equal-score segmentations the
  // first one found (scanning left to right, shorter pieces first) is kept.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const override;

 private:
  std::string name_;
  std::vector<double> scores_;
  std::optional<int32_t> unk_id_;
  bool byte_fallback_;
  double unk_score_ = 0;
  size_t max_piece_bytes_ = 0;
  std::array<int32_t, 256> byte_piece_ids_{};
};

}  // namespace tdyn
