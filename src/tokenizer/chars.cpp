#include "tokenizer/chars.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tdyn {

bool is_char_vocab(const Json& vocab) {
  if (!vocab.is_object() || vocab.empty()) return false;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const std::string& key = it.key();
    if (key.empty() || unicode::find_invalid_utf8(key)) return false;
    if (unicode::decode_utf8(key, "vocabulary key").size() != 1) return false;
  }
  return true;
}

CharTokenizer::CharTokenizer(const Json& vocab, const std::string& name)
    : name_(name), vocab_(vocabulary_from_json_object(vocab, name)) {
  if (!is_char_vocab(vocab)) fail("character vocabulary '{}': every key must be exactly one character", name);
}

std::vector<int32_t> CharTokenizer::encode_utf8(std::string_view text, bool) const {
  std::vector<int32_t> ids;
  size_t index = 0;
  for (const auto& cp : unicode::decode_utf8(text, fmt::format("text for character vocabulary '{}'", name_))) {
    std::string_view character = text.substr(cp.offset, cp.length);
    auto id = vocab_.find(character);
    if (!id) {
      std::string shown = cp.value < 0x20 || cp.value == 0x7F ? fmt::format("\\x{:02x}", static_cast<uint32_t>(cp.value))
                                                              : std::string(character);
      fail("character vocabulary '{}' has no '{}' (U+{:04X}) at character {} (byte {}) of the text", name_, shown,
           static_cast<uint32_t>(cp.value), index, cp.offset);
    }
    ids.push_back(*id);
    ++index;
  }
  return ids;
}

std::string CharTokenizer::piece(int32_t id) const {
  const std::string* p = vocab_.piece(id);
  if (!p) fail("character vocabulary '{}': token id {} out of range [0, {})", name_, id, vocab_.size());
  return *p;
}

std::string CharTokenizer::decode_step(int32_t, int32_t id) const { return piece(id); }

}  // namespace tdyn
