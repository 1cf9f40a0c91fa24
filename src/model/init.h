// Random initialisation of an architecture (the "step 0" null model of SPEC §3 "Training vs architecture"),
// written as a Hugging Face checkpoint (config.json + model.safetensors) that tdyn loads like any other.
// Weights follow the Hugging Face _init_weights rule: every matrix and embedding ~ N(0, initializer_range),
// biases 0, norm scales 1 (norm biases 0). The tensor list comes from the family table, so any family with
// an "hf" table can be initialised.
#pragma once

#include <cstdint>
#include <map>
#include <utility>

#include <nlohmann/json_fwd.hpp>

#include "model/config.h"
#include "model/families.h"

namespace tdyn {

// config.json for `config` (Llama family), in Hugging Face's keys.
nlohmann::json llama_hf_config_json(const ModelConfig& config);

// The mean and standard deviation of a kind of tensor (a role and part of the family tables) over a model's layers.
struct Moments {
  double mean = 0, std = 0;
  int64_t count = 0;  // the values they summarise
};
using TensorMoments = std::map<std::pair<Role, Part>, Moments>;

// Writes DIR/config.json (`hf_config`) and DIR/model.safetensors with the family's published init: matrices and
// embeddings from N(0, hf_config["initializer_range"] (default 0.02)), GPT-2's attn.c_proj and mlp.c_proj with that
// std over √(2L), norm scales 1 and biases 0; drawn in blocks of 2^16 values, each from a std::mt19937_64 seeded
// from `seed`, the tensor and the block (the same weights on any number of threads). With `moments`,
// every tensor whose role and part it lists is drawn from N(mean, std) instead: random weights with another
// model's scales, tensor kind by tensor kind.
void write_random_init(const nlohmann::json& hf_config, const fs::path& dir, uint64_t seed, const TensorMoments* moments = nullptr);

}  // namespace tdyn
