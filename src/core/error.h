// Errors. User-data problems (bad files, shapes, configs, flags) are reported by throwing tdyn::Error with a
// message that names the file, the tensor, and what was expected vs found; the library never exits. The CLI
// catches Error at the top and maps it to a non-zero exit code. Broken internal invariants (bugs) use
// TDYN_CHECK, which aborts loudly instead: they are not the user's fault and must not be caught.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace tdyn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tdyn

#define TDYN_CHECK(cond)                                                                    \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr,                                                                  \
                   "tdyn: internal error (a bug, not a problem with your input): %s:%d: "   \
                   "check failed: %s\nplease report it with the command line and the "      \
                   "output of `tdyn --version`\n", __FILE__, __LINE__, #cond);               \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)
