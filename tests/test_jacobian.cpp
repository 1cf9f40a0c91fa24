// Sublayer Jacobians: against the fixtures' float64 references (every family), against central finite
// differences of the float64 local map, and the structured form / structured mean against the plain path.
#include <optional>
#include <random>

#include "analysis/jacobian/jacobian_model.h"
#include "analysis/jacobian/means.h"
#include "fixture_check.h"
#include "io/safetensors.h"
#include "model/ablation.h"
#include "model/loader.h"
#include "test_util.h"

namespace tdyn {
namespace {

using linalg::Matrix;
using linalg::Vector;

struct Loaded {
  std::shared_ptr<JacobianModel> model;
  TensorStore refs;
};

Loaded load_fixture(const std::string& family) {
  const fs::path dir = test::shared_dir() / "fixtures" / family;
  Loaded f;
  f.model = std::make_shared<JacobianModel>(std::make_shared<Transformer>(load_model(dir)));
  read_safetensors(dir / "refs.safetensors", f.refs);
  return f;
}

std::vector<int32_t> ints32(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

// Worst |a − ref| / (rtol |ref| + atol_x_max · max|ref|) over the matrix (the fixture convention).
double ref_ratio(const TensorStore& refs, const std::string& key, const Matrix& got) {
  const std::vector<double> ref = refs.doubles(key);  // row-major [d, d]
  const int64_t d = got.rows();
  EXPECT_EQ(static_cast<int64_t>(ref.size()), d * d) << key;
  const test::FixtureTolerance tol = test::fixture_tolerance(key);
  double max_ref = 0;
  for (double r : ref) max_ref = std::max(max_ref, std::abs(r));
  double worst = 0;
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const double r = ref[i * d + j];
      worst = std::max(worst, std::abs(got(i, j) - r) / (tol.rtol * std::abs(r) + tol.atol_x_max * max_ref));
    }
  return worst;
}

double relative_error(const Matrix& a, const Matrix& b) { return (a - b).norm() / std::max(b.norm(), 1e-300); }

// Relative error of `n` random columns of j (the local map's Jacobian at its input in `s`) against central
// differences of the float64 local map along the same input axes.
double difference_error(const JacobianModel& m, const SequenceState& s, int64_t l, Sublayer which, int64_t pos, const Matrix& j,
                        int64_t n, std::mt19937_64& rng) {
  const Vector x = m.input(s, l, which, pos);
  Matrix fd(j.rows(), n), exact(j.rows(), n);
  const double h = 1e-5;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t c = static_cast<int64_t>(rng() % x.size());
    Vector xp = x, xm = x;
    xp[c] += h;
    xm[c] -= h;
    fd.col(k) = (m.step(s, l, which, pos, xp) - m.step(s, l, which, pos, xm)) / (2 * h);
    exact.col(k) = j.col(c);
  }
  return relative_error(exact, fd);
}

class JacobianFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(JacobianFixture, MatchesReferencesAndStructuredForm) {
  const std::string family = GetParam();
  TDYN_REQUIRE_SHARED("fixtures/" + family + "/refs.safetensors");
  Loaded f = load_fixture(family);
  const JacobianModel& m = *f.model;
  std::vector<int32_t> types;
  if (f.refs.contains("seq0.token_type_ids")) types = ints32(f.refs.ints("seq0.token_type_ids"));
  const SequenceState state = m.run(ints32(f.refs.ints("seq0.input_ids")), types);
  double worst = 0, worst_structured = 0, worst_projected = 0;
  std::string worst_key;
  const StatePosition both[] = {{&state, 5}, {&state, 23}};
  for (int64_t pos : {5, 23}) {
    for (int64_t l = 0; l < m.config().n_layers; ++l) {
      const std::string prefix = fmt::format("seq0.pos{}.blocks.{}.", pos, l);
      const Matrix attn = m.jacobian(state, l, Sublayer::Attention, pos);
      const Matrix mlp = m.jacobian(state, l, Sublayer::Mlp, pos);
      for (auto [name, j] : {std::pair{"jac_attn", attn}, {"jac_mlp", mlp}, {"jac_block", m.block_jacobian(attn, mlp)}}) {
        const double r = ref_ratio(f.refs, prefix + name, j);
        if (r > worst) worst = r, worst_key = prefix + name;
      }
      for (Sublayer which : {Sublayer::Attention, Sublayer::Mlp}) {
        const Matrix structured = m.structure(state, l, which, pos).dense();
        worst_structured = std::max(worst_structured, relative_error(structured, m.jacobian_by_tangents(state, l, which, pos)));
        // The input projections made for both positions in one product each give the same structure.
        const std::vector<StepProjections> projected = m.project_inputs(both, l, which);
        worst_projected = std::max(
            worst_projected, relative_error(m.structure(state, l, which, pos, &projected[pos == 5 ? 0 : 1]).dense(), structured));
      }
    }
  }
  EXPECT_LE(worst, 1.0) << family << ": worst error/tolerance at " << worst_key;
  EXPECT_LE(worst_structured, 1e-12) << family << ": structured form vs tangent propagation";
  EXPECT_LE(worst_projected, 1e-13) << family << ": structured form from projections made together vs one by one";
  std::cout << fmt::format("[ jacobian ] {}: worst error/tolerance {:.3g} ({}), structured vs tangents {:.2g}, projections "
                           "made together vs alone {:.2g}\n",
                           family, worst, worst_key, worst_structured, worst_projected);
}

INSTANTIATE_TEST_SUITE_P(JacobianFamilies, JacobianFixture,
                         ::testing::Values("gpt2", "gpt_neo", "bert", "albert", "llama", "llama_tied", "olmo3", "gemma4"));

// The float64 local map reproduces the float32 forward pass, and its Jacobian matches central differences.
TEST(JacobianFiniteDifferences, EveryFamilyAtRandomStates) {
  for (const std::string family : {"gpt2", "bert", "llama", "olmo3", "gemma4", "gpt_neo", "albert"}) {
    TDYN_REQUIRE_SHARED("fixtures/" + family + "/refs.safetensors");
    Loaded f = load_fixture(family);
    const JacobianModel& m = *f.model;
    std::vector<int32_t> types;
    if (f.refs.contains("seq1.token_type_ids")) types = ints32(f.refs.ints("seq1.token_type_ids"));
    const SequenceState state = m.run(ints32(f.refs.ints("seq1.input_ids")), types);
    std::mt19937_64 rng(7);
    std::normal_distribution<double> normal;
    for (int64_t l = 0; l < m.config().n_layers; ++l) {
      for (Sublayer which : {Sublayer::Attention, Sublayer::Mlp}) {
        const int64_t pos = (l + 2) % state.n_pos;
        const Vector x0 = m.input(state, l, which, pos);
        // The local map at the forward input gives the forward output.
        const Vector y0 = m.step(state, l, which, pos, x0), ref = m.output(state, l, which, pos);
        EXPECT_LE((y0 - ref).norm() / ref.norm(), 1e-5) << family << " layer " << l << " " << to_string(which);
        // A random state near the forward one: J of the plain path vs central differences, column by column.
        Vector x = x0;
        for (int64_t i = 0; i < x.size(); ++i) x[i] += 0.1 * normal(rng) * (std::abs(x0[i]) + 0.1);
        SequenceState moved = state;
        Tensor& rows = which == Sublayer::Attention ? moved.resid_pre[l] : moved.resid_mid[l];
        for (int64_t i = 0; i < x.size(); ++i) rows.row(pos)[i] = static_cast<float>(x[i]);
        const Matrix j = m.jacobian(moved, l, which, pos);
        // 16 random input directions (columns) per sublayer keep the test fast; all rows are checked.
        EXPECT_LE(difference_error(m, moved, l, which, pos, j, 16, rng), 1e-7) << family << " layer " << l << " " << to_string(which);
        EXPECT_LE(relative_error(m.structure(moved, l, which, pos).dense(), m.jacobian_by_tangents(moved, l, which, pos)), 1e-12)
            << family << " layer " << l;
      }
    }
  }
}

// The closed-form Jacobian (what jacobian() returns: structure().dense()) equals the tangent-propagation one
// element by element, |a − b| ≤ atol + rtol |b|, for gated and plain MLPs (and attention) under every norm
// placement. The fixtures give five (gating, placement) pairs with their own weights and norms (LayerNorm: GPT-2,
// GPT-Neo, BERT, ALBERT; RMSNorm: Llama, OLMo 3, Gemma 4); Gemma 4's weights hold every norm a placement reads
// (pre and post), so with the placement and the gating switched they give all eight pairs, per-layer-input
// branch, layer scalar, GQA and KV sharing included.
TEST(JacobianClosedForm, EqualsTangentPropagation) {
  const double atol = 1e-11, rtol = 1e-9;
  struct Case {
    std::string family;
    std::optional<NormPlacement> placement;  // switched from the family's own
    std::optional<bool> gated;
  };
  std::vector<Case> cases;
  for (const char* family : {"gpt2", "gpt_neo", "bert", "albert", "llama", "olmo3", "gemma4"}) cases.push_back({family, {}, {}});
  for (NormPlacement p : {NormPlacement::Pre, NormPlacement::PostResidual, NormPlacement::PostSublayer, NormPlacement::Sandwich})
    for (bool gated : {true, false}) cases.push_back({"gemma4", p, gated});
  for (const Case& c : cases) {
    TDYN_REQUIRE_SHARED("fixtures/" + c.family + "/refs.safetensors");
    const fs::path dir = test::shared_dir() / "fixtures" / c.family;
    // load_model made the Model non-const (make_shared<Model>), so switching its settings here is well defined.
    const auto model = std::const_pointer_cast<Model>(load_model(dir));
    if (c.placement) model->config.norm_placement = *c.placement;
    if (c.gated) model->config.gated_mlp = *c.gated;
    const std::string name = fmt::format("{} ({}, {} MLP)", c.family, to_string(model->config.norm_placement),
                                         model->config.gated_mlp ? "gated" : "plain");
    const JacobianModel m(std::make_shared<Transformer>(model));
    TensorStore refs;
    read_safetensors(dir / "refs.safetensors", refs);
    std::vector<int32_t> types;
    if (refs.contains("seq0.token_type_ids")) types = ints32(refs.ints("seq0.token_type_ids"));
    const SequenceState state = m.run(ints32(refs.ints("seq0.input_ids")), types);
    for (Sublayer which : {Sublayer::Mlp, Sublayer::Attention}) {
      double worst = 0;
      std::string where;
      for (int64_t l = 0; l < m.config().n_layers; ++l)
        for (int64_t pos : {int64_t{0}, state.n_pos / 2, state.n_pos - 1}) {
          const Matrix a = m.jacobian(state, l, which, pos), b = m.jacobian_by_tangents(state, l, which, pos);
          ASSERT_EQ(a.rows(), b.rows());
          ASSERT_EQ(a.cols(), b.cols());
          for (int64_t j = 0; j < b.cols(); ++j)
            for (int64_t i = 0; i < b.rows(); ++i) {
              const double r = std::abs(a(i, j) - b(i, j)) / (atol + rtol * std::abs(b(i, j)));
              if (r > worst)
                worst = r, where = fmt::format("layer {} pos {} element ({}, {}): closed form {:.17g}, tangents {:.17g}", l,
                                               pos, i, j, a(i, j), b(i, j));
            }
        }
      EXPECT_LE(worst, 1.0) << name << " " << to_string(which) << ": worst |a − b|/(atol + rtol|b|) = " << worst << " at "
                            << where;
      std::cout << fmt::format("[ jacobian ] closed form vs tangents, {} {}: worst |a − b|/(atol + rtol|b|) {:.2g}\n", name,
                               to_string(which), worst);
    }
  }
}

// The structured mean equals the mean of plain per-sample Jacobians (float64, 1e-10 relative).
TEST(JacobianStructuredMean, EqualsPlainMean) {
  struct Case {
    std::string path;
    std::string positions;
  };
  const std::vector<Case> cases = {{"fixtures/llama", "all"},  {"fixtures/gpt2", "last"},   {"fixtures/olmo3", "3,-1"},
                                   {"fixtures/bert", "0,5"},   {"fixtures/gemma4", "2,-1"}, {"fixtures/gpt_neo", "last"},
                                   {"fixtures/albert", "last"}, {"models/stories260K/stories260K.bin", "last"}};
  for (const Case& c : cases) {
    TDYN_REQUIRE_SHARED(c.path);
    auto model = std::make_shared<JacobianModel>(std::make_shared<Transformer>(load_model(test::shared_dir() / c.path)));
    std::mt19937_64 rng(3);
    std::vector<Sample> samples;
    for (int s = 0; s < 6; ++s) {
      Sample smp;
      const int n = 9 + 3 * s;
      for (int i = 0; i < n; ++i) smp.ids.push_back(static_cast<int32_t>(rng() % std::min<int64_t>(model->config().d_vocab, 100)));
      samples.push_back(smp);
    }
    MeanJacobianOptions opts;
    opts.positions = PositionSpec::parse(c.positions);
    opts.structured = true;
    const MeanJacobians structured = mean_jacobians(*model, samples, opts);
    opts.structured = false;
    opts.mean_of_products = true;
    const MeanJacobians plain = mean_jacobians(*model, samples, opts);
    ASSERT_EQ(structured.n_pairs, plain.n_pairs);
    double worst = 0;
    for (size_t k = 0; k < plain.mean.size(); ++k) worst = std::max(worst, relative_error(structured.mean[k], plain.mean[k]));
    EXPECT_LE(worst, 1e-10) << c.path;
    // The mean of products of one pair is the product of its Jacobians; with several pairs the first depth agrees.
    EXPECT_LE(relative_error(plain.mean_of_products[0], plain.mean[0]), 1e-12);
    std::cout << fmt::format("[ jacobian ] {} ({} pairs): structured vs plain mean {:.2g}\n", c.path, plain.n_pairs, worst);
  }
}

// Jacobians of an ablated model (model/ablation.h), on every family and every kind of zeroed part: the float32
// states are those of the forward pass with the same edits, the float64 local map gives them at the forward input,
// its Jacobian (tangents) equals central differences of it and the structured form equals the tangents.
TEST(JacobianAblated, StatesMapsAndDerivativesAreTheAblatedModels) {
  const std::vector<std::string> specs = {"blocks.*.attn.hook_z:heads=1", "blocks.*.hook_attn_out", "blocks.*.mlp.hook_post",
                                          "blocks.*.hook_mlp_out"};
  for (const std::string family : {"gpt2", "bert", "llama", "olmo3", "gemma4", "gpt_neo", "albert"}) {
    TDYN_REQUIRE_SHARED("fixtures/" + family + "/refs.safetensors");
    const fs::path dir = test::shared_dir() / "fixtures" / family;
    auto transformer = std::make_shared<Transformer>(load_model(dir));
    TensorStore refs;
    read_safetensors(dir / "refs.safetensors", refs);
    std::vector<int32_t> types;
    if (refs.contains("seq1.token_type_ids")) types = ints32(refs.ints("seq1.token_type_ids"));
    const std::vector<int32_t> ids = ints32(refs.ints("seq1.input_ids"));
    const JacobianModel plain(transformer);
    const SequenceState unablated = plain.run(ids, types);
    for (const std::string& spec : specs) {
      const ZeroedParts zeroed(*transformer, {Ablation::parse(spec)});
      const JacobianModel m(transformer, zeroed);
      const SequenceState state = m.run(ids, types);
      ActivationCache edited("blocks.*.hook_resid_mid,blocks.*.hook_resid_post");
      zeroed.add_edits(edited);
      transformer->forward(ids, &edited, nullptr, types);
      std::mt19937_64 rng(11);
      for (int64_t l = 0; l < m.config().n_layers; ++l) {
        const std::string where = fmt::format("{} {} layer {}", family, spec, l);
        for (auto [name, got] : {std::pair{"hook_resid_mid", &state.resid_mid[l]}, {"hook_resid_post", &state.resid_post[l]}}) {
          const Tensor& want = edited.at(fmt::format("blocks.{}.{}", l, name));
          test::expect_close(got->data, want.data, 1e-5, 1e-5, where + " " + name);
        }
        for (Sublayer which : {Sublayer::Attention, Sublayer::Mlp}) {
          const int64_t pos = (l + 2) % state.n_pos;
          const Vector x = m.input(state, l, which, pos), ref = m.output(state, l, which, pos);
          EXPECT_LE((m.step(state, l, which, pos, x) - ref).norm() / ref.norm(), 1e-5) << where << " " << to_string(which);
          const Matrix j = m.jacobian_by_tangents(state, l, which, pos);
          EXPECT_LE(difference_error(m, state, l, which, pos, j, 8, rng), 1e-7) << where << " " << to_string(which);
          EXPECT_LE(relative_error(m.structure(state, l, which, pos).dense(), j), 1e-12) << where << " " << to_string(which);
          // The ablation changes the sublayer it reaches (so that the checks above could fail).
          const bool reached = (which == Sublayer::Attention) == (spec.find("attn") != std::string::npos);
          if (reached) EXPECT_GT(relative_error(j, plain.jacobian_by_tangents(unablated, l, which, pos)), 1e-3) << where;
        }
      }
    }
  }
}

// Where no norm follows a sublayer (Llama: pre-norm), zeroing what it adds leaves J = I, and each head's share of
// J − I (what ablating it removes) adds up over the heads to J − I: the head's columns of W_O and its kv head (GQA)
// are found where they are.
TEST(JacobianAblated, PreNormIdentities) {
  TDYN_REQUIRE_SHARED("fixtures/llama/refs.safetensors");
  const fs::path dir = test::shared_dir() / "fixtures/llama";
  auto transformer = std::make_shared<Transformer>(load_model(dir));
  const ModelConfig& c = transformer->config();
  ASSERT_LT(c.n_kv_heads, c.n_heads);
  TensorStore refs;
  read_safetensors(dir / "refs.safetensors", refs);
  const std::vector<int32_t> ids = ints32(refs.ints("seq0.input_ids"));
  auto ablated = [&](const std::string& spec) { return JacobianModel(transformer, ZeroedParts(*transformer, {Ablation::parse(spec)})); };
  const JacobianModel full(transformer);
  const SequenceState state = full.run(ids);
  const int64_t d = c.d_model, pos = 7, l = 1;
  const Matrix identity = Matrix::Identity(d, d);
  for (auto [spec, which] : {std::pair{"blocks.1.hook_attn_out", Sublayer::Attention}, {"blocks.1.mlp.hook_post", Sublayer::Mlp},
                             {"blocks.1.hook_mlp_out", Sublayer::Mlp}}) {
    const JacobianModel m = ablated(spec);
    EXPECT_LE((m.jacobian(m.run(ids), l, which, pos) - identity).norm(), 1e-12) << spec;
  }
  // Ablating one head changes no other head's z, so the heads' shares add up over the same state.
  const Matrix j = full.jacobian(state, l, Sublayer::Attention, pos);
  Matrix shares = Matrix::Zero(d, d);
  for (int64_t h = 0; h < c.n_heads; ++h)
    shares += j - ablated(fmt::format("blocks.1.attn.hook_z:heads={}", h)).jacobian(state, l, Sublayer::Attention, pos);
  EXPECT_LE(relative_error(shares, j - identity), 1e-10);
}

TEST(JacobianPositions, Parse) {
  EXPECT_EQ(PositionSpec::parse("last").resolve(5), std::vector<int64_t>({4}));
  EXPECT_EQ(PositionSpec::parse("all").resolve(3), std::vector<int64_t>({0, 1, 2}));
  EXPECT_EQ(PositionSpec::parse("5,1,-1,99").resolve(7), std::vector<int64_t>({1, 5, 6}));
  EXPECT_THROW(PositionSpec::parse("5,x"), Error);
}

}  // namespace
}  // namespace tdyn
