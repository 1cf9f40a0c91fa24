// The tokenizer a GGUF file carries in its metadata, built the way llama.cpp (src/llama-vocab.cpp) builds it.
//
// Keys (llama.cpp's gguf-py constants; ids index tokenizer.ggml.tokens):
//   tokenizer.ggml.model         string: "llama" (SentencePiece-style BPE), "gpt2" (byte-level BPE) or "bert"
//                                (WordPiece); "no_vocab" / "none" mean the file has no tokenizer
//   tokenizer.ggml.tokens        array of strings, the piece of each id (unique)
//   tokenizer.ggml.scores        array of numbers, one per token ("llama": merge priority, higher first)
//   tokenizer.ggml.token_type    array of integers, one per token: 0 undefined, 1 normal, 2 unknown, 3 control,
//                                4 user-defined, 5 unused, 6 byte (<0xXX>)
//   tokenizer.ggml.merges        array of strings "left right", highest priority first ("gpt2")
//   tokenizer.ggml.pre           string, the pre-tokenizer of "gpt2" models: "gpt-2" (also "phi-2", "roberta-bpe":
//                                GPT-2's split regex) or "llama-bpe" ("llama3", "llama-v3": Llama 3's)
//   tokenizer.ggml.{bos,eos,unknown,padding,seperator}_token_id   integers < the token count ("llama": without
//                                unknown_token_id, the token typed unknown stands for characters without byte tokens)
//   tokenizer.ggml.add_bos_token / add_eos_token / add_space_prefix   bools
//
// What encode() does, as llama.cpp's llama_tokenize with parse_special:
//   - control, user-defined and unknown tokens ("<s>", "<|endoftext|>") are matched verbatim in the text first;
//   - "llama": each stretch of text between them gets a leading space (add_space_prefix, default true), every ' '
//     becomes "▁", and adjacent symbols (starting from the characters) are merged while their concatenation is a
//     token, the highest-scoring merge first (leftmost among equal scores); a leftover character that is no token
//     becomes its <0xXX> byte tokens (or the unknown token). No other normalization: unlike the SentencePiece
//     library, runs of spaces are kept.
//   - "gpt2": split with the pre-tokenizer's regex, bytes mapped to GPT-2's printable characters, merges by rank;
//   - "bert": tokens without the "▁" word-start mark are continuation pieces (control tokens excepted); BERT's
//     uncased basic tokenizer, then WordPiece;
//   - add_bos_token (default: true for "llama" and "bert", false for "gpt2") puts BOS in front, add_eos_token
//     (default false) EOS at the end; "bert" adds [CLS] .. [SEP].
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/tokenizer.h"

namespace tdyn {

// True when the metadata names a tokenizer model (other than "no_vocab" / "none").
bool gguf_has_tokenizer(const nlohmann::json& metadata);
// The tokenizer described by GGUF metadata (as read_gguf stores it); `name` (the file) for errors. Throws Error
// when there is none, or when its arrays disagree (lengths, element types, merges of unknown tokens, special ids
// out of range).
std::unique_ptr<Tokenizer> gguf_tokenizer(const nlohmann::json& metadata, const std::string& name);
// The tokenizer inside a .gguf file.
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const fs::path& file);

}  // namespace tdyn
