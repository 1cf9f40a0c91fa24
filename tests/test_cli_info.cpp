// tdyn info on every fixture: family, sizes and the exact parameter count (sum of the stored tensors, tied
// matrices once), as text and JSON; and the global flags every command shares.
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "kernels/packed_matrix.h"
#include "test_util.h"

namespace tdyn {
namespace {

struct Expected {
  const char* dir;
  const char* family;
  int64_t d_model, n_layers, n_heads, n_kv_heads;
};

class InfoCommand : public ::testing::TestWithParam<Expected> {};

TEST_P(InfoCommand, ReportsFamilySizesAndParameterCount) {
  const Expected e = GetParam();
  TDYN_REQUIRE_SHARED(fs::path("fixtures") / e.dir);
  fs::path dir = test::shared_dir() / "fixtures" / e.dir;
  std::string out, err;
  ASSERT_EQ(test::run_cli("info --json " + dir.string(), &out, &err), 0) << err;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["family"], e.family);
  EXPECT_EQ(j["config"]["d_model"], e.d_model);
  EXPECT_EQ(j["config"]["n_layers"], e.n_layers);
  EXPECT_EQ(j["config"]["n_heads"], e.n_heads);
  EXPECT_EQ(j["config"]["n_kv_heads"], e.n_kv_heads);
  // Independent count: every element of every tensor in the safetensors file (tied tensors are stored once).
  TensorStore store;
  read_safetensors(dir / "model.safetensors", store);
  int64_t expected = 0;
  for (const auto& name : store.names()) expected += numel(store.get(name).shape);
  EXPECT_EQ(j["parameters"], expected);
  ASSERT_EQ(test::run_cli("info " + dir.string(), &out, &err), 0) << err;
  EXPECT_NE(out.find(fmt::format("family      {}", e.family)), std::string::npos) << out;
  EXPECT_NE(out.find(fmt::format("parameters  {}", expected)), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, InfoCommand,
                         ::testing::Values(Expected{"gpt2", "gpt2", 64, 3, 4, 4}, Expected{"gpt_neo", "gpt_neo", 64, 3, 4, 4},
                                           Expected{"bert", "bert", 64, 2, 4, 4}, Expected{"albert", "albert", 64, 3, 4, 4},
                                           Expected{"llama", "llama", 64, 3, 4, 2}, Expected{"llama_tied", "llama", 64, 2, 4, 1},
                                           Expected{"olmo3", "olmo3", 64, 3, 4, 2}, Expected{"gemma4", "gemma4", 64, 5, 4, 2}),
                         [](const auto& info) { return std::string(info.param.dir); });

// --quiet has one meaning wherever it stands: before the command or after it, no progress on stderr.
TEST(GlobalFlags, QuietSilencesProgressBeforeOrAfterTheCommand) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  const std::string model = (test::shared_dir() / "models/stories260K/stories260K.bin").string();
  const fs::path out = fs::temp_directory_path() / fmt::format("tdyn_quiet_{}", ::getpid());
  for (const std::string command : {"jacobian", "power", "topology"}) {
    const std::string args = fmt::format("{} {} --samples 20 --max-len 8 --out {}", command, model, out.string()) +
                             (command == "topology" ? " --permutations 10" : "");
    std::string stdout_text, loud, quiet_after, quiet_before;
    ASSERT_EQ(test::run_cli(args, &stdout_text, &loud), 0) << loud;
    EXPECT_NE(loud, "") << command << " printed no progress, so this test shows nothing";
    ASSERT_EQ(test::run_cli(args + " --quiet", &stdout_text, &quiet_after), 0) << quiet_after;
    EXPECT_EQ(quiet_after, "") << command << " ... --quiet";
    ASSERT_EQ(test::run_cli("--quiet " + args, &stdout_text, &quiet_before), 0) << quiet_before;
    EXPECT_EQ(quiet_before, "") << "--quiet " << command;
  }
  fs::remove_all(out);
}

// --version names the build's optional parts and the CPUs tdyn runs on. With OMP_PROC_BIND set, libgomp binds
// the first process to one place before tdyn restarts itself (tools/tdyn/main.cpp); the restarted process must
// still see every CPU.
TEST(GlobalFlags, VersionListsTheCpusAlsoWhenThreadsAreBound) {
  const auto cpus = [](const std::string& text) {
    const size_t at = text.find("CPUs: ");
    return at == std::string::npos ? std::string() : text.substr(at, text.find('\n', at) - at);
  };
#ifdef __clang__
  // tdyn's OpenMP calls then reach LLVM's libomp, while libgomp, which igraph loads, still binds this thread to its
  // first place before main(): libomp sees that one place only. The gcc build, which users run, has one runtime.
  GTEST_SKIP() << "a clang build has two OpenMP runtimes; this checks libgomp's binding (the gcc build)";
#endif
  std::string unbound, bound;
  ASSERT_EQ(test::run_cli("--version", &unbound), 0);
  EXPECT_EQ(unbound.rfind("tdyn ", 0), 0u) << unbound;
  EXPECT_NE(unbound.find("small float64 products: "), std::string::npos) << unbound;
  EXPECT_NE(unbound.find("prompt products: "), std::string::npos) << unbound;
  ASSERT_NE(cpus(unbound), "") << unbound;
  ::setenv("OMP_PROC_BIND", "true", 1);
  const int code = test::run_cli("--version", &bound);
  ::unsetenv("OMP_PROC_BIND");
  ASSERT_EQ(code, 0);
  EXPECT_EQ(cpus(bound), cpus(unbound));
}

// tdyn starts again with a short OpenMP spin and malloc on huge pages unless the user chose otherwise, keeping the
// user's other glibc tunables (tools/tdyn/main.cpp); --version shows what the running process has.
// --version names what multiplies prompts: oneDNN's packed kernels where this build and CPU have them, else OpenBLAS,
// which is also what a CPU limited to AVX2 gets (oneDNN 2.6 packs weights only for AVX-512).
TEST(GlobalFlags, VersionNamesThePromptProducts) {
  std::string text;
  ASSERT_EQ(test::run_cli("--version", &text), 0);
  const std::string kernel = packed_products_kernel();
  if (kernel.empty()) {
    EXPECT_NE(text.find("prompt products: OpenBLAS sgemm;"), std::string::npos) << text;
    GTEST_SKIP() << "no packed kernels in this build or on this CPU: the AVX2 limit changes nothing";
  }
  EXPECT_NE(text.find("prompt products: " + kernel + ", weights packed;"), std::string::npos) << text;
  ::setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
  const int code = test::run_cli("--version", &text);
  ::unsetenv("ONEDNN_MAX_CPU_ISA");
  ASSERT_EQ(code, 0);
  EXPECT_NE(text.find("prompt products: OpenBLAS sgemm;"), std::string::npos) << text;
}

TEST(GlobalFlags, RestartAddsTheRuntimeSettingsTheUserDidNotChoose) {
  const char* names[] = {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "GLIBC_TUNABLES"};
  std::map<std::string, std::optional<std::string>> saved;
  for (const char* name : names) {
    if (const char* value = std::getenv(name)) saved[name] = value;
    else saved[name] = std::nullopt;
    ::unsetenv(name);
  }
  const auto runtime = [](const std::string& gomp_spincount, const std::string& glibc_tunables) {
    if (!gomp_spincount.empty()) ::setenv("GOMP_SPINCOUNT", gomp_spincount.c_str(), 1);
    if (!glibc_tunables.empty()) ::setenv("GLIBC_TUNABLES", glibc_tunables.c_str(), 1);
    std::string out;
    EXPECT_EQ(test::run_cli("--version", &out), 0);
    ::unsetenv("GOMP_SPINCOUNT");
    ::unsetenv("GLIBC_TUNABLES");
    const size_t at = out.find("runtime: ");
    return at == std::string::npos ? out : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_EQ(runtime("", ""), "runtime: GOMP_SPINCOUNT=1000 OMP_WAIT_POLICY=(unset) GLIBC_TUNABLES=glibc.malloc.hugetlb=1");
  EXPECT_EQ(runtime("5", "glibc.malloc.arena_max=4"),
            "runtime: GOMP_SPINCOUNT=5 OMP_WAIT_POLICY=(unset) GLIBC_TUNABLES=glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1");
  EXPECT_EQ(runtime("", "glibc.malloc.hugetlb=0"),
            "runtime: GOMP_SPINCOUNT=1000 OMP_WAIT_POLICY=(unset) GLIBC_TUNABLES=glibc.malloc.hugetlb=0");
  for (const auto& [name, value] : saved)
    if (value) ::setenv(name.c_str(), value->c_str(), 1);
}

// A bad number or data path is refused before any work, with a message that names the flag and the value given.
TEST(GlobalFlags, BadNumbersAndDataSayWhatIsWrong) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  const std::string model = (test::shared_dir() / "models/stories260K/stories260K.bin").string();
  const fs::path out = fs::temp_directory_path() / fmt::format("tdyn_bad_numbers_{}", ::getpid());
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"analyze " + model + " --samples 0", 2, "--samples: must be greater than 0, got 0"},
      {"jacobian " + model + " --max-len -3", 2, "--max-len: must be greater than 0, got -3"},
      {"power " + model + " --samples many", 2, "--samples: must be a number, got 'many'"},
      {"--threads -1 power " + model, 2, "--threads: must be 0 or more, got -1"},
      {"power " + model + " --data " + fs::temp_directory_path().string(), 1, "is a directory; pass a text file, or a .npy"},
  };
  for (const auto& [args, code, phrase] : cases) {
    std::string err;
    EXPECT_EQ(test::run_cli(args + " --out " + out.string(), nullptr, &err), code) << args << ": " << err;
    EXPECT_NE(err.find(phrase), std::string::npos) << args << ": " << err;
    EXPECT_FALSE(fs::exists(out / "results.json")) << args;
  }
  fs::remove_all(out);
}

}  // namespace
}  // namespace tdyn
