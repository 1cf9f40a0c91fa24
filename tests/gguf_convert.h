// HF checkpoints converted to GGUF the way llama.cpp's convert_hf_to_gguf.py converts them (its metadata keys,
// tensor names, permutations and regroupings), with tdyn's own GGUF writer: the tests' stand-in for llama.cpp's
// converter, which needs the `gguf` Python package.
#pragma once

#include <optional>
#include <string>

#include "io/gguf_writer.h"
#include "io/tensor_store.h"
#include "test_util.h"

namespace tdyn::test {

// A GGUF file's content before writing, so that tests can break it first.
struct GgufModel {
  GgufMetadata metadata;
  std::vector<GgufTensor> tensors;
};

std::string raw_bytes(const TensorInfo& t);
inline GgufValue u32(int64_t v) { return GgufValue::uint32(static_cast<uint32_t>(v)); }

// A float32 matrix [rows, cols] stored as its transpose [cols, rows] (HF Conv1D [in, out] -> nn.Linear [out, in]).
GgufTensor transposed(const std::string& name, const TensorInfo& t);

// Llama (and Mistral, which llama.cpp writes as arch "llama") with q/k rows permuted to interleaved RoPE pairs,
// or Qwen2 / Qwen3 (arch "qwen2" / "qwen3", rows kept; Qwen3 adds its q/k norms). With `write_vocab_size` the llama.vocab_size key is written;
// with `quantize` every F32 matrix whose rows are whole blocks is stored as that type.
struct LlamaConversion {
  std::string arch = "llama";
  bool write_vocab_size = true;
  std::optional<DType> quantize = std::nullopt;
};
GgufModel convert_hf_llama(const fs::path& hf_dir, const LlamaConversion& how = {});

GgufModel convert_hf_gpt2(const fs::path& hf_dir);      // arch "gpt2"
GgufModel convert_hf_phi3(const fs::path& hf_dir);      // arch "phi3"
GgufModel convert_hf_gpt_neox(const fs::path& hf_dir);  // arch "gptneox"

// The model without metadata key `key` / with `key` set to `value`.
GgufModel without_key(GgufModel m, const std::string& key);
GgufModel with_key(GgufModel m, const std::string& key, GgufValue value);

}  // namespace tdyn::test
