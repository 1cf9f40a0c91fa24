#include "core/json_value.h"

#include <nlohmann/json.hpp>

namespace tdyn {

JsonValue::JsonValue() : value_(std::make_unique<nlohmann::json>()) {}
JsonValue::JsonValue(const nlohmann::json& value) : value_(std::make_unique<nlohmann::json>(value)) {}
JsonValue::JsonValue(const JsonValue& other) : JsonValue(*other) {}
JsonValue::JsonValue(JsonValue&& other) : value_(std::move(other.value_)) {
  other.value_ = std::make_unique<nlohmann::json>();
}
JsonValue& JsonValue::operator=(const JsonValue& other) {
  *value_ = *other;
  return *this;
}
JsonValue& JsonValue::operator=(JsonValue&& other) noexcept {
  std::swap(value_, other.value_);
  return *this;
}
JsonValue::~JsonValue() = default;

}  // namespace tdyn
