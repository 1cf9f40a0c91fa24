// Hugging Face tokenizer.json (the `tokenizers` library's serialization) -> PipelineTokenizer.
//
// Format (the parts tdyn reads; anything else that changes the result is rejected with an Error naming it):
//   "added_tokens":   [{"id", "content", "special", "lstrip", "rstrip", ...}]  matched verbatim in the text first
//   "normalizer":     null | {"type": Sequence | Lowercase | NFD | NFKD | NFC | NFKC | StripAccents |
//                               Replace (String pattern, or Regex " {2,}") | Prepend | Strip | BertNormalizer |
//                               Precompiled (base64 SentencePiece charsmap, see sentencepiece.h)}
//   "pre_tokenizer":  null | {"type": Sequence | ByteLevel | Split (String pattern, or any Regex ICU compiles) |
//                               Metaspace | WhitespaceSplit | BertPreTokenizer}
//   "model":          {"type": "BPE", "vocab": {piece: id}, "merges": ["a b", ...] or [["a", "b"], ...],
//                      "unk_token", "fuse_unk", "byte_fallback", "ignore_merges"}
//                   | {"type": "WordPiece", "vocab": {piece: id}, "unk_token", "continuing_subword_prefix",
//                      "max_input_chars_per_word"}
//                   | {"type": "Unigram", "vocab": [[piece, score], ...], "unk_id", "byte_fallback"}
//   "post_processor": null | {"type": TemplateProcessing | BertProcessing | RobertaProcessing | ByteLevel | Sequence}
//   "decoder":        null | {"type": ByteLevel | WordPiece | Metaspace | Sequence of Replace / ByteFallback / Fuse /
//                               Strip / Metaspace / ByteLevel}
// A tokenizer_config.json beside it supplies bos_token / eos_token when present.
#pragma once

#include <memory>
#include <string_view>

#include "tokenizer/json_files.h"
#include "tokenizer/tokenizer.h"

namespace tdyn {

std::unique_ptr<Tokenizer> load_tokenizer_json(const fs::path& path);
// `tokenizer_config` may be null.
std::unique_ptr<Tokenizer> tokenizer_from_json(const Json& root, const std::string& name_for_errors,
                                               const Json* tokenizer_config);
// The ids the post-processor puts before and after a single sequence (ALBERT: [CLS], [SEP]); used for a
// SentencePiece .model that has a tokenizer.json beside it.
std::pair<std::vector<int32_t>, std::vector<int32_t>> tokenizer_json_special_template(const Json& root,
                                                                                      const std::string& name_for_errors);

}  // namespace tdyn
