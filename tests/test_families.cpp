// Every seed family end to end: the HF-layout fixtures (GPT-2, GPT-Neo, BERT, ALBERT, Llama, OLMo 3, Gemma 4)
// against their float64 references at every hook, the residual identities of each norm placement, KV-cached
// decoding against whole sequences, config and tensor-table errors, and the trained slm4096 GPT-2 against the
// logits of its original code.
#include <cmath>
#include <iostream>

#include <omp.h>

#include <nlohmann/json.hpp>

#include "core/npy.h"
#include "fixture_check.h"
#include "io/safetensors.h"
#include "model/families.h"
#include "model/init.h"
#include "model/ops.h"

namespace tdyn {
namespace {

fs::path fixtures() { return test::shared_dir() / "fixtures"; }

struct FixtureCase {
  const char* name;    // test name
  const char* model;   // model directory under fixtures/
  const char* refs;    // refs file under fixtures/
  int min_compared;
};

class FamilyFixture : public ::testing::TestWithParam<FixtureCase> {};

// The worst error/tolerance ratio is printed and recorded (XML property worst_ratio) for docs/fidelity.md.
TEST_P(FamilyFixture, MatchesReferencesAtEveryHook) {
  const FixtureCase f = GetParam();
  TDYN_REQUIRE_SHARED(fs::path("fixtures") / f.model);
  test::FixtureReport report;
  int compared = test::check_fixture(fixtures() / f.model, fixtures() / f.refs, &report);
  EXPECT_GE(compared, f.min_compared);
  RecordProperty("worst_ratio", fmt::format("{:.4f}", report.worst_ratio));
  RecordProperty("worst_key", report.worst_key);
  std::cout << fmt::format("[fidelity] {:<34} {:4d} tensors, worst error/tolerance {:.4f} ({})\n", f.name, compared,
                           report.worst_ratio, report.worst_key);
}

// min_compared: per sequence embeddings + 6 hooks per layer + final_hidden + logits (+ extras), two sequences.
INSTANTIATE_TEST_SUITE_P(
    Families, FamilyFixture,
    ::testing::Values(FixtureCase{"gpt2", "gpt2", "gpt2/refs.safetensors", 2 * (1 + 3 * 6 + 2)},
                      FixtureCase{"gpt2_hub_layout", "gpt2/hub_layout", "gpt2/refs.safetensors", 2 * (1 + 3 * 6 + 2)},
                      FixtureCase{"gpt_neo", "gpt_neo", "gpt_neo/refs.safetensors", 2 * (1 + 3 * 6 + 2)},
                      FixtureCase{"bert", "bert", "bert/refs.safetensors", 2 * (1 + 2 * 6 + 3)},
                      FixtureCase{"albert", "albert", "albert/refs.safetensors", 2 * (2 + 3 * 6 + 3)},
                      FixtureCase{"llama", "llama", "llama/refs.safetensors", 2 * (1 + 3 * 6 + 2)},
                      FixtureCase{"llama_tied", "llama_tied", "llama_tied/refs.safetensors", 2 * (1 + 2 * 6 + 2)},
                      FixtureCase{"olmo3", "olmo3", "olmo3/refs.safetensors", 2 * (1 + 3 * 6 + 2)},
                      FixtureCase{"gemma4", "gemma4", "gemma4/refs.safetensors", 2 * (2 + 5 * 8 + 3)},
                      FixtureCase{"gemma4_text_only", "gemma4/text_only", "gemma4/refs.safetensors", 2 * (2 + 5 * 8 + 3)},
                      FixtureCase{"gemma4_with_unused_shared_kv", "gemma4/with_unused_shared_kv_tensors",
                                  "gemma4/refs.safetensors", 2 * (2 + 5 * 8 + 3)}),
    [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------------------
// Residual identities, exactly (bit for bit), for every norm placement.

class FamilyIdentities : public ::testing::TestWithParam<const char*> {};

TEST_P(FamilyIdentities, ResidualIdentitiesHoldExactly) {
  const std::string dir = GetParam();
  TDYN_REQUIRE_SHARED(fs::path("fixtures") / dir);
  Transformer model(load_model(fixtures() / dir));
  const ModelConfig& c = model.config();
  ActivationCache cache("blocks.*.hook_*");
  std::vector<int32_t> ids = {5, 17, 42, 9, 3, 11, 2, 8, 30, 1, 4};  // longer than the sliding windows (8)
  model.forward(ids, &cache);
  const int64_t n = static_cast<int64_t>(ids.size()), d = c.d_model;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto get = [&](const char* h) { return cache.at(fmt::format("blocks.{}.{}", l, h)).data; };
    auto pre = get("hook_resid_pre"), attn = get("hook_attn_out"), mid = get("hook_resid_mid");
    auto mlp = get("hook_mlp_out"), post = get("hook_resid_post");
    std::vector<float> expect_mid(pre.size()), expect_post(pre.size());
    for (size_t i = 0; i < pre.size(); ++i) expect_mid[i] = pre[i] + attn[i];
    for (size_t i = 0; i < pre.size(); ++i) expect_post[i] = mid[i] + mlp[i];
    const LayerWeights& L = model.model().weights.layers[l];
    if (c.norm_placement == NormPlacement::PostResidual) {
      // BERT / ALBERT: resid_mid = LN(resid_pre + attn_out), resid_post = LN(resid_mid + mlp_out).
      apply_norm(c.norm, expect_mid.data(), n, d, L.attn_post_norm, c.norm_eps, expect_mid.data());
      apply_norm(c.norm, expect_post.data(), n, d, L.mlp_post_norm, c.norm_eps, expect_post.data());
    }
    if (c.d_per_layer_input > 0) {
      // Gemma 4: after_mlp = mid + mlp_out; after_ple = after_mlp + ple_out; post = after_ple * layer_scalar.
      auto after_mlp = get("hook_resid_after_mlp"), ple = get("hook_ple_out"), after_ple = get("hook_resid_after_ple");
      for (size_t i = 0; i < pre.size(); ++i) {
        ASSERT_EQ(after_mlp[i], expect_post[i]) << dir << " layer " << l << " element " << i << " (after_mlp)";
        ASSERT_EQ(after_ple[i], after_mlp[i] + ple[i]) << dir << " layer " << l << " element " << i << " (after_ple)";
        expect_post[i] = after_ple[i] * L.layer_scalar[0];
      }
    }
    for (size_t i = 0; i < pre.size(); ++i) {
      ASSERT_EQ(mid[i], expect_mid[i]) << dir << " layer " << l << " element " << i << " (resid_mid)";
      ASSERT_EQ(post[i], expect_post[i]) << dir << " layer " << l << " element " << i << " (resid_post)";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyIdentities,
                         ::testing::Values("gpt2", "gpt_neo", "bert", "albert", "llama", "olmo3", "gemma4"));

// ---------------------------------------------------------------------------------------------------------
// Hooks that write: the forward pass goes on from the edited activation.

class FamilyEdits : public ::testing::TestWithParam<const char*> {};

// Activation patching of the whole stream: with prompt B's resid_post of layer l written into prompt A's run, every
// later layer sees B's stream, so A's logits become B's bit for bit. (Not Gemma 4: its per-layer inputs and
// KV-shared layers read A's tokens and earlier layers directly.)
TEST_P(FamilyEdits, PatchingTheStreamRunsTheOtherPrompt) {
  const std::string dir = GetParam();
  TDYN_REQUIRE_SHARED(fs::path("fixtures") / dir);
  Transformer model(load_model(fixtures() / dir));
  const std::vector<int32_t> a = {5, 17, 42, 9, 3, 11, 2, 8, 30, 1, 4}, b = {7, 2, 19, 33, 6, 1, 12, 25, 3, 9, 14};
  for (int64_t l = 0; l < model.config().n_layers; ++l) {
    const std::string name = fmt::format("blocks.{}.hook_resid_post", l);
    ActivationCache source(name);
    const Tensor logits_b = model.forward(b, &source);
    ActivationCache patched(name);
    patched.add_edit(name, [&](const std::string& hook, int64_t start, float* data, const Shape& shape) {
      ASSERT_EQ(hook, name);
      ASSERT_EQ(start, 0);
      ASSERT_EQ(shape, source.at(name).shape);
      std::copy(source.at(name).data.begin(), source.at(name).data.end(), data);
    });
    const Tensor logits_a = model.forward(a, &patched);
    EXPECT_EQ(patched.at(name).data, source.at(name).data) << dir << " layer " << l << ": the edited value is captured";
    EXPECT_EQ(logits_a.data, logits_b.data) << dir << " layer " << l;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyEdits, ::testing::Values("gpt2", "gpt_neo", "bert", "albert", "llama", "olmo3"));

// One head's z zeroed removes exactly its share of the output projection, z_h W_O[:, h]ᵀ (in float64 from the
// checkpoint's own o_proj); the MLP's hidden activation zeroed leaves its output projection at zero (no bias).
TEST(FamilyEditsLlama, HeadAblationRemovesItsShareOfTheOutputProjection) {
  TDYN_REQUIRE_SHARED("fixtures/llama");
  auto loaded = load_model(fixtures() / "llama");
  Transformer model(loaded);
  const ModelConfig& c = model.config();
  const std::vector<int32_t> ids = {5, 17, 42, 9, 3, 11, 2};
  const int64_t n = static_cast<int64_t>(ids.size()), d = c.d_model, hd = c.d_head, head = 2, l = 1;
  ActivationCache clean(fmt::format("blocks.{0}.attn.hook_z,blocks.{0}.attn.hook_out_proj", l));
  model.forward(ids, &clean);
  ActivationCache ablated(fmt::format("blocks.{0}.attn.hook_out_proj,blocks.{0}.mlp.hook_out_proj", l));
  ablated.add_edit(fmt::format("blocks.{}.attn.hook_z", l), [&](const std::string&, int64_t, float* z, const Shape& shape) {
    ASSERT_EQ(shape, (Shape{n, c.n_heads, hd}));
    for (int64_t i = 0; i < n; ++i) std::fill_n(z + (i * c.n_heads + head) * hd, hd, 0.0f);
  });
  ablated.add_edit(fmt::format("blocks.{}.mlp.hook_post", l),
                   [](const std::string&, int64_t, float* h, const Shape& shape) { std::fill_n(h, shape[0] * shape[1], 0.0f); });
  model.forward(ids, &ablated);
  const std::vector<double> w_o = loaded->store.doubles(fmt::format("model.layers.{}.self_attn.o_proj.weight", l));
  const Tensor& z = clean.at(fmt::format("blocks.{}.attn.hook_z", l));
  const Tensor& out = clean.at(fmt::format("blocks.{}.attn.hook_out_proj", l));
  const Tensor& out_ablated = ablated.at(fmt::format("blocks.{}.attn.hook_out_proj", l));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < d; ++r) {
      double share = 0;
      for (int64_t k = 0; k < hd; ++k) share += w_o[r * c.n_heads * hd + head * hd + k] * z.data[(i * c.n_heads + head) * hd + k];
      const double got = double(out.row(i)[r]) - out_ablated.row(i)[r];
      ASSERT_NEAR(got, share, 1e-5 + 1e-5 * std::abs(share)) << "position " << i << " row " << r;
    }
  for (float v : ablated.at(fmt::format("blocks.{}.mlp.hook_out_proj", l)).data) ASSERT_EQ(v, 0.0f);
}

TEST(FamilyEditsLlama, EditsOfReadOnlyOrUnknownHooksAreRefusedBeforeTheRun) {
  TDYN_REQUIRE_SHARED("fixtures/llama");
  Transformer model(load_model(fixtures() / "llama"));
  const std::set<std::string> writable = model.writable_hook_names();
  EXPECT_TRUE(writable.count("blocks.0.hook_resid_post") && writable.count("blocks.1.attn.hook_z"));
  EXPECT_FALSE(writable.count("blocks.0.attn.hook_pattern") || writable.count("hook_embed"));
  const std::vector<int32_t> ids = {5, 17, 42};
  for (const char* pattern : {"blocks.0.attn.hook_pattern", "blocks.0.hook_resid_psot", "blocks.99.hook_resid_post"}) {
    ActivationCache cache("hook_embed");
    bool called = false;
    cache.add_edit(pattern, [&](const std::string&, int64_t, float*, const Shape&) { called = true; });
    try {
      model.forward(ids, &cache);
      ADD_FAILURE() << pattern << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("matches no writable hook of this model"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("blocks.{l}.hook_resid_post"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(called || cache.contains("hook_embed")) << pattern << ": refused before any work";
  }
  // An edit added after a pass is checked before the next one.
  ActivationCache reused("hook_embed");
  model.forward(ids, &reused);
  reused.add_edit("blocks.0.attn.hook_pattern", zero_ablation());
  EXPECT_THROW(model.forward(ids, &reused), Error);
  EXPECT_THROW(ActivationCache("*").add_edit(",", [](const std::string&, int64_t, float*, const Shape&) {}), Error);
}

// ---------------------------------------------------------------------------------------------------------
// KV-cached decoding reproduces the whole-sequence logits (sliding windows crossed, Gemma 4 KV sharing).

class FamilyKvCache : public ::testing::TestWithParam<const char*> {};

TEST_P(FamilyKvCache, CachedDecodingEqualsWholeSequence) {
  const std::string dir = GetParam();
  TDYN_REQUIRE_SHARED(fs::path("fixtures") / dir);
  Transformer model(load_model(fixtures() / dir));
  std::vector<int32_t> ids = {1, 7, 20, 13, 64, 9, 31, 2, 5, 40, 11, 3, 8, 17};
  Tensor whole = model.forward(ids);
  KVCache cache = model.new_cache(20);
  Tensor prefix = model.forward(std::span(ids).first(4), nullptr, &cache);
  std::vector<float> got(prefix.data);
  for (size_t t = 4; t < ids.size(); t += 3) {  // chunks of up to 3 tokens
    auto chunk = std::span(ids).subspan(t, std::min<size_t>(3, ids.size() - t));
    Tensor step = model.forward(chunk, nullptr, &cache);
    got.insert(got.end(), step.data.begin(), step.data.end());
  }
  test::expect_close(got, whole.data, 1e-5, 1e-5, dir + " cached logits");
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyKvCache, ::testing::Values("gpt2", "gpt_neo", "olmo3", "gemma4"));

// ---------------------------------------------------------------------------------------------------------
// Checkpoint-level behaviour.

TEST(FamilyLoading, Gpt2FusedQkvIsUsedInPlace) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2");
  auto model = load_model(fixtures() / "gpt2");
  const int64_t d = model->config.d_model;
  const std::byte* fused = model->store.get("transformer.h.1.attn.c_attn.weight").data;
  const auto* fused_bias = reinterpret_cast<const float*>(model->store.get("transformer.h.1.attn.c_attn.bias").data);
  const LayerWeights& L = model->weights.layers[1];
  EXPECT_EQ(L.q.w.data, fused);
  EXPECT_EQ(L.k.w.data, fused + 4 * d);
  EXPECT_EQ(L.v.w.data, fused + 4 * 2 * d);
  EXPECT_EQ(L.v.b, fused_bias + 2 * d);
  EXPECT_TRUE(L.q.in_out);
  EXPECT_EQ(L.q.w.row_bytes, 4 * 3 * d);
  EXPECT_EQ(L.q.w.cols, d);
}

// A checkpoint with tensor `name` removed (or, with `copy_as`, copied under an extra name) must fail with an
// error containing `message`.
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

TEST(FamilyLoading, Gpt2HubLayoutKeepsAttentionBiasAndRejectsUnknownTensors) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2/hub_layout");
  // The legacy buffer filter must not swallow attn.c_attn.bias.
  expect_bind_fails(fixtures() / "gpt2/hub_layout", "h.0.attn.c_attn.bias", "", "h.0.attn.c_attn.bias");
  expect_bind_fails(fixtures() / "gpt2/hub_layout", "h.0.attn.c_proj.bias", "h.0.attn.c_proj.extra",
                            "unknown tensor 'h.0.attn.c_proj.extra'");
}

TEST(FamilyLoading, GemmaKvSharedLayersNeedNoKeyValueTensors) {
  TDYN_REQUIRE_SHARED("fixtures/gemma4");
  auto model = load_model(fixtures() / "gemma4");
  const ModelConfig& c = model->config;
  EXPECT_EQ(c.layer(3).kv_source, 1);
  EXPECT_EQ(c.layer(4).kv_source, 2);
  EXPECT_EQ(c.layer(4).d_head, 32);
  EXPECT_EQ(c.layer(3).d_mlp, 2 * c.d_mlp);
  EXPECT_FALSE(model->weights.layers[3].k);
  // A missing k_proj on a layer that computes its own keys is an error.
  expect_bind_fails(fixtures() / "gemma4", "model.language_model.layers.2.self_attn.k_proj.weight", "",
                            "layers.2.self_attn.k_proj.weight");
}

TEST(FamilyLoading, Gemma4RopeFrequenciesMatch) {
  TDYN_REQUIRE_SHARED("fixtures/gemma4");
  TensorStore refs;
  read_safetensors(fixtures() / "gemma4/refs.safetensors", refs);
  ModelConfig c = read_hf_config(fixtures() / "gemma4/config.json");
  test::expect_close(rope_inv_freq(c.layer(0).rope, c.layer(0).d_head), refs.doubles("rope.sliding_attention.inv_freq"),
                     1e-12, 0, "sliding inv_freq");
  test::expect_close(rope_inv_freq(c.layer(2).rope, c.layer(2).d_head), refs.doubles("rope.full_attention.inv_freq"),
                     1e-12, 0, "full inv_freq");
}

TEST(FamilyLoading, Olmo3RopeScalingOnFullLayersOnly) {
  TDYN_REQUIRE_SHARED("fixtures/olmo3");
  TensorStore refs;
  read_safetensors(fixtures() / "olmo3/refs.safetensors", refs);
  ModelConfig c = read_hf_config(fixtures() / "olmo3/config.json");
  test::expect_close(rope_inv_freq(c.layer(0).rope, c.d_head), refs.doubles("rope.sliding_attention.inv_freq"), 1e-12, 0,
                     "sliding inv_freq");
  test::expect_close(rope_inv_freq(c.layer(1).rope, c.d_head), refs.doubles("rope.full_attention.inv_freq"), 1e-12, 0,
                     "full inv_freq");
  EXPECT_EQ(c.layer(0).sliding_window, 8);
  EXPECT_EQ(c.layer(1).sliding_window, 0);
}

TEST(FamilyLoading, AlbertReusesOneStoredLayer) {
  TDYN_REQUIRE_SHARED("fixtures/albert");
  auto model = load_model(fixtures() / "albert");
  ASSERT_EQ(model->weights.layers.size(), 3u);
  EXPECT_EQ(model->weights.layers[0].q.w.data, model->weights.layers[2].q.w.data);
  EXPECT_EQ(model->config.n_stored_layers(), 1);
}

// ---------------------------------------------------------------------------------------------------------
// forward() argument checks.

TEST(FamilyForward, TokenTypesAndPositionsAreChecked) {
  TDYN_REQUIRE_SHARED("fixtures/bert");
  Transformer bert(load_model(fixtures() / "bert"));
  Transformer gpt2(load_model(fixtures() / "gpt2"));
  std::vector<int32_t> ids = {1, 2, 3};
  std::vector<int32_t> types = {0, 1, 1};
  EXPECT_NO_THROW(bert.forward(ids, nullptr, nullptr, types));
  EXPECT_THROW(bert.forward(ids, nullptr, nullptr, std::vector<int32_t>{0, 2, 0}), Error);  // type_vocab_size 2
  EXPECT_THROW(bert.forward(ids, nullptr, nullptr, std::vector<int32_t>{0, 1}), Error);     // count
  EXPECT_THROW(gpt2.forward(ids, nullptr, nullptr, types), Error);                           // no token types
  EXPECT_NO_THROW(gpt2.forward(ids, nullptr, nullptr, std::vector<int32_t>{0, 0, 0}));
  // Token types change the encoder's output.
  Tensor a = bert.forward(ids), b = bert.forward(ids, nullptr, nullptr, types);
  EXPECT_NE(a.data, b.data);
  // Learned positions end at n_ctx (64): position 64 is an error, also when reached through a cache.
  std::vector<int32_t> long_ids(65, 3);
  EXPECT_THROW(gpt2.forward(long_ids), Error);
  EXPECT_NO_THROW(gpt2.forward(std::span(long_ids).first(64)));
  KVCache cache = gpt2.new_cache(80);
  gpt2.forward(std::span(long_ids).first(64), nullptr, &cache);
  EXPECT_THROW(gpt2.forward(std::span(long_ids).first(1), nullptr, &cache), Error);
  // Encoders are bidirectional: no KV cache.
  EXPECT_THROW(bert.new_cache(8), Error);
}

// ---------------------------------------------------------------------------------------------------------
// Config parsing.

nlohmann::json fixture_config(const char* dir) {
  return nlohmann::json::parse(read_file(fixtures() / dir / "config.json"));
}

void expect_config_error(const nlohmann::json& j, const std::string& message) {
  try {
    parse_hf_config(j, "config.json");
    ADD_FAILURE() << "config accepted; expected an error containing '" << message << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(FamilyConfig, ParsesEveryFamilyWithItsFeatures) {
  TDYN_REQUIRE_SHARED("fixtures/gemma4");
  ModelConfig gpt2 = parse_hf_config(fixture_config("gpt2"), "gpt2");
  EXPECT_EQ(gpt2.d_mlp, 4 * gpt2.d_model);  // n_inner: null
  EXPECT_EQ(gpt2.activation, Activation::GeluTanh);
  EXPECT_TRUE(gpt2.learned_positions && gpt2.tied_embeddings);
  ModelConfig neo = parse_hf_config(fixture_config("gpt_neo"), "gpt_neo");
  EXPECT_EQ(neo.attn_scale, 1.0);
  EXPECT_EQ(neo.layer(0).sliding_window, 0);
  EXPECT_EQ(neo.layer(1).sliding_window, 8);
  ModelConfig bert = parse_hf_config(fixture_config("bert"), "bert");
  EXPECT_EQ(bert.norm_placement, NormPlacement::PostResidual);
  EXPECT_EQ(bert.activation, Activation::GeluErf);
  EXPECT_FALSE(bert.causal);
  ModelConfig albert = parse_hf_config(fixture_config("albert"), "albert");
  EXPECT_EQ(albert.embed_dim(), 32);
  ModelConfig olmo = parse_hf_config(fixture_config("olmo3"), "olmo3");
  EXPECT_EQ(olmo.norm_placement, NormPlacement::PostSublayer);
  EXPECT_EQ(olmo.qk_norm, QKNorm::FullProjection);
  ModelConfig gemma = parse_hf_config(fixture_config("gemma4"), "gemma4");
  EXPECT_EQ(gemma.norm_placement, NormPlacement::Sandwich);
  EXPECT_EQ(gemma.embed_scale, 8.0);
  EXPECT_EQ(gemma.final_logit_softcap, 10.0);
  EXPECT_EQ(gemma.d_per_layer_input, 8);
  ModelConfig gemma_text = parse_hf_config(fixture_config("gemma4/text_only"), "gemma4_text");
  EXPECT_EQ(gemma_text.n_layers, gemma.n_layers);
  EXPECT_EQ(gemma_text.layer(4).kv_source, 2);
}

// tdyn init follows each family's published rule: GPT-2's residual-writing projections get 0.02/√(2L).
TEST(FamilyInit, Gpt2ScalesTheResidualProjections) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2");
  const nlohmann::json config = fixture_config("gpt2");
  const fs::path dir = test::scratch_dir("init_gpt2");
  write_random_init(config, dir, 5);
  TensorStore store;
  read_safetensors(dir / "model.safetensors", store);
  auto std_of = [&](const std::string& name) {
    const FloatBuffer v = store.floats(name);
    double sum = 0, squares = 0;
    for (size_t i = 0; i < v.size(); ++i) sum += v.data()[i], squares += double(v.data()[i]) * v.data()[i];
    const double n = static_cast<double>(v.size()), mean = sum / n;
    return std::sqrt(squares / n - mean * mean);
  };
  const double range = config.value("initializer_range", 0.02), layers = config["n_layer"].get<double>();
  // 4096 draws or more: the sample std is within 3 % of the true one with overwhelming probability.
  for (const char* name : {"transformer.h.0.attn.c_proj.weight", "transformer.h.2.mlp.c_proj.weight"})
    EXPECT_NEAR(std_of(name), range / std::sqrt(2 * layers), 0.03 * range / std::sqrt(2 * layers)) << name;
  for (const char* name : {"transformer.h.0.attn.c_attn.weight", "transformer.h.1.mlp.c_fc.weight", "transformer.wte.weight"})
    EXPECT_NEAR(std_of(name), range, 0.03 * range) << name;
  const FloatBuffer ln = store.floats("transformer.h.0.ln_1.weight"), bias = store.floats("transformer.h.0.attn.c_proj.bias");
  for (size_t i = 0; i < ln.size(); ++i) EXPECT_EQ(ln.data()[i], 1.0f);
  for (size_t i = 0; i < bias.size(); ++i) EXPECT_EQ(bias.data()[i], 0.0f);
}

// The draw runs in blocks of 2^16 values, each its own stream: the same file on one thread as on two, and no block,
// tensor or seed repeats another's values.
TEST(FamilyInit, SameWeightsOnAnyNumberOfThreadsAndStreamsApart) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2");
  nlohmann::json config = fixture_config("gpt2");
  config["n_embd"] = 256;  // mlp.c_fc: 256 × 1024 values, four blocks
  const fs::path dir = test::scratch_dir("init_threads");
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  write_random_init(config, dir / "one", 3);
  omp_set_num_threads(2);
  write_random_init(config, dir / "two", 3);
  write_random_init(config, dir / "other_seed", 4);
  omp_set_num_threads(threads);
  EXPECT_EQ(read_file(dir / "one/model.safetensors"), read_file(dir / "two/model.safetensors"));
  TensorStore one, other;
  read_safetensors(dir / "one/model.safetensors", one);
  read_safetensors(dir / "other_seed/model.safetensors", other);
  const FloatBuffer fc = one.floats("transformer.h.0.mlp.c_fc.weight"), fc1 = one.floats("transformer.h.1.mlp.c_fc.weight"),
                    fc_other = other.floats("transformer.h.0.mlp.c_fc.weight");
  ASSERT_EQ(fc.size(), size_t{4} << 16);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_NE(fc.data()[i], fc.data()[i + (size_t{1} << 16)]) << "blocks 0 and 1 at " << i;
    EXPECT_NE(fc.data()[i], fc1.data()[i]) << "layers 0 and 1 at " << i;
    EXPECT_NE(fc.data()[i], fc_other.data()[i]) << "seeds 3 and 4 at " << i;
  }
}

TEST(FamilyConfig, UnsupportedFeaturesAreErrors) {
  TDYN_REQUIRE_SHARED("fixtures/gemma4");
  auto j = fixture_config("gpt2");
  j["model_type"] = "gpt_bigcode";
  expect_config_error(j, "unknown model_type 'gpt_bigcode'");
  j = fixture_config("gpt2");
  j["some_new_switch"] = true;
  expect_config_error(j, "unknown config key(s) 'some_new_switch'");
  j = fixture_config("olmo3");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}};
  expect_config_error(j, "rope scaling type 'yarn' is not supported");
  j = fixture_config("gemma4");
  j["text_config"]["attention_k_eq_v"] = true;
  expect_config_error(j, "attention_k_eq_v");
  j = fixture_config("gemma4");
  j["text_config"]["enable_moe_block"] = true;
  expect_config_error(j, "enable_moe_block");
  j = fixture_config("gemma4/text_only");
  j["use_bidirectional_attention"] = "vision";
  expect_config_error(j, "use_bidirectional_attention");
  j = fixture_config("bert");
  j["position_embedding_type"] = "relative_key";
  expect_config_error(j, "position_embedding_type 'relative_key'");
  j = fixture_config("albert");
  j["inner_group_num"] = 2;
  expect_config_error(j, "inner_group_num");
  j = fixture_config("gpt2");
  j["activation_function"] = "quick_gelu";
  expect_config_error(j, "activation_function 'quick_gelu'");
  j = fixture_config("gpt_neo");
  j["attention_types"] = {{{"global", "local"}, 2}};
  expect_config_error(j, "attention_types expands to 4 layers");
}

// ---------------------------------------------------------------------------------------------------------
// slm4096: a trained character-level GPT-2 (exact erf GELU) against its original code's float32 logits.

TEST(FamilySlm4096, LogitsMatchOriginalModel) {
  TDYN_REQUIRE_SHARED("models/slm4096/model.safetensors");
  const fs::path dir = test::shared_dir() / "models/slm4096";
  Transformer model(load_model(dir));
  EXPECT_EQ(model.config().activation, Activation::GeluErf);
  for (const char* name : {"corpus128", "q_cats"}) {
    std::vector<int64_t> ids64 = read_npy(dir / fmt::format("tokens_{}.npy", name)).as_int64();
    std::vector<int32_t> ids(ids64.begin(), ids64.end());
    NpyArray expected = read_npy(dir / fmt::format("logits_{}.npy", name));
    Tensor logits = model.forward(ids);
    ASSERT_EQ(expected.shape, logits.shape);
    std::vector<float> want = expected.as_float();
    // golden.json: max abs diff <= 1e-4 and the argmax identical at every row.
    auto c = test::compare(logits.ptr(), want.data(), want.size(), 0.0, 1e-4);
    EXPECT_TRUE(c.ok) << c.describe(name);
    std::cout << fmt::format("[fidelity] slm4096 {:<10} max |diff| / 1e-4 = {:.4f}\n", name, c.worst_ratio);
    const int64_t V = model.config().d_vocab;
    for (int64_t t = 0; t < logits.dim(0); ++t) {
      auto argmax = [&](const float* row) { return std::max_element(row, row + V) - row; };
      EXPECT_EQ(argmax(logits.row(t)), argmax(want.data() + t * V)) << name << " position " << t;
    }
  }
}

}  // namespace
}  // namespace tdyn
