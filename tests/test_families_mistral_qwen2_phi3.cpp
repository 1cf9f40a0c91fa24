// Mistral, Qwen2, Qwen3 and Phi-3 against float64 references of their Hugging Face forward passes, generated at
// test time by tests/refgen/extra_families.py (tiny random checkpoints with HF tensor names; sliding windows shorter
// than the sequences, GQA, Qwen2 q/k/v biases and tied head, Qwen3 per-head q/k norms, head_dim wider than
// hidden_size / heads and o_proj bias, Phi-3 fused qkv_proj / gate_up_proj and partial rotary embeddings): every
// hook, the Jacobians, KV-cached decoding, `tdyn info` / `tdyn run`, and the config and tensor errors of these
// families.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <iostream>

#include <nlohmann/json.hpp>

#include "analysis/jacobian/jacobian_model.h"
#include "core/npy.h"
#include "fixture_check.h"
#include "generated_fixtures.h"
#include "io/safetensors.h"
#include "model/families.h"
#include "model/loader.h"

namespace tdyn {
namespace {

#define REQUIRE_GENERATED(dir) TDYN_REQUIRE_GENERATED(dir, extra_family_fixtures)

class GeneratedFamily : public ::testing::TestWithParam<const char*> {};

TEST_P(GeneratedFamily, MatchesReferencesAtEveryHook) {
  REQUIRE_GENERATED(root);
  const std::string family = GetParam();
  test::FixtureReport report;
  const int compared = test::check_fixture(root / family, root / family / "refs.safetensors", &report);
  const int64_t n_layers = read_hf_config(root / family / "config.json").n_layers;
  EXPECT_GE(compared, 2 * (1 + n_layers * 6 + 2));  // embeddings, 6 hooks per layer, final hidden, logits
  RecordProperty("worst_ratio", fmt::format("{:.4f}", report.worst_ratio));
  std::cout << fmt::format("[fidelity] {:<34} {:4d} tensors, worst error/tolerance {:.4f} ({})\n", family, compared,
                           report.worst_ratio, report.worst_key);
}

// The sublayer Jacobians of the analyses (float64 tangent propagation) against the references' autograd ones.
TEST_P(GeneratedFamily, JacobiansMatchReferences) {
  REQUIRE_GENERATED(root);
  const std::string family = GetParam();
  TensorStore refs;
  read_safetensors(root / family / "refs.safetensors", refs);
  const JacobianModel model(std::make_shared<Transformer>(load_model(root / family)));
  const std::vector<int64_t> ids64 = refs.ints("seq0.input_ids");
  const SequenceState state = model.run(std::vector<int32_t>(ids64.begin(), ids64.end()));
  double worst = 0;
  std::string worst_key;
  for (int64_t pos : {5, 23}) {
    for (int64_t l = 0; l < model.config().n_layers; ++l) {
      const linalg::Matrix attn = model.jacobian(state, l, Sublayer::Attention, pos);
      const linalg::Matrix mlp = model.jacobian(state, l, Sublayer::Mlp, pos);
      for (auto [name, j] : {std::pair{"jac_attn", attn}, {"jac_mlp", mlp}, {"jac_block", linalg::Matrix(mlp * attn)}}) {
        const std::string key = fmt::format("seq0.pos{}.blocks.{}.{}", pos, l, name);
        const std::vector<double> ref = refs.doubles(key);  // row-major [d, d]
        const int64_t d = j.rows();
        ASSERT_EQ(static_cast<int64_t>(ref.size()), d * d) << key;
        double max_ref = 0;
        for (double r : ref) max_ref = std::max(max_ref, std::abs(r));
        const test::FixtureTolerance tol = test::fixture_tolerance(key);
        for (int64_t a = 0; a < d; ++a)
          for (int64_t b = 0; b < d; ++b) {
            const double r = ref[a * d + b], ratio = std::abs(j(a, b) - r) / (tol.rtol * std::abs(r) + tol.atol_x_max * max_ref);
            if (ratio > worst) worst = ratio, worst_key = fmt::format("{} [{}, {}]", key, a, b);
          }
      }
    }
  }
  EXPECT_LE(worst, 1.0) << family << ": worst error/tolerance at " << worst_key;
  std::cout << fmt::format("[ jacobian ] {}: worst error/tolerance {:.3g} ({})\n", family, worst, worst_key);
}

TEST_P(GeneratedFamily, RopeFrequenciesMatch) {
  REQUIRE_GENERATED(root);
  const std::string family = GetParam();
  TensorStore refs;
  read_safetensors(root / family / "refs.safetensors", refs);
  const ModelConfig c = read_hf_config(root / family / "config.json");
  test::expect_close(rope_inv_freq(c.layer(0).rope, c.d_head), refs.doubles("rope.inv_freq"), 1e-12, 0, family + " inv_freq");
}

// KV-cached decoding in chunks reproduces the whole sequence, with the sliding windows crossed inside the cache.
TEST_P(GeneratedFamily, CachedDecodingEqualsWholeSequence) {
  REQUIRE_GENERATED(root);
  const std::string family = GetParam();
  Transformer model(load_model(root / family));
  std::vector<int32_t> ids = {1, 7, 20, 13, 64, 9, 31, 2, 5, 40, 11, 3, 8, 17, 99, 6};
  Tensor whole = model.forward(ids);
  KVCache cache = model.new_cache(20);
  std::vector<float> got = model.forward(std::span(ids).first(4), nullptr, &cache).data;
  for (size_t t = 4; t < ids.size(); t += 3) {
    Tensor step = model.forward(std::span(ids).subspan(t, std::min<size_t>(3, ids.size() - t)), nullptr, &cache);
    got.insert(got.end(), step.data.begin(), step.data.end());
  }
  test::expect_close(got, whole.data, 1e-5, 1e-5, family + " cached logits");
}

// `tdyn info` names the family and its windows; `tdyn run` gives the reference logits of seq0.
TEST_P(GeneratedFamily, InfoAndRunCommands) {
  REQUIRE_GENERATED(root);
  const std::string family = GetParam();
  const fs::path dir = root / family;
  std::string out, err;
  ASSERT_EQ(test::run_cli("info --json " + dir.string(), &out, &err), 0) << err;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["family"], family);
  const ModelConfig c = read_hf_config(dir / "config.json");
  for (int64_t l = 0; l < c.n_layers; ++l) EXPECT_EQ(j["config"]["sliding_window"][l], c.layer(l).sliding_window);

  TensorStore refs;
  read_safetensors(dir / "refs.safetensors", refs);
  std::string ids;
  for (int64_t id : refs.ints("seq0.input_ids")) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  const fs::path logits = test::scratch_dir("mqp_run_" + family) / "logits.npy";
  ASSERT_EQ(test::run_cli(fmt::format("run {} --ids {} --max-new-tokens 0 --save-logits {}", dir.string(), ids, logits.string()),
                          &out, &err),
            0)
      << err;
  const std::vector<float> got = read_npy(logits).as_float();
  EXPECT_LE(test::expect_matches_ref(refs, "seq0.logits", got.data(), got.size()), 1.0);
}

INSTANTIATE_TEST_SUITE_P(Families, GeneratedFamily, ::testing::Values("mistral", "qwen2", "qwen3", "phi3"));

// ---------------------------------------------------------------------------------------------------------
// Loading.

TEST(GeneratedFamilyLoading, Phi3FusedProjectionsAreUsedInPlace) {
  REQUIRE_GENERATED(root);
  auto model = load_model(root / "phi3");
  const ModelConfig& c = model->config;
  const LayerWeights& L = model->weights.layers[1];
  const std::byte* qkv = model->store.get("model.layers.1.self_attn.qkv_proj.weight").data;
  const std::byte* gate_up = model->store.get("model.layers.1.mlp.gate_up_proj.weight").data;
  const int64_t row = 4 * c.d_model;  // float32 rows of [out, d_model]
  ASSERT_LT(c.n_kv_heads, c.n_heads);  // k and v parts are smaller than q
  EXPECT_EQ(L.q.w.data, qkv);
  EXPECT_EQ(L.k.w.data, qkv + c.q_dim() * row);
  EXPECT_EQ(L.v.w.data, qkv + (c.q_dim() + c.kv_dim()) * row);
  EXPECT_EQ(L.q.out, c.q_dim());
  EXPECT_EQ(L.k.out, c.kv_dim());
  EXPECT_EQ(L.v.out, c.kv_dim());
  EXPECT_EQ(L.gate.w.data, gate_up);
  EXPECT_EQ(L.up.w.data, gate_up + c.d_mlp * row);
  EXPECT_EQ(L.up.out, c.d_mlp);
  EXPECT_EQ(c.layer(0).rope.rotary_dim(c.d_head), c.d_head / 2);  // partial_rotary_factor 0.5
  EXPECT_EQ(rope_inv_freq(c.layer(0).rope, c.d_head).size(), static_cast<size_t>(c.d_head / 4));
}

// A checkpoint with tensor `name` removed (or, with `copy_as`, also stored under that extra name) must fail to
// bind with an error containing `message`.
void expect_bind_fails(const fs::path& dir, const std::string& name, const std::string& copy_as, const std::string& message) {
  auto model = load_model(dir);
  TensorStore store;
  for (const auto& n : model->store.names()) {
    if (n == name && copy_as.empty()) continue;
    store.add(model->store.get(n));
    if (n == name) {
      TensorInfo copy = model->store.get(n);
      copy.name = copy_as;
      store.add(copy);
    }
  }
  try {
    bind_weights(model->config, store, family_table(model->config.family, model->config.format));
    ADD_FAILURE() << "binding succeeded; expected an error containing '" << message << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(GeneratedFamilyLoading, MissingUnknownAndMisshapenTensorsAreErrors) {
  REQUIRE_GENERATED(root);
  expect_bind_fails(root / "phi3", "model.layers.1.self_attn.qkv_proj.weight", "",
                    "missing tensor 'model.layers.1.self_attn.qkv_proj.weight'");
  // Unfused names in a Phi-3 file are not silently accepted.
  expect_bind_fails(root / "phi3", "model.layers.0.mlp.gate_up_proj.weight", "model.layers.0.mlp.up_proj.weight",
                    "unknown tensor 'model.layers.0.mlp.up_proj.weight'");
  // Qwen2 needs its q/k/v biases.
  expect_bind_fails(root / "qwen2", "model.layers.2.self_attn.k_proj.bias", "", "missing tensor 'model.layers.2.self_attn.k_proj.bias'");
  expect_bind_fails(root / "mistral", "model.norm.weight", "model.norm.bias", "unknown tensor 'model.norm.bias'");
  // Qwen3 needs its per-head q/k norms, and its o_proj bias when attention_bias is set.
  expect_bind_fails(root / "qwen3", "model.layers.1.self_attn.k_norm.weight", "",
                    "missing tensor 'model.layers.1.self_attn.k_norm.weight'");
  expect_bind_fails(root / "qwen3", "model.layers.0.self_attn.o_proj.bias", "", "missing tensor 'model.layers.0.self_attn.o_proj.bias'");
  // Phi-3 with more kv heads than its qkv_proj holds.
  auto model = load_model(root / "phi3");
  ModelConfig c = model->config;
  c.n_kv_heads = c.n_heads;
  try {
    bind_weights(c, model->store, family_table("phi3", "hf"));
    ADD_FAILURE() << "binding succeeded with the wrong qkv_proj shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.layers.0.self_attn.qkv_proj.weight' has wrong shape"), std::string::npos)
        << e.what();
  }
}

// ---------------------------------------------------------------------------------------------------------
// Config parsing: the HF window semantics and the refusals.

nlohmann::json generated_config(const fs::path& root, const char* family) {
  return nlohmann::json::parse(read_file(root / family / "config.json"));
}

void expect_config_error(const nlohmann::json& j, const std::string& message) {
  try {
    parse_hf_config(j, "config.json");
    ADD_FAILURE() << "config accepted; expected an error containing '" << message << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

std::vector<int64_t> windows(const nlohmann::json& j) {
  const ModelConfig c = parse_hf_config(j, "config.json");
  std::vector<int64_t> w;
  for (int64_t l = 0; l < c.n_layers; ++l) w.push_back(c.layer(l).sliding_window);
  return w;
}

TEST(GeneratedFamilyConfig, SlidingWindowsFollowHuggingFace) {
  REQUIRE_GENERATED(root);
  auto j = generated_config(root, "mistral");
  EXPECT_EQ(windows(j), (std::vector<int64_t>{6, 6, 6}));
  j["sliding_window"] = nullptr;  // Mistral v0.2+: no window
  EXPECT_EQ(windows(j), (std::vector<int64_t>{0, 0, 0}));
  j.erase("sliding_window");  // MistralConfig default 4096
  EXPECT_EQ(windows(j), (std::vector<int64_t>{4096, 4096, 4096}));

  j = generated_config(root, "qwen2");
  EXPECT_EQ(windows(j), (std::vector<int64_t>{0, 6, 6}));  // layers >= max_window_layers (1)
  ModelConfig qwen = parse_hf_config(j, "qwen2");
  EXPECT_TRUE(qwen.attn_qkv_bias && !qwen.attn_o_bias && qwen.tied_embeddings);
  j["use_sliding_window"] = false;  // the released Qwen2.5 setting: sliding_window ignored
  EXPECT_EQ(windows(j), (std::vector<int64_t>{0, 0, 0}));
  j["use_sliding_window"] = true;
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};  // explicit types win
  EXPECT_EQ(windows(j), (std::vector<int64_t>{6, 0, 6}));
  j["use_sliding_window"] = false;
  expect_config_error(j, "layer_types marks layer 0 sliding_attention but there is no window");

  j = generated_config(root, "qwen3");  // Qwen2's window rule
  EXPECT_EQ(windows(j), (std::vector<int64_t>{0, 6, 6}));
  j["use_sliding_window"] = false;  // the released Qwen3 setting
  EXPECT_EQ(windows(j), (std::vector<int64_t>{0, 0, 0}));

  j = generated_config(root, "phi3");
  EXPECT_EQ(windows(j), (std::vector<int64_t>{7, 7}));
  j.erase("sliding_window");  // Phi3Config default: None
  EXPECT_EQ(windows(j), (std::vector<int64_t>{0, 0}));
}

// Qwen3Config: head_dim is its own setting (default 128, not hidden_size / heads), attention_bias covers o_proj too,
// and the q/k norms are per head.
TEST(GeneratedFamilyConfig, Qwen3HeadsAndBiases) {
  REQUIRE_GENERATED(root);
  auto j = generated_config(root, "qwen3");
  ModelConfig c = parse_hf_config(j, "qwen3");
  EXPECT_EQ(c.d_head, 24);
  EXPECT_EQ(c.q_dim(), 96);  // wider than d_model 64
  EXPECT_DOUBLE_EQ(c.attn_scale, 1.0 / std::sqrt(24.0));
  EXPECT_EQ(c.qk_norm, QKNorm::PerHead);
  EXPECT_TRUE(c.attn_qkv_bias && c.attn_o_bias && c.tied_embeddings);
  j.erase("head_dim");
  j.erase("attention_bias");
  c = parse_hf_config(j, "qwen3");
  EXPECT_EQ(c.d_head, 128);
  EXPECT_DOUBLE_EQ(c.attn_scale, 1.0 / std::sqrt(128.0));
  EXPECT_FALSE(c.attn_qkv_bias || c.attn_o_bias);
}

// The config.json Qwen/Qwen3-0.6B is published with (bf16, tied head, 128-wide heads over a 1024-wide stream).
TEST(Qwen3Config, PublishedConfigParses) {
  const auto j = nlohmann::json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02,
    "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 151936})");
  const ModelConfig c = parse_hf_config(j, "Qwen3-0.6B/config.json");
  EXPECT_EQ(c.family, "qwen3");
  EXPECT_EQ(c.d_model, 1024);
  EXPECT_EQ(c.q_dim(), 2048);
  EXPECT_EQ(c.kv_dim(), 1024);
  EXPECT_EQ(c.n_layers, 28);
  EXPECT_EQ(c.qk_norm, QKNorm::PerHead);
  EXPECT_FALSE(c.attn_qkv_bias || c.attn_o_bias);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  for (int64_t l = 0; l < c.n_layers; ++l) EXPECT_EQ(c.layer(l).sliding_window, 0) << "layer " << l;
  EXPECT_NO_THROW(c.validate("Qwen3-0.6B/config.json"));
}

TEST(GeneratedFamilyConfig, UnsupportedFeaturesAreErrors) {
  REQUIRE_GENERATED(root);
  for (const char* family : {"mistral", "qwen2", "qwen3", "phi3"}) {
    auto j = generated_config(root, family);
    j["some_new_switch"] = true;
    expect_config_error(j, "unknown config key(s) 'some_new_switch'");
    j = generated_config(root, family);
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    expect_config_error(j, "rope scaling type 'yarn' is not supported");
    j = generated_config(root, family);
    j["hidden_act"] = "quick_gelu";
    expect_config_error(j, "hidden_act 'quick_gelu'");
  }
  auto j = generated_config(root, "phi3");
  for (const char* type : {"longrope", "su"}) {
    j["rope_scaling"] = {{"type", type}, {"short_factor", std::vector<double>(4, 1.0)}, {"long_factor", std::vector<double>(4, 2.0)}};
    expect_config_error(j, fmt::format("config key 'rope_scaling' of type '{}'", type));
  }
  j = generated_config(root, "phi3");
  j["partial_rotary_factor"] = 1.5;
  expect_config_error(j, "partial_rotary_factor must be in (0, 1]");
  j["partial_rotary_factor"] = 0.01;  // int(16 * 0.01) = 0 rotary dimensions
  expect_config_error(j, "rotary dimensions");
  j = generated_config(root, "mistral");
  j["sliding_window"] = 0;
  expect_config_error(j, "sliding_window must be a positive integer or null");
}

}  // namespace
}  // namespace tdyn
