// llama2.c legacy checkpoints (run.c "version 0" .bin, as written by export.py --version 0 / legacy_export).
//
// Layout (all little-endian, no padding):
//   int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len   (28 bytes)
//   float32 token_embedding [vocab, dim]
//   float32 rms_att  [n_layers, dim]
//   float32 wq [n_layers, n_heads*head, dim]   wk, wv [n_layers, n_kv_heads*head, dim]
//   float32 wo [n_layers, dim, n_heads*head]
//   float32 rms_ffn  [n_layers, dim]
//   float32 w1 [n_layers, hidden, dim]  w2 [n_layers, dim, hidden]  w3 [n_layers, hidden, dim]
//   float32 rms_final [dim]
//   float32 freq_cis_real, freq_cis_imag [seq_len, head/2] each (unused: RoPE is recomputed)
//   float32 wcls [vocab, dim]   only when vocab_size < 0 (the sign flags an unshared classifier)
// Matrices are nn.Linear [out, in]. q/k use llama2.c's interleaved RoPE pairs (2i, 2i+1).
// The reader checks every header field and that the file size is exactly what the header implies, then
// exposes each layer slice as a tensor named like Meta's checkpoints (layers.{l}.attention.wq.weight, ...).
#pragma once

#include <cstdint>

#include "io/tensor_store.h"

namespace tdyn {

struct Llama2cHeader {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  bool shared_classifier;  // vocab_size > 0 in the file
};

// Reads the checkpoint into `store` (format "llama2c"); header fields also go into store.metadata().
Llama2cHeader read_llama2c(const fs::path& file, TensorStore& store);
Llama2cHeader read_llama2c(std::shared_ptr<const MappedFile> file, TensorStore& store);  // errors name file->path()

// True when the first bytes look like a llama2.c legacy header (used to pick the reader).
bool looks_like_llama2c(const fs::path& file);

}  // namespace tdyn
