// Shared test helpers: where the shared test data lives, skipping when it is absent, and tolerance checks
// |a - b| <= atol + rtol*|b| that print the worst element on failure.
#pragma once

#include <cmath>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/files.h"

// Whether this build runs under AddressSanitizer (gcc says __SANITIZE_ADDRESS__, clang __has_feature).
#if defined(__SANITIZE_ADDRESS__)
#define TDYN_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TDYN_TEST_UNDER_ASAN 1
#endif
#endif

namespace tdyn::test {

// ../shared next to the source tree (override with TDYN_SHARED).
inline fs::path shared_dir() {
  if (const char* env = std::getenv("TDYN_SHARED")) return env;
  return fs::path(TDYN_SOURCE_DIR).parent_path() / "shared";
}

// The shared TinyStories checkpoint most end-to-end tests run (relative to shared_dir()).
inline constexpr const char* kStories = "models/stories260K/stories260K.bin";

inline fs::path source_dir() { return TDYN_SOURCE_DIR; }
inline fs::path cli_path() { return TDYN_CLI_PATH; }

// A scratch directory for one test process, emptied first (ctest runs tests in parallel processes).
inline fs::path scratch_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("tdyn_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Runs `fn`, which must throw tdyn::Error with `phrase` in its message.
template <typename Fn>
void expect_error_contains(Fn&& fn, const std::string& phrase) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one saying '" << phrase << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << "message: " << e.what();
  }
}

#define TDYN_REQUIRE_SHARED(rel)                                                                  \
  do {                                                                                            \
    if (!fs::exists(::tdyn::test::shared_dir() / (rel)))                                          \
      GTEST_SKIP() << "shared test data not found: " << (::tdyn::test::shared_dir() / (rel))     \
                   << " (set TDYN_SHARED to the shared/ directory)";                              \
  } while (0)

struct Closeness {
  bool ok = true;
  size_t worst = 0;
  double worst_ratio = 0, worst_a = 0, worst_b = 0;
  std::string describe(const std::string& what) const {
    return fmt::format("{}: worst element {} : got {:.9g}, expected {:.9g}, |diff| = {:.3g} = {:.3g} x tolerance", what,
                       worst, worst_a, worst_b, std::abs(worst_a - worst_b), worst_ratio);
  }
};

// |a - b| <= atol + rtol*|b| elementwise; reports the element with the largest error/tolerance ratio. NaN in both
// at one element agrees (a value not computed in either); NaN or ±∞ in one only is an infinite error.
template <typename A, typename B>
Closeness compare(const A* a, const B* b, size_t n, double rtol, double atol) {
  Closeness c;
  for (size_t i = 0; i < n; ++i) {
    double x = a[i], y = b[i];
    double tol = atol + rtol * std::abs(y);
    double ratio = std::isnan(x) && std::isnan(y)          ? 0.0
                   : std::isfinite(x) && !std::isnan(y) ? std::abs(x - y) / (tol > 0 ? tol : 1e-300)
                                                           : INFINITY;
    if (ratio > c.worst_ratio || i == 0) {
      c.worst_ratio = ratio;
      c.worst = i;
      c.worst_a = x;
      c.worst_b = y;
    }
  }
  c.ok = c.worst_ratio <= 1.0;
  return c;
}

template <typename A, typename B>
void expect_close(const std::vector<A>& a, const std::vector<B>& b, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what << ": size mismatch";
  auto c = compare(a.data(), b.data(), a.size(), rtol, atol);
  EXPECT_TRUE(c.ok) << c.describe(what);
}

// `s` as one word for the shell that run_cli's command line goes through.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs the tdyn CLI with the given arguments; returns its exit status, stdout in *out, stderr in *err.
int run_cli(const std::string& args, std::string* out = nullptr, std::string* err = nullptr);

}  // namespace tdyn::test
