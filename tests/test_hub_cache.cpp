// MODEL as a Hugging Face hub cache: DIR@REVISION and a bare cache directory resolve to their snapshot, in a cache
// laid out as huggingface_hub writes it (refs/<name> holding a commit, snapshots/<commit>/ of symlinks into
// blobs/), with clear errors for what a real cache can hold: a missing revision, an ambiguous commit prefix, a
// link to a blob that never arrived.
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "io/hub_cache.h"
#include "model/loader.h"
#include "model/transformer.h"
#include "test_util.h"

namespace tdyn {
namespace {

constexpr const char* kMain = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
constexpr const char* kStep = "a1b2c3d4ffff0718293a4b5c6d7e8f9012345678";  // shares 8 hex digits with kMain

class HubCache : public ::testing::Test {
 protected:
  void SetUp() override {
    TDYN_REQUIRE_SHARED("fixtures/llama");
    fixture_ = test::shared_dir() / "fixtures/llama";
    root_ = fs::temp_directory_path() / fmt::format("tdyn_hub_{}", ::getpid());
    fs::remove_all(root_);
    cache_ = root_ / "models--tdyn--tiny-llama";
    // main: the fixture; step1000: its bf16 copy. Blobs are named by content in a real cache; any name will do.
    add_snapshot(kMain, fixture_, "m");
    add_snapshot(kStep, fixture_ / "bf16", "s");
    fs::create_directories(cache_ / "refs");
    write_file_atomic(cache_ / "refs/main", kMain);
    write_file_atomic(cache_ / "refs/step1000", std::string(kStep) + "\n");
  }
  void TearDown() override { fs::remove_all(root_); }

  void add_snapshot(const std::string& commit, const fs::path& source, const std::string& blob_prefix) {
    fs::create_directories(cache_ / "blobs");
    fs::create_directories(cache_ / "snapshots" / commit);
    for (const char* name : {"config.json", "model.safetensors"}) {
      const std::string blob = blob_prefix + name;
      fs::copy_file(source / name, cache_ / "blobs" / blob);
      fs::create_symlink(fs::path("../../blobs") / blob, cache_ / "snapshots" / commit / name);
    }
  }

  std::string error_of(const std::string& spec) {
    try {
      resolve_checkpoint(spec);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }

  fs::path fixture_, root_, cache_;
};

TEST_F(HubCache, RevisionsResolveToTheirSnapshots) {
  const fs::path main_snapshot = cache_ / "snapshots" / kMain, step_snapshot = cache_ / "snapshots" / kStep;
  EXPECT_EQ(resolve_checkpoint(cache_.string()), main_snapshot);  // a bare cache means @main
  EXPECT_EQ(resolve_checkpoint(cache_.string() + "@main"), main_snapshot);
  EXPECT_EQ(resolve_checkpoint(cache_.string() + "@step1000"), step_snapshot);  // the ref's newline is dropped
  EXPECT_EQ(resolve_checkpoint(cache_.string() + "@" + kStep), step_snapshot);   // a full commit
  EXPECT_EQ(resolve_checkpoint(cache_.string() + "@a1b2c3d4f"), step_snapshot);  // a unique prefix
  EXPECT_EQ(resolve_checkpoint(fixture_.string()), fixture_);                    // not a cache: as given
  // An ordinary directory whose name holds '@' is used as it is.
  const fs::path at_dir = root_ / "run@2";
  fs::create_directories(at_dir);
  EXPECT_EQ(resolve_checkpoint(at_dir.string()), at_dir);

  // The model loaded through the cache is the fixture, bit for bit: same logits.
  const std::vector<int32_t> ids = {1, 5, 9, 2};
  const Tensor direct = Transformer(load_model(fixture_)).forward(ids);
  const auto cached_model = load_model(cache_.string() + "@main");
  EXPECT_EQ(cached_model->path, main_snapshot);
  const Tensor cached = Transformer(cached_model).forward(ids);
  EXPECT_EQ(direct.shape, cached.shape);
  EXPECT_EQ(direct.data, cached.data);
}

TEST_F(HubCache, BadRevisionsAndBrokenLinksAreClearErrors) {
  const std::string missing = error_of(cache_.string() + "@step2000");
  EXPECT_NE(missing.find("no revision 'step2000'"), std::string::npos) << missing;
  EXPECT_NE(missing.find("main, step1000"), std::string::npos) << missing;  // what the cache does have
  const std::string ambiguous = error_of(cache_.string() + "@a1b2c3d4");
  EXPECT_NE(ambiguous.find("ambiguous"), std::string::npos) << ambiguous;
  EXPECT_NE(error_of(cache_.string() + "@../refs").find("not a revision name"), std::string::npos);
  EXPECT_NE(error_of(cache_.string() + "@").find("not a revision name"), std::string::npos);
  const std::string not_cache = error_of(fixture_.string() + "@main");
  EXPECT_NE(not_cache.find("not a Hugging Face hub cache directory"), std::string::npos) << not_cache;

  // A ref to a commit whose snapshot is missing, and a snapshot whose blob never arrived.
  write_file_atomic(cache_ / "refs/step3000", "0123456789abcdef0123456789abcdef01234567");
  const std::string no_snapshot = error_of(cache_.string() + "@step3000");
  EXPECT_NE(no_snapshot.find("snapshots/0123456789abcdef0123456789abcdef01234567 is missing"), std::string::npos) << no_snapshot;
  write_file_atomic(cache_ / "refs/step4000", "not a hash");
  EXPECT_NE(error_of(cache_.string() + "@step4000").find("should hold a commit hash"), std::string::npos);
  fs::remove(cache_ / "blobs/smodel.safetensors");
  const std::string broken = error_of(cache_.string() + "@step1000");
  EXPECT_NE(broken.find("model.safetensors' links to"), std::string::npos) << broken;
  EXPECT_NE(broken.find("does not exist"), std::string::npos) << broken;
  EXPECT_THROW(load_model(cache_.string() + "@step1000"), Error);
}

// The command line takes the same specs, --compare included: one checkpoint series in one run.
TEST_F(HubCache, JacobianComparesRevisionsOfOneCache) {
  const fs::path out = root_ / "out";
  std::string stdout_text, err;
  ASSERT_EQ(test::run_cli(fmt::format("--quiet jacobian {}@main --compare {}@step1000,{}@{} --ids 1,5,9,2,7 --out {}",
                                      cache_.string(), cache_.string(), cache_.string(), std::string(kMain).substr(0, 10),
                                      out.string()),
                          &stdout_text, &err),
            0)
      << err;
  const auto results = nlohmann::json::parse(read_file(out / "results.json"));
  EXPECT_EQ(results["options"]["compare"].size(), 2u) << results["options"].dump();
}

}  // namespace
}  // namespace tdyn
