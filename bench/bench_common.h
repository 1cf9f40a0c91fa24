// Helpers shared by the Google Benchmark programs in bench/.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "linalg/dense.h"

namespace tdyn::bench {

// A d × d matrix of N(0, 1/d) entries from a fixed seed (spectral radius ≈ 1), the same in every run.
inline linalg::Matrix random_matrix(Eigen::Index d, std::uint64_t seed = 42) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> gaussian;
  linalg::Matrix a(d, d);
  for (double& x : a.reshaped()) x = gaussian(generator);
  return a / std::sqrt(double(d));
}

// An environment variable for the printed run conditions (thread counts, OPENBLAS_CORETYPE).
inline std::string env_or_unset(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "(unset)";
}

}  // namespace tdyn::bench
