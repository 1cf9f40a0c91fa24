// Byte-pair encoding by merge rank, the model of GPT-2 / Llama 3 (byte-level) and of SentencePiece-style BPE
// (Llama 2, Gemma: "▁" for spaces, <0xXX> byte fallback), plus the loader for GPT-2's classic file pair.
//
// Classic GPT-2 files:
//   vocab.json / encoder.json: a JSON object {piece: id}; pieces are byte-level strings (see pretokenize.h)
//   merges.txt / vocab.bpe:    an optional "#version: ..." first line, then one merge per line, "left right",
//                              highest priority first (rank = line order)
#pragma once

#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/pipeline.h"

namespace tdyn {

using MergeList = std::vector<std::pair<std::string, std::string>>;

struct BpeOptions {
  std::optional<std::string> unk_token;  // stands for a character that is not in the vocabulary
  bool fuse_unk = false;                 // consecutive unknown characters give one unk
  bool byte_fallback = false;            // unknown characters become their <0xXX> byte pieces
  bool ignore_merges = false;            // a word that is itself a piece is emitted whole (Llama 3)
};

class BpeModel final : public SubwordModel {
 public:
  BpeModel(Vocabulary vocab, const MergeList& merges, BpeOptions options, const std::string& name_for_errors);
  // The word's characters (code points) are the initial symbols; the adjacent pair with the lowest merge rank
  // is merged first (leftmost among equal ranks) until no pair has a merge.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const override;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  std::string name_;
  BpeOptions options_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  std::array<int32_t, 256> byte_piece_ids_{};  // id of "<0xXX>", or -1
};

// "left right" -> the two pieces; nothing when the line is not two non-empty pieces separated by one space.
std::optional<std::pair<std::string, std::string>> split_merge(std::string_view line);
// merges.txt: "left right" lines; the first line is skipped when it starts with "#version".
MergeList parse_merges_text(std::string_view text, const std::string& name_for_errors);

// GPT-2 from vocab.json + merges.txt (or encoder.json + vocab.bpe): byte-level pre-tokenizer with GPT-2's split
// regex, no special tokens added by encode; "<|endoftext|>" (when in the vocabulary) is matched in the text
// and is both BOS and EOS, as in GPT-2's config.
std::unique_ptr<Tokenizer> load_gpt2_bpe(const fs::path& vocab_file, const fs::path& merges_file);
// The same from the parsed vocab.json and the text of merges.txt (names for errors).
std::unique_ptr<Tokenizer> gpt2_bpe_tokenizer(const nlohmann::json& vocab_json, const std::string& vocab_name,
                                              std::string_view merges_text, const std::string& merges_name);

}  // namespace tdyn
