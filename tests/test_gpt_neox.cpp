// GPT-NeoX / Pythia end to end against float64 references made at test time by tests/refgen/gpt_neox.py (from
// the HF modeling semantics, reusing shared/fixtures/_gen's primitives): one checkpoint with parallel blocks
// (use_parallel_residual, rotary_pct 0.25) and one sequential (rotary_pct 0.5). Every hook, the residual
// identities, KV-cached decoding, the sublayer Jacobians and their composition over depth, the layer matrices,
// config and tensor errors, and the CLI commands on them.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>

#include <nlohmann/json.hpp>

#include "analysis/jacobian/jacobian_model.h"
#include "analysis/jacobian/means.h"
#include "analysis/layer_matrix.h"
#include "core/files.h"
#include "core/npy.h"
#include "fixture_check.h"
#include "generated_fixtures.h"
#include "io/safetensors.h"
#include "model/ops.h"

namespace tdyn {
namespace {

using linalg::Matrix;

#define TDYN_REQUIRE_NEOX(var) TDYN_REQUIRE_GENERATED(var, gpt_neox_fixtures)

std::vector<int32_t> ints32(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

class Neox : public ::testing::TestWithParam<const char*> {};

TEST_P(Neox, MatchesReferencesAtEveryHook) {
  TDYN_REQUIRE_NEOX(root);
  const fs::path dir = root / GetParam();
  test::FixtureReport report;
  const int compared = test::check_fixture(dir, dir / "refs.safetensors", &report);
  EXPECT_GE(compared, 2 * (1 + 3 * 6 + 2));
  RecordProperty("worst_ratio", fmt::format("{:.4f}", report.worst_ratio));
  RecordProperty("worst_key", report.worst_key);
  std::cout << fmt::format("[fidelity] gpt_neox_{:<25} {:4d} tensors, worst error/tolerance {:.4f} ({})\n", GetParam(),
                           compared, report.worst_ratio, report.worst_key);
}

// resid_mid = resid_pre + attn_out and resid_post = resid_mid + mlp_out bit for bit; a parallel block's MLP reads
// resid_pre (ln2.hook_normalized is the norm of resid_pre, not of resid_mid).
TEST_P(Neox, ResidualIdentitiesHoldExactly) {
  TDYN_REQUIRE_NEOX(root);
  Transformer model(load_model(root / GetParam()));
  const ModelConfig& c = model.config();
  EXPECT_EQ(c.parallel_residual, std::string(GetParam()) == "parallel");
  ActivationCache cache("*");
  const std::vector<int32_t> ids = {5, 17, 42, 9, 3, 11, 2, 8, 30, 1, 4};
  model.forward(ids, &cache);
  const int64_t n = static_cast<int64_t>(ids.size()), d = c.d_model;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto get = [&](const char* h) { return cache.at(fmt::format("blocks.{}.{}", l, h)).data; };
    const auto pre = get("hook_resid_pre"), attn = get("hook_attn_out"), mid = get("hook_resid_mid");
    const auto mlp = get("hook_mlp_out"), post = get("hook_resid_post"), ln2 = get("ln2.hook_normalized");
    std::vector<float> mlp_input(ln2.size());
    apply_norm(c.norm, (c.parallel_residual ? pre : mid).data(), n, d, model.model().weights.layers[l].mlp_norm, c.norm_eps,
               mlp_input.data());
    for (size_t i = 0; i < pre.size(); ++i) {
      ASSERT_EQ(mid[i], pre[i] + attn[i]) << "layer " << l << " element " << i;
      ASSERT_EQ(post[i], mid[i] + mlp[i]) << "layer " << l << " element " << i;
      ASSERT_EQ(ln2[i], mlp_input[i]) << "layer " << l << " element " << i << " (the MLP's input)";
    }
  }
  // Run step by step, a parallel block's MLP step refuses to guess its input.
  if (c.parallel_residual) {
    Tensor x = cache.at("blocks.1.hook_resid_mid");
    EXPECT_THROW(model.mlp_block(1, x, nullptr), Error);
  }
}

// The maps the power analogy iterates without the residual (Transformer::layer_without_residual): a parallel block
// is attn(ln1(x)) + mlp(ln2(x)), which forward() adds to the stream as hook_attn_out + hook_mlp_out; a sequential one
// is mlp(ln2(attn(ln1(x)))), whose MLP part is what mlp_block adds to its input.
TEST_P(Neox, WithoutResidualDropsTheSkips) {
  TDYN_REQUIRE_NEOX(root);
  Transformer model(load_model(root / GetParam()));
  ActivationCache cache("blocks.*");
  const std::vector<int32_t> ids = {5, 17, 42, 9, 3, 11, 2, 8, 30, 1, 4};
  model.forward(ids, &cache);
  auto expect_near = [](const Tensor& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_EQ(got.data.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got.data[i], want[i], 1e-5f + 1e-5f * std::abs(want[i])) << what << " element " << i;
  };
  for (int64_t l = 0; l < model.config().n_layers; ++l) {
    auto get = [&](const char* h) { return cache.at(fmt::format("blocks.{}.{}", l, h)); };
    const Tensor pre = get("hook_resid_pre"), attn = get("hook_attn_out"), mlp = get("hook_mlp_out");
    const std::string at = fmt::format("{} layer {}", GetParam(), l);
    expect_near(model.sublayer_without_residual(l, Sublayer::Attention, pre, 0, nullptr), attn.data, at + " attention");
    std::vector<float> want(pre.data.size());
    if (model.config().parallel_residual) {
      for (size_t i = 0; i < want.size(); ++i) want[i] = attn.data[i] + mlp.data[i];
    } else {
      Tensor stepped = attn;  // mlp_block: attn + mlp(ln2(attn))
      model.mlp_block(l, stepped, nullptr);
      for (size_t i = 0; i < want.size(); ++i) want[i] = stepped.data[i] - attn.data[i];
    }
    expect_near(model.layer_without_residual(l, pre, 0, nullptr), want, at + " layer");
  }
}

// Partial RoPE at positions past the chunk start: cached decoding equals the whole sequence.
TEST_P(Neox, CachedDecodingEqualsWholeSequence) {
  TDYN_REQUIRE_NEOX(root);
  Transformer model(load_model(root / GetParam()));
  const std::vector<int32_t> ids = {1, 7, 20, 13, 64, 9, 31, 2, 5, 40, 11, 3, 8, 17};
  const Tensor whole = model.forward(ids);
  KVCache cache = model.new_cache(20);
  std::vector<float> got = model.forward(std::span(ids).first(4), nullptr, &cache).data;
  for (size_t t = 4; t < ids.size(); t += 3) {
    const Tensor step = model.forward(std::span(ids).subspan(t, std::min<size_t>(3, ids.size() - t)), nullptr, &cache);
    got.insert(got.end(), step.data.begin(), step.data.end());
  }
  test::expect_close(got, whole.data, 1e-5, 1e-5, "cached logits");
}

// Worst |a − ref| / (rtol |ref| + atol_x_max · max|ref|) over a [d, d] reference (the fixture convention).
double ref_ratio(const std::vector<double>& ref, const std::string& key, const Matrix& got) {
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

using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

Matrix ref_matrix(const TensorStore& refs, const std::string& key, int64_t d) {
  const std::vector<double> v = refs.doubles(key);
  return Eigen::Map<const RowMajor>(v.data(), d, d);
}

// Sublayer Jacobians against the references; the block's against the reference taken through the whole layer
// (parallel: J_attn + J_mlp − I, sequential: J_mlp J_attn); the structured form against tangent propagation; the
// local maps against the stored stream.
TEST_P(Neox, JacobiansMatchReferences) {
  TDYN_REQUIRE_NEOX(root);
  const fs::path dir = root / GetParam();
  const JacobianModel m(std::make_shared<Transformer>(load_model(dir)));
  TensorStore refs;
  read_safetensors(dir / "refs.safetensors", refs);
  const SequenceState state = m.run(ints32(refs.ints("seq0.input_ids")));
  const int64_t d = m.d_model();
  double worst = 0, worst_structured = 0, worst_step = 0;
  std::string worst_key;
  for (int64_t pos : {5, 23}) {
    for (int64_t l = 0; l < m.config().n_layers; ++l) {
      const std::string prefix = fmt::format("seq0.pos{}.blocks.{}.", pos, l);
      const Matrix attn = m.jacobian(state, l, Sublayer::Attention, pos);
      const Matrix mlp = m.jacobian(state, l, Sublayer::Mlp, pos);
      const Matrix block = m.block_jacobian(attn, mlp);
      for (auto [name, j] : {std::pair{"jac_attn", attn}, {"jac_mlp", mlp}, {"jac_block", block}}) {
        const double r = ref_ratio(refs.doubles(prefix + name), prefix + name, j);
        if (r > worst) worst = r, worst_key = prefix + name;
      }
      for (Sublayer which : {Sublayer::Attention, Sublayer::Mlp}) {
        const Matrix tangents = m.jacobian_by_tangents(state, l, which, pos);
        worst_structured = std::max(worst_structured, (m.structure(state, l, which, pos).dense() - tangents).norm() / tangents.norm());
        const linalg::Vector out = m.output(state, l, which, pos);
        worst_step = std::max(worst_step, (m.step(state, l, which, pos, m.input(state, l, which, pos)) - out).norm() / out.norm());
      }
    }
  }
  EXPECT_LE(worst, 1.0) << "worst error/tolerance at " << worst_key;
  EXPECT_LE(worst_structured, 1e-12) << "structured form vs tangent propagation";
  EXPECT_LE(worst_step, 1e-6) << "float64 local map vs the float32 forward pass";
  std::cout << fmt::format("[fidelity] gpt_neox_{} Jacobians: worst error/tolerance {:.4f} ({})\n", GetParam(), worst, worst_key);
}

// The chain over depth: at the last position nothing else depends on the input, so the product of the layers'
// block Jacobians (references, through each whole layer) is the exact d resid_post / d x_0, which DepthChain must
// build from the sublayer Jacobians (for a parallel block: C_2l + (J_2l+1 − I) C_2l−1, not J_2l+1 C_2l).
TEST_P(Neox, DepthChainComposesBlocks) {
  TDYN_REQUIRE_NEOX(root);
  const fs::path dir = root / GetParam();
  const JacobianModel m(std::make_shared<Transformer>(load_model(dir)));
  TensorStore refs;
  read_safetensors(dir / "refs.safetensors", refs);
  const SequenceState state = m.run(ints32(refs.ints("seq0.input_ids")));
  const int64_t d = m.d_model(), pos = 23;
  DepthChain<Matrix> chain(m.config().parallel_residual);
  Matrix expected = Matrix::Identity(d, d);
  for (int64_t l = 0; l < m.config().n_layers; ++l) {
    const std::string key = fmt::format("seq0.pos{}.blocks.{}.", pos, l);
    chain.add(m.jacobian(state, l, Sublayer::Attention, pos));
    const Matrix got = chain.add(m.jacobian(state, l, Sublayer::Mlp, pos));
    expected = ref_matrix(refs, key + "jac_block", d) * expected;
    const RowMajor e = expected;
    EXPECT_LE(ref_ratio(std::vector<double>(e.data(), e.data() + d * d), key + "jac_block", got), 1.0)
        << "d resid_post / d x_0 after layer " << l;
  }
}

TEST_P(Neox, LayerMatricesMatchReferences) {
  TDYN_REQUIRE_NEOX(root);
  const fs::path dir = root / GetParam();
  auto model = load_model(dir);
  TensorStore refs;
  read_safetensors(dir / "refs.safetensors", refs);
  for (const LayerMatrix& lm : layer_matrices(*model)) {
    const std::string key = fmt::format("blocks.{}.layer_matrix", lm.layer);
    EXPECT_LE(ref_ratio(refs.doubles(key), key, lm.f), 1.0) << key;
    const std::vector<double> bias = refs.doubles(key + "_bias");
    test::expect_close(std::vector<double>(lm.bias.data(), lm.bias.data() + lm.bias.size()), bias, 1e-5, 1e-6, key + "_bias");
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Neox, ::testing::Values("parallel", "sequential"),
                         [](const auto& info) { return std::string(info.param); });

// ---------------------------------------------------------------------------------------------------------
// Bad checkpoints: clear errors naming what is wrong.

fs::path broken_copy(const fs::path& from, const std::string& name) {
  const fs::path dir = test::scratch_dir("neox_" + name);
  fs::copy_file(from / "config.json", dir / "config.json");
  fs::copy_file(from / "model.safetensors", dir / "model.safetensors");
  return dir;
}

void edit_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(read_file(dir / "config.json"));
  edit(j);
  std::ofstream(dir / "config.json") << j.dump(2);
}

std::string load_error(const fs::path& dir) {
  try {
    load_model(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(NeoxErrors, BadConfigsAndTensorsAreNamed) {
  TDYN_REQUIRE_NEOX(root);
  const fs::path good = root / "parallel";
  {
    const fs::path dir = broken_copy(good, "odd_rotary");
    edit_config(dir, [](nlohmann::json& j) { j["rotary_pct"] = 0.3; });  // 16 * 0.3 = 4.8 -> 4: fine
    EXPECT_EQ(load_error(dir), "");
    edit_config(dir, [](nlohmann::json& j) { j["rotary_pct"] = 0.2; });  // 3 dims
    EXPECT_NE(load_error(dir).find("rotary_pct 0.2 gives 3 rotary dimensions"), std::string::npos) << load_error(dir);
    edit_config(dir, [](nlohmann::json& j) { j["rotary_pct"] = 1.5; });
    EXPECT_NE(load_error(dir).find("rotary_pct must be in [0, 1]"), std::string::npos) << load_error(dir);
    edit_config(dir, [](nlohmann::json& j) { j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}}; j["rotary_pct"] = 0.25; });
    EXPECT_NE(load_error(dir).find("dynamic"), std::string::npos) << load_error(dir);
  }
  {
    const fs::path dir = broken_copy(good, "heads");
    edit_config(dir, [](nlohmann::json& j) { j["num_attention_heads"] = 8; });  // same sizes, other head split
    Transformer eight(load_model(dir));  // loads (the fused tensor's size does not depend on the split) ...
    Transformer four(load_model(good));
    const std::vector<int32_t> ids = {1, 2, 3, 4};
    EXPECT_NE(eight.forward(ids).data, four.forward(ids).data);  // ... but regroups q/k/v differently
  }
  {
    const fs::path dir = broken_copy(good, "tied");
    edit_config(dir, [](nlohmann::json& j) { j["tie_word_embeddings"] = true; });
    EXPECT_NE(load_error(dir).find("unknown tensor 'embed_out.weight'"), std::string::npos) << load_error(dir);
  }
  {
    const fs::path dir = broken_copy(good, "no_bias");
    edit_config(dir, [](nlohmann::json& j) { j["attention_bias"] = false; });
    EXPECT_NE(load_error(dir).find("unknown tensor 'gpt_neox.layers.0.attention."), std::string::npos)
        << load_error(dir);
  }
  {
    const fs::path dir = broken_copy(good, "mlp_size");
    edit_config(dir, [](nlohmann::json& j) { j["intermediate_size"] = 128; });
    EXPECT_NE(load_error(dir).find("tensor 'gpt_neox.layers.0.mlp.dense_h_to_4h.weight' has wrong shape; expected [128, 64], got [160, 64]"),
              std::string::npos)
        << load_error(dir);
  }
  {
    // No parser makes a parallel block with other norms, but the block itself refuses one rather than run it wrongly.
    const std::shared_ptr<Model> post_norm = model_variant(load_model(good));
    post_norm->config.norm_placement = NormPlacement::PostResidual;
    try {
      Transformer t(post_norm);
      ADD_FAILURE() << "a parallel block with post-norms was run";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("a parallel-residual block is only supported with pre-norms"), std::string::npos) << e.what();
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// The CLI on the parallel checkpoint.

TEST(NeoxCli, InfoRunJacobianPower) {
  TDYN_REQUIRE_NEOX(root);
  const fs::path model = root / "parallel", out = test::scratch_dir("neox_cli");
  std::string stdout_text, err;
  ASSERT_EQ(test::run_cli("info --json " + model.string(), &stdout_text, &err), 0) << err;
  const nlohmann::json info = nlohmann::json::parse(stdout_text);
  EXPECT_EQ(info["family"], "gpt_neox");
  EXPECT_EQ(info["config"]["parallel_residual"], true);
  EXPECT_EQ(info["config"]["rope"]["rotary_dims"], 4);

  ASSERT_EQ(test::run_cli(fmt::format("run {} --ids 1,2,3 --max-new-tokens 2 --save-logits {}", model.string(),
                                      (out / "logits.npy").string()),
                          &stdout_text, &err),
            0)
      << err;
  EXPECT_TRUE(fs::exists(out / "logits.npy"));

  std::ofstream(out / "samples.ids") << "1 5 9 13 17 21 25 29 33 37 41 45\n2 6 10 14 18 22 26 30 34 38 42 46\n"
                                        "3 7 11 15 19 23 27 31 35 39 43 47\n";
  ASSERT_EQ(test::run_cli(fmt::format("jacobian {} --data {} --samples 3 --max-len 12 --out {} --cumulative both --quiet",
                                      model.string(), (out / "samples.ids").string(), (out / "jac").string()),
                          &stdout_text, &err),
            0)
      << err;
  const nlohmann::json jac = nlohmann::json::parse(read_file(out / "jac" / "results.json"));
  ASSERT_EQ(jac["results"]["models"][0]["depths"].size(), 6u);
  // The default path sums the structured Jacobians in a shared pass: the same means and chain, to float32 round-off
  // (the pass stacks the samples' rows into one product, whose float32 sums the host's BLAS may round by shape).
  ASSERT_EQ(test::run_cli(fmt::format("jacobian {} --data {} --samples 3 --max-len 12 --out {} --quiet", model.string(),
                                      (out / "samples.ids").string(), (out / "jac_pass").string()),
                          &stdout_text, &err),
            0)
      << err;
  for (const char* file : {"mean_jacobians.npy", "cumulative_products.npy"})
    test::expect_close(read_npy(out / "jac_pass" / file).as_double(), read_npy(out / "jac" / file).as_double(), 1e-5,
                       1e-5, std::string("pass vs in-memory ") + file);

  // The family's random initialisation loads and runs.
  ASSERT_EQ(test::run_cli(fmt::format("init {} --seed 3 --out {}", model.string(), (out / "init").string()), &stdout_text, &err), 0)
      << err;
  ASSERT_EQ(test::run_cli(fmt::format("run {} --ids 1,2,3 --max-new-tokens 1", (out / "init").string()), &stdout_text, &err), 0)
      << err;

  ASSERT_EQ(test::run_cli(fmt::format("power {} --data {} --samples 3 --max-len 12 --out {} --iterate-layer 1 "
                                      "--iterations 10 --steer-samples 1 --quiet",
                                      model.string(), (out / "samples.ids").string(), (out / "power").string()),
                          &stdout_text, &err),
            0)
      << err;
  const nlohmann::json power = nlohmann::json::parse(read_file(out / "power" / "results.json"));
  EXPECT_EQ(power["results"]["layers"].size(), 3u);
}

}  // namespace
}  // namespace tdyn
