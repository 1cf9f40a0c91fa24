#include "tokenizer/pipeline.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace tdyn {

namespace {

// A bound on the ids a vocabulary may use beyond its entry count, so a single corrupt id cannot make
// vocab_size() (and every table sized by it) enormous.
constexpr int64_t kMaxIdsBeyondEntries = 1 << 20;

size_t skip_whitespace_forward(std::string_view text, size_t pos) {
  for (const auto& cp : unicode::decode_utf8(text.substr(pos), "text"))
    if (!unicode::is_regex_space(cp.value)) return pos + cp.offset;
  return text.size();
}

std::string_view trim_whitespace_back(std::string_view text) {
  auto cps = unicode::decode_utf8(text, "text");
  size_t end = text.size();
  for (auto it = cps.rbegin(); it != cps.rend() && unicode::is_regex_space(it->value); ++it) end = it->offset;
  return text.substr(0, end);
}

std::optional<unsigned char> exact_byte_piece(std::string_view piece) {
  // "<0xXX>" with two hex digits, as SentencePiece writes byte pieces.
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return std::nullopt;
  unsigned value = 0;
  for (char c : piece.substr(3, 2)) {
    int digit = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    value = value * 16 + digit;
  }
  return static_cast<unsigned char>(value);
}

}  // namespace

Vocabulary::Vocabulary(std::vector<std::pair<std::string, int64_t>> entries, const std::string& name) {
  int64_t max_id = -1;
  for (const auto& [piece, id] : entries) {
    if (id < 0 || id >= static_cast<int64_t>(entries.size()) + kMaxIdsBeyondEntries)
      fail("tokenizer '{}': piece '{}' has id {} (expected 0 <= id < {} + {})", name, piece, id, entries.size(),
           kMaxIdsBeyondEntries);
    max_id = std::max(max_id, id);
  }
  pieces_.resize(static_cast<size_t>(max_id + 1));
  present_.resize(pieces_.size(), false);
  ids_.reserve(entries.size());
  for (auto& [piece, id] : entries) {
    if (present_[id]) fail("tokenizer '{}': id {} is used by both '{}' and '{}'", name, id, pieces_[id], piece);
    if (auto bad = unicode::find_invalid_utf8(piece)) fail("tokenizer '{}': piece {} is not valid UTF-8", name, id);
    present_[id] = true;
    ids_.emplace(piece, static_cast<int32_t>(id));  // the first id wins for a repeated piece
    pieces_[id] = std::move(piece);
  }
}

std::optional<int32_t> Vocabulary::find(std::string_view piece) const {
  auto it = ids_.find(piece);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* Vocabulary::piece(int32_t id) const {
  if (id < 0 || id >= size() || !present_[id]) return nullptr;
  return &pieces_[id];
}

PipelineTokenizer::PipelineTokenizer(PipelineParts parts) : p_(std::move(parts)) {
  TDYN_CHECK(p_.model != nullptr);
  vocab_size_ = p_.model->vocab().size();
  // Longest first, so that matching at a position takes the longest added token.
  std::stable_sort(p_.added_tokens.begin(), p_.added_tokens.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (const AddedToken& t : p_.added_tokens) {
    if (t.content.empty()) fail("tokenizer '{}': added token {} is empty", p_.name, t.id);
    if (t.id < 0) fail("tokenizer '{}': added token '{}' has negative id {}", p_.name, t.content, t.id);
    if (unicode::find_invalid_utf8(t.content)) fail("tokenizer '{}': added token {} is not valid UTF-8", p_.name, t.id);
    added_by_id_.emplace(t.id, &t);
    vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{t.id} + 1);
  }
  for (int32_t id : p_.special_prefix) checked_piece(id);
  for (int32_t id : p_.special_suffix) checked_piece(id);
}

const std::string& PipelineTokenizer::checked_piece(int32_t id) const {
  if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return it->second->content;
  if (const std::string* piece = p_.model->vocab().piece(id)) return *piece;
  if (id < 0 || id >= vocab_size_) fail("tokenizer '{}': token id {} out of range [0, {})", p_.name, id, vocab_size_);
  fail("tokenizer '{}': token id {} has no piece", p_.name, id);
}

std::string PipelineTokenizer::piece(int32_t id) const { return checked_piece(id); }

bool PipelineTokenizer::is_special(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && it->second->special;
}

std::vector<int32_t> PipelineTokenizer::encode_utf8(std::string_view text, bool add_special) const {
  std::vector<int32_t> ids;
  if (add_special) ids = p_.special_prefix;

  size_t plain_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* match = nullptr;
    for (const AddedToken& t : p_.added_tokens) {
      if (text.compare(pos, t.content.size(), t.content) == 0) {
        match = &t;
        break;
      }
    }
    if (!match) {
      ++pos;
      continue;
    }
    std::string_view before = text.substr(plain_start, pos - plain_start);
    if (match->lstrip) before = trim_whitespace_back(before);
    encode_plain(before, plain_start == 0, ids);
    ids.push_back(match->id);
    pos += match->content.size();
    if (match->rstrip) pos = skip_whitespace_forward(text, pos);
    plain_start = pos;
  }
  encode_plain(text.substr(plain_start), plain_start == 0, ids);

  if (add_special) ids.insert(ids.end(), p_.special_suffix.begin(), p_.special_suffix.end());
  return ids;
}

void PipelineTokenizer::encode_plain(std::string_view text, bool at_text_start, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  std::string normalized(text);
  for (const TextNormalizer& normalize : p_.normalizers) normalized = normalize(normalized);
  // Text the normalizers empty (" " stripped) gives no token: `tokenizers` prepends a Metaspace / ByteLevel
  // prefix only to a non-empty string, as SentencePiece adds its dummy prefix only to non-empty text.
  if (normalized.empty()) return;
  std::vector<std::string> words{std::move(normalized)};
  for (const PreTokenizer& pre_tokenize : p_.pre_tokenizers) {
    std::vector<std::string> next;
    for (size_t i = 0; i < words.size(); ++i) pre_tokenize(words[i], at_text_start && i == 0, next);
    words = std::move(next);
  }
  for (const std::string& word : words)
    if (!word.empty()) p_.model->tokenize(word, ids);
}

std::string PipelineTokenizer::decode_step(int32_t prev, int32_t id) const {
  const std::string& piece = checked_piece(id);
  const TokenDecoder& d = p_.decoder;
  switch (d.kind) {
    case TokenDecoder::Kind::Plain:
      return prev < 0 ? piece : " " + piece;
    case TokenDecoder::Kind::ByteLevel:
      return unicode_to_bytes(piece);
    case TokenDecoder::Kind::WordPiece:
      if (prev < 0) return piece;
      if (piece.starts_with(d.marker)) return piece.substr(d.marker.size());
      return " " + piece;
    case TokenDecoder::Kind::Metaspace: {
      if (d.byte_fallback && !added_by_id_.contains(id)) {
        if (auto byte = exact_byte_piece(piece)) return std::string(1, static_cast<char>(*byte));
      }
      std::string text = replace_all(piece, d.marker, " ");
      if (d.strip_leading_space && (prev < 0 || is_special(prev)) && text.starts_with(' ')) text.erase(0, 1);
      return text;
    }
  }
  TDYN_CHECK(false);
  return {};
}

}  // namespace tdyn
