// The Llama family end to end: HF fixtures (float32, bf16, sharded) against float64 references, and the
// trained llama2.c models against the logits their authors' run.c produced.
#include <cmath>

#include "core/npy.h"
#include "fixture_check.h"
#include "io/safetensors.h"
#include "model/ops.h"

namespace tdyn {
namespace {

fs::path fixtures() { return test::shared_dir() / "fixtures"; }

TEST(LlamaFixture, MatchesReferencesAtEveryHook) {
  TDYN_REQUIRE_SHARED("fixtures/llama");
  EXPECT_GE(test::check_fixture(fixtures() / "llama", fixtures() / "llama/refs.safetensors"), 2 * (1 + 3 * 6 + 1));
}

TEST(LlamaFixture, TiedMqaMatchesReferences) {
  TDYN_REQUIRE_SHARED("fixtures/llama_tied");
  EXPECT_GT(test::check_fixture(fixtures() / "llama_tied", fixtures() / "llama_tied/refs.safetensors"), 20);
}

TEST(LlamaFixture, Bf16CheckpointMatchesItsReferences) {
  TDYN_REQUIRE_SHARED("fixtures/llama/bf16");
  EXPECT_GT(test::check_fixture(fixtures() / "llama/bf16", fixtures() / "llama/bf16/refs.safetensors"), 20);
}

TEST(LlamaFixture, ShardedCheckpointMatchesReferences) {
  TDYN_REQUIRE_SHARED("fixtures/llama/sharded");
  EXPECT_GT(test::check_fixture(fixtures() / "llama/sharded", fixtures() / "llama/refs.safetensors"), 20);
}

TEST(LlamaFixture, Stories260kConvertedToHfMatches) {
  TDYN_REQUIRE_SHARED("fixtures/stories260K_hf");
  EXPECT_GT(test::check_fixture(fixtures() / "stories260K_hf", fixtures() / "stories260K_hf/refs.safetensors"), 20);
}

TEST(LlamaFixture, Llama3RopeFrequenciesMatch) {
  TDYN_REQUIRE_SHARED("fixtures/llama");
  TensorStore refs;
  read_safetensors(fixtures() / "llama/refs.safetensors", refs);
  ModelConfig c = read_hf_config(fixtures() / "llama/config.json");
  std::vector<double> inv = rope_inv_freq(c.rope, c.d_head);
  test::expect_close(inv, refs.doubles("rope.inv_freq"), 1e-12, 0, "rope.inv_freq");
}

TEST(LlamaFixture, ResidualIdentitiesHoldExactly) {
  TDYN_REQUIRE_SHARED("fixtures/llama");
  Transformer model(load_model(fixtures() / "llama"));
  ActivationCache cache("blocks.*.hook_*");
  std::vector<int32_t> ids = {5, 17, 42, 99, 3};
  model.forward(ids, &cache);
  for (int64_t l = 0; l < model.config().n_layers; ++l) {
    auto get = [&](const char* h) { return cache.at(fmt::format("blocks.{}.{}", l, h)).data; };
    auto pre = get("hook_resid_pre"), attn = get("hook_attn_out"), mid = get("hook_resid_mid");
    auto mlp = get("hook_mlp_out"), post = get("hook_resid_post");
    for (size_t i = 0; i < pre.size(); ++i) {
      ASSERT_EQ(mid[i], pre[i] + attn[i]) << "layer " << l << " element " << i;
      ASSERT_EQ(post[i], mid[i] + mlp[i]) << "layer " << l << " element " << i;
    }
  }
}

// Incremental decoding with the KV cache must reproduce the whole-sequence logits.
TEST(LlamaFixture, KvCacheDecodingEqualsWholeSequence) {
  TDYN_REQUIRE_SHARED("fixtures/llama");
  Transformer model(load_model(fixtures() / "llama"));
  std::vector<int32_t> ids = {1, 7, 200, 13, 64, 9, 31};
  Tensor whole = model.forward(ids);
  KVCache cache = model.new_cache(16);
  Tensor prefix = model.forward(std::span(ids).first(3), nullptr, &cache);
  std::vector<float> got(prefix.data);
  for (size_t t = 3; t < ids.size(); ++t) {
    Tensor step = model.forward(std::span(ids).subspan(t, 1), nullptr, &cache);
    got.insert(got.end(), step.data.begin(), step.data.end());
  }
  test::expect_close(got, whole.data, 1e-5, 1e-5, "cached logits");
}

struct GoldenModel {
  const char* dir;
  const char* file;
  double logits_atol;
};

class Llama2cGolden : public ::testing::TestWithParam<GoldenModel> {};

TEST_P(Llama2cGolden, LogitsMatchRunC) {
  const GoldenModel g = GetParam();
  TDYN_REQUIRE_SHARED(fs::path("models") / g.dir / g.file);
  fs::path dir = test::shared_dir() / "models" / g.dir;
  Transformer model(load_model(dir / g.file));
  for (const char* prompt : {"once_upon_a_time", "lily_and_tom"}) {
    std::vector<int64_t> ids64 = read_npy(dir / fmt::format("input_tokens_{}_n64.npy", prompt)).as_int64();
    std::vector<int32_t> ids(ids64.begin(), ids64.end());
    NpyArray expected = read_npy(dir / fmt::format("logits_{}_n64.npy", prompt));
    Tensor logits = model.forward(ids);
    ASSERT_EQ(expected.shape, logits.shape);
    test::expect_close(logits.data, expected.as_float(), 0.0, g.logits_atol, fmt::format("{} {}", g.dir, prompt));
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Llama2cGolden,
                         ::testing::Values(GoldenModel{"stories260K", "stories260K.bin", 1e-4},
                                           GoldenModel{"llama2xs", "model.bin", 5e-4},
                                           GoldenModel{"aidreams260K", "aidreams260K.bin", 1e-4}),
                         [](const auto& info) { return std::string(info.param.dir); });

}  // namespace
}  // namespace tdyn
