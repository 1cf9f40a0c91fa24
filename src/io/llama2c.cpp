#include "io/llama2c.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tdyn {
namespace {

constexpr int32_t kMaxDimension = 1 << 20;  // any larger header field is corruption, not a model

}  // namespace

bool looks_like_llama2c(const fs::path& file) {
  return file.extension() == ".bin" && fs::is_regular_file(file) && fs::file_size(file) >= 28;
}

Llama2cHeader read_llama2c(const fs::path& path, TensorStore& store) {
  return read_llama2c(MappedFile::open(path), store);
}

Llama2cHeader read_llama2c(std::shared_ptr<const MappedFile> file, TensorStore& store) {
  const std::string name = file->path();
  if (file->size() < 28) fail("{}: too short for a llama2.c checkpoint ({} bytes, header needs 28)", name, file->size());
  int32_t h[7];
  std::memcpy(h, file->data(), sizeof h);
  if (static_cast<uint32_t>(h[0]) == 0x616b3432u)
    fail("{}: llama2.c export version with magic 'ak42' is not supported; export with --version 0 (legacy)", name);
  Llama2cHeader hd{h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[5] > 0};
  const char* field_names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    int64_t v = i == 5 ? std::abs(static_cast<int64_t>(h[i])) : h[i];
    if (v <= 0 || v > kMaxDimension) fail("{}: header field {} = {} is out of range (1..{})", name, field_names[i], h[i], kMaxDimension);
  }
  if (hd.dim % hd.n_heads != 0) fail("{}: dim {} is not a multiple of n_heads {}", name, hd.dim, hd.n_heads);
  if (hd.n_heads % hd.n_kv_heads != 0) fail("{}: n_heads {} is not a multiple of n_kv_heads {}", name, hd.n_heads, hd.n_kv_heads);
  const int64_t dim = hd.dim, hidden = hd.hidden_dim, L = hd.n_layers, vocab = std::abs(static_cast<int64_t>(hd.vocab_size));
  const int64_t head = dim / hd.n_heads, kv_dim = head * hd.n_kv_heads, q_dim = dim;
  if (head % 2 != 0) fail("{}: head size {} must be even for RoPE", name, head);

  struct Block { std::string role; Shape per_layer; bool layered; };
  std::vector<Block> blocks = {
      {"tok_embeddings.weight", {vocab, dim}, false},
      {"attention_norm.weight", {dim}, true},
      {"attention.wq.weight", {q_dim, dim}, true},
      {"attention.wk.weight", {kv_dim, dim}, true},
      {"attention.wv.weight", {kv_dim, dim}, true},
      {"attention.wo.weight", {dim, q_dim}, true},
      {"ffn_norm.weight", {dim}, true},
      {"feed_forward.w1.weight", {hidden, dim}, true},
      {"feed_forward.w2.weight", {dim, hidden}, true},
      {"feed_forward.w3.weight", {hidden, dim}, true},
      {"norm.weight", {dim}, false},
      {"freq_cis", {2 * hd.seq_len * head / 2}, false},
  };
  if (!hd.shared_classifier) blocks.push_back({"output.weight", {vocab, dim}, false});
  uint64_t expected = 28;
  // Each block is below 2^62 bytes (fields <= 2^20), but their sum can wrap around 2^64.
  bool overflow = false;
  for (const auto& b : blocks)
    overflow |= __builtin_add_overflow(expected, 4ull * numel(b.per_layer) * (b.layered ? L : 1), &expected);
  if (overflow)
    fail("{}: header (dim {}, hidden {}, layers {}, vocab {}) implies a file of more than 2^64 bytes", name, hd.dim,
         hd.hidden_dim, hd.n_layers, hd.vocab_size);
  if (file->size() != expected) {
    fail("{}: file is {} bytes but the header (dim {}, hidden {}, layers {}, heads {}/{}, vocab {}, seq_len {}, {} classifier) "
         "implies {} bytes{}",
         name, file->size(), hd.dim, hd.hidden_dim, hd.n_layers, hd.n_heads, hd.n_kv_heads, hd.vocab_size, hd.seq_len,
         hd.shared_classifier ? "shared" : "separate", expected, file->size() < expected ? " (truncated?)" : "");
  }
  const std::byte* p = file->data() + 28;
  for (const auto& b : blocks) {
    size_t bytes = 4ull * numel(b.per_layer);
    for (int64_t l = 0; l < (b.layered ? L : 1); ++l) {
      if (b.role != "freq_cis") {
        std::string tensor = b.layered ? fmt::format("layers.{}.{}", l, b.role) : b.role;
        store.add({tensor, DType::F32, b.per_layer, p, bytes, name});
      }
      p += bytes;
    }
  }
  store.metadata() = {{"dim", hd.dim}, {"hidden_dim", hd.hidden_dim}, {"n_layers", hd.n_layers}, {"n_heads", hd.n_heads},
                      {"n_kv_heads", hd.n_kv_heads}, {"vocab_size", hd.vocab_size}, {"seq_len", hd.seq_len}};
  store.keep_alive(std::move(file));
  store.format = "llama2c";
  return hd;
}

}  // namespace tdyn
