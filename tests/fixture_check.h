// Runs a model on a fixture's reference sequences and compares every stored activation with the float64
// references under the manifest's tolerances: |a - ref| <= rtol*|ref| + atol_x_max * max|ref|.
#pragma once

#include <string>

#include "io/tensor_store.h"
#include "model/transformer.h"
#include "test_util.h"

namespace tdyn::test {

struct FixtureTolerance {
  double rtol, atol_x_max;
};
FixtureTolerance fixture_tolerance(const std::string& ref_key);

// Compares `got` (float32, same element order) against reference tensor `key` of `refs`; returns the worst
// error / tolerance ratio (<= 1 passes).
double expect_matches_ref(const TensorStore& refs, const std::string& key, const float* got, size_t n);

struct FixtureReport {
  int compared = 0;           // tensors compared
  double worst_ratio = 0;     // worst error / tolerance over all of them
  std::string worst_key;
};

// Runs every sequence of the fixture in `model_dir` (refs file `refs_file`, token types from
// seq{s}.token_type_ids when present) and checks every reference it holds: embeddings, every hook (the refs'
// hook_attn_out / hook_mlp_out are the projections before any post-norm: compared with attn.hook_out_proj /
// mlp.hook_out_proj), attention patterns, final hidden state, logits and the family extras (mlm_transform,
// embeddings_raw, per_layer_inputs, hook_resid_after_*, logits_pre_softcap). A per-sequence reference that
// nothing compares is a failure (Jacobians, layer matrices and RoPE tables are checked elsewhere).
// Returns the number of tensors compared.
int check_fixture(const fs::path& model_dir, const fs::path& refs_file, FixtureReport* report = nullptr);

// Writes to `out` the references of `refs_file` cut to each sequence's first `n` positions (ids, every [T, ...]
// activation, patterns [H, n, n]; per-position Jacobians dropped) and returns `out`. A causal model's activations
// at those positions do not depend on the later ones, so a model that matches the reference only up to position n
// (a conversion that dropped a sliding window of n) is checked there at the full tolerances.
fs::path prefix_refs(const fs::path& refs_file, int64_t n, const fs::path& out);

}  // namespace tdyn::test
