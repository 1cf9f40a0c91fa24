#include "fixture_check.h"

#include <cmath>

#include "io/safetensors.h"

namespace tdyn::test {

FixtureTolerance fixture_tolerance(const std::string& key) {
  auto has = [&](const char* s) { return key.find(s) != std::string::npos; };
  if (has("layer_matrix")) return {1e-5, 1e-6};
  if (has("jac_")) return {1e-3, 5e-5};
  if (has("hook_pattern")) return {1e-3, 5e-5};
  if (has("embeddings") && !has("embeddings_raw")) return {1e-5, 2e-6};
  return {1e-4, 2e-5};  // hook_resid_*, attn/mlp out, final_hidden, logits, per_layer_inputs, mlm_transform
}

void expect_matches_ref(const TensorStore& refs, const std::string& key, const float* got, size_t n) {
  std::vector<double> ref = refs.doubles(key);
  ASSERT_EQ(ref.size(), n) << key << ": element count differs";
  double max_ref = 0;
  for (double r : ref) max_ref = std::max(max_ref, std::abs(r));
  FixtureTolerance tol = fixture_tolerance(key);
  Closeness c = compare(got, ref.data(), n, tol.rtol, tol.atol_x_max * max_ref);
  EXPECT_TRUE(c.ok) << c.describe(key);
}

int check_fixture(const fs::path& model_dir, const fs::path& refs_file) {
  TensorStore refs;
  read_safetensors(refs_file, refs);
  Transformer model(load_model(model_dir));
  const int64_t n_layers = model.config().n_layers;
  int compared = 0;
  for (int seq = 0; refs.contains(fmt::format("seq{}.input_ids", seq)); ++seq) {
    const std::string prefix = fmt::format("seq{}.", seq);
    std::vector<int64_t> ids64 = refs.ints(prefix + "input_ids");
    std::vector<int32_t> ids(ids64.begin(), ids64.end());
    ActivationCache cache("*");
    Tensor logits = model.forward(ids, &cache);
    auto check = [&](const std::string& ref_key, const float* got, size_t n) {
      if (!refs.contains(ref_key)) return;
      expect_matches_ref(refs, ref_key, got, n);
      ++compared;
    };
    auto check_hook = [&](const std::string& ref_key, const std::string& hook) {
      if (!refs.contains(ref_key)) return;
      const Tensor& t = cache.at(hook);
      check(ref_key, t.ptr(), t.size());
    };
    check_hook(prefix + "embeddings", "blocks.0.hook_resid_pre");
    for (int64_t l = 0; l < n_layers; ++l) {
      for (const char* h : {"hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out",
                            "attn.hook_pattern"}) {
        std::string name = fmt::format("blocks.{}.{}", l, h);
        check_hook(prefix + name, name);
      }
    }
    check_hook(prefix + "final_hidden", "ln_final.hook_normalized");
    check(prefix + "logits", logits.ptr(), logits.size());
  }
  return compared;
}

}  // namespace tdyn::test
