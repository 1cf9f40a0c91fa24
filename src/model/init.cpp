#include "model/init.h"

#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/families.h"

namespace tdyn {

nlohmann::json llama_hf_config_json(const ModelConfig& c) {
  TDYN_CHECK(c.family == "llama");
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                      {"model_type", "llama"},
                      {"vocab_size", c.d_vocab},
                      {"hidden_size", c.d_model},
                      {"intermediate_size", c.d_mlp},
                      {"num_hidden_layers", c.n_layers},
                      {"num_attention_heads", c.n_heads},
                      {"num_key_value_heads", c.n_kv_heads},
                      {"head_dim", c.d_head},
                      {"hidden_act", "silu"},
                      {"max_position_embeddings", c.n_ctx},
                      {"rms_norm_eps", c.norm_eps},
                      {"rope_theta", c.rope.theta},
                      {"rope_scaling", nullptr},
                      {"attention_bias", c.attn_qkv_bias},
                      {"mlp_bias", c.mlp_bias},
                      {"tie_word_embeddings", c.tied_embeddings},
                      {"initializer_range", 0.02},
                      {"torch_dtype", "float32"}};
  if (c.bos_id) j["bos_token_id"] = *c.bos_id;
  if (c.eos_id) j["eos_token_id"] = *c.eos_id;
  if (c.rope.scaling != "default") {
    j["rope_scaling"] = {{"rope_type", c.rope.scaling}, {"factor", c.rope.factor}};
    if (c.rope.scaling == "llama3") {
      j["rope_scaling"]["low_freq_factor"] = c.rope.low_freq_factor;
      j["rope_scaling"]["high_freq_factor"] = c.rope.high_freq_factor;
      j["rope_scaling"]["original_max_position_embeddings"] = c.rope.original_max_position;
    }
  }
  return j;
}

namespace {

// The standard deviation of a matrix relative to initializer_range, by each family's published init. GPT-2's
// (GPT2PreTrainedModel._init_weights, after the GPT-2 paper) scales the two projections that write into the
// residual stream, attn.c_proj and mlp.c_proj, by 1/√(2L) so that the stream's variance does not grow with depth;
// the other families draw every matrix and embedding from N(0, initializer_range).
double init_scale(const ModelConfig& c, const std::string& tensor) {
  if (c.family == "gpt2" && tensor.ends_with("c_proj.weight")) return 1 / std::sqrt(2.0 * static_cast<double>(c.n_layers));
  return 1;
}

}  // namespace

void write_random_init(const nlohmann::json& hf_config, const fs::path& dir, uint64_t seed, const TensorMoments* moments) {
  ModelConfig reparsed = parse_hf_config(hf_config, "generated config.json");
  const double initializer_range = hf_config.value("initializer_range", 0.02);
  const FamilyTable& table = family_table(reparsed.family, "hf");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, static_cast<float>(initializer_range));
  std::normal_distribution<double> unit;
  std::map<std::string, TensorToWrite> tensors;
  for (const auto& spec : table.tensors) {
    // Ignored tensors are not written; a fused tensor (GPT-2 c_attn) is written once, by its first slice.
    if (spec.role == Role::Ignored || spec.role == Role::IgnoredPerLayer || spec.fused_index > 0) continue;
    const bool layered = spec.name.find("{l}") != std::string::npos;
    for (int64_t l = 0; l < (layered ? reparsed.n_stored_layers() : 1); ++l) {
      if (spec.present && !spec.present(reparsed, l)) continue;
      std::string name = spec.name;
      if (layered) name.replace(name.find("{l}"), 3, std::to_string(l));
      if (size_t p = name.find("{p}"); p != std::string::npos) name.replace(p, 3, table.prefixes.front());
      Shape shape = spec.shape(reparsed, l);
      std::vector<float> values(numel(shape));
      const auto matched = moments ? moments->find({spec.role, spec.part}) : TensorMoments::const_iterator{};
      if (moments && matched != moments->end()) {
        const Moments& m = matched->second;
        for (float& v : values) v = static_cast<float>(m.mean + m.std * unit(rng));
      } else if (spec.layout != Layout::Vector) {
        const float scale = static_cast<float>(init_scale(reparsed, name));
        for (float& v : values) v = scale * normal(rng);
      } else if (spec.part == Part::Weight) {
        std::fill(values.begin(), values.end(), 1.0f);  // norm scales start at 1, biases at 0
      }
      tensors[name] = f32_tensor(shape, values.data());
    }
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create '{}': {}", dir.string(), ec.message());
  write_file_atomic(dir / "config.json", hf_config.dump(2) + "\n");
  write_safetensors(dir / "model.safetensors", tensors);
}

}  // namespace tdyn
