// One entry point per reader, shared by the libFuzzer targets (fuzz/fuzz_*.cpp) and the regression suite
// (tests/test_fuzz_regressions.cpp). Each takes the raw bytes of a file — or of several files joined by
// kPartSeparator — runs them through the same code as loading them from disk, and then uses what was loaded
// (tensor data converted, texts encoded and decoded, a forward pass) so that a header which lies about its
// data is caught where the lie would be believed.
//
// Contract: an entry point returns, or throws tdyn::Error. Anything else — another exception, a crash, a
// sanitizer report, a hang or a huge allocation — is a bug in the reader.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/npy.h"
#include "io/gguf.h"
#include "io/hub_cache.h"
#include "io/llama2c.h"
#include "io/safetensors.h"
#include "io/torch_pickle.h"
#include "model/config.h"
#include "model/gguf_config.h"
#include "model/loader.h"
#include "model/transformer.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chars.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/json_files.h"
#include "tokenizer/llama2c_tokenizer.h"
#include "tokenizer/sentencepiece.h"
#include "tokenizer/wordpiece.h"

namespace tdyn::fuzz {

// Separates the files of a multi-file input (config + weights, vocab + merges, ...).
inline constexpr std::string_view kPartSeparator = "\n--tdyn-fuzz-part--\n";

inline std::vector<std::string_view> split_parts(std::string_view input) {
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    size_t end = input.find(kPartSeparator, pos);
    if (end == std::string_view::npos) {
      parts.push_back(input.substr(pos));
      return parts;
    }
    parts.push_back(input.substr(pos, end - pos));
    pos = end + kPartSeparator.size();
  }
}

inline std::string join_parts(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? std::string(kPartSeparator) : "") + parts[i];
  return out;
}

// Reads every tensor's data the way the model layer does.
inline void touch_tensors(const TensorStore& store) {
  for (const auto& name : store.names()) {
    const TensorInfo& t = store.get(name);
    if (is_float(t.dtype)) store.floats(name);  // quantized types included: decoded block by block
    else store.ints(name);
  }
}

inline void safetensors(std::string_view input) {
  TensorStore store;
  read_safetensors(MappedFile::from_bytes(input, "model.safetensors"), store);
  touch_tensors(store);
}

// Part 0: model.safetensors.index.json; part i >= 1: the i-th shard it names (in name order).
inline void safetensors_index(std::string_view input) {
  const auto parts = split_parts(input);
  const std::string name = "model.safetensors.index.json";
  const auto weight_map = parse_safetensors_index(parts[0], name);
  std::vector<std::string> shards;
  for (const auto& [tensor, shard] : weight_map) shards.push_back(shard);
  std::sort(shards.begin(), shards.end());
  shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
  TensorStore store;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (i + 1 >= parts.size()) fail("{}: shard '{}' is missing", name, shards[i]);
    read_safetensors(MappedFile::from_bytes(parts[i + 1], shards[i]), store);
  }
  check_safetensors_index(weight_map, store, name);
  touch_tensors(store);
}

// A pytorch_model.bin: the zip directory, the restricted unpickler, then the tensors converted.
inline void torch_checkpoint(std::string_view input) {
  TensorStore store;
  read_torch(MappedFile::from_bytes(input, "pytorch_model.bin"), store);
  touch_tensors(store);
}

inline void exercise(const Tokenizer& tok);

// The tokenizer (tokenizer.ggml.*) and the config are independent readers of the metadata: both run, and the
// tokenizer's Error, if any, is thrown after the config has had its turn.
inline void gguf(std::string_view input) {
  TensorStore store;
  read_gguf(MappedFile::from_bytes(input, "model.gguf"), store);
  touch_tensors(store);
  std::optional<Error> tokenizer_error;
  if (gguf_has_tokenizer(store.metadata())) {
    try {
      exercise(*gguf_tokenizer(store.metadata(), "model.gguf"));
    } catch (const Error& e) {
      tokenizer_error = e;
    }
  }
  gguf_config(store, "model.gguf");
  if (tokenizer_error) throw *tokenizer_error;
}

inline void llama2c(std::string_view input) {
  TensorStore store;
  read_llama2c(MappedFile::from_bytes(input, "model.bin"), store);
  touch_tensors(store);
  llama2c_config(store).validate("model.bin");
}

// As read_hf_config, which reads the text from disk.
inline void config(std::string_view input) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(input.begin(), input.end());
  } catch (const nlohmann::json::exception& e) {
    fail("config.json: invalid JSON: {}", e.what());
  }
  ModelConfig c = parse_hf_config(j, "config.json");
  for (int64_t l = 0; l < c.n_layers; ++l) rope_inv_freq(c.layer(l).rope, c.layer(l).d_head);
}

inline void npy(std::string_view input) {
  NpyArray a = parse_npy(input, "array.npy");
  a.as_double();
  if (a.descr.substr(1) != "f4" && a.descr.substr(1) != "f8") a.as_int64();
}

// Uses a loaded tokenizer on texts that reach its special cases: spaces, accents, CJK, emoji, control bytes,
// invalid UTF-8 and the special tokens of every family.
inline void exercise(const Tokenizer& tok) {
  static constexpr char kWithNul[] = "nul\0byte \x01\x7f";
  static const std::array<std::string_view, 6> texts = {
      "Hello, world!  It's 2024.\n\tnew line",
      "h\xC3\xA9llo na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 \xE2\x96\x81x",
      "<s>[CLS] a [SEP]</s><|endoftext|><unk>[MASK]",
      std::string_view(kWithNul, sizeof kWithNul - 1),
      "   leading and trailing   ",
      "",
  };
  for (std::string_view text : texts) {
    for (bool add_special : {true, false}) {
      std::vector<int32_t> ids;
      try {
        ids = tok.encode(text, add_special);
      } catch (const Error&) {
        continue;  // e.g. a character the vocabulary cannot express: an error, not a bug
      }
      tok.decode(ids);
      for (int32_t id : ids) tok.piece(id);
    }
  }
  const int64_t n = tok.vocab_size();
  for (int64_t id : {int64_t{0}, n / 2, n - 1}) {
    if (id < 0 || id >= n) continue;
    // Vocabularies may have holes (ids no piece uses); those are errors too.
    try { tok.piece(static_cast<int32_t>(id)); tok.decode_step(-1, static_cast<int32_t>(id)); } catch (const Error&) {}
  }
  tok.bos_id();
  tok.eos_id();
}

// Part 0: tokenizer.json; part 1 (optional): tokenizer_config.json.
inline void tokenizer_json(std::string_view input) {
  const auto parts = split_parts(input);
  Json root = parse_json_text(parts[0], "tokenizer.json");
  std::optional<Json> config;
  if (parts.size() > 1) config = parse_json_text(parts[1], "tokenizer_config.json");
  exercise(*tokenizer_from_json(root, "tokenizer.json", config ? &*config : nullptr));
}

inline void tokenizer_llama2c(std::string_view input) { exercise(*Llama2cTokenizer::parse(input, "tokenizer.bin")); }

// A SentencePiece .model (protobuf, its charsmaps checked before the library sees them).
inline void sentencepiece_model(std::string_view input) { exercise(SentencePieceTokenizer(input, "tokenizer.model")); }

// Part 0: vocab.txt; part 1 (optional): tokenizer_config.json.
inline void vocab_txt(std::string_view input) {
  const auto parts = split_parts(input);
  std::optional<Json> config;
  if (parts.size() > 1) config = parse_json_text(parts[1], "tokenizer_config.json");
  exercise(*bert_tokenizer_from_vocab_txt(parts[0], "vocab.txt", config ? &*config : nullptr, "tokenizer_config.json"));
}

// Part 0: vocab.json; part 1: merges.txt (missing: empty).
inline void gpt2_bpe(std::string_view input) {
  const auto parts = split_parts(input);
  Json vocab = parse_json_text(parts[0], "vocab.json");
  exercise(*gpt2_bpe_tokenizer(vocab, "vocab.json", parts.size() > 1 ? parts[1] : "", "merges.txt"));
}

// As the loader of a vocab.json without merges.txt beside it.
inline void char_vocab(std::string_view input) {
  Json vocab = parse_json_text(input, "vocab.json");
  if (!is_char_vocab(vocab)) fail("'vocab.json' is not a character vocabulary");
  exercise(CharTokenizer(vocab, "vocab.json"));
}

// End to end: a model written to a scratch directory and loaded as the CLI would, then a forward pass on two
// tokens. One part: a .gguf file (starting "GGUF") or else a llama2.c .bin. Two parts: config.json and
// model.safetensors (pytorch_model.bin when it starts like a zip archive, "PK"). Three or more: config.json, model.safetensors.index.json and shards named as HF names
// them (model-00001-of-0000N.safetensors, ...).
inline void write_scratch(const fs::path& path, std::string_view bytes) {
  // Not write_file_atomic: its fsync would dominate the time of every run.
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void model(std::string_view input) {
  const auto parts = split_parts(input);
  static const fs::path dir = fs::temp_directory_path() / fmt::format("tdyn_fuzz_model_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::path path;
  if (parts.size() == 1) {
    path = dir / (parts[0].starts_with("GGUF") ? "model.gguf" : "model.bin");
    write_scratch(path, parts[0]);
  } else {
    path = dir;
    write_scratch(dir / "config.json", parts[0]);
    if (parts.size() == 2) {
      write_scratch(dir / (parts[1].starts_with("PK") ? "pytorch_model.bin" : "model.safetensors"), parts[1]);
    } else {
      write_scratch(dir / "model.safetensors.index.json", parts[1]);
      const size_t n = parts.size() - 2;
      for (size_t i = 0; i < n; ++i)
        write_scratch(dir / fmt::format("model-{:05}-of-{:05}.safetensors", i + 1, n), parts[i + 2]);
    }
  }
  Transformer transformer(load_model(path));
  const int64_t vocab = transformer.config().d_vocab;
  const std::vector<int32_t> ids = {0, static_cast<int32_t>(std::min<int64_t>(1, vocab - 1))};
  transformer.forward(ids);
}

// True when `path`, with every symlink on the way resolved, lies inside `dir` (itself resolved).
inline bool resolves_inside(const fs::path& dir, const fs::path& path) {
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(path, ec);
  if (ec) return false;
  const fs::path relative = real.lexically_relative(fs::weakly_canonical(dir, ec));
  return !ec && !relative.empty() && *relative.begin() != "..";
}

// A Hugging Face hub cache directory built in a scratch directory from the input, then resolved as every MODEL
// argument is (`DIR@REVISION`, or the bare `DIR` meaning main), and the snapshot it names listed. Part 0: the
// revision (empty: the bare directory). Each further part is one entry of the cache: "file PATH\nCONTENT",
// "dir PATH" or "link PATH\nTARGET" (a symlink, as the cache links snapshot files to ../../blobs/HASH). Entries
// whose path or link target would leave the cache are skipped (the fuzzer is not to walk the machine's file
// system), as are entries the file system refuses; at most 64 entries are made.
inline void hub_cache(std::string_view input) {
  const auto parts = split_parts(input);
  static const fs::path root = fs::temp_directory_path() / fmt::format("tdyn_fuzz_hub_cache_{}", ::getpid());
  const fs::path cache = root / "models--org--name";
  fs::remove_all(root);
  fs::create_directories(cache);
  for (size_t i = 1; i < std::min<size_t>(parts.size(), 65); ++i) {
    const std::string_view entry = parts[i];
    const size_t space = entry.find(' '), newline = entry.find('\n');
    if (space == std::string_view::npos || (newline != std::string_view::npos && newline < space)) continue;
    const std::string_view kind = entry.substr(0, space);
    const std::string_view path_text = entry.substr(space + 1, newline == std::string_view::npos ? newline : newline - space - 1);
    const std::string_view content = newline == std::string_view::npos ? std::string_view() : entry.substr(newline + 1);
    if (path_text.empty() || path_text.find('\0') != std::string_view::npos || content.find('\0') != std::string_view::npos)
      continue;
    const fs::path path = cache / fs::path(path_text);
    std::error_code ec;
    if (fs::path(path_text).is_absolute() || !resolves_inside(cache, path.parent_path())) continue;
    fs::create_directories(path.parent_path(), ec);
    if (!resolves_inside(cache, path.parent_path())) continue;
    if (kind == "file") {
      if (resolves_inside(cache, path)) write_scratch(path, content);
    } else if (kind == "dir") {
      fs::create_directories(path, ec);
    } else if (kind == "link" && !fs::path(content).is_absolute() && resolves_inside(cache, path.parent_path() / fs::path(content))) {
      fs::create_symlink(fs::path(content), path, ec);
    }
  }
  const std::string revision(parts[0]);
  const fs::path snapshot = resolve_checkpoint(revision.empty() ? cache.string() : cache.string() + "@" + revision);
  std::error_code ec;
  size_t files = 0;
  for (auto it = fs::recursive_directory_iterator(snapshot, ec); !ec && it != fs::recursive_directory_iterator() && files < 1000;
       it.increment(ec))
    files += it->is_regular_file(ec);
}

}  // namespace tdyn::fuzz

// The body of a libFuzzer target: tdyn::Error is the expected outcome for bad input; any other exception
// escapes and libFuzzer reports it as a crash.
#define TDYN_FUZZ_TARGET(entry)                                                      \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {          \
    try {                                                                            \
      ::tdyn::fuzz::entry(std::string_view(reinterpret_cast<const char*>(data), size)); \
    } catch (const ::tdyn::Error&) {                                                 \
    }                                                                                \
    return 0;                                                                        \
  }
