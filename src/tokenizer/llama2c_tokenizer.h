// llama2.c tokenizer.bin, encoded and decoded exactly as karpathy/llama2.c run.c (commit 350e04fe) does.
//
// On-disk format (little-endian, no header magic, no token count: the count is whatever fills the file, run.c
// takes it from the model header instead):
//   int32 max_token_length
//   repeated until end of file:
//     float32 score   // merge priority: the highest-scoring adjacent pair is merged first
//     int32   len     // byte length of the piece, 0 <= len <= max_token_length
//     uint8   bytes[len]  // the piece; SentencePiece's "▁" already replaced by ' '
// Ids 0/1/2 are <unk>, BOS ("\n<s>\n"), EOS ("\n</s>\n"); ids 3..258 are the byte pieces "<0x00>".."<0xFF>".
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tdyn {

class Llama2cTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 1;
  static constexpr int32_t kEos = 2;
  static constexpr int32_t kFirstByteId = 3;  // byte fallback: id = byte + 3

  static std::unique_ptr<Llama2cTokenizer> load(const fs::path& path);
  static std::unique_ptr<Llama2cTokenizer> parse(std::string_view file_bytes, const std::string& name_for_errors);

  std::string kind() const override { return "llama2c"; }
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  // run.c decode() followed by safe_printf(): what run.c writes to stdout for `id` after `prev`. A BOS with
  // no predecessor prints nothing (run.c never prints the BOS that starts the prompt).
  std::string decode_step(int32_t prev, int32_t id) const override;
  std::optional<int32_t> bos_id() const override { return kBos; }
  std::optional<int32_t> eos_id() const override { return kEos; }
  std::string piece(int32_t id) const override;
  float score(int32_t id) const;

 private:
  // run.c encode(text, bos=add_special, eos=0).
  std::vector<int32_t> encode_utf8(std::string_view text, bool add_special) const override;
  Llama2cTokenizer() = default;
  const std::string& checked_piece(int32_t id) const;
  int32_t lookup(std::string_view piece) const;  // -1 when absent

  std::string name_;
  std::vector<std::string> pieces_;  // as stored (may contain NUL bytes)
  std::vector<float> scores_;
  // run.c compares pieces as C strings, so lookups use the piece up to its first NUL; the lowest id wins
  // when two pieces are equal that way.
  std::unordered_map<std::string, int32_t> id_of_;
};

}  // namespace tdyn
