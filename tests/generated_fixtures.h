// Fixtures made at test time (float64 references from tests/refgen/*.py, SentencePiece models, torch.save files):
// each is made once per content and reused by every test process of every run while its inputs are unchanged.
#pragma once

#include <functional>
#include <string>

#include "test_util.h"

namespace tdyn::test {

// A 64-bit FNV-1a hash as 16 hex digits: a cache key that is the same in every process and build.
std::string content_hash(const std::string& text);

// TDYN_TEST_DATA_DIR/<name>-<content_hash(key)>, made by `make(dir)` the first time it is asked for. `key` holds
// everything the fixture is made from (generator sources, input files, parameters), so a change to any of them
// makes it again. One process makes it, under a file lock, into a temporary directory that is then renamed:
// the others (ctest runs tests in parallel processes) wait and never see half of it. `make` throws or returns
// false when it fails; false with *why set means "cannot be made here" (a skip: the returned path is empty).
fs::path made_once(const std::string& name, const std::string& key,
                   const std::function<bool(const fs::path& dir, std::string* why)>& make, std::string* why);

// DIR/{mistral, qwen2, qwen3, phi3}/{config.json, model.safetensors, refs.safetensors} from tests/refgen/extra_families.py.
// Empty with *why set when the generator cannot run here (a skip, not a failure).
fs::path extra_family_fixtures(std::string* why);

// DIR/{parallel, sequential}/... (GPT-NeoX) from tests/refgen/gpt_neox.py. Empty with *why set when it cannot run.
fs::path gpt_neox_fixtures(std::string* why);

}  // namespace tdyn::test

#define TDYN_REQUIRE_GENERATED(var, generator)               \
  std::string why_##var;                                     \
  const fs::path var = ::tdyn::test::generator(&why_##var);  \
  if (var.empty()) GTEST_SKIP() << why_##var
