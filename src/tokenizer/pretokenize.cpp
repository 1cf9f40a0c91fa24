#include "tokenizer/pretokenize.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tdyn {

const char* const kGpt2SplitPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::optional<SplitRegex> recognise_split_regex(std::string_view pattern) {
  if (pattern == kGpt2SplitPattern) return SplitRegex::Gpt2;
  if (pattern == kLlama3SplitPattern) return SplitRegex::Llama3;
  return std::nullopt;
}

namespace {

using unicode::is_letter;
using unicode::is_number;
using unicode::is_regex_space;

bool is_other(char32_t c) { return !is_regex_space(c) && !is_letter(c) && !is_number(c); }
bool is_newline(char32_t c) { return c == '\r' || c == '\n'; }

// A matcher sees the text as code points and returns where the match starting at `i` ends (always > i).
class CodePointMatcher {
 public:
  explicit CodePointMatcher(const std::vector<char32_t>& cps) : cps_(cps), n_(cps.size()) {}

  // 's|'t|'re|'ve|'m|'ll|'d, optionally ASCII-case-insensitive (with U+017F LONG S folding to 's', as the
  // Unicode case folding of the reference regex engines does).
  size_t contraction(size_t i, bool ignore_case) const {
    if (cps_[i] != '\'') return i;
    static const char* const suffixes[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    for (const char* suffix : suffixes) {
      size_t j = i + 1;
      for (const char* p = suffix; *p; ++p, ++j) {
        if (j >= n_ || fold(cps_[j], ignore_case) != static_cast<char32_t>(*p)) goto next_suffix;
      }
      return j;
    next_suffix:;
    }
    return i;
  }

  template <typename Class>
  size_t run(size_t i, Class in_class, size_t max_length = SIZE_MAX) const {
    size_t j = i;
    while (j < n_ && j - i < max_length && in_class(cps_[j])) ++j;
    return j;
  }

  // ` ?X+` for a character class X: the optional leading space is taken only when X follows it.
  template <typename Class>
  size_t optional_space_then_run(size_t i, Class in_class) const {
    size_t start = (cps_[i] == ' ' && i + 1 < n_ && in_class(cps_[i + 1])) ? i + 1 : i;
    return in_class(cps_[start]) ? run(start, in_class) : i;
  }

  // \s+(?!\S)|\s+ : a whitespace run, giving its last character back to a following non-space when the run is
  // longer than one (so " world" keeps its space).
  size_t trailing_whitespace(size_t i) const {
    size_t j = run(i, is_regex_space);
    if (j == i) return i;
    if (j == n_ || j - i == 1) return j;
    return j - 1;
  }

  char32_t at(size_t i) const { return cps_[i]; }
  size_t size() const { return n_; }

 private:
  static char32_t fold(char32_t c, bool ignore_case) {
    if (!ignore_case) return c;
    if (c >= 'A' && c <= 'Z') return c - 'A' + 'a';
    if (c == 0x17F) return 's';
    return c;
  }
  const std::vector<char32_t>& cps_;
  size_t n_;
};

size_t match_gpt2(const CodePointMatcher& m, size_t i) {
  size_t end;
  if ((end = m.contraction(i, false)) > i) return end;
  if ((end = m.optional_space_then_run(i, is_letter)) > i) return end;
  if ((end = m.optional_space_then_run(i, is_number)) > i) return end;
  if ((end = m.optional_space_then_run(i, is_other)) > i) return end;
  return m.trailing_whitespace(i);
}

size_t match_llama3(const CodePointMatcher& m, size_t i) {
  size_t end;
  if ((end = m.contraction(i, true)) > i) return end;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (is_letter(m.at(i))) return m.run(i, is_letter);
  if (!is_newline(m.at(i)) && !is_number(m.at(i)) && i + 1 < m.size() && is_letter(m.at(i + 1)))
    return m.run(i + 1, is_letter);
  // \p{N}{1,3}
  if (is_number(m.at(i))) return m.run(i, is_number, 3);
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  if ((end = m.optional_space_then_run(i, is_other)) > i) return m.run(end, is_newline);
  // \s*[\r\n]+ : the whitespace run up to and including its last line break.
  size_t run_end = m.run(i, is_regex_space);
  for (size_t p = run_end; p > i; --p)
    if (is_newline(m.at(p - 1))) return p;
  return m.trailing_whitespace(i);
}

}  // namespace

std::vector<ByteRange> find_regex_matches(std::string_view text, SplitRegex regex) {
  std::vector<unicode::CodePoint> decoded = unicode::decode_utf8(text, "pre-tokenizer input");
  std::vector<char32_t> cps;
  cps.reserve(decoded.size());
  for (const auto& cp : decoded) cps.push_back(cp.value);
  CodePointMatcher matcher(cps);
  std::vector<ByteRange> matches;
  for (size_t i = 0; i < cps.size();) {
    size_t end = regex == SplitRegex::Gpt2 ? match_gpt2(matcher, i) : match_llama3(matcher, i);
    TDYN_CHECK(end > i && end <= cps.size());  // every character belongs to some alternative
    size_t begin_byte = decoded[i].offset;
    size_t end_byte = end == cps.size() ? text.size() : decoded[end].offset;
    matches.emplace_back(begin_byte, end_byte);
    i = end;
  }
  return matches;
}

std::vector<ByteRange> find_literal_matches(std::string_view text, std::string_view literal) {
  TDYN_CHECK(!literal.empty());
  std::vector<ByteRange> matches;
  for (size_t pos = text.find(literal); pos != std::string_view::npos; pos = text.find(literal, pos + literal.size()))
    matches.emplace_back(pos, pos + literal.size());
  return matches;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  TDYN_CHECK(!from.empty());
  std::string out;
  size_t pos = 0;
  for (size_t hit = text.find(from); hit != std::string_view::npos; hit = text.find(from, pos)) {
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
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
