// JSON has no NaN or infinity: results.json writes a non-finite number as null, which readers (the report, numpy
// users) take as "not computed". And the readers of what a writer wrote (each result's from_json), which name the
// key that is absent or of the wrong type.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tdyn {

inline nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

inline nlohmann::json finite_or_null(const std::vector<double>& xs) {
  nlohmann::json out = nlohmann::json::array();
  for (double x : xs) out.push_back(finite_or_null(x));
  return out;
}

// The value under `key` of the object j; throws Error naming the key when j is no object or lacks it.
inline const nlohmann::json& value_at(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) fail("results.json: expected an object holding '{}', got {}", key, j.type_name());
  const auto it = j.find(key);
  if (it == j.end()) fail("results.json lacks '{}'", key);
  return *it;
}

// The number under `key`, NaN for null (a non-finite number as written).
inline double number_at(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = value_at(j, key);
  if (v.is_null()) return NAN;
  if (!v.is_number()) fail("results.json: '{}' is {}, not a number", key, v.type_name());
  return v.get<double>();
}

inline int64_t integer_at(const nlohmann::json& j, const char* key) { return static_cast<int64_t>(number_at(j, key)); }

inline std::string string_at(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = value_at(j, key);
  if (!v.is_string()) fail("results.json: '{}' is {}, not text", key, v.type_name());
  return v.get<std::string>();
}

inline bool boolean_at(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = value_at(j, key);
  if (!v.is_boolean()) fail("results.json: '{}' is {}, not true or false", key, v.type_name());
  return v.get<bool>();
}

// The object or list under `key`.
inline const nlohmann::json& object_at(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = value_at(j, key);
  if (!v.is_object()) fail("results.json: '{}' is {}, not an object", key, v.type_name());
  return v;
}

inline const nlohmann::json& list_at(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = value_at(j, key);
  if (!v.is_array()) fail("results.json: '{}' is {}, not a list", key, v.type_name());
  return v;
}

// The list under `key` whose every entry `accepts` (else an Error naming the key and `what` the entry should be),
// each read by `value`.
template <class T, class Accepts, class Value>
std::vector<T> entries_at(const nlohmann::json& j, const char* key, const char* what, Accepts accepts, Value value) {
  std::vector<T> out;
  for (const nlohmann::json& v : list_at(j, key)) {
    if (!accepts(v)) fail("results.json: '{}' holds {}, not {}", key, v.dump(), what);
    out.push_back(value(v));
  }
  return out;
}

// Lists of counts, of numbers (null: NaN, as written) and of flags.
inline std::vector<int64_t> integers_at(const nlohmann::json& j, const char* key) {
  return entries_at<int64_t>(j, key, "a count", [](const nlohmann::json& v) { return v.is_number_integer(); },
                             [](const nlohmann::json& v) { return v.get<int64_t>(); });
}

inline std::vector<double> numbers_at(const nlohmann::json& j, const char* key) {
  return entries_at<double>(j, key, "a number", [](const nlohmann::json& v) { return v.is_number() || v.is_null(); },
                            [](const nlohmann::json& v) { return v.is_null() ? NAN : v.get<double>(); });
}

inline std::vector<bool> booleans_at(const nlohmann::json& j, const char* key) {
  return entries_at<bool>(j, key, "true or false", [](const nlohmann::json& v) { return v.is_boolean(); },
                          [](const nlohmann::json& v) { return v.get<bool>(); });
}

}  // namespace tdyn
