// Layer matrices F_t = O_t V_t and offsets c_t = O_t b_V + b_O (the power-method paper) against the fixtures' float64
// references blocks.{l}.layer_matrix / layer_matrix_bias, for every family (the shared fixtures and the generated
// ones); plus the uniform-attention identity attn_out = F x̄ + c through the real attention code, and the llama2.c /
// HF-layout agreement of stories260K.
#include <gtest/gtest.h>

#include "analysis/layer_matrix.h"
#include "fixture_check.h"
#include "generated_fixtures.h"
#include "io/safetensors.h"
#include "model/transformer.h"

namespace tdyn {
namespace {

std::vector<float> row_major_floats(const linalg::Matrix& m) {
  std::vector<float> out(m.size());
  for (linalg::Index r = 0; r < m.rows(); ++r)
    for (linalg::Index c = 0; c < m.cols(); ++c) out[r * m.cols() + c] = static_cast<float>(m(r, c));
  return out;
}

// Every layer's F and c of the checkpoint in `dir` against its refs.safetensors.
void expect_layer_matrices_match(const fs::path& dir) {
  auto model = load_model(dir);
  TensorStore refs;
  read_safetensors(dir / "refs.safetensors", refs);
  const auto matrices = layer_matrices(*model);
  ASSERT_EQ(static_cast<int64_t>(matrices.size()), model->config.n_layers);
  for (const LayerMatrix& m : matrices) {
    const std::string key = fmt::format("blocks.{}.layer_matrix", m.layer);
    ASSERT_TRUE(refs.contains(key)) << key;
    // expect_matches_ref takes float32; the float64 F rounded to float32 is far inside rtol 1e-5.
    std::vector<float> f = row_major_floats(m.f);
    test::expect_matches_ref(refs, key, f.data(), f.size());
    std::vector<float> bias(m.bias.data(), m.bias.data() + m.bias.size());
    test::expect_matches_ref(refs, key + "_bias", bias.data(), bias.size());
  }
}

class LayerMatrixFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(LayerMatrixFixture, MatchesReferences) {
  TDYN_REQUIRE_SHARED("fixtures/" + GetParam());
  expect_layer_matrices_match(test::shared_dir() / "fixtures" / GetParam());
}

INSTANTIATE_TEST_SUITE_P(LayerMatrixFamilies, LayerMatrixFixture,
                         ::testing::Values("gpt2", "gpt_neo", "bert", "albert", "llama", "llama_tied", "olmo3", "gemma4"));

// The families whose references tests/refgen/extra_families.py makes (Qwen3: with its o_proj bias in c).
class LayerMatrixGenerated : public ::testing::TestWithParam<std::string> {};

TEST_P(LayerMatrixGenerated, MatchesReferences) {
  TDYN_REQUIRE_GENERATED(root, extra_family_fixtures);
  expect_layer_matrices_match(root / GetParam());
}

INSTANTIATE_TEST_SUITE_P(LayerMatrixFamilies, LayerMatrixGenerated, ::testing::Values("mistral", "qwen2", "qwen3", "phi3"));

TEST(LayerMatrix, Gemma4SharedLayersUseTheSourceValues) {
  TDYN_REQUIRE_SHARED("fixtures/gemma4");
  auto model = load_model(test::shared_dir() / "fixtures/gemma4");
  int shared = 0;
  for (int64_t l = 0; l < model->config.n_layers; ++l) {
    LayerMatrix m = layer_matrix(*model, l);
    EXPECT_EQ(m.value_layer, model->config.layer(l).kv_source);
    shared += m.value_layer != l;
  }
  EXPECT_EQ(shared, 2);  // the fixture has two KV-shared layers
}

TEST(LayerMatrix, AlbertLayersAreTheSharedLayer) {
  TDYN_REQUIRE_SHARED("fixtures/albert");
  auto model = load_model(test::shared_dir() / "fixtures/albert");
  const auto m = layer_matrices(*model);
  for (size_t l = 1; l < m.size(); ++l) EXPECT_EQ((m[l].f - m[0].f).norm(), 0.0);
}

// The uniform-attention identity: when every query head mixes its KV head's values with equal weights, the
// attention output is O(V x̄ + b_V) + b_O = F x̄ + c. Computed here through the model's own bound Linear views
// (storage layout, head grouping, bias path) for one x̄.
TEST(LayerMatrix, OffsetAndMatrixReproduceTheProjections) {
  TDYN_REQUIRE_SHARED("fixtures/llama");
  for (const char* family : {"llama", "gpt2", "gemma4"}) {
    auto model = load_model(test::shared_dir() / "fixtures" / family);
    const ModelConfig& c = model->config;
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const LayerMatrix m = layer_matrix(*model, l);
      const LayerWeights& w = model->weights.layers[l];
      const LayerWeights& src = model->weights.layers[m.value_layer];
      const int64_t d_head = c.layer(l).d_head, group = c.n_heads / c.n_kv_heads;
      std::vector<float> x(c.d_model);
      for (int64_t i = 0; i < c.d_model; ++i) x[i] = static_cast<float>(std::sin(0.37 * i + l));
      std::vector<float> kv(src.v.out), z(c.n_heads * d_head), y(c.d_model);
      src.v.apply(x.data(), 1, kv.data());
      for (int64_t h = 0; h < c.n_heads; ++h)  // every query head takes its KV head's values (uniform pattern)
        for (int64_t r = 0; r < d_head; ++r) z[h * d_head + r] = kv[(h / group) * d_head + r];
      w.o.apply(z.data(), 1, y.data());
      linalg::Vector xd = Eigen::Map<Eigen::VectorXf>(x.data(), c.d_model).cast<double>();
      linalg::Vector expected = m.f * xd + m.bias;
      for (int64_t i = 0; i < c.d_model; ++i)
        EXPECT_NEAR(y[i], expected[i], 1e-4 * (1 + std::abs(expected[i]))) << family << " layer " << l << " row " << i;
    }
  }
}

// llama2.c's checkpoint and its HF conversion (q/k permuted for RoPE; v and o untouched) give the same F_t.
TEST(LayerMatrix, Llama2cAndHfLayoutAgree) {
  TDYN_REQUIRE_SHARED("fixtures/stories260K_hf");
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  auto hf = load_model(test::shared_dir() / "fixtures/stories260K_hf");
  auto l2c = load_model(test::shared_dir() / "models/stories260K/stories260K.bin");
  ASSERT_EQ(hf->config.n_layers, l2c->config.n_layers);
  for (int64_t l = 0; l < hf->config.n_layers; ++l) {
    LayerMatrix a = layer_matrix(*hf, l), b = layer_matrix(*l2c, l);
    EXPECT_LE((a.f - b.f).norm(), 1e-6 * a.f.norm()) << "layer " << l;
  }
}

TEST(LayerMatrix, OutOfRangeLayerIsAnError) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2");
  auto model = load_model(test::shared_dir() / "fixtures/gpt2");
  EXPECT_THROW(layer_matrix(*model, 3), Error);
  EXPECT_THROW(layer_matrix(*model, -1), Error);
}

}  // namespace
}  // namespace tdyn
