// Random initialisation of an architecture (the "step 0" null model of SPEC §3 "Training vs architecture"),
// written as a Hugging Face checkpoint (config.json + model.safetensors) that tdyn loads like any other.
// Weights follow the Hugging Face _init_weights rule: every matrix and embedding ~ N(0, initializer_range),
// biases 0, norm scales 1 (norm biases 0). The tensor list comes from the family table, so any family with
// an "hf" table can be initialised.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace tdyn {

// config.json for `config` (Llama family), in Hugging Face's keys.
nlohmann::json llama_hf_config_json(const ModelConfig& config);

// Writes DIR/config.json (`hf_config`) and DIR/model.safetensors with weights drawn with
// std = hf_config["initializer_range"] (default 0.02) from a std::mt19937_64 seeded with `seed`.
void write_random_init(const nlohmann::json& hf_config, const fs::path& dir, uint64_t seed);

}  // namespace tdyn
