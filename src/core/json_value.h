// A JSON value held through a pointer, so that a header can keep one as a member with only
// <nlohmann/json_fwd.hpp>: the full nlohmann/json.hpp, among the costliest headers to compile, then reaches only the
// sources that read or write the value. It copies deeply, as the json it holds does.
#pragma once

#include <memory>

#include <nlohmann/json_fwd.hpp>

namespace tdyn {

class JsonValue {
 public:
  JsonValue();  // null
  JsonValue(const nlohmann::json& value);  // NOLINT: implicit, as assigning a json is
  JsonValue(const JsonValue& other);
  JsonValue(JsonValue&& other);  // leaves `other` null
  JsonValue& operator=(const JsonValue& other);
  JsonValue& operator=(JsonValue&& other) noexcept;
  ~JsonValue();

  nlohmann::json& operator*() { return *value_; }
  const nlohmann::json& operator*() const { return *value_; }
  nlohmann::json* operator->() { return value_.get(); }
  const nlohmann::json* operator->() const { return value_.get(); }

 private:
  std::unique_ptr<nlohmann::json> value_;  // never null
};

}  // namespace tdyn
