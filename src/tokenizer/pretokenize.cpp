#include "tokenizer/pretokenize.h"

#include <algorithm>
#include <array>
#include <memory>

#include <unicode/regex.h>
#include <unicode/utext.h>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tdyn {

const char* const kGpt2SplitPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// ICU's limit on one match, in its engine's steps (roughly milliseconds): a pattern that backtracks
// catastrophically on some text stops with an error instead of hanging the run.
constexpr int32_t kMatchTimeLimit = 10000;

struct SplitRegex::Compiled {
  std::unique_ptr<icu::RegexPattern> pattern;
};

SplitRegex::SplitRegex(std::string_view pattern) : pattern_(pattern) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError where{};
  auto compiled = std::make_shared<Compiled>();
  const icu::UnicodeString source = icu::UnicodeString::fromUTF8(icu::StringPiece(pattern.data(), static_cast<int32_t>(pattern.size())));
  compiled->pattern.reset(icu::RegexPattern::compile(source, where, status));
  if (U_FAILURE(status))
    fail("split regex '{}' cannot be compiled: {} at character {}", pattern_, u_errorName(status), where.offset);
  compiled_ = std::move(compiled);
}

std::vector<ByteRange> SplitRegex::matches(std::string_view text) const {
  unicode::decode_utf8(text, "pre-tokenizer input");  // ICU would read bad bytes as U+FFFD; refuse them instead
  UErrorCode status = U_ZERO_ERROR;
  // A UTF-8 UText: the matcher's indices are byte offsets into `text`.
  std::unique_ptr<UText, decltype(&utext_close)> input(
      utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status), &utext_close);
  std::unique_ptr<icu::RegexMatcher> matcher(compiled_->pattern->matcher(status));
  if (U_SUCCESS(status)) matcher->reset(input.get());
  if (U_SUCCESS(status)) matcher->setTimeLimit(kMatchTimeLimit, status);
  std::vector<ByteRange> matches;
  while (U_SUCCESS(status) && matcher->find(status)) {
    const int64_t begin = matcher->start64(status), end = matcher->end64(status);
    if (end > begin) matches.emplace_back(static_cast<size_t>(begin), static_cast<size_t>(end));
  }
  if (U_FAILURE(status)) fail("split regex '{}': {} on a word of {} bytes", pattern_, u_errorName(status), text.size());
  return matches;
}

std::vector<ByteRange> find_literal_matches(std::string_view text, std::string_view literal) {
  TDYN_CHECK(!literal.empty());
  std::vector<ByteRange> matches;
  for (size_t pos = text.find(literal); pos != std::string_view::npos; pos = text.find(literal, pos + literal.size()))
    matches.emplace_back(pos, pos + literal.size());
  return matches;
}

std::string replace_matches(std::string_view text, const std::vector<ByteRange>& matches, std::string_view to) {
  std::string out;
  size_t pos = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text.substr(pos, begin - pos));
    out.append(to);
    pos = end;
  }
  out.append(text.substr(pos));
  return out;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  return replace_matches(text, find_literal_matches(text, from), to);
}

std::optional<SplitBehavior> parse_split_behavior(std::string_view name) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  return std::nullopt;
}

std::vector<std::string> split_at(std::string_view text, const std::vector<ByteRange>& matches, SplitBehavior behavior,
                                  bool invert) {
  struct Segment {
    ByteRange range;
    bool is_delimiter;
  };
  // The text as alternating gaps and matches, each non-empty.
  std::vector<Segment> segments;
  size_t pos = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > pos) segments.push_back({{pos, begin}, invert});
    if (end > begin) segments.push_back({{begin, end}, !invert});
    pos = end;
  }
  if (pos < text.size()) segments.push_back({{pos, text.size()}, invert});

  std::vector<ByteRange> pieces;
  bool previous_is_delimiter = false;
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const auto& s : segments)
        if (!s.is_delimiter) pieces.push_back(s.range);
      break;
    case SplitBehavior::Isolated:
      for (const auto& s : segments) pieces.push_back(s.range);
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const auto& s : segments) {
        if (s.is_delimiter && !previous_is_delimiter && !pieces.empty()) {
          pieces.back().second = s.range.second;
        } else {
          pieces.push_back(s.range);
        }
        previous_is_delimiter = s.is_delimiter;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_delimiter && !previous_is_delimiter && !pieces.empty()) {
          pieces.back().first = it->range.first;
        } else {
          pieces.push_back(it->range);
        }
        previous_is_delimiter = it->is_delimiter;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case SplitBehavior::Contiguous:
      for (const auto& s : segments) {
        if (s.is_delimiter && previous_is_delimiter) {
          pieces.back().second = s.range.second;
        } else {
          pieces.push_back(s.range);
        }
        previous_is_delimiter = s.is_delimiter;
      }
      break;
  }
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (const auto& [begin, end] : pieces)
    if (end > begin) out.emplace_back(text.substr(begin, end - begin));
  return out;
}

namespace {

struct ByteUnicodeTables {
  std::array<char32_t, 256> char_of_byte{};
  std::array<int, 512> byte_of_char{};  // -1 where no byte maps there; all targets are below U+0200

  ByteUnicodeTables() {
    byte_of_char.fill(-1);
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    char32_t next_free = 256;
    for (int b = 0; b < 256; ++b) {
      char_of_byte[b] = printable(b) ? static_cast<char32_t>(b) : next_free++;
      byte_of_char[char_of_byte[b]] = b;
    }
  }
};

const ByteUnicodeTables& byte_unicode_tables() {
  static const ByteUnicodeTables tables;
  return tables;
}

}  // namespace

std::string bytes_to_unicode(std::string_view bytes) {
  const auto& tables = byte_unicode_tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) unicode::append_utf8(out, tables.char_of_byte[b]);
  return out;
}

std::string unicode_to_bytes(std::string_view mapped) {
  const auto& tables = byte_unicode_tables();
  std::string out;
  for (const auto& cp : unicode::decode_utf8(mapped, "byte-level token")) {
    if (cp.value < tables.byte_of_char.size() && tables.byte_of_char[cp.value] >= 0) {
      out += static_cast<char>(tables.byte_of_char[cp.value]);
    } else {
      out.append(mapped, cp.offset, cp.length);
    }
  }
  return out;
}

}  // namespace tdyn
