// JSON has no NaN or infinity: results.json writes a non-finite number as null, which readers (the report, numpy
// users) take as "not computed".
#pragma once

#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

namespace tdyn {

inline nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

inline nlohmann::json finite_or_null(const std::vector<double>& xs) {
  nlohmann::json out = nlohmann::json::array();
  for (double x : xs) out.push_back(finite_or_null(x));
  return out;
}

}  // namespace tdyn
