// A model's configuration from GGUF metadata. gguf_config() hands general.architecture to the parser of the family
// that lists it (FamilyDefinition::gguf_architectures, model/families/); gguf_settings holds what several of
// llama.cpp's architectures write alike under their "<arch>." keys, as config_json does for config.json.
#pragma once

#include <string>

#include "io/gguf_keys.h"
#include "io/tensor_store.h"
#include "model/config.h"

namespace tdyn {

ModelConfig gguf_config(const TensorStore& store, const std::string& origin);

namespace gguf_settings {

// <arch>.vocab_size, else the rows of token_embd.weight.
int64_t vocab_size(const GgufKeys& keys, const TensorStore& store, const std::string& arch);

// The RMSNorm / SwiGLU / RoPE architectures (llama, qwen2, phi3): sizes, grouped-query heads, epsilon, RoPE base,
// vocabulary and head tying. The RoPE pair layout is the caller's.
ModelConfig llama_like(const GgufKeys& keys, const TensorStore& store, const std::string& arch);

// The LayerNorm / GELU architectures with biases everywhere (gpt2, gptneox), under `family`'s name: sizes, heads
// (no grouped-query attention), epsilon, vocabulary and head tying. The activation is the caller's.
ModelConfig gpt_like(const GgufKeys& keys, const TensorStore& store, const std::string& arch, const std::string& family);

// <arch>.rope.dimension_count (default: the whole head): RoPE over the first that many dimensions of each head, as
// rotate-half pairs (llama.cpp's NEOX rope type, which its qwen2, phi3 and gptneox use), the rest unrotated.
void rotate_half_rope(const GgufKeys& keys, const std::string& arch, ModelConfig& c);

// <arch>.rope.scaling.type other than none (e.g. Qwen2's YaRN) is refused: tdyn reads RoPE scaling from GGUF for the
// llama architecture only.
void refuse_rope_scaling(const GgufKeys& keys, const std::string& arch);

}  // namespace gguf_settings
}  // namespace tdyn
