// Fixtures made at test time, once per content (see generated_fixtures.h).
#include "generated_fixtures.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "core/error.h"

namespace tdyn::test {

std::string content_hash(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

fs::path made_once(const std::string& name, const std::string& key,
                   const std::function<bool(const fs::path& dir, std::string* why)>& make, std::string* why) {
  const fs::path root = TDYN_TEST_DATA_DIR;
  const fs::path dir = root / (name + "-" + content_hash(key));
  if (fs::exists(dir)) return dir;
  fs::create_directories(root);
  const fs::path lock_file = root / (name + ".lock");
  const int lock = ::open(lock_file.c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) throw Error("cannot lock " + lock_file.string());
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }  // closing releases the lock
  } unlock{lock};
  if (fs::exists(dir)) return dir;  // another process made it while this one waited
  const fs::path tmp = root / fmt::format("{}.tmp{}", name, ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::string reason;
  const bool made = make(tmp, &reason);
  if (!made) {
    fs::remove_all(tmp);
    if (reason.empty()) throw Error("making the test fixture " + name + " failed");
    *why = reason;
    return {};
  }
  // Earlier versions of this fixture are of no further use.
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.path().filename().string().starts_with(name + "-")) fs::remove_all(entry.path());
  fs::rename(tmp, dir);
  return dir;
}

namespace {

constexpr const char* kPython = "/usr/bin/python3";

// The text of the reference generator `script` and of the shared modules it imports: the fixture's key.
std::string generator_sources(const fs::path& script) {
  std::string sources = read_file(script);
  for (const char* m : {"families.py", "nn64.py", "refs.py", "sfio.py", "make_fixtures.py"}) {
    const fs::path module = shared_dir() / "fixtures/_gen" / m;
    if (fs::exists(module)) sources += read_file(module);
  }
  return sources;
}

// Runs a reference generator: exit 0 made the fixture, 77 means torch is missing (a skip), anything else (a
// self-check of the references failed) is a test failure.
bool run_generator(const std::string& cmd, std::string* why) {
  std::cout << "[ refgen   ] " << cmd << std::endl;
  const int status = std::system(cmd.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    *why = fmt::format("{} has no torch module: the generated references cannot be made", kPython);
    return false;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw Error(fmt::format("reference generator failed: {}", cmd));
  return true;
}

// Why a reference generator cannot run here, or "" when it can.
std::string generator_missing() {
  const fs::path gen = shared_dir() / "fixtures/_gen/nn64.py";
  if (!fs::exists(gen)) return "shared fixture generator not found: " + gen.string() + " (set TDYN_SHARED to the shared/ directory)";
  if (!fs::exists(kPython)) return std::string(kPython) + " not found: the generated references cannot be made";
  return "";
}

}  // namespace

fs::path extra_family_fixtures(std::string* why) {
  static std::string reason;
  static const fs::path dir = [] {
    if (reason = generator_missing(); !reason.empty()) return fs::path();
    const fs::path script = source_dir() / "tests/refgen/extra_families.py";
    return made_once("refgen_extra_families", generator_sources(script), [&](const fs::path& out, std::string* not_here) {
      return run_generator(fmt::format("{} -B {} --shared {} --out {}", kPython, shell_quote(script.string()),
                                       shell_quote(shared_dir().string()), shell_quote(out.string())), not_here);
    }, &reason);
  }();
  *why = reason;
  return dir;
}

fs::path gpt_neox_fixtures(std::string* why) {
  static std::string reason;
  static const fs::path dir = [] {
    if (reason = generator_missing(); !reason.empty()) return fs::path();
    const fs::path script = source_dir() / "tests/refgen/gpt_neox.py";
    return made_once("refgen_gpt_neox", generator_sources(script), [&](const fs::path& out, std::string* not_here) {
      return run_generator(fmt::format("{} -B {} {} {}", kPython, shell_quote(script.string()),
                                       shell_quote(shared_dir().string()), shell_quote(out.string())), not_here);
    }, &reason);
  }();
  *why = reason;
  return dir;
}

}  // namespace tdyn::test
