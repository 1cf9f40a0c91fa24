// The power-method analysis (the power-method paper, SPEC §2): spectra of F_t, the token-dynamics modes, alignment statistics,
// shared-weight iteration regimes on constructed models, rank-1 steering through the real forward pass, and the
// `tdyn power` command.
#include <cmath>
#include <fstream>
#include <functional>
#include <random>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <Eigen/Dense>

#include "analysis/power/iteration.h"
#include "analysis/power/spectra.h"
#include "analysis/power/steering.h"
#include "analysis/power/token_dynamics.h"
#include "io/safetensors.h"
#include "model/init.h"
#include "random_matrix.h"
#include "test_util.h"

namespace tdyn {
namespace {

fs::path fixture(const std::string& family) { return test::shared_dir() / "fixtures" / family; }

// ---- Spectra ---------------------------------------------------------------------------------------------------

TEST(PowerSpectrum, EigenpairsOfFixtureLayerMatrices) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2");
  for (const char* family : {"gpt2", "llama", "albert", "gemma4"}) {
    auto model = load_model(fixture(family));
    for (const LayerMatrix& m : layer_matrices(*model)) {
      const LayerSpectrum s = layer_spectrum(m);
      ASSERT_TRUE(s.full);
      const ComplexMatrix& v = s.eigenvectors;
      const ComplexMatrix residual = m.f.cast<Complex>() * v - v * s.eigenvalues.asDiagonal();
      EXPECT_LE(residual.norm(), 1e-10 * m.f.norm()) << family << " layer " << m.layer;
      // Conjugate pairs adjacent and exact; sorted by modulus.
      for (const EigenGroup& g : eigen_groups(s.eigenvalues)) {
        const Complex lambda = s.eigenvalues[g.start];
        if (lambda.imag() != 0) {
          ASSERT_TRUE(g.pair) << family << ": unpaired complex eigenvalue " << lambda;
          EXPECT_EQ(s.eigenvalues[g.start + 1], std::conj(lambda));
        }
      }
      for (Index i = 1; i < s.eigenvalues.size(); ++i) EXPECT_GE(std::abs(s.eigenvalues[i - 1]) + 1e-12, std::abs(s.eigenvalues[i]));
      // Dominant eigenvector: F v1 = λ1 v1; I + F: its dominant eigenvalue is 1 + λ of largest |1 + λ|.
      Vector v1r = s.f.eigenvector_real;
      ComplexVector v1 = v1r.cast<Complex>();
      if (s.f.complex_pair) v1 += Complex(0, 1) * s.f.eigenvector_imag.cast<Complex>();
      EXPECT_LE((m.f.cast<Complex>() * v1 - s.f.lambda1 * v1).norm(), 1e-10 * m.f.norm());
      EXPECT_NEAR(std::abs(s.f.lambda1), std::abs(s.eigenvalues[0]), 1e-12);
      double best = 0;
      for (Index i = 0; i < s.eigenvalues.size(); ++i) best = std::max(best, std::abs(1.0 + s.eigenvalues[i]));
      EXPECT_NEAR(std::abs(s.identity_plus_f.lambda1), best, 1e-10);
      EXPECT_NEAR(s.f.gap, std::abs(s.f.lambda1) - (s.f.lambda2 ? std::abs(*s.f.lambda2) : 0.0), 1e-12);
    }
  }
}

TEST(PowerSpectrum, ArnoldiPathAgreesWithDgeev) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2");
  auto model = load_model(fixture("gpt2"));
  const LayerMatrix m = layer_matrix(*model, 1);
  SpectrumOptions arnoldi;
  arnoldi.full_spectrum_max_d = 8;
  const LayerSpectrum full = layer_spectrum(m), top = layer_spectrum(m, arnoldi);
  EXPECT_FALSE(top.full);
  EXPECT_NEAR(std::abs(top.f.lambda1 - full.f.lambda1), 0.0, 1e-8);
  EXPECT_NEAR(std::abs(top.identity_plus_f.lambda1 - full.identity_plus_f.lambda1), 0.0, 1e-8);
  EXPECT_NEAR(alignment(full.f.eigenvector_real, dominant_basis(top.f)), 1.0, 1e-8);
}

TEST(PowerSpectrum, ArnoldiFailureFallsBackToDgeev) {
  // A random layer matrix (leading moduli barely separated) with Arnoldi starved of restarts and subspace:
  // Spectra does not converge, and the top_k eigenpairs come from dgeev, with a note, instead of an error.
  const Index d = 120, k = 4;
  LayerMatrix m;
  m.layer = m.value_layer = 3;
  m.f = test::random_gaussian(d, d, 31) / std::sqrt(double(d));
  m.bias = Vector::Zero(d);
  SpectrumOptions starved;
  starved.full_spectrum_max_d = 8;
  starved.top_k = k;
  starved.arnoldi.subspace_dimension = k + 2;
  starved.arnoldi.max_restarts = 1;
  ASSERT_FALSE(linalg::top_eigenpairs_if_converged(m.f, k, starved.arnoldi).has_value());
  const Matrix identity_plus_f = m.f + Matrix::Identity(d, d);
  ASSERT_FALSE(linalg::top_eigenpairs_if_converged(identity_plus_f, k, starved.arnoldi).has_value());

  const LayerSpectrum s = layer_spectrum(m, starved);
  EXPECT_FALSE(s.full);  // top_k only, like the Arnoldi path
  ASSERT_EQ(s.notes.size(), 1u);  // I + F comes from the same dgeev spectrum, shifted: no second fallback
  EXPECT_NE(s.notes[0].find("did not converge"), std::string::npos) << s.notes[0];
  EXPECT_NE(s.notes[0].find("dgeev"), std::string::npos) << s.notes[0];
  EXPECT_EQ(s.to_json()["notes"].size(), 1u);

  const linalg::Eigendecomposition dgeev = linalg::sorted_by_modulus(linalg::eigen_general(m.f, true));
  ASSERT_EQ(s.eigenvalues.size(), k);
  ASSERT_EQ(s.eigenvectors.cols(), k);
  EXPECT_LE((s.eigenvalues - dgeev.eigenvalues.head(k)).norm(), 1e-12);
  EXPECT_LE((s.eigenvectors - dgeev.eigenvectors.leftCols(k)).norm(), 1e-12);
  const DominantSpectrum f = dominant_spectrum(m.f), shifted = dominant_spectrum(identity_plus_f);
  EXPECT_LE(std::abs(s.f.lambda1 - f.lambda1), 1e-12);
  EXPECT_LE((s.f.eigenvector_real - f.eigenvector_real).norm(), 1e-10);
  EXPECT_LE(std::abs(s.identity_plus_f.lambda1 - shifted.lambda1), 1e-10);
  EXPECT_NEAR(alignment(shifted.eigenvector_real, dominant_basis(s.identity_plus_f)), 1.0, 1e-10);

  // With Spectra's default restarts the same matrix converges and nothing is noted.
  SpectrumOptions arnoldi = starved;
  arnoldi.arnoldi = {};
  const LayerSpectrum converged = layer_spectrum(m, arnoldi);
  EXPECT_TRUE(converged.notes.empty());
  EXPECT_LE(std::abs(converged.f.lambda1 - f.lambda1), 1e-8);
}

TEST(PowerStatistics, BaselineAndBinomialTail) {
  EXPECT_NEAR(random_alignment_baseline(2, 1), 2 / M_PI, 1e-14);  // E|cos θ| on the circle
  EXPECT_NEAR(random_alignment_baseline(3, 1), 0.5, 1e-14);       // E|z| on the 2-sphere
  EXPECT_NEAR(random_alignment_baseline(7, 7), 1.0, 1e-14);
  EXPECT_NEAR(random_alignment_baseline(4096, 1) / std::sqrt(2 / (M_PI * 4096)), 1.0, 1e-3);
  EXPECT_NEAR(binomial_upper_tail(8, 10), (45.0 + 10 + 1) / 1024, 1e-15);
  EXPECT_DOUBLE_EQ(binomial_upper_tail(0, 10), 1.0);
  EXPECT_NEAR(binomial_upper_tail(10, 10), 1.0 / 1024, 1e-16);
  EXPECT_LT(binomial_upper_tail(600, 1000), 1e-9);
}

TEST(PowerStatistics, AlignmentWithAComplexPlane) {
  DominantSpectrum s;
  s.complex_pair = true;
  s.eigenvector_real = Vector::Zero(4);
  s.eigenvector_imag = Vector::Zero(4);
  s.eigenvector_real << 1, 1, 0, 0;  // Re v and Im v not orthogonal: the basis must be orthonormalised
  s.eigenvector_imag << 0, 1, 0, 0;
  const Matrix basis = dominant_basis(s);
  ASSERT_EQ(basis.cols(), 2);
  EXPECT_LE((basis.transpose() * basis - Matrix::Identity(2, 2)).norm(), 1e-14);
  Vector in_plane(4), outside(4), mixed(4);
  in_plane << 3, -2, 0, 0;
  outside << 0, 0, 1, 5;
  mixed << 1, 0, 1, 0;
  EXPECT_NEAR(alignment(in_plane, basis), 1.0, 1e-14);
  EXPECT_NEAR(alignment(outside, basis), 0.0, 1e-14);
  EXPECT_NEAR(alignment(mixed, basis), std::sqrt(0.5), 1e-14);
}

// ---- Dynamics modes --------------------------------------------------------------------------------------------

// γ's control on the tokens' own distribution: directions drawn from their covariance.
TEST(PowerStatistics, DirectionsDrawnFromTheTokens) {
  const Index d = 6;
  // Tokens on one ray: every draw is that ray, so every token aligns fully, whatever the seed.
  Matrix ray(4, d);
  for (Index i = 0; i < 4; ++i) ray.row(i) = (i % 2 ? -1.0 : 2.0 + i) * Vector::Unit(d, 2).transpose();
  for (double a : token_covariance_alignments(ray, 1, token_covariance_seed(0, 0))) EXPECT_NEAR(a, 1.0, 1e-14);
  // One ray spans one dimension: two directions cannot be drawn from it.
  for (double a : token_covariance_alignments(ray, 2, 7)) EXPECT_TRUE(std::isnan(a));
  // Orthogonal unit tokens e_0..e_3: the centred tokens span 3 dimensions of span{e_0..e_3}, U two of them, and the
  // alignments' squares sum to that dimension (Σ_i ‖Pᵀe_i‖² = ‖P‖_F² = 2 for P inside span{e_0..e_3}).
  Matrix basis_tokens = Matrix::Identity(4, d);
  const std::vector<double> a = token_covariance_alignments(basis_tokens, 2, 11);
  double squares = 0;
  for (double v : a) {
    EXPECT_TRUE(v >= 0 && v <= 1 + 1e-15) << v;
    squares += v * v;
  }
  EXPECT_NEAR(squares, 2.0, 1e-12);
  // Deterministic in the seed, different across seeds; the seeds of neighbouring layers and samples differ.
  EXPECT_EQ(token_covariance_alignments(basis_tokens, 1, 3), token_covariance_alignments(basis_tokens, 1, 3));
  EXPECT_NE(token_covariance_alignments(basis_tokens, 1, 3), token_covariance_alignments(basis_tokens, 1, 4));
  EXPECT_NE(token_covariance_seed(0, 1), token_covariance_seed(1, 0));
  EXPECT_NE(token_covariance_seed(2, 5), token_covariance_seed(2, 6));
}

// full + residual is the model itself: every layer's output equals forward()'s hook_resid_post, and attn-only +
// residual equals hook_resid_mid (for every norm placement: pre, post-LN, post-sublayer, sandwich, KV sharing).
TEST(PowerDynamics, FullModeIsTheForwardPass) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2");
  for (const char* family : {"gpt2", "bert", "olmo3", "gemma4", "llama"}) {
    Transformer model(load_model(fixture(family)));
    const std::vector<int32_t> ids = {3, 17, 5, 9, 2, 11, 4};
    ActivationCache cache("blocks.*.hook_resid_*");
    model.forward(ids, &cache);
    TokenState full = initial_state(model, ids, {DynamicsMode::Full, true});
    for (int64_t l = 0; l < model.config().n_layers; ++l) {
      TokenState attn_only = full;
      apply_layer(model, l, attn_only, {DynamicsMode::AttnOnly, true});
      apply_layer(model, l, full, {DynamicsMode::Full, true});
      const Tensor& post = cache.at(fmt::format("blocks.{}.hook_resid_post", l));
      const Tensor& mid = cache.at(fmt::format("blocks.{}.hook_resid_mid", l));
      EXPECT_EQ(full.x.data, post.data) << family << " layer " << l;
      EXPECT_EQ(attn_only.x.data, mid.data) << family << " layer " << l;
    }
  }
}

// x ← (x + A(G x))/‖·‖ with G = diag(sqrt(d) g), g read from the checkpoint's raw input_layernorm tensor.
TEST(PowerDynamics, L2ModeKeepsUnitTokensAndNoResidualDropsTheSkip) {
  TDYN_REQUIRE_SHARED("fixtures/llama");
  auto model_ptr = load_model(fixture("llama"));
  Transformer model(model_ptr);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  const std::vector<double> g = model_ptr->store.doubles("model.layers.0.input_layernorm.weight");
  const int64_t d = model.config().d_model;
  ASSERT_EQ(static_cast<int64_t>(g.size()), d);
  for (bool residual : {true, false}) {
    TokenState s = initial_state(model, ids, {DynamicsMode::AttnOnlyL2, residual});
    TokenState before = s;
    apply_layer(model, 0, s, {DynamicsMode::AttnOnlyL2, residual});
    Tensor input = before.x;
    for (int64_t i = 0; i < input.dim(0); ++i)
      for (int64_t j = 0; j < d; ++j) input.row(i)[j] = static_cast<float>(input.row(i)[j] * std::sqrt(double(d)) * g[j]);
    Tensor expected = model.attention(0, input, 0, nullptr);  // A(G x), then + x with the residual, then x/|x|
    if (residual) for (int64_t i = 0; i < expected.size(); ++i) expected.data[i] += before.x.data[i];
    normalize_rows(expected);
    for (int64_t i = 0; i < s.x.dim(0); ++i) {
      EXPECT_NEAR(Eigen::Map<const Eigen::VectorXf>(s.x.row(i), s.x.dim(1)).norm(), 1.0f, 1e-5f);
      for (int64_t j = 0; j < s.x.dim(1); ++j) EXPECT_NEAR(s.x.row(i)[j], expected.row(i)[j], 1e-6f);
    }
  }
}

TEST(PowerDynamics, TokenDynamicsStatistics) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2");
  auto model_ptr = load_model(fixture("gpt2"));
  Transformer model(model_ptr);
  std::vector<LayerSpectrum> spectra;
  for (const auto& m : layer_matrices(*model_ptr)) spectra.push_back(layer_spectrum(m));
  std::vector<Sample> samples = {{{1, 5, 9, 13, 2, 7}, 0}, {{4, 4, 8, 15, 16, 23, 42}, 1}};
  TokenDynamics d = token_dynamics(model, samples, spectra, {DynamicsMode::AttnOnlyL2, true});
  ASSERT_EQ(d.tokens, 13);
  ASSERT_EQ(d.layers.size(), 3u);
  for (const auto& l : d.layers) {
    EXPECT_EQ(l.f.tokens, 13);
    EXPECT_GE(l.f.gamma, 0);
    EXPECT_LE(l.f.gamma, 1);
    EXPECT_NEAR(l.f.rho, l.f.increases / 13.0, 1e-15);
    EXPECT_NEAR(l.f.p_value, binomial_upper_tail(l.f.increases, 13), 1e-15);
    int64_t counted = 0;
    for (int64_t h : l.f.histogram) counted += h;
    EXPECT_EQ(counted, 13);
    EXPECT_NEAR(l.f.quantiles.front(), *std::min_element(d.after[l.layer].begin(), d.after[l.layer].end()), 1e-15);
    EXPECT_NEAR(l.mean_norm_after, 1.0, 1e-5);  // L2 mode
    EXPECT_TRUE(l.f.gamma_covariance >= 0 && l.f.gamma_covariance <= 1) << l.f.gamma_covariance;
    EXPECT_TRUE(std::isnan(l.identity_plus_f.gamma_covariance));  // F's control only
    // The cross-layer alignment's diagonal is γ_t; its other entries are alignments too.
    EXPECT_NEAR(d.cross_alignment(l.layer, l.layer), l.f.gamma, 1e-15);
    for (int64_t s = 0; s < 3; ++s) EXPECT_TRUE(d.cross_alignment(l.layer, s) >= 0 && d.cross_alignment(l.layer, s) <= 1);
  }
  ASSERT_EQ(d.cross_alignment.rows(), 3);
  ASSERT_EQ(d.cross_alignment.cols(), 3);
}

// Repeated states: in a causal model, a token whose prefix an earlier sample had; in an encoder, only a token of
// a sample that repeats an earlier one whole.
TEST(PowerDynamics, RepeatedStatesAreMarked) {
  const std::vector<Sample> samples = {{{1, 5, 9}, 0}, {{1, 5, 7, 2}, 1}, {{1, 6}, 2}, {{1, 5, 9}, 3}, {{5}, 4}};
  TokenAlignments causal, encoder;
  mark_repeated_states(samples, true, &causal);
  mark_repeated_states(samples, false, &encoder);
  EXPECT_EQ(causal.sample_of_token, (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3, 4}));
  EXPECT_EQ(causal.repeated, (std::vector<char>{0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(encoder.repeated, (std::vector<char>{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0}));
}

// The sample-level test can fail where the pooled binomial test passes: one long sample whose tokens all move
// toward v₁ and nine short ones whose tokens move away give a pooled ρ = 100/145 (binomial p ≈ 1e-6) but one
// sample of ten with ρ_s > 1/2. A BOS token that moves toward v₁ in every sample counts once.
TEST(PowerDynamics, RhoIsTestedOverSamplesWithoutRepeatedStates) {
  auto alignments = [](const std::vector<Sample>& samples, const std::function<bool(size_t, size_t)>& increases) {
    TokenAlignments a;
    a.samples = static_cast<int64_t>(samples.size());
    std::vector<double> before, after;
    for (size_t s = 0; s < samples.size(); ++s)
      for (size_t i = 0; i < samples[s].ids.size(); ++i) {
        before.push_back(0.5);
        after.push_back(increases(s, i) ? 0.6 : 0.4);
      }
    for (auto* v : {&a.before_f, &a.before_if}) v->assign(1, before);
    for (auto* v : {&a.after_f, &a.after_if}) v->assign(1, after);
    for (auto* v : {&a.norm_before, &a.norm_after}) v->assign(1, std::vector<double>(before.size(), 1.0));
    mark_repeated_states(samples, true, &a);
    return a;
  };
  LayerSpectrum spectrum;
  spectrum.f.lambda1 = spectrum.identity_plus_f.lambda1 = 1;
  spectrum.f.eigenvector_real = spectrum.identity_plus_f.eigenvector_real = Vector::Unit(8, 0);
  const std::vector<LayerSpectrum> spectra = {spectrum};

  std::vector<Sample> samples;
  samples.push_back({std::vector<int32_t>(100, 0), 0});
  for (int s = 1; s < 10; ++s) samples.push_back({std::vector<int32_t>(5, s), s});
  for (size_t s = 1; s < samples.size(); ++s) samples[s].ids[0] = 100 + static_cast<int32_t>(s);  // no shared prefix
  samples[0].ids[0] = 99;
  const AlignmentStats one_long = summarize_token_dynamics(alignments(samples, [](size_t s, size_t) { return s == 0; }), spectra, 8, {})
                                      .layers[0].f;
  EXPECT_NEAR(one_long.rho, 100.0 / 145, 1e-15);
  EXPECT_LT(one_long.p_value, 1e-5);  // pooled: significant
  EXPECT_EQ(one_long.samples_above, 1);
  EXPECT_EQ(one_long.samples_below, 9);
  EXPECT_NEAR(one_long.p_value_samples, binomial_upper_tail(1, 10), 1e-15);
  EXPECT_GT(one_long.p_value_samples, 0.05);

  // 12 samples "BOS x y" whose x, y move away from v₁ and whose BOS moves toward it, plus "BOS": pooled, BOS
  // makes 13 of 37 increases; counted once, 1 of 25.
  std::vector<Sample> bos;
  for (int s = 0; s < 12; ++s) bos.push_back({{1, 10 + s, 30 + s}, s});
  bos.push_back({{1}, 12});
  const AlignmentStats with_bos = summarize_token_dynamics(alignments(bos, [](size_t, size_t i) { return i == 0; }), spectra, 8, {})
                                      .layers[0].f;
  EXPECT_EQ(with_bos.tokens, 37);
  EXPECT_EQ(with_bos.increases, 13);
  EXPECT_EQ(with_bos.unique_tokens, 25);
  EXPECT_NEAR(with_bos.rho_unique, 1.0 / 25, 1e-15);

  // Every sample mostly toward v₁: significant over samples too.
  std::vector<Sample> many;
  for (int s = 0; s < 12; ++s) many.push_back({{200 + s, 2, 3, 4}, s});
  const AlignmentStats toward = summarize_token_dynamics(alignments(many, [](size_t, size_t i) { return i != 3; }), spectra, 8, {})
                                    .layers[0].f;
  EXPECT_EQ(toward.samples_above, 12);
  EXPECT_NEAR(toward.p_value_samples, std::pow(0.5, 12), 1e-18);
  EXPECT_NEAR(toward.rho_unique, 0.75, 1e-15);
}

// ---- Shared-weight iteration on constructed models ----------------------------------------------------------------

// A one-layer Llama with d = 6, one head, W_Q = W_K = 0 (uniform causal attention), W_O = I and W_V = F, so
// the attention output of token i is F times the mean of the states up to i. The pre-attention norm weight is
// 1/sqrt(d), so G = diag(sqrt(d) g) = I and in attn-only-l2 the iteration is the normalised power method on
// F G = F (no residual) or on I + F (residual).
std::shared_ptr<const Model> constructed_model(const Matrix& f, const std::string& name, double norm_weight = 1 / std::sqrt(6.0)) {
  const fs::path dir = test::scratch_dir("power_" + name);
  nlohmann::json config = {{"model_type", "llama"}, {"vocab_size", 16}, {"hidden_size", 6}, {"intermediate_size", 8},
                           {"num_hidden_layers", 1}, {"num_attention_heads", 1}, {"num_key_value_heads", 1},
                           {"head_dim", 6}, {"max_position_embeddings", 32}, {"rms_norm_eps", 1e-5},
                           {"tie_word_embeddings", false}, {"initializer_range", 0.5}, {"hidden_act", "silu"}};
  write_random_init(config, dir, 7);
  TensorStore store;
  read_safetensors(dir / "model.safetensors", store);
  std::map<std::string, TensorToWrite> tensors;
  for (const std::string& name : store.names()) {
    FloatBuffer b = store.floats(name);
    tensors[name] = f32_tensor(store.get(name).shape, b.data());
  }
  std::vector<float> zero(36, 0.0f), identity(36, 0.0f), value(36);
  for (int i = 0; i < 6; ++i) identity[i * 7] = 1.0f;
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 6; ++c) value[r * 6 + c] = static_cast<float>(f(r, c));  // nn.Linear [out, in]: y = F x
  tensors["model.layers.0.self_attn.q_proj.weight"] = f32_tensor({6, 6}, zero.data());
  tensors["model.layers.0.self_attn.k_proj.weight"] = f32_tensor({6, 6}, zero.data());
  tensors["model.layers.0.self_attn.v_proj.weight"] = f32_tensor({6, 6}, value.data());
  tensors["model.layers.0.self_attn.o_proj.weight"] = f32_tensor({6, 6}, identity.data());
  std::vector<float> norm(6, static_cast<float>(norm_weight));
  tensors["model.layers.0.input_layernorm.weight"] = f32_tensor({6}, norm.data());
  write_safetensors(dir / "model.safetensors", tensors);
  return load_model(dir);
}

// F = Q B Qᵀ for a fixed orthogonal Q and block-diagonal B.
Matrix conjugated(const Matrix& blocks) {
  Matrix g(6, 6);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 6; ++c) g(r, c) = std::sin(1.3 * r + 0.7 * c * c + 0.1);
  Eigen::HouseholderQR<Matrix> qr(g);
  const Matrix q = qr.householderQ();
  return q * blocks * q.transpose();
}

IterationResult iterate(const std::shared_ptr<const Model>& model, bool residual, int64_t steps) {
  Transformer t(model);
  IterationOptions o;
  o.layer = 0;
  o.steps = steps;
  o.bipartite_steps = 200;
  o.dynamics = {DynamicsMode::AttnOnlyL2, residual};
  const Sample sample{{1, 4, 9, 3, 12, 7, 2, 10}, 0};
  return iterate_layer(t, sample, layer_matrix(*model, 0), o);
}

TEST(PowerIteration, StrictlyDominantRealEigenvalueGivesConsensus) {
  Matrix b = Matrix::Zero(6, 6);
  b.diagonal() << 2.0, 0.9, -0.5, 0.3, 0.2, -0.1;
  const Matrix f = conjugated(b);
  auto model = constructed_model(f, "consensus");
  EXPECT_LE((layer_matrix(*model, 0).f - f).norm(), 1e-6);
  for (bool residual : {false, true}) {
    const IterationResult r = iterate(model, residual, 300);
    EXPECT_EQ(r.step_matrix, residual ? "I + F G" : "F G");
    EXPECT_FALSE(r.step.complex_pair);
    EXPECT_NEAR(r.step.lambda1.real(), residual ? 3.0 : 2.0, 1e-6);
    EXPECT_EQ(r.regime.regime, Regime::Consensus) << r.regime.description;
    EXPECT_EQ(r.regime.eigenvector, 0);
    EXPECT_GE(r.curves.min_alignment.back(), 0.9999);
    EXPECT_TRUE(r.curves.positive_fraction.back() == 0.0 || r.curves.positive_fraction.back() == 1.0);
    // The bipartite split ±v1 is left once perturbed (uniform attention pulls every token to one side).
    ASSERT_TRUE(r.bipartite.ran);
    EXPECT_EQ(r.bipartite.eigenvector, 0);
    EXPECT_TRUE(r.bipartite.left_perturbed) << r.bipartite.perturbed.description;
  }
}

// attn-only-l2 feeds G x to the attention, so the iteration is the power method on F G: with g = 2/sqrt(d),
// G = 2I doubles λ1 (the tokens still reach consensus on v1, which G = cI does not move).
TEST(PowerIteration, L2ModeStepMatrixIncludesTheNormGain) {
  Matrix b = Matrix::Zero(6, 6);
  b.diagonal() << 2.0, 0.9, -0.5, 0.3, 0.2, -0.1;
  auto model = constructed_model(conjugated(b), "gain", 2 / std::sqrt(6.0));
  const IterationResult r = iterate(model, false, 100);
  EXPECT_EQ(r.step_matrix, "F G");
  EXPECT_NEAR(r.step.lambda1.real(), 4.0, 1e-5);
  EXPECT_EQ(r.regime.regime, Regime::Consensus) << r.regime.description;
  EXPECT_EQ(r.regime.eigenvector, 0);
}

// Consensus is judged from the token-to-token spread too: every token on one ray that is no eigenvector (as the
// full layer's nonlinear fixed points are) is consensus, not "not converged"; spread-out tokens are neither.
TEST(PowerIteration, ConsensusOffTheEigenvectorsIsFoundFromTheSpread) {
  const int64_t d = 6, n = 5;
  ComplexVector lambda(d);
  lambda << 3.0, 2.0, 1.0, 0.5, 0.25, 0.125;
  const ComplexMatrix vectors = ComplexMatrix::Identity(d, d);  // v_k = e_k
  std::mt19937_64 rng(3);
  std::normal_distribution<double> noise(0.0, 1e-4);
  Tensor together({n, d}), apart({n, d});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      together.row(i)[j] = static_cast<float>((j < 3 ? 1.0 : 0.0) + noise(rng));  // ≈ (1, 1, 1, 0, 0, 0): no eigenvector
      apart.row(i)[j] = static_cast<float>(std::sin(1.7 * i + 0.9 * j * j + 0.3));
    }
  const RegimeEvidence one_ray = classify_regime(together, lambda, vectors, 0.99, 4);
  EXPECT_EQ(one_ray.regime, Regime::Consensus) << one_ray.description;
  EXPECT_EQ(one_ray.eigenvector, -1);
  EXPECT_GT(one_ray.min_cosine_to_mean, 0.999);
  EXPECT_LT(one_ray.min_alignment, 0.99);  // no eigenvector holds the tokens
  const RegimeEvidence spread = classify_regime(apart, lambda, vectors, 0.99, 4);
  EXPECT_EQ(spread.regime, Regime::NotConverged) << spread.description;
  EXPECT_LT(spread.min_cosine_to_mean, 0.99);
}

TEST(PowerIteration, DominantComplexPairRotatesByItsArgument) {
  const double theta = 0.4, radius = 1.2;
  Matrix b = Matrix::Zero(6, 6);
  b(0, 0) = b(1, 1) = radius * std::cos(theta);
  b(0, 1) = -radius * std::sin(theta);
  b(1, 0) = radius * std::sin(theta);
  b(2, 2) = 0.6, b(3, 3) = -0.5, b(4, 4) = 0.3, b(5, 5) = 0.1;
  auto model = constructed_model(conjugated(b), "rotation");
  const IterationResult r = iterate(model, false, 400);
  ASSERT_TRUE(r.step.complex_pair);
  EXPECT_NEAR(std::abs(r.step.lambda1), radius, 1e-6);
  EXPECT_NEAR(r.expected_angle_per_step, theta, 1e-6);
  EXPECT_EQ(r.regime.regime, Regime::Rotation) << r.regime.description;
  EXPECT_NEAR(r.measured_angle_per_step, theta, 1e-4);
  // Every step of the last quarter turns by arg λ1, not only on average.
  for (size_t k = r.curves.mean_angle_step.size() - 50; k < r.curves.mean_angle_step.size(); ++k)
    EXPECT_NEAR(r.curves.mean_angle_step[k], theta, 1e-4) << "step " << k;
  EXPECT_GE(r.curves.min_alignment.back(), 0.9999);
}

// ---- Steering -------------------------------------------------------------------------------------------------

TEST(PowerSteering, RankOneUpdateGivesTheChosenEigenvector) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2");
  auto model = load_model(fixture("gpt2"));
  const int64_t last = model->config.n_layers - 1;
  const RankOneSteering s = rank_one_steering(*model, last, random_direction(64, 3));
  EXPECT_NEAR(s.reachable, 1.0, 1e-10);  // V is 64 × 64 and invertible: F' = F + c u uᵀ
  const double c = 5.0;
  auto steered = steered_model(model, s, c);
  const Matrix expected = layer_matrix(*model, last).f + c * s.u * s.u.transpose();
  EXPECT_LE((layer_matrix(*steered, last).f - expected).norm(), 1e-5 * expected.norm());
  EXPECT_EQ((layer_matrix(*steered, 0).f - layer_matrix(*model, 0).f).norm(), 0.0);  // other layers untouched
}

// c = 0 reproduces the base model's logits bit for bit in every family: the steered copy carries every weight.
TEST(PowerSteering, ZeroScaleIsTheBaseModel) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2");
  for (const char* family : {"gpt2", "gpt_neo", "bert", "albert", "llama", "llama/bf16", "llama_tied", "olmo3", "gemma4"}) {
    auto model = load_model(fixture(family));  // llama/bf16: converted weights owned by the base model
    const RankOneSteering s = rank_one_steering(*model, model->config.n_layers - 1, random_direction(64, 5));
    Transformer base(model), zero(steered_model(model, s, 0.0));
    const std::vector<int32_t> ids = {5, 6, 7, 8, 1, 2};
    EXPECT_EQ(base.forward(ids).data, zero.forward(ids).data) << family;
  }
}

TEST(PowerSteering, GqaSteeringUsesTheReachablePart) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  auto model = load_model(test::shared_dir() / "models/stories260K/stories260K.bin");
  const int64_t last = model->config.n_layers - 1;
  const RankOneSteering s = rank_one_steering(*model, last, random_direction(model->config.d_model, 1));
  const Matrix v = expanded_value_matrix(*model, last);
  const Matrix projector = v.completeOrthogonalDecomposition().pseudoInverse() * v;  // V⁺V
  EXPECT_NEAR(s.reachable, s.u.dot(projector * s.u), 1e-8);
  EXPECT_LT(s.reachable, 1.0);  // 4 KV heads of 8 dims: V has rank 32 < d_model = 64
  const double c = 3.0;
  const Matrix expected = layer_matrix(*model, last).f + c * s.u * (projector * s.u).transpose();
  EXPECT_LE((layer_matrix(*steered_model(model, s, c), last).f - expected).norm(), 1e-5 * expected.norm());
}

void expect_strong_steering(const std::shared_ptr<const Model>& model, const std::vector<Sample>& samples) {
  SteeringOptions o;
  o.scales = {0, 1e5};
  const SteeringResult r = steering_sweep(model, random_direction(model->config.d_model, 11), samples, o);
  ASSERT_EQ(r.points.size(), 2u);
  EXPECT_EQ(r.points[0].mean_kl, 0.0);
  EXPECT_LT(r.points[0].mean_alignment, 0.9);
  EXPECT_GE(r.points[1].min_alignment, 0.99) << "mean " << r.points[1].mean_alignment;
  EXPECT_GE(r.points[1].eigenvector_alignment, 0.99);
  EXPECT_GT(r.points[1].spectrum.gap, 0.5 * std::abs(r.points[1].spectrum.lambda1));  // a large spectral gap
  EXPECT_GT(r.points[1].mean_kl, 0.0);
  // The controls: as large a perturbation along random directions orthogonal to u aligns the tokens with its own
  // direction, not with u.
  ASSERT_EQ(r.controls.size(), 5u);
  std::set<uint64_t> seeds;
  for (const SteeringControl& k : r.controls) {
    seeds.insert(k.seed);
    EXPECT_LT(k.mean_alignment_with_u, 0.1) << "seed " << k.seed;
    EXPECT_GE(k.mean_alignment_with_own, 0.99) << "seed " << k.seed;
    Vector v = random_direction(model->config.d_model, k.seed);
    v = (v - v.dot(r.steering.u) * r.steering.u).normalized();
    const RankOneSteering other = rank_one_steering(*model, model->config.n_layers - 1, v);
    EXPECT_NEAR(k.c * other.w.norm(), r.points[1].c * r.steering.w.norm(), 1e-9 * k.c * other.w.norm()) << "the same Frobenius norm";
  }
  EXPECT_EQ(seeds.size(), 5u);
}

TEST(PowerSteering, LargeScaleAlignsEveryTokenOnStories260K) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  auto model = load_model(test::shared_dir() / "models/stories260K/stories260K.bin");
  expect_strong_steering(model, {{{1, 403, 407, 261, 378, 418, 356, 260, 299, 412}, 0}, {{1, 320, 345, 281, 260, 283}, 1}});
}

TEST(PowerSteering, LargeScaleAlignsEveryTokenOnGpt2Fixture) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2");
  expect_strong_steering(load_model(fixture("gpt2")), {{{3, 17, 5, 9, 2, 11, 4, 40, 33}, 0}, {{8, 1, 0, 63}, 1}});
}

// ---- CLI ---------------------------------------------------------------------------------------------------------

TEST(PowerCli, Stories260KWritesResults) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  TDYN_REQUIRE_SHARED("data/wikitext-2/wiki.test.raw");
  const fs::path out = test::scratch_dir("power_cli");
  const std::string args = fmt::format(
      "power {} --text {} --samples 3 --max-len 24 --out {} --iterate-layer 2 --iterations 40 --steer-scales 0,1,100000 "
      "--steer-samples 2 --quiet",
      (test::shared_dir() / "models/stories260K/stories260K.bin").string(),
      (test::shared_dir() / "data/wikitext-2/wiki.test.raw").string(), out.string());
  std::string stdout_text, stderr_text;
  ASSERT_EQ(test::run_cli(args, &stdout_text, &stderr_text), 0) << stderr_text;
  EXPECT_EQ(stderr_text, "");  // --quiet
  std::ifstream in(out / "results.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["command"], "power");
  EXPECT_EQ(j["options"]["mode"], "full");
  EXPECT_NE(j["options"]["attention_input"].get<std::string>().find("pre-attention norm"), std::string::npos);
  EXPECT_EQ(j["options"]["residual"], true);
  EXPECT_EQ(j["options"]["samples"]["samples"], 3);
  EXPECT_EQ(j["options"]["iteration"]["steps"], 40);
  EXPECT_EQ(j["results"]["samples"], 3);
  const auto& layers = j["results"]["layers"];
  ASSERT_EQ(layers.size(), 5u);
  for (const auto& l : layers) {
    for (const char* key : {"gamma", "rho", "p_value", "baseline", "quantiles", "histogram"}) EXPECT_TRUE(l["dynamics_F"].contains(key)) << key;
    EXPECT_TRUE(l["F"].contains("gap"));
    EXPECT_TRUE(l["I_plus_F"].contains("modulus_ratio"));
    const Index plane = l["F"]["complex_pair"].get<bool>() ? 2 : 1;  // a complex pair: the 2-D plane's baseline
    EXPECT_NEAR(l["dynamics_F"]["baseline"].get<double>(), random_alignment_baseline(64, plane), 1e-12);
  }
  EXPECT_EQ(j["results"]["iteration"]["layer"], 2);
  EXPECT_TRUE(j["results"]["iteration"]["regime"].contains("regime"));
  const auto& steering = j["results"]["steering"];
  ASSERT_EQ(steering["points"].size(), 3u);
  EXPECT_GE(steering["points"][2]["final_layer_min_alignment"].get<double>(), 0.99);
  EXPECT_FALSE(steering["points"][2]["top_tokens"][0]["piece"].get<std::string>().empty());
  for (const char* file : {"results.json", "layers.csv", "eigenvalues.npy", "dominant_eigenvectors_F.npy", "layer_matrix_bias.npy",
                           "alignment_after.npy", "alignment_histogram.npy", "iteration_curves.csv", "iteration_alignment.npy",
                           "iteration_plane.npy", "steering.csv", "eigenvalues.gp", "gamma_rho.dat", "iteration_alignment.gp",
                           "steering_sweep.dat"})
    EXPECT_TRUE(fs::exists(out / file)) << file;
  EXPECT_TRUE(j["files"].contains("layers.csv"));
}

TEST(PowerCli, BadModeIsAUsageError) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  const std::string args = fmt::format("power {} --ids 1,2,3 --mode sideways --out {}",
                                       (test::shared_dir() / "models/stories260K/stories260K.bin").string(),
                                       test::scratch_dir("power_cli_bad").string());
  EXPECT_EQ(test::run_cli(args), 2);
}

}  // namespace
}  // namespace tdyn
