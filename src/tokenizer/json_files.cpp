#include "tokenizer/json_files.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tdyn {

Json parse_json_text(std::string_view text, const std::string& name) {
  // nlohmann rejects invalid UTF-8 in strings too, but naming the byte helps.
  if (auto bad = unicode::find_invalid_utf8(text)) fail("'{}': not valid UTF-8 (byte {})", name, *bad);
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    fail("'{}': invalid JSON: {}", name, e.what());
  }
}

Json read_json_file(const fs::path& path) { return parse_json_text(read_file(path), path.string()); }

Vocabulary vocabulary_from_json_object(const Json& object, const std::string& name) {
  if (!object.is_object()) fail("'{}': the vocabulary must be a JSON object {{piece: id}}", name);
  std::vector<std::pair<std::string, int64_t>> entries;
  entries.reserve(object.size());
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (!it.value().is_number_integer()) fail("'{}': the id of piece '{}' is not an integer", name, it.key());
    entries.emplace_back(it.key(), it.value().get<int64_t>());
  }
  return Vocabulary(std::move(entries), name);
}

namespace {

const Json* find_value(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

std::string json_string(const Json& object, const char* key, const std::string& fallback, const std::string& where) {
  const Json* v = find_value(object, key);
  if (!v) return fallback;
  if (!v->is_string()) fail("{}: '{}' must be a string", where, key);
  return v->get<std::string>();
}

std::optional<std::string> json_optional_string(const Json& object, const char* key, const std::string& where) {
  const Json* v = find_value(object, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) fail("{}: '{}' must be a string", where, key);
  return v->get<std::string>();
}

bool json_bool(const Json& object, const char* key, bool fallback, const std::string& where) {
  const Json* v = find_value(object, key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail("{}: '{}' must be true or false", where, key);
  return v->get<bool>();
}

int64_t json_int(const Json& object, const char* key, int64_t fallback, const std::string& where) {
  const Json* v = find_value(object, key);
  if (!v) return fallback;
  if (!v->is_number_integer()) fail("{}: '{}' must be an integer", where, key);
  return v->get<int64_t>();
}

}  // namespace tdyn
