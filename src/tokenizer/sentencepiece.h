// SentencePiece `.model` files (ALBERT's spiece.model, Llama 2's / Gemma's tokenizer.model) and the `Precompiled`
// normalizer of tokenizer.json, both through the SentencePiece library (Debian libsentencepiece-dev), so that ids are
// the library's own.
//
// Format: a .model is a serialized protobuf ModelProto (sentencepiece_model.proto). The fields tdyn reads itself:
//   ModelProto      1: repeated SentencePiece {1: piece, 2: score (float), 3: type}
//                   2: TrainerSpec  {3: model_type (1 unigram, 2 bpe, 3 word, 4 char), 44: unk_surface}
//                   3: NormalizerSpec {2: precompiled_charsmap, 3: add_dummy_prefix, 4: remove_extra_whitespaces,
//                                      5: escape_whitespaces}
//                   5: denormalizer_spec (a NormalizerSpec)
// A precompiled charsmap is
//   uint32 (little-endian) trie_size | trie: trie_size / 4 Darts-clone double-array units | normalized strings, each
//   NUL-terminated, indexed by the trie's leaf values
// and maps each longest matching input prefix to its normalized string (nmt_nfkc, ...). The library trusts it: a
// corrupt trie makes it read out of bounds. So every charsmap is checked here first (units and strings in range, no
// cycle, at most 32 matches along any key) and a bad one is an Error, never handed on.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tdyn {

// What tdyn reads from a ModelProto itself (the library reads the rest).
struct SentencePieceModelInfo {
  int model_type = 1;  // TrainerSpec.ModelType: 1 unigram, 2 bpe, 3 word, 4 char
  std::string unk_surface = " \xE2\x81\x87 ";  // " ⁇ ", what an unknown piece decodes to
  std::string precompiled_charsmap;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};
// Parses the protobuf wire format of a .model; throws Error naming `name` on malformed input or a bad charsmap.
SentencePieceModelInfo read_sentencepiece_model_info(std::string_view model_proto, const std::string& name);

// Throws Error unless `charsmap` is a precompiled charsmap the library can use safely (see the top of this file).
void check_precompiled_charsmap(std::string_view charsmap, const std::string& name);

// tokenizer.json's Precompiled normalizer: the charsmap applied by the library's normalizer (longest match at each
// position; no dummy prefix, whitespace kept as it is), exactly what a .model with this charsmap does to the text.
TextNormalizer make_precompiled_normalizer(const std::string& charsmap, const std::string& name);

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // `bytes` is the content of the .model file `name`. Special tokens added by encode(): see load().
  SentencePieceTokenizer(std::string_view bytes, const std::string& name);
  ~SentencePieceTokenizer() override;

  // A .model file. encode(add_special) adds what a Hugging Face checkpoint says around it: the post-processor
  // template of a tokenizer.json beside the file (ALBERT: [CLS] .. [SEP]), else tokenizer_config.json's
  // add_bos_token (default true) / add_eos_token (default false) with the model's own BOS / EOS; with neither
  // file, BOS when the model has one (Llama 2, Gemma).
  static std::unique_ptr<SentencePieceTokenizer> load(const fs::path& path);

  // "sentencepiece-unigram", "sentencepiece-bpe", "sentencepiece-word" or "sentencepiece-char".
  std::string kind() const override;
  int64_t vocab_size() const override;
  // As the library's DecodeIds, one piece at a time: control pieces print nothing, an unknown piece the model's
  // unk surface, <0xXX> its byte, "▁" a space; the leading "▁" is dropped at the start and after a control piece.
  std::string decode_step(int32_t prev, int32_t id) const override;
  std::optional<int32_t> bos_id() const override;
  std::optional<int32_t> eos_id() const override;
  std::string piece(int32_t id) const override;

  void set_special_tokens(std::vector<int32_t> prefix, std::vector<int32_t> suffix);

 private:
  std::vector<int32_t> encode_utf8(std::string_view text, bool add_special) const override;
  void check_id(int32_t id) const;

  std::string name_;
  SentencePieceModelInfo info_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::vector<int32_t> special_prefix_, special_suffix_;
};

}  // namespace tdyn
