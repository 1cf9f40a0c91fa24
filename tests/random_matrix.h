// Seeded Gaussian test matrices, shared by the linear-algebra and operator-metric tests.
#pragma once

#include <random>

#include "linalg/dense.h"

namespace tdyn::test {

inline linalg::Matrix random_gaussian(linalg::Index rows, linalg::Index cols, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> gaussian;
  linalg::Matrix a(rows, cols);
  for (linalg::Index j = 0; j < cols; ++j)
    for (linalg::Index i = 0; i < rows; ++i) a(i, j) = gaussian(generator);
  return a;
}

}  // namespace tdyn::test
