// Text <-> token ids for every tokenizer a supported checkpoint ships: llama2.c tokenizer.bin, GPT-2 byte-level
// BPE, BERT WordPiece, SentencePiece .model files, SentencePiece-style Unigram / BPE (tokenizer.json) and character
// vocabularies. See
// docs/tokenizers.md for what is covered and how a model's tokenizer is found.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/files.h"

namespace tdyn {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "llama2c", "gpt2-bpe", "wordpiece", "unigram", "sp-bpe", "chars", "sentencepiece-{unigram,bpe,word,char}" or
  // "gguf-{llama,gpt2}".
  virtual std::string kind() const = 0;
  virtual int64_t vocab_size() const = 0;

  // Ids for `text`; with add_special, the model's special tokens are added (llama2.c: BOS; BERT: [CLS] .. [SEP];
  // tokenizer.json: its post-processor; GPT-2 and character vocabularies: none). Every tokenizer reads UTF-8:
  // other text is refused with an Error naming the first invalid byte.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true) const;

  // The bytes to print when `id` follows `prev` (-1 at the start) while streaming generated tokens. For
  // llama2c this is exactly what run.c prints. Throws Error for an id outside the vocabulary.
  virtual std::string decode_step(int32_t prev, int32_t id) const = 0;
  // decode_step over the sequence, the first with prev = -1.
  std::string decode(std::span<const int32_t> ids) const;

  virtual std::optional<int32_t> bos_id() const { return std::nullopt; }
  virtual std::optional<int32_t> eos_id() const { return std::nullopt; }

  // The raw vocabulary string of `id`, for reports. Throws Error for an id outside the vocabulary.
  virtual std::string piece(int32_t id) const = 0;

 private:
  // encode() after the text was checked to be valid UTF-8.
  virtual std::vector<int32_t> encode_utf8(std::string_view text, bool add_special) const = 0;
};

// A tokenizer file named explicitly (--tokenizer): tokenizer.json, a SentencePiece *.model, tokenizer.bin /
// tok*.bin, vocab.txt, vocab.json (+ merges.txt beside it, or a character vocabulary), encoder.json (+ vocab.bpe),
// merges.txt / vocab.bpe (+ the vocabulary beside it), or a .gguf file's own tokenizer (tokenizer/gguf_tokenizer.h).
std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& file);

// The tokenizer that belongs to a model: for a GGUF file, the tokenizer in its metadata when it has one; for a
// Hugging Face directory (or a file in one) tokenizer.model or
// spiece.model (unless tokenizer.json adds tokens the .model lacks), else tokenizer.json, else
// vocab.json + merges.txt, else encoder.json + vocab.bpe, else vocab.txt, else a character vocab.json; for a
// llama2.c .bin checkpoint, tokenizer.bin beside it, else the single tok*.bin there. A hub cache spec (DIR@REVISION)
// is resolved to its snapshot first, as load_model does.
std::unique_ptr<Tokenizer> load_tokenizer_for_model(const fs::path& model_spec);

}  // namespace tdyn
