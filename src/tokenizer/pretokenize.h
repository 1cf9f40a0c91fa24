// Pre-tokenization building blocks: the split regexes of GPT-2 and Llama 3 implemented by hand (std::regex has
// no \p{L}/\p{N}), HF's split behaviours, and GPT-2's reversible byte <-> printable-character mapping.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tdyn {

// The split regexes tdyn implements, recognised by their exact pattern string in tokenizer.json.
enum class SplitRegex {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Gpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Llama3,
};
extern const char* const kGpt2SplitPattern;
extern const char* const kLlama3SplitPattern;
std::optional<SplitRegex> recognise_split_regex(std::string_view pattern);

using ByteRange = std::pair<size_t, size_t>;  // [begin, end) in bytes

// The successive leftmost matches of `regex` in UTF-8 `text` (they cover the whole text for both patterns).
std::vector<ByteRange> find_regex_matches(std::string_view text, SplitRegex regex);
// Every non-overlapping occurrence of `literal` (non-empty), left to right.
std::vector<ByteRange> find_literal_matches(std::string_view text, std::string_view literal);

// What happens to the matched delimiters when a word is split (HF SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
std::optional<SplitBehavior> parse_split_behavior(std::string_view name);
// Splits `text` at `matches`; with `invert` the matches are the pieces to keep and the gaps the delimiters.
// Empty pieces are dropped.
std::vector<std::string> split_at(std::string_view text, const std::vector<ByteRange>& matches, SplitBehavior behavior,
                                  bool invert = false);

// Every occurrence of `from` (non-empty) replaced by `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

// GPT-2's bytes_to_unicode(): every byte maps to one printable character (printable Latin-1 bytes to themselves,
// the rest to U+0100.. in byte order), so any byte string becomes a string of "visible" characters.
std::string bytes_to_unicode(std::string_view bytes);
// The inverse; characters outside the mapping (added tokens) are kept as their UTF-8 bytes.
std::string unicode_to_bytes(std::string_view mapped);

}  // namespace tdyn
