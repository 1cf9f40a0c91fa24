#include "io/gguf_keys.h"

#include <limits>

namespace tdyn {

const nlohmann::json& GgufKeys::required(const std::string& key) const {
  if (!m_.contains(key)) fail("{}: GGUF metadata has no '{}'", origin_, key);
  return m_[key];
}

std::string GgufKeys::kind(const nlohmann::json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a bool";
  if (v.is_number_integer()) return "an integer (" + v.dump() + ")";
  if (v.is_number()) return "a number (" + v.dump() + ")";
  if (v.is_array()) return "an array";
  return v.type_name();
}

int64_t GgufKeys::integer(const std::string& key) const {
  const nlohmann::json& v = required(key);
  if (!v.is_number_integer()) fail("{}: GGUF key '{}' must be an integer, got {}", origin_, key, kind(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail("{}: GGUF key '{}' = {} is out of range", origin_, key, v.dump());
  return v.get<int64_t>();
}

double GgufKeys::real(const std::string& key) const {
  const nlohmann::json& v = required(key);
  if (!v.is_number()) fail("{}: GGUF key '{}' must be a number, got {}", origin_, key, kind(v));
  return v.get<double>();
}

bool GgufKeys::boolean(const std::string& key) const {
  const nlohmann::json& v = required(key);
  if (!v.is_boolean()) fail("{}: GGUF key '{}' must be a bool, got {}", origin_, key, kind(v));
  return v.get<bool>();
}

std::string GgufKeys::text(const std::string& key) const {
  const nlohmann::json& v = required(key);
  if (!v.is_string()) fail("{}: GGUF key '{}' must be a string, got {}", origin_, key, kind(v));
  return v.get<std::string>();
}

std::optional<int32_t> GgufKeys::token_id(const std::string& key, int64_t n_tokens) const {
  if (!has(key)) return std::nullopt;
  const nlohmann::json& v = m_.at(key);
  if (!v.is_number_integer()) fail("{}: GGUF key '{}' must be an integer token id, got {}", origin_, key, kind(v));
  if (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(n_tokens)
                             : v.get<int64_t>() < 0 || v.get<int64_t>() >= n_tokens)
    fail("{}: GGUF key '{}' = {} is not a token id (the vocabulary has {} tokens)", origin_, key, v.dump(), n_tokens);
  return static_cast<int32_t>(v.get<int64_t>());
}

}  // namespace tdyn
