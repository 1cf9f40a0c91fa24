// JSON has no NaN or infinity: results.json writes a non-finite number as null, which readers (the report, numpy
// users) take as "not computed".
#pragma once

#include <cmath>

#include <nlohmann/json.hpp>

namespace tdyn {

inline nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

}  // namespace tdyn
