// Fixtures whose float64 references are generated at test time (tests/refgen/*.py, reusing shared/fixtures/_gen's
// primitives), made once and reused by every test process while the generator is unchanged.
#pragma once

#include <string>

#include "test_util.h"

namespace tdyn::test {

// DIR/{mistral, qwen2, phi3}/{config.json, model.safetensors, refs.safetensors} from tests/refgen/extra_families.py.
// Empty with *why set when the generator cannot run here (a skip, not a failure).
fs::path extra_family_fixtures(std::string* why);

// DIR/{parallel, sequential}/... (GPT-NeoX) from tests/refgen/gpt_neox.py. Empty with *why set when it cannot run.
fs::path gpt_neox_fixtures(std::string* why);

}  // namespace tdyn::test

#define TDYN_REQUIRE_GENERATED(var, generator)               \
  std::string why_##var;                                     \
  const fs::path var = ::tdyn::test::generator(&why_##var);  \
  if (var.empty()) GTEST_SKIP() << why_##var
