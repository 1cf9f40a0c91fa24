// Fixtures generated at test time by the reference generators under tests/refgen (see generated_fixtures.h).
#include "generated_fixtures.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>

#include "core/error.h"

namespace tdyn::test {

constexpr const char* kPython = "/usr/bin/python3";

// The generated fixtures (DIR/<family>/{config.json, model.safetensors, refs.safetensors}). Made once per
// generator version: the directory name carries a hash of the generator and of the shared modules it imports,
// and it is filled under a private name then renamed, so parallel test processes never see half of it.
// Returns an empty path with `why` set when the generator cannot run here (a skip, not a failure).
fs::path extra_family_fixtures(std::string* why) {
  static std::string skip_reason;
  static const fs::path dir = [&]() -> fs::path {
    const fs::path script = source_dir() / "tests/refgen/extra_families.py";
    const fs::path gen = shared_dir() / "fixtures/_gen";
    if (!fs::exists(gen / "families.py")) {
      skip_reason = "shared fixture generator not found: " + gen.string() + " (set TDYN_SHARED to the shared/ directory)";
      return {};
    }
    if (!fs::exists(kPython) || std::system(fmt::format("{} -c 'import torch' 2>/dev/null", kPython).c_str()) != 0) {
      skip_reason = fmt::format("{} with torch is needed to generate the Mistral/Qwen2/Phi-3 references", kPython);
      return {};
    }
    std::string sources = read_file(script);
    for (const char* m : {"families.py", "nn64.py", "refs.py", "sfio.py", "make_fixtures.py"}) sources += read_file(gen / m);
    const fs::path out = fs::temp_directory_path() / fmt::format("tdyn_refgen_extra_{:016x}", std::hash<std::string>{}(sources));
    if (fs::exists(out / "phi3/refs.safetensors")) return out;
    const fs::path tmp = fs::path(out.string() + fmt::format(".tmp{}", ::getpid()));
    fs::remove_all(tmp);
    const std::string cmd = fmt::format("{} -B {} --shared {} --out {}", kPython, shell_quote(script.string()),
                                        shell_quote(shared_dir().string()), shell_quote(tmp.string()));
    std::cout << "[ refgen   ] " << cmd << std::endl;
    const int status = std::system(cmd.c_str());
    // A failing generator (a self-check of the references) is a test failure, not a skip.
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw Error(fmt::format("reference generator failed: {}", cmd));
    std::error_code ec;
    fs::rename(tmp, out, ec);  // another process may have renamed its copy first: keep that one
    fs::remove_all(tmp, ec);
    return out;
  }();
  if (why) *why = skip_reason;
  return dir;
}

// The generated fixtures, made once into the build tree and reused by every test process while the generator is
// unchanged (under a file lock, into a temporary directory then renamed, so no process sees half a fixture).
// Empty when shared/fixtures/_gen, /usr/bin/python3 or its torch is missing; *why says which.
fs::path gpt_neox_fixtures(std::string* why) {
  const fs::path gen = shared_dir() / "fixtures" / "_gen" / "nn64.py";
  const fs::path script = source_dir() / "tests" / "refgen" / "gpt_neox.py";
  auto none = [&](const std::string& reason) {
    *why = reason;
    return fs::path();
  };
  if (!fs::exists(gen)) return none("shared fixture generator not found: " + gen.string() + " (set TDYN_SHARED)");
  if (!fs::exists("/usr/bin/python3")) return none("/usr/bin/python3 not found");
  const fs::path root = cli_path().parent_path() / "test_data";
  const fs::path dir = root / "gpt_neox", stamp = dir / "generator.stamp";
  const std::string version = std::to_string(fs::last_write_time(script).time_since_epoch().count());
  auto fresh = [&] { return fs::exists(stamp) && read_file(stamp) == version; };
  if (fresh()) return dir;
  // One process generates; the others (ctest runs tests in parallel processes) wait for it here.
  fs::create_directories(root);
  const int lock = ::open((root / "gpt_neox.lock").c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) return none("cannot lock " + (root / "gpt_neox.lock").string());
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }  // closing releases the lock
  } unlock{lock};
  if (fresh()) return dir;
  const fs::path tmp = root / ("gpt_neox.tmp" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const std::string cmd = fmt::format("/usr/bin/python3 -B {} {} {}", shell_quote(script.string()),
                                      shell_quote(shared_dir().string()), shell_quote(tmp.string()));
  const int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) return none("/usr/bin/python3 has no torch module");
  if (rc != 0) {
    ADD_FAILURE() << "reference generator failed (" << rc << "): " << cmd;
    return none("reference generator failed");
  }
  std::ofstream(tmp / "generator.stamp") << version;
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::rename(tmp, dir, ec);
  if (ec) return none("cannot move the generated references to " + dir.string() + ": " + ec.message());
  return dir;
}

}  // namespace tdyn::test
