// Typed access to GGUF metadata (the JSON that io/gguf.h puts in TensorStore::metadata()), for the readers of a
// model's configuration (model/gguf_config.cpp and the families' GGUF parsers in model/families/) and of its
// tokenizer (tokenizer/gguf_tokenizer.cpp). Every error names the file and the key, and says what the key holds
// instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tdyn {

class GgufKeys {
 public:
  // `metadata` must outlive this; `origin` (the file) begins every error message.
  GgufKeys(const nlohmann::json& metadata, std::string origin) : m_(metadata), origin_(std::move(origin)) {}

  const std::string& origin() const { return origin_; }
  bool has(const std::string& key) const { return m_.contains(key); }

  // Each throws Error when the key is absent (but for the forms with a fallback) or holds another type.
  int64_t integer(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  double real(const std::string& key) const;
  double real(const std::string& key, double fallback) const { return has(key) ? real(key) : fallback; }
  bool boolean(const std::string& key) const;
  bool boolean(const std::string& key, bool fallback) const { return has(key) ? boolean(key) : fallback; }
  std::string text(const std::string& key) const;
  // A token id: an integer in [0, n_tokens); none when the key is absent.
  std::optional<int32_t> token_id(const std::string& key, int64_t n_tokens) const;

  // An array whose every element passes ok(element) (described by `element` in the error).
  template <typename Check>
  const nlohmann::json& array(const std::string& key, const char* element, Check ok) const {
    const nlohmann::json& v = required(key);
    if (!v.is_array()) fail("{}: GGUF key '{}' must be an array of {}, got {}", origin_, key, element, kind(v));
    for (size_t i = 0; i < v.size(); ++i)
      if (!ok(v[i])) fail("{}: GGUF key '{}': element {} must be {}, got {}", origin_, key, i, element, kind(v[i]));
    return v;
  }

 private:
  const nlohmann::json& required(const std::string& key) const;
  static std::string kind(const nlohmann::json& v);  // "a string", "an integer (3)", ...

  const nlohmann::json& m_;
  std::string origin_;
};

}  // namespace tdyn
