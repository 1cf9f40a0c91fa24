// Pre-tokenization building blocks: split regexes (any pattern tokenizer.json holds, compiled by ICU), HF's split
// behaviours, and GPT-2's reversible byte <-> printable-character mapping.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tdyn {

extern const char* const kGpt2SplitPattern;   // GPT-2's; also the ByteLevel pre-tokenizer's (use_regex)
extern const char* const kLlama3SplitPattern;  // Llama 3's (llama.cpp's "llama-bpe")

using ByteRange = std::pair<size_t, size_t>;  // [begin, end) in bytes

// A split regex as tokenizer.json writes it (the reference library's Oniguruma syntax), run by ICU, whose syntax
// agrees for what split patterns use: \p{L} and \p{N}, \s as the White_Space property, (?i:...) with Unicode
// case folding, lookahead and counted repetition. Immutable once compiled; `matches` may run on many threads.
class SplitRegex {
 public:
  explicit SplitRegex(std::string_view pattern);  // throws Error saying why ICU cannot compile `pattern`

  // The successive leftmost non-empty matches in UTF-8 `text` (for GPT-2's and Llama 3's patterns they cover
  // the whole text); throws Error when the text is not UTF-8 or a match runs away (catastrophic backtracking).
  std::vector<ByteRange> matches(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::shared_ptr<const Compiled> compiled_;
};

// Every non-overlapping occurrence of `literal` (non-empty), left to right.
std::vector<ByteRange> find_literal_matches(std::string_view text, std::string_view literal);

// What happens to the matched delimiters when a word is split (HF SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
std::optional<SplitBehavior> parse_split_behavior(std::string_view name);
// Splits `text` at `matches`; with `invert` the matches are the pieces to keep and the gaps the delimiters.
// Empty pieces are dropped.
std::vector<std::string> split_at(std::string_view text, const std::vector<ByteRange>& matches, SplitBehavior behavior,
                                  bool invert = false);

// Each of the (ordered, non-overlapping) `matches` in `text` replaced by `to`.
std::string replace_matches(std::string_view text, const std::vector<ByteRange>& matches, std::string_view to);
// Every occurrence of `from` (non-empty) replaced by `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

// GPT-2's bytes_to_unicode(): every byte maps to one printable character (printable Latin-1 bytes to themselves,
// the rest to U+0100.. in byte order), so any byte string becomes a string of "visible" characters.
std::string bytes_to_unicode(std::string_view bytes);
// The inverse; characters outside the mapping (added tokens) are kept as their UTF-8 bytes.
std::string unicode_to_bytes(std::string_view mapped);

}  // namespace tdyn
