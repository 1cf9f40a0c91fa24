#include "model/init.h"

#include <cmath>
#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "kernels/serial_blas.h"
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

// Each tensor is drawn in blocks of kDrawBlock values, block b of tensor i from its own std::mt19937_64 seeded
// with draw_seed(seed, i, b): the blocks draw in parallel (a 7–8B model is billions of values), and the weights are
// the same on any number of threads.
constexpr int64_t kDrawBlock = int64_t{1} << 16;

uint64_t draw_seed(uint64_t seed, uint64_t tensor, uint64_t block) {
  uint64_t z = seed;
  for (uint64_t word : {tensor, block}) {  // splitmix64 steps: neighbouring tensors and blocks get unrelated streams
    z += 0x9e3779b97f4a7c15ULL ^ word;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
  }
  return z;
}

// A tensor to draw from N(mean, std²): its float32 bytes as written.
struct Draw {
  std::string* bytes = nullptr;
  double mean = 0, std = 0;
};

void draw_normal(const std::vector<Draw>& draws, uint64_t seed) {
  std::vector<std::pair<size_t, int64_t>> blocks;  // (tensor, first value)
  for (size_t i = 0; i < draws.size(); ++i)
    for (int64_t at = 0; at < static_cast<int64_t>(draws[i].bytes->size() / sizeof(float)); at += kDrawBlock) blocks.emplace_back(i, at);
  parallel_tasks(static_cast<int64_t>(blocks.size()), [&](int64_t b) {
    const auto [i, at] = blocks[static_cast<size_t>(b)];
    std::mt19937_64 rng(draw_seed(seed, i, static_cast<uint64_t>(at / kDrawBlock)));
    std::normal_distribution<double> unit;  // std = 0 (a tensor of one value in moments) is allowed
    std::string& bytes = *draws[i].bytes;
    std::vector<float> values(static_cast<size_t>(std::min<int64_t>(kDrawBlock, static_cast<int64_t>(bytes.size() / sizeof(float)) - at)));
    for (float& v : values) v = static_cast<float>(draws[i].mean + draws[i].std * unit(rng));
    std::memcpy(bytes.data() + static_cast<size_t>(at) * sizeof(float), values.data(), values.size() * sizeof(float));
  });
}

}  // namespace

void write_random_init(const nlohmann::json& hf_config, const fs::path& dir, uint64_t seed, const TensorMoments* moments) {
  ModelConfig reparsed = parse_hf_config(hf_config, "generated config.json");
  const double initializer_range = hf_config.value("initializer_range", 0.02);
  const FamilyTable& table = family_table(reparsed.family, "hf");
  std::map<std::string, TensorToWrite> tensors;
  std::vector<Draw> draws;  // in the family table's order
  for (const auto& spec : table.tensors) {
    // Ignored tensors are not written; a fused tensor (GPT-2 c_attn) is written once, by its first slice.
    if (spec.role == Role::Ignored || spec.role == Role::IgnoredPerLayer || spec.fused_index > 0) continue;
    const bool layered = spec.name.find("{l}") != std::string::npos;
    for (int64_t l = 0; l < (layered ? reparsed.n_stored_layers() : 1); ++l) {
      if (spec.present && !spec.present(reparsed, l)) continue;
      std::string name = spec.name;
      if (layered) name.replace(name.find("{l}"), 3, std::to_string(l));
      if (size_t p = name.find("{p}"); p != std::string::npos) name.replace(p, 3, table.prefixes.front());
      const Shape shape = spec.shape(reparsed, l);
      TensorToWrite& tensor = tensors[name] = {DType::F32, shape, std::string(numel(shape) * sizeof(float), '\0')};  // biases 0
      const auto matched = moments ? moments->find({spec.role, spec.part}) : TensorMoments::const_iterator{};
      if (moments && matched != moments->end()) {
        draws.push_back({&tensor.bytes, matched->second.mean, matched->second.std});
      } else if (spec.layout != Layout::Vector) {
        draws.push_back({&tensor.bytes, 0, initializer_range * init_scale(reparsed, name)});
      } else if (spec.part == Part::Weight) {
        tensor = f32_tensor(shape, std::vector<float>(numel(shape), 1.0f).data());  // norm scales start at 1
      }
    }
  }
  draw_normal(draws, seed);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create '{}': {}", dir.string(), ec.message());
  write_file_atomic(dir / "config.json", hf_config.dump(2) + "\n");
  write_safetensors(dir / "model.safetensors", tensors);
}

}  // namespace tdyn
