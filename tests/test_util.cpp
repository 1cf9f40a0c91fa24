#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

namespace tdyn::test {

int run_cli(const std::string& args, std::string* out, std::string* err) {
  static int counter = 0;
  fs::path dir = fs::temp_directory_path() / fmt::format("tdyn_cli_{}_{}", ::getpid(), counter++);
  fs::create_directories(dir);
  std::string cmd = fmt::format("{} {} > {} 2> {} < /dev/null", cli_path().string(), args, (dir / "out").string(), (dir / "err").string());
  int status = std::system(cmd.c_str());
  if (out) *out = read_file(dir / "out");
  if (err) *err = read_file(dir / "err");
  fs::remove_all(dir);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace tdyn::test
