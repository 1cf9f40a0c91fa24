#include "fixture_check.h"

#include <cmath>
#include <map>
#include <set>

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

double expect_matches_ref(const TensorStore& refs, const std::string& key, const float* got, size_t n) {
  std::vector<double> ref = refs.doubles(key);
  EXPECT_EQ(ref.size(), n) << key << ": element count differs";
  if (ref.size() != n) return INFINITY;
  double max_ref = 0;
  for (double r : ref) max_ref = std::max(max_ref, std::abs(r));
  FixtureTolerance tol = fixture_tolerance(key);
  Closeness c = compare(got, ref.data(), n, tol.rtol, tol.atol_x_max * max_ref);
  EXPECT_TRUE(c.ok) << c.describe(key);
  return c.worst_ratio;
}

int check_fixture(const fs::path& model_dir, const fs::path& refs_file, FixtureReport* report) {
  TensorStore refs;
  read_safetensors(refs_file, refs);
  Transformer model(load_model(model_dir));
  const int64_t n_layers = model.config().n_layers;
  FixtureReport local;
  FixtureReport& r = report ? *report : local;
  r = FixtureReport{};
  std::set<std::string> compared_keys;
  for (int seq = 0; refs.contains(fmt::format("seq{}.input_ids", seq)); ++seq) {
    const std::string prefix = fmt::format("seq{}.", seq);
    std::vector<int64_t> ids64 = refs.ints(prefix + "input_ids");
    std::vector<int32_t> ids(ids64.begin(), ids64.end());
    std::vector<int32_t> types;
    if (refs.contains(prefix + "token_type_ids")) {
      std::vector<int64_t> t = refs.ints(prefix + "token_type_ids");
      types.assign(t.begin(), t.end());
    }
    ActivationCache cache("*");
    Tensor logits = model.forward(ids, &cache, nullptr, types);
    auto check = [&](const std::string& ref_key, const float* got, size_t n) {
      if (!refs.contains(ref_key)) return;
      double ratio = expect_matches_ref(refs, ref_key, got, n);
      ++r.compared;
      compared_keys.insert(ref_key);
      if (ratio > r.worst_ratio || r.worst_key.empty()) {
        r.worst_ratio = ratio;
        r.worst_key = ref_key;
      }
    };
    auto check_hook = [&](const std::string& ref_key, const std::string& hook) {
      if (!refs.contains(ref_key)) return;
      if (!cache.contains(hook)) {
        ADD_FAILURE() << "reference " << ref_key << " has no hook " << hook;
        return;
      }
      const Tensor& t = cache.at(hook);
      check(ref_key, t.ptr(), t.size());
    };
    check_hook(prefix + "embeddings", "blocks.0.hook_resid_pre");
    check_hook(prefix + "embeddings_raw", "embed.ln.hook_normalized");
    check_hook(prefix + "per_layer_inputs", "hook_per_layer_inputs");
    for (int64_t l = 0; l < n_layers; ++l) {
      auto block = [&](const char* h) { return fmt::format("blocks.{}.{}", l, h); };
      for (const char* h : {"hook_resid_pre", "hook_resid_mid", "hook_resid_post", "attn.hook_pattern",
                            "hook_resid_after_mlp", "hook_resid_after_ple"})
        check_hook(prefix + block(h), block(h));
      // The refs hold the output projections before any post-norm.
      check_hook(prefix + block("hook_attn_out"), block("attn.hook_out_proj"));
      check_hook(prefix + block("hook_mlp_out"), block("mlp.hook_out_proj"));
    }
    check_hook(prefix + "final_hidden", cache.contains("ln_final.hook_normalized")
                                            ? std::string("ln_final.hook_normalized")
                                            : fmt::format("blocks.{}.hook_resid_post", n_layers - 1));
    check_hook(prefix + "mlm_transform", "mlm.hook_transform");
    check_hook(prefix + "logits_pre_softcap", "hook_logits_pre_softcap");
    check(prefix + "logits", logits.ptr(), logits.size());
  }
  // Every float reference of a sequence must have been compared (except the ones other tests check).
  for (const auto& key : refs.names()) {
    if (key.rfind("seq", 0) != 0 || compared_keys.count(key)) continue;
    bool elsewhere = false;
    for (const char* s : {"input_ids", "token_type_ids", "jac_", "logits_alt_"}) elsewhere |= key.find(s) != std::string::npos;
    if (!elsewhere) ADD_FAILURE() << "reference " << key << " in " << refs_file << " was not compared";
  }
  return r.compared;
}

fs::path prefix_refs(const fs::path& refs_file, int64_t n, const fs::path& out) {
  TensorStore refs;
  read_safetensors(refs_file, refs);
  std::map<std::string, TensorToWrite> cut;
  for (const std::string& key : refs.names()) {
    const TensorInfo& t = refs.get(key);
    const size_t element = dtype_size(t.dtype);
    const char* bytes = reinterpret_cast<const char*>(t.data);
    if (key.rfind("seq", 0) != 0) {
      cut[key] = {t.dtype, t.shape, std::string(bytes, t.nbytes)};
      continue;
    }
    if (key.find(".pos") != std::string::npos) continue;  // per-position Jacobians
    const int64_t T = refs.get(key.substr(0, key.find('.')) + ".input_ids").shape[0];
    EXPECT_LE(n, T) << key;
    if (key.ends_with("hook_pattern")) {  // [H, T, T] -> [H, n, n]
      std::string s;
      for (int64_t h = 0; h < t.shape[0]; ++h)
        for (int64_t q = 0; q < n; ++q) s.append(bytes + ((h * T + q) * T) * element, n * element);
      cut[key] = {t.dtype, {t.shape[0], n, n}, s};
      continue;
    }
    EXPECT_EQ(t.shape[0], T) << key << ": not a per-position reference";
    Shape shape = t.shape;
    shape[0] = n;
    cut[key] = {t.dtype, shape, std::string(bytes, t.nbytes / T * n)};
  }
  write_safetensors(out, cut);
  return out;
}

}  // namespace tdyn::test
