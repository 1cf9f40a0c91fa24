// The real-model bridge of the clustering paper (analysis/particles/bridge.h) and `tdyn particles --from-model`: one head's
// Q, K, V, O and the initial tokens against a computation from the raw tensors of the checkpoint (read from the
// tensor store by name, not through the bound weights), the whole layer against the layer matrix F_t and the
// per-head scores, grouped-query attention, the errors, and CLI runs on stories260K.
#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

#include "analysis/layer_matrix.h"
#include "analysis/particles/bridge.h"
#include "core/npy.h"
#include "model/loader.h"
#include "test_util.h"

namespace tdyn::particles {
namespace {

using test::kStories;

// Tensor names of one layer in the two Llama layouts the tests use.
struct Names {
  std::string q, k, v, o, norm, embed;
};

Names tensor_names(const Model& model, int64_t l) {
  if (model.config.format == "llama2c")
    return {fmt::format("layers.{}.attention.wq.weight", l), fmt::format("layers.{}.attention.wk.weight", l),
            fmt::format("layers.{}.attention.wv.weight", l), fmt::format("layers.{}.attention.wo.weight", l),
            fmt::format("layers.{}.attention_norm.weight", l), "tok_embeddings.weight"};
  const std::string p = fmt::format("model.layers.{}.", l);
  return {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight",
          p + "self_attn.o_proj.weight", p + "input_layernorm.weight", "model.embed_tokens.weight"};
}

void expect_matrix_close(const Matrix& got, const Matrix& expected, double rtol, const std::string& what) {
  ASSERT_EQ(got.rows(), expected.rows()) << what;
  ASSERT_EQ(got.cols(), expected.cols()) << what;
  const double atol = rtol * expected.cwiseAbs().maxCoeff();
  const auto c = test::compare(got.data(), expected.data(), got.size(), rtol, atol);
  EXPECT_TRUE(c.ok) << c.describe(what);
}

class ParticlesBridgeLlama : public ::testing::TestWithParam<std::string> {};

// Q = β W_q[h] G, K = W_k[kv(h)] G, V = W_v[kv(h)] G, O = W_o[:, h], G = diag(sqrt(d) g), for every head of the
// first and last layer; x0 = the unit embedding rows of the ids.
TEST_P(ParticlesBridgeLlama, HeadMatchesRawWeights) {
  TDYN_REQUIRE_SHARED(GetParam());
  auto model = load_model(test::shared_dir() / GetParam());
  const ModelConfig& c = model->config;
  const int64_t d = c.d_model, H = c.n_heads, dh = c.d_head, group = c.n_heads / c.n_kv_heads;
  const double beta = 1.0 / std::sqrt(static_cast<double>(dh));  // Llama's scale
  for (int64_t l : {int64_t{0}, c.n_layers - 1}) {
    const Names names = tensor_names(*model, l);
    const std::vector<double> wq = model->store.doubles(names.q), wk = model->store.doubles(names.k),
                              wv = model->store.doubles(names.v), wo = model->store.doubles(names.o),
                              g = model->store.doubles(names.norm);
    for (int64_t h = 0; h < H; ++h) {
      nlohmann::json record;
      const particles::AttentionHead head = model_attention_head(*model, {l, h, 32}, &record);
      const int64_t kv = h / group;
      EXPECT_EQ(record["kv_head"], kv);
      Matrix q(dh, d), k(dh, d), v(dh, d), o(d, dh);
      for (int64_t r = 0; r < dh; ++r)
        for (int64_t i = 0; i < d; ++i) {
          const double gain = std::sqrt(static_cast<double>(d)) * g[i];
          q(r, i) = beta * wq[(h * dh + r) * d + i] * gain;
          k(r, i) = wk[(kv * dh + r) * d + i] * gain;
          v(r, i) = wv[(kv * dh + r) * d + i] * gain;
          o(i, r) = wo[i * (H * dh) + h * dh + r];
        }
      const std::string where = fmt::format("{} layer {} head {}", GetParam(), l, h);
      expect_matrix_close(head.query, q, 1e-12, "Q of " + where);
      expect_matrix_close(head.key, k, 1e-12, "K of " + where);
      expect_matrix_close(head.value, v, 1e-12, "V of " + where);
      expect_matrix_close(head.output, o, 1e-12, "O of " + where);
    }
  }

  const std::vector<int32_t> ids = {1, 5, 9, 5, 200};
  nlohmann::json record;
  const Matrix x0 = model_initial_tokens(*model, ids, {0, 0, 4}, &record);
  EXPECT_EQ(record["tokens"], 4);
  EXPECT_EQ(record["token_ids"], (std::vector<int32_t>{1, 5, 9, 5}));
  const std::vector<double> embed = model->store.doubles(tensor_names(*model, 0).embed);
  Matrix expected(4, d);
  for (int64_t t = 0; t < 4; ++t) {
    for (int64_t i = 0; i < d; ++i) expected(t, i) = embed[ids[t] * d + i];
    expected.row(t).normalize();
  }
  expect_matrix_close(x0, expected, 1e-12, "x0 (unit embedding rows)");
}

// The whole layer: W = O V = F_t G, and the scores are the sum of the heads' scores.
TEST_P(ParticlesBridgeLlama, WholeLayerIsTheLayerMatrixAndSummedScores) {
  TDYN_REQUIRE_SHARED(GetParam());
  auto model = load_model(test::shared_dir() / GetParam());
  const ModelConfig& c = model->config;
  const int64_t d = c.d_model;
  const int64_t l = c.n_layers - 1;
  nlohmann::json record;
  const particles::AttentionHead layer = model_attention_head(*model, {l, -1, 32}, &record);
  EXPECT_EQ(record["head"], "all");
  EXPECT_EQ(layer.query.rows(), c.n_heads * c.d_head);

  Matrix expected = layer_matrix(*model, l).f;
  const float* g = model->weights.layers[l].attn_norm.w;
  ASSERT_NE(g, nullptr);
  for (int64_t i = 0; i < d; ++i) expected.col(i) *= std::sqrt(static_cast<double>(d)) * g[i];
  expect_matrix_close(layer.value_map(), expected, 1e-10, "O V vs F_t diag(sqrt(d) g)");

  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  Vector x(d), y(d);
  for (int64_t i = 0; i < d; ++i) x[i] = normal(rng), y[i] = normal(rng);
  double summed = 0;
  for (int64_t h = 0; h < c.n_heads; ++h) {
    const particles::AttentionHead head = model_attention_head(*model, {l, h, 32}, nullptr);
    summed += (head.query * x).dot(head.key * y);
    // Head h is block h of the stacked matrices, bit for bit.
    EXPECT_EQ(head.query, layer.query.middleRows(h * c.d_head, c.d_head)) << "head " << h;
    EXPECT_EQ(head.key, layer.key.middleRows(h * c.d_head, c.d_head)) << "head " << h;
  }
  const double score = (layer.query * x).dot(layer.key * y);
  EXPECT_NEAR(score, summed, 1e-10 * std::max(1.0, std::abs(summed)));
}

INSTANTIATE_TEST_SUITE_P(Particles, ParticlesBridgeLlama, ::testing::Values(kStories, "fixtures/llama"),
                         [](const auto& info) { return info.index == 0 ? std::string("stories260K") : std::string("llama_fixture"); });

// GPT-2 stores Conv1D [in, out] weights and has a LayerNorm with bias: the layer matrix identity still holds.
TEST(ParticlesBridge, Gpt2WholeLayerIsTheLayerMatrix) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2");
  auto model = load_model(test::shared_dir() / "fixtures/gpt2");
  const int64_t d = model->config.d_model;
  for (int64_t l = 0; l < model->config.n_layers; ++l) {
    nlohmann::json record;
    const particles::AttentionHead layer = model_attention_head(*model, {l, -1, 32}, &record);
    Matrix expected = layer_matrix(*model, l).f;
    for (int64_t i = 0; i < d; ++i) expected.col(i) *= std::sqrt(static_cast<double>(d)) * model->weights.layers[l].attn_norm.w[i];
    expect_matrix_close(layer.value_map(), expected, 1e-10, fmt::format("gpt2 layer {}: O V vs F_t G", l));
    const std::string left_out = record["left_out"].dump();
    EXPECT_NE(left_out.find("attention biases"), std::string::npos) << left_out;
    EXPECT_NE(left_out.find("LayerNorm"), std::string::npos) << left_out;
  }
}

// Grouped-query attention (the fixture has 4 query heads on 2 KV heads): heads 0, 1 share keys and values, so do
// heads 2, 3, and the two groups differ.
TEST(ParticlesBridge, GroupedQueryHeadsShareTheirKvHead) {
  TDYN_REQUIRE_SHARED("fixtures/llama");
  auto model = load_model(test::shared_dir() / "fixtures/llama");
  ASSERT_EQ(model->config.n_heads, 4);
  ASSERT_EQ(model->config.n_kv_heads, 2);
  std::vector<particles::AttentionHead> heads;
  for (int64_t h = 0; h < 4; ++h) heads.push_back(model_attention_head(*model, {1, h, 32}, nullptr));
  EXPECT_EQ(heads[0].key, heads[1].key);
  EXPECT_EQ(heads[2].key, heads[3].key);
  EXPECT_EQ(heads[0].value, heads[1].value);
  EXPECT_EQ(heads[2].value, heads[3].value);
  EXPECT_NE(heads[0].key, heads[2].key);
  EXPECT_NE(heads[0].query, heads[1].query);
}

TEST(ParticlesBridge, SystemIsOnTheSphere) {
  TDYN_REQUIRE_SHARED(kStories);
  auto model = load_model(test::shared_dir() / kStories);
  const ModelParticles p = model_particles(*model, {1, 403, 407, 261}, {2, 3, 32});
  EXPECT_TRUE(p.experiment.system.project_to_sphere);
  EXPECT_FALSE(p.experiment.system.ffn.has_value());
  EXPECT_EQ(p.experiment.x0.rows(), 4);  // fewer ids than tokens asked for
  EXPECT_EQ(p.record["layer"], 2);
  EXPECT_EQ(p.record["head"], 3);
  for (int64_t t = 0; t < 4; ++t) EXPECT_NEAR(p.experiment.x0.row(t).norm(), 1.0, 1e-14);
  EXPECT_TRUE(p.record["left_out"].dump().find("RoPE") != std::string::npos);
}

// ALBERT's embeddings (32 wide) reach d_model = 64 through the embedding LayerNorm and
// embedding_hidden_mapping_in, computed here in float64 from the raw tensors.
TEST(ParticlesBridge, NarrowEmbeddingsGoThroughTheMappingIn) {
  TDYN_REQUIRE_SHARED("fixtures/albert");
  auto model = load_model(test::shared_dir() / "fixtures/albert");
  const int64_t e = 32, d = model->config.d_model;
  ASSERT_EQ(model->config.embed_dim(), e);
  const std::vector<double> words = model->store.doubles("albert.embeddings.word_embeddings.weight"),
                            gamma = model->store.doubles("albert.embeddings.LayerNorm.weight"),
                            beta = model->store.doubles("albert.embeddings.LayerNorm.bias"),
                            map = model->store.doubles("albert.encoder.embedding_hidden_mapping_in.weight"),
                            map_bias = model->store.doubles("albert.encoder.embedding_hidden_mapping_in.bias");
  const std::vector<int32_t> ids = {2, 3, 4, 3};
  nlohmann::json record;
  const Matrix x0 = model_initial_tokens(*model, ids, {0, -1, 32}, &record);
  Matrix expected(4, d);
  for (int64_t t = 0; t < 4; ++t) {
    Vector row(e);
    for (int64_t i = 0; i < e; ++i) row[i] = words[ids[t] * e + i];
    const double mean = row.mean(), var = (row.array() - mean).square().mean();
    for (int64_t i = 0; i < e; ++i) row[i] = (row[i] - mean) / std::sqrt(var + 1e-12) * gamma[i] + beta[i];
    for (int64_t o = 0; o < d; ++o) {
      expected(t, o) = map_bias[o];
      for (int64_t i = 0; i < e; ++i) expected(t, o) += map[o * e + i] * row[i];
    }
    expected.row(t).normalize();
  }
  expect_matrix_close(x0, expected, 1e-5, "ALBERT initial tokens");
  EXPECT_EQ(x0.row(1), x0.row(3));  // the same id, the same token
  EXPECT_NE(record["initial_tokens"].get<std::string>().find("embedding_hidden_mapping_in"), std::string::npos);
}

TEST(ParticlesBridge, ErrorsNameTheLayerAndHead) {
  TDYN_REQUIRE_SHARED(kStories);
  auto model = load_model(test::shared_dir() / kStories);
  auto message = [&](const ModelHeadOptions& o) {
    try {
      model_attention_head(*model, o, nullptr);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({5, 0, 32}).find("layer 5 is out of range: the model has 5 layers"), std::string::npos) << message({5, 0, 32});
  EXPECT_NE(message({-1, 0, 32}).find("layer -1 is out of range"), std::string::npos);
  EXPECT_NE(message({0, 8, 32}).find("head 8 is out of range: layer 0 has 8 heads"), std::string::npos) << message({0, 8, 32});
  EXPECT_THROW(model_initial_tokens(*model, {}, {}, nullptr), Error);
  EXPECT_THROW(model_initial_tokens(*model, {1, 512}, {}, nullptr), Error);  // the vocabulary has 512 ids
}

// Gemma 4 KV-shared layers read an earlier layer's keys: no key projection of their own.
TEST(ParticlesBridge, KvSharedLayerIsRefused) {
  TDYN_REQUIRE_SHARED("fixtures/gemma4");
  auto model = load_model(test::shared_dir() / "fixtures/gemma4");
  int refused = 0;
  for (int64_t l = 0; l < model->config.n_layers; ++l) {
    if (model->config.layer(l).kv_source == l) continue;
    try {
      model_attention_head(*model, {l, 0, 32}, nullptr);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("KV sharing"), std::string::npos) << e.what();
      ++refused;
    }
  }
  EXPECT_EQ(refused, 2);
}

TEST(ParticlesBridgeCli, FlagErrors) {
  const fs::path dir = test::scratch_dir("particles_bridge_errors");
  std::string err;
  EXPECT_EQ(test::run_cli(fmt::format("particles --layer 1 --out {}", (dir / "a").string()), nullptr, &err), 2);
  EXPECT_NE(err.find("--from-model"), std::string::npos) << err;
  EXPECT_EQ(test::run_cli(fmt::format("particles --head 1 --out {}", (dir / "b").string()), nullptr, &err), 2);
  EXPECT_NE(err.find("--from-model"), std::string::npos) << err;
  EXPECT_EQ(test::run_cli(fmt::format("particles --from-model m.bin --preset leaders --out {}", (dir / "c").string()), nullptr, &err), 2);
  EXPECT_NE(err.find("--preset"), std::string::npos) << err;
  EXPECT_EQ(test::run_cli(fmt::format("particles --from-model m.bin --query identity --out {}", (dir / "d").string()), nullptr, &err), 2);
  EXPECT_NE(err.find("--query"), std::string::npos) << err;
}

TEST(ParticlesBridgeCli, LayerOutOfRange) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path dir = test::scratch_dir("particles_bridge_range");
  std::string err;
  EXPECT_EQ(test::run_cli(fmt::format("particles --from-model {} --layer 9 --ids 1,2,3 --out {}", (test::shared_dir() / kStories).string(),
                                      (dir / "a").string()),
                          nullptr, &err),
            1);
  EXPECT_NE(err.find("layer 9 is out of range"), std::string::npos) << err;
  // The particles start from one sample: a second --ids is refused, not dropped.
  EXPECT_EQ(test::run_cli(fmt::format("particles --from-model {} --layer 1 --ids 1,2,3 --ids 4,5 --out {}",
                                      (test::shared_dir() / kStories).string(), (dir / "b").string()),
                          nullptr, &err),
            1);
  EXPECT_NE(err.find("the particles start from one sample of tokens: 2 were given as ids"), std::string::npos) << err;
}

// The example: one head of stories260K on the default corpus.
TEST(ParticlesBridgeCli, OneHeadOfStories260K) {
  TDYN_REQUIRE_SHARED(kStories);
  TDYN_REQUIRE_SHARED("data/wikitext-2/wiki.test.raw");
  const fs::path dir = test::scratch_dir("particles_bridge_head") / "out";
  std::string out, err;
  ASSERT_EQ(test::run_cli(fmt::format("particles --from-model {} --layer 0 --head 0 --n 16 --T 2 --out {}",
                                      (test::shared_dir() / kStories).string(), dir.string()),
                          &out, &err),
            0)
      << err;
  const auto j = nlohmann::json::parse(read_file(dir / "results.json"));
  const auto& m = j["model"];
  EXPECT_EQ(m["source"], "model");
  EXPECT_EQ(m["family"], "llama");
  EXPECT_EQ(m["layer"], 0);
  EXPECT_EQ(m["head"], 0);
  EXPECT_EQ(m["bridge"]["kv_head"], 0);
  EXPECT_EQ(m["bridge"]["tokens"], 16);
  EXPECT_EQ(m["bridge"]["token_ids"].size(), 16u);
  EXPECT_NE(m["bridge"]["token_source"]["data"].get<std::string>().find("wiki.test.raw"), std::string::npos);
  EXPECT_TRUE(m["bridge"]["left_out"].is_array());
  // The real-layer defaults, with the flags given.
  EXPECT_EQ(j["options"]["T"], 2.0);
  EXPECT_EQ(j["options"]["sphere"], true);
  EXPECT_EQ(j["options"]["cluster_on"], "x");
  EXPECT_EQ(j["options"]["n"], 16);
  EXPECT_EQ(j["options"]["d_head"], 8);
  const NpyArray x = read_npy(dir / "x.npy");
  ASSERT_EQ(x.shape, (Shape{21, 16, 64}));  // t = 0, 0.1, ..., 2
  const std::vector<double> xs = x.as_double();
  for (int64_t t = 0; t < 16; ++t) {  // the last save is on the sphere
    double norm = 0;
    for (int64_t i = 0; i < 64; ++i) norm += xs[(20 * 16 + t) * 64 + i] * xs[(20 * 16 + t) * 64 + i];
    EXPECT_NEAR(std::sqrt(norm), 1.0, 1e-12) << "token " << t;
  }
  EXPECT_EQ(read_npy(dir / "Q.npy").shape, (Shape{8, 64}));
  EXPECT_NE(out.find("layer 0 head 0"), std::string::npos) << out;
  // The figures show what clusters on the sphere: the tokens x, not the rescaled z.
  EXPECT_NE(read_file(dir / "trajectories.gp").find("set title 'tokens x_i(t) on the unit sphere'"), std::string::npos);
  EXPECT_NE(read_file(dir / "clusters.gp").find("set title 'number of clusters of x over time'"), std::string::npos);
}

// The whole layer from a prompt: the n tokens are the prompt's and T defaults to 20; flags given override the
// real-layer defaults.
TEST(ParticlesBridgeCli, WholeLayerFromAPromptAndOverrides) {
  TDYN_REQUIRE_SHARED(kStories);
  const fs::path dir = test::scratch_dir("particles_bridge_layer");
  const std::string model = (test::shared_dir() / kStories).string();
  std::string out, err;
  ASSERT_EQ(test::run_cli(fmt::format("particles --from-model {} --layer 1 --prompt 'Once upon a time' --dt 0.5 --out {}", model,
                                      (dir / "a").string()),
                          &out, &err),
            0)
      << err;
  auto j = nlohmann::json::parse(read_file(dir / "a/results.json"));
  EXPECT_EQ(j["model"]["head"], "all");
  EXPECT_EQ(j["model"]["bridge"]["head"], "all");
  EXPECT_EQ(j["options"]["T"], 20.0);
  EXPECT_EQ(j["options"]["dt"], 0.5);
  EXPECT_EQ(j["options"]["sphere"], true);
  const int64_t n = j["options"]["n"];
  EXPECT_GT(n, 1);
  EXPECT_LT(n, 32);
  EXPECT_EQ(read_npy(dir / "a/Q.npy").shape, (Shape{64, 64}));  // 8 heads of 8 stacked
  EXPECT_EQ(read_npy(dir / "a/x.npy").shape, (Shape{41, n, 64}));

  ASSERT_EQ(test::run_cli(fmt::format("particles --from-model {} --layer 1 --head 7 --ids 1,403,407 --T 1 --no-sphere --cluster-on z "
                                      "--out {}",
                                      model, (dir / "b").string()),
                          &out, &err),
            0)
      << err;
  j = nlohmann::json::parse(read_file(dir / "b/results.json"));
  EXPECT_EQ(j["model"]["head"], 7);
  EXPECT_EQ(j["model"]["bridge"]["kv_head"], 3);
  EXPECT_EQ(j["options"]["n"], 3);
  EXPECT_EQ(j["options"]["T"], 1.0);
  EXPECT_EQ(j["options"]["sphere"], false);
  EXPECT_EQ(j["options"]["cluster_on"], "z");
}

}  // namespace
}  // namespace tdyn::particles
