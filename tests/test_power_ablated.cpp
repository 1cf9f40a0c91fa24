// The power-method analysis of an ablated model (model/ablation.h): its layer matrices against the float32 attention
// that ran the same edits, every dynamics mode against the forward pass or an identity of the edit, the token
// dynamics of `run_power` against forward passes with the edits, the steering through the heads that still write,
// and `tdyn power --ablate`.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "analysis/layer_matrix.h"
#include "analysis/power/run.h"
#include "test_util.h"

namespace tdyn {
namespace {

ZeroedParts zeroed_parts(const Transformer& t, const std::vector<std::string>& specs) { return ZeroedParts(t, Ablation::parse(specs)); }

// The largest |a - b| over two tensors of one shape.
double max_difference(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape, b.shape);
  double worst = 0;
  for (int64_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a.data[i]) - b.data[i]));
  return worst;
}

// One token attends to itself alone, so the attention output is F x + c exactly: with some heads' z set to 0 by the
// forward's own edit, F and c of the ablated model.
TEST(LayerMatrixAblated, IsTheAttentionOfTheAblatedModelOnOneToken) {
  TDYN_REQUIRE_SHARED("fixtures/llama");
  for (const char* family : {"gpt2", "gpt_neo", "bert", "llama", "olmo3"}) {  // Gemma 4's v_norm is not linear
    auto model = load_model(test::shared_dir() / "fixtures" / family);
    const Transformer t(model);
    const ModelConfig& c = model->config;
    const ZeroedParts parts = zeroed_parts(t, {fmt::format("blocks.*.attn.hook_z:heads=0,{}", c.n_heads - 1)});
    for (int64_t l = 0; l < c.n_layers; ++l) {
      Tensor x({1, c.d_model});
      for (int64_t i = 0; i < c.d_model; ++i) x.data[i] = static_cast<float>(std::sin(0.37 * i + l));
      const linalg::Vector xd = Eigen::Map<Eigen::VectorXf>(x.ptr(), c.d_model).cast<double>();
      const LayerMatrix ablated = layer_matrix(*model, l, parts), whole = layer_matrix(*model, l);
      const linalg::Vector expected = ablated.f * xd + ablated.bias;
      const Tensor y = t.attention(l, x, 0, nullptr, parts.edits(l).get());
      for (int64_t i = 0; i < c.d_model; ++i)
        EXPECT_NEAR(y.data[i], expected[i], 1e-4 * (1 + std::abs(expected[i]))) << family << " layer " << l << " row " << i;
      EXPECT_GT((expected - (whole.f * xd + whole.bias)).norm(), 1e-3) << family << " layer " << l << ": the heads wrote nothing";
    }
    // The attention output zeroed: no F, no c.
    const LayerMatrix none = layer_matrix(*model, 0, zeroed_parts(t, {"blocks.0.hook_attn_out"}));
    EXPECT_EQ(none.f.norm(), 0.0) << family;
    EXPECT_EQ(none.bias.norm(), 0.0) << family;
  }
}

// The full mode with the residual is the forward pass that ran the same edits, bit for bit, in every family.
TEST(PowerDynamicsAblated, FullModeIsTheAblatedForwardPass) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2");
  for (const char* family : {"gpt2", "bert", "olmo3", "gemma4", "llama"}) {
    Transformer model(load_model(test::shared_dir() / "fixtures" / family));
    const std::vector<int32_t> ids = {3, 17, 5, 9, 2, 11, 4};
    const DynamicsOptions options{DynamicsMode::Full, true, zeroed_parts(model, {"blocks.0.attn.hook_z:heads=1", "blocks.1.mlp.hook_post"})};
    ActivationCache cache("blocks.*.hook_resid_post");
    options.zeroed.add_edits(cache);
    model.forward(ids, &cache);
    ActivationCache clean("blocks.*.hook_resid_post");
    model.forward(ids, &clean);
    TokenState s = initial_state(model, ids, options);
    for (int64_t l = 0; l < model.config().n_layers; ++l) {
      apply_layer(model, l, s, options);
      const std::string post = fmt::format("blocks.{}.hook_resid_post", l);
      EXPECT_EQ(s.x.data, cache.at(post).data) << family << " layer " << l;
      EXPECT_GT(max_difference(s.x, clean.at(post)), 1e-4) << family << " layer " << l << ": the ablation changed nothing";
    }
  }
}

// The modes that leave out parts of the layer: a zeroed attention output adds nothing to the residual (attn-only and
// attn-only-l2), and without the residual the attention output is linear in z, so the outputs with complementary
// heads zeroed add up to the output with none plus the one with all.
TEST(PowerDynamicsAblated, PartialModesZeroTheSameParts) {
  TDYN_REQUIRE_SHARED("fixtures/llama");
  Transformer model(load_model(test::shared_dir() / "fixtures/llama"));  // pre-norm: the sublayer output is O z (+ b_O) itself
  const int64_t heads = model.config().n_heads;
  ASSERT_GE(heads, 2);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  for (DynamicsMode mode : {DynamicsMode::AttnOnly, DynamicsMode::AttnOnlyL2}) {
    const DynamicsOptions options{mode, true, zeroed_parts(model, {"blocks.0.hook_attn_out"})};
    TokenState s = initial_state(model, ids, options);
    const Tensor before = s.x;
    apply_layer(model, 0, s, options);
    EXPECT_LE(max_difference(s.x, before), mode == DynamicsMode::AttnOnly ? 0.0 : 1e-6) << to_string(mode);
  }
  auto output = [&](DynamicsMode mode, const std::string& spec) {
    const DynamicsOptions options{mode, false, spec.empty() ? ZeroedParts() : zeroed_parts(model, {spec})};
    TokenState s = initial_state(model, ids, options);
    apply_layer(model, 0, s, options);
    return s.x;
  };
  std::string first = "blocks.0.attn.hook_z:heads=0", rest = "blocks.0.attn.hook_z:heads=1";
  for (int64_t h = 2; h < heads; ++h) rest += fmt::format(",{}", h);
  const Tensor a = output(DynamicsMode::AttnOnly, first), b = output(DynamicsMode::AttnOnly, rest);
  const Tensor none = output(DynamicsMode::AttnOnly, ""), all = output(DynamicsMode::AttnOnly, "blocks.0.attn.hook_z");
  Tensor sum = a, expected = none;
  for (int64_t i = 0; i < sum.size(); ++i) sum.data[i] += b.data[i], expected.data[i] += all.data[i];
  EXPECT_LE(max_difference(sum, expected), 1e-5);
  EXPECT_GT(max_difference(a, none), 1e-3);
  // A whole layer without the residual, its MLP output zeroed: a sequential block gives 0.
  const Tensor zero = output(DynamicsMode::Full, "blocks.0.hook_mlp_out");
  EXPECT_EQ(max_difference(zero, Tensor(zero.shape)), 0.0);
}

std::vector<Sample> stories_samples() {
  return {{{1, 403, 407, 261, 378, 418, 356, 260, 299, 412}, 0}, {{1, 320, 345, 281, 260, 283}, 1}};
}

// run_power's token dynamics (a sample pass with the edits) are the alignments of the ablated forward passes' states
// with the dominant eigenvectors of the ablated layer matrices.
TEST(PowerAblated, TokenDynamicsAreThoseOfTheAblatedForwardPasses) {
  TDYN_REQUIRE_SHARED(test::kStories);
  auto model = load_model(test::shared_dir() / test::kStories);
  const Transformer t(model);
  const std::vector<Sample> samples = stories_samples();
  PowerOptions options;
  options.iterate = options.steer = false;
  options.ablations = Ablation::parse(std::vector<std::string>{"blocks.1.attn.hook_z:heads=0,2", "blocks.3.hook_mlp_out"});
  const PowerResult r = run_power(model, "stories260K", samples, options, silent_progress());
  const ZeroedParts parts(t, options.ablations);
  const int64_t L = model->config.n_layers;
  ASSERT_EQ(static_cast<int64_t>(r.matrices.size()), L);
  EXPECT_EQ(r.spectra[1].f.lambda1, layer_spectrum(layer_matrix(*model, 1, parts)).f.lambda1);
  int64_t token = 0;
  for (const Sample& sample : samples) {
    ActivationCache cache("blocks.*.hook_resid_*");
    parts.add_edits(cache);
    t.forward(sample.ids, &cache);
    for (int64_t i = 0; i < static_cast<int64_t>(sample.ids.size()); ++i, ++token)
      for (int64_t l = 0; l < L; ++l) {
        const Tensor& after = cache.at(l + 1 < L ? fmt::format("blocks.{}.hook_resid_pre", l + 1) : fmt::format("blocks.{}.hook_resid_post", l));
        const double expected = alignment(token_state(after, i), dominant_basis(r.spectra[l].f));
        EXPECT_NEAR(r.dynamics.after[l][token], expected, 1e-5) << "layer " << l << " token " << token;
      }
  }
  options.ablations.clear();
  const PowerResult clean = run_power(model, "stories260K", samples, options, silent_progress());
  EXPECT_EQ(clean.dynamics.after[0], r.dynamics.after[0]);  // before the first ablated part
  EXPECT_NE(clean.spectra[1].f.lambda1, r.spectra[1].f.lambda1);
  EXPECT_NE(clean.dynamics.after[3], r.dynamics.after[3]);
}

// With heads of the last layer zeroed, w lives on the other heads: F' = F + c u (P u)ᵀ for the ablated F and the
// projection P onto the ablated V's row space, the sweep's c = 0 is the ablated model itself, and a large c still
// aligns every token with u. Every head zeroed leaves nothing to steer.
TEST(PowerAblated, SteeringRunsThroughTheHeadsThatStillWrite) {
  TDYN_REQUIRE_SHARED(test::kStories);
  auto model = load_model(test::shared_dir() / test::kStories);
  const Transformer t(model);
  const int64_t last = model->config.n_layers - 1;
  const ZeroedParts parts = zeroed_parts(t, {fmt::format("blocks.{}.attn.hook_z:heads=0,1,5", last)});
  const RankOneSteering s = rank_one_steering(*model, last, random_direction(model->config.d_model, 1), parts);
  const Matrix v = expanded_value_matrix(*model, last, parts);
  const Matrix projector = v.completeOrthogonalDecomposition().pseudoInverse() * v;
  EXPECT_NEAR(s.reachable, s.u.dot(projector * s.u), 1e-8);
  const double c = 3.0;
  const Matrix expected = layer_matrix(*model, last, parts).f + c * s.u * (projector * s.u).transpose();
  EXPECT_LE((layer_matrix(*steered_model(model, s, c), last, parts).f - expected).norm(), 1e-5 * expected.norm());

  SteeringOptions o;
  o.scales = {0, 1e5};
  o.control_draws = 1;
  const SteeringResult r = steering_sweep(model, s.u, stories_samples(), o, silent_progress(), parts);
  EXPECT_EQ(r.points[0].mean_kl, 0.0);
  EXPECT_GE(r.points[1].min_alignment, 0.99);
  try {
    rank_one_steering(*model, last, s.u, zeroed_parts(t, {fmt::format("blocks.{}.hook_attn_out", last)}));
    ADD_FAILURE() << "steered a layer whose attention output is zeroed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention is ablated"), std::string::npos) << e.what();
  }
}

TEST(PowerAblated, CliRecordsTheAblationsAndRefusesBadOnes) {
  TDYN_REQUIRE_SHARED(test::kStories);
  const fs::path out = test::scratch_dir("power_ablated_cli");
  const std::string model = (test::shared_dir() / test::kStories).string();
  const std::string args = fmt::format("power {} --ids 1,403,407,261,378,418 --out {} --no-steer --ablate "
                                       "'blocks.2.attn.hook_z:heads=3' --ablate blocks.0.mlp.hook_post --quiet", model, out.string());
  std::string err;
  ASSERT_EQ(test::run_cli(args, nullptr, &err), 0) << err;
  std::ifstream in(out / "results.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["options"]["ablate"], nlohmann::json({"blocks.2.attn.hook_z:zero:heads=3", "blocks.0.mlp.hook_post:zero"}));
  for (const std::string bad : {"blocks.0.hook_resid_mid", "blocks.0.attn.hook_z:heads=99", "blocks.0.attn.hook_z:mean", "blocks.9.nothing"}) {
    ASSERT_NE(test::run_cli(fmt::format("power {} --ids 1,2,3 --out {} --ablate {}", model, out.string(), bad), nullptr, &err), 0) << bad;
    EXPECT_NE(err.find(bad.substr(0, bad.find(':'))), std::string::npos) << bad << ": " << err;  // the message names it
  }
}

}  // namespace
}  // namespace tdyn
