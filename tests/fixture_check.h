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

// Compares `got` (float32, same element order) against reference tensor `key` of `refs`.
void expect_matches_ref(const TensorStore& refs, const std::string& key, const float* got, size_t n);

// Runs every sequence of the fixture in `fixture_dir` (refs file `refs_file`) and checks embeddings, every
// hook the refs hold, attention patterns, final hidden state and logits. Returns the number of tensors compared.
int check_fixture(const fs::path& model_dir, const fs::path& refs_file);

}  // namespace tdyn::test
