// Core plumbing: .npy round trips and malformed files, atomic writes, results directories, figures.
#include <set>

#include <nlohmann/json.hpp>

#include "core/npy.h"
#include "model/hooks.h"
#include "report/figure.h"
#include "report/results.h"
#include "test_util.h"

namespace tdyn {
namespace {

TEST(Npy, RoundTripsEveryWrittenDtype) {
  fs::path dir = test::scratch_dir("npy");
  std::vector<float> f = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, 7.0f};
  write_npy(dir / "f.npy", f.data(), {2, 3});
  NpyArray a = read_npy(dir / "f.npy");
  EXPECT_EQ(a.descr, "<f4");
  EXPECT_EQ(a.shape, (Shape{2, 3}));
  EXPECT_EQ(a.as_float(), f);
  std::vector<int64_t> i = {1, -2, 3};
  write_npy(dir / "i.npy", i.data(), {3});
  EXPECT_EQ(read_npy(dir / "i.npy").as_int64(), i);
  std::vector<double> d = {0.1};
  write_npy(dir / "d.npy", d.data(), {});
  NpyArray s = read_npy(dir / "d.npy");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.as_double(), d);
}

TEST(Npy, HeaderIsPaddedTo64Bytes) {
  fs::path dir = test::scratch_dir("npy_pad");
  std::vector<float> f(5, 1.0f);
  write_npy(dir / "f.npy", f.data(), {5});
  EXPECT_EQ((fs::file_size(dir / "f.npy") - 20u) % 64u, 0u);  // numpy aligns the data start to 64 bytes
}

TEST(Npy, RejectsMalformedFiles) {
  EXPECT_THROW(parse_npy("not numpy at all", "x"), Error);
  std::string good("\x93NUMPY\x01\x00", 8);
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
  dict.append(118 - dict.size() - 1, ' ');
  dict += '\n';
  std::string hdr = good + std::string(1, char(dict.size())) + std::string(1, '\0') + dict;
  EXPECT_NO_THROW(parse_npy(hdr + std::string(16, '\0'), "ok"));
  EXPECT_THROW(parse_npy(hdr + std::string(15, '\0'), "short"), Error);  // truncated data
  std::string huge_len = good + "\xff\xff" + dict;
  EXPECT_THROW(parse_npy(huge_len, "len"), Error);  // header length past EOF
  std::string be = hdr;
  be.replace(be.find("<f4"), 3, ">f4");
  EXPECT_THROW(parse_npy(be + std::string(16, '\0'), "be"), Error);
  EXPECT_THROW(parse_npy(hdr + std::string(16, '\0'), "ok").as_int64(), Error);  // float read as ints
}

TEST(Results, WritesSchemaVersionedJsonAndTables) {
  fs::path dir = test::scratch_dir("results") / "nested" / "out";
  ResultsDir out(dir, "unit", {"tdyn", "unit", "--x", "1"});
  out.options()["x"] = 1;
  out.results()["answer"] = 42;
  out.csv("t.csv", {"a", "b"}, {{1, 2}, {3, 0.1}}, "a table");
  { PhaseTimer t(out, "phase"); }
  out.write();
  auto j = nlohmann::json::parse(read_file(dir / "results.json"));
  EXPECT_EQ(j["schema_version"], kResultsSchemaVersion);
  EXPECT_EQ(j["command"], "unit");
  EXPECT_EQ(j["options"]["x"], 1);
  EXPECT_EQ(j["results"]["answer"], 42);
  EXPECT_TRUE(j["timings"].contains("phase"));
  EXPECT_TRUE(j["files"].contains("t.csv"));
  EXPECT_EQ(read_file(dir / "t.csv"), "a,b\n1,2\n3,0.10000000000000001\n");
  for (auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos);
}

// A directory used again ends with exactly this run's files: the earlier run's that this one did not write go,
// files tdyn did not list stay, and an earlier list naming paths outside the directory removes nothing there.
TEST(Results, ReusedDirectoryKeepsOnlyThisRunsFiles) {
  const fs::path root = test::scratch_dir("results_reused");
  const fs::path dir = root / "out";
  {
    ResultsDir first(dir, "unit", {"tdyn", "unit"});
    first.csv("kept.csv", {"a"}, {{1}}, "rewritten by the second run");
    first.csv("late.csv", {"a"}, {{1}}, "rewritten before the second run records it");
    first.csv("stale.csv", {"a"}, {{1}}, "not written by the second run");
    first.write();
  }
  write_file_atomic(dir / "notes.txt", "the user's");
  write_file_atomic(root / "outside.txt", "not ours");
  auto listed = nlohmann::json::parse(read_file(dir / "results.json"));
  listed["files"]["../outside.txt"] = "a path outside the directory";
  write_file_atomic(dir / "results.json", listed.dump());

  ResultsDir second(dir, "unit", {"tdyn", "unit"});
  second.csv("kept.csv", {"a"}, {{2}}, "again");
  write_file_atomic(dir / "late.csv", "a\n2\n");
  second.write();  // late.csv is written but not recorded yet: it stays
  EXPECT_TRUE(fs::exists(dir / "late.csv"));
  EXPECT_FALSE(fs::exists(dir / "stale.csv"));
  second.record_file("late.csv", "recorded now");
  second.write();
  std::set<std::string> on_disk;
  for (const auto& e : fs::directory_iterator(dir)) on_disk.insert(e.path().filename().string());
  EXPECT_EQ(on_disk, (std::set<std::string>{"kept.csv", "late.csv", "notes.txt", "results.json"}));
  EXPECT_TRUE(fs::exists(root / "outside.txt"));
  auto j = nlohmann::json::parse(read_file(dir / "results.json"));
  EXPECT_EQ(j["files"].size(), 2u) << j["files"].dump();
  fs::remove_all(root);
}

// A run that fails before writing anything leaves no directory it created, and never removes one it found.
TEST(Results, FailedRunLeavesNoDirectoryItCreated) {
  const fs::path root = test::scratch_dir("results_failed");
  { ResultsDir failed(root / "new", "unit", {}); }
  EXPECT_FALSE(fs::exists(root / "new"));
  fs::create_directories(root / "existing");
  { ResultsDir failed(root / "existing", "unit", {}); }
  EXPECT_TRUE(fs::is_directory(root / "existing"));
  {
    ResultsDir interrupted(root / "resumable", "unit", {});
    write_file_atomic(interrupted.file("state.partial"), "what a resumed run continues from");
  }
  EXPECT_TRUE(fs::exists(root / "resumable" / "state.partial"));
  fs::remove_all(root);
}

TEST(Figure, WritesDataScriptAndRendersWhenGnuplotExists) {
  fs::path dir = test::scratch_dir("figure");
  Figure fig{"curve", "A curve", "x", "y", {}, {{"y = x^2", {{0, 1, 2}, {0, 1, 4}}}}};
  FigureFiles files = write_figure(dir, fig);
  EXPECT_TRUE(fs::exists(dir / "curve.dat"));
  EXPECT_TRUE(fs::exists(dir / "curve.gp"));
  EXPECT_NE(read_file(dir / "curve.dat").find("2 4"), std::string::npos);
  if (gnuplot_available()) {
    EXPECT_TRUE(files.rendered) << files.note;
    EXPECT_NE(read_file(dir / "curve.svg").find("<svg"), std::string::npos);
  } else {
    EXPECT_FALSE(files.rendered);
    EXPECT_NE(files.note.find("gnuplot not found"), std::string::npos);
  }
}

// Hook names are selected with shell globs (fnmatch): '*' crosses the dots between name parts.
TEST(Hooks, GlobsSelectHookNames) {
  ActivationCache cache("blocks.*.hook_resid_*,hook_embed,blocks.?.attn.hook_pattern,blocks.[02].hook_mlp_out");
  for (const char* name : {"blocks.0.hook_resid_pre", "blocks.11.hook_resid_post", "hook_embed", "blocks.3.attn.hook_pattern",
                           "blocks.2.hook_mlp_out"})
    EXPECT_TRUE(cache.wants(name)) << name;
  for (const char* name : {"hook_embed_tokens", "blocks.12.attn.hook_pattern", "blocks.1.hook_mlp_out", "ln_final.hook_normalized",
                           "blocks.0.hook_attn_out"})
    EXPECT_FALSE(cache.wants(name)) << name;
  EXPECT_TRUE(ActivationCache("*").wants("blocks.7.attn.hook_z"));
  EXPECT_THROW(ActivationCache(",,"), Error);
}

}  // namespace
}  // namespace tdyn
