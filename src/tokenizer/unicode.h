// Unicode helpers for the tokenizers: strict UTF-8 decoding/encoding, the character classes the pre-tokenizer
// regexes and BERT's BasicTokenizer use, and normalization (NFD/NFKD/NFC/NFKC, full lower-casing, accent
// stripping). Classification and normalization come from ICU so they cover all of Unicode, not a hand table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tdyn::unicode {

// One code point decoded from UTF-8, with where its bytes are in the source.
struct CodePoint {
  char32_t value;
  size_t offset;  // byte offset of the first byte
  size_t length;  // 1..4 bytes
};

// Decodes `text` strictly (no overlongs, surrogates or values past U+10FFFF); returns the byte offset of the
// first invalid sequence, or nothing when the text is valid.
std::optional<size_t> find_invalid_utf8(std::string_view text);
// Why `text` is not UTF-8 text, to follow "is" in an error message: "not valid UTF-8 (byte 0): it starts with a
// UTF-16 byte-order mark", or unless NULs are allowed "not UTF-8 text: it has a NUL character at byte 1 (is it
// UTF-16?)"; nothing when it is UTF-8 text.
std::optional<std::string> why_not_utf8_text(std::string_view text, bool allow_nul);
// Decodes valid UTF-8; throws Error naming `what` and the byte offset when it is not.
std::vector<CodePoint> decode_utf8(std::string_view text, std::string_view what);
void append_utf8(std::string& out, char32_t c);

// \p{N}, \s (the White_Space property, as the regex engines of the reference tokenizers define \s).
bool is_number(char32_t c);
bool is_regex_space(char32_t c);
bool is_nonspacing_mark(char32_t c);  // general category Mn
bool is_mark(char32_t c);             // general category M (Mn, Mc, Me)

// BERT's definitions (BasicTokenizer): whitespace = ' ', \t, \n, \r or category Zs; control = category C*
// except \t \n \r; punctuation = ASCII symbols 33-47, 58-64, 91-96, 123-126 or category P*; CJK = the
// CJK Unified Ideographs blocks BERT lists.
bool is_bert_whitespace(char32_t c);
bool is_bert_control(char32_t c);
bool is_bert_punctuation(char32_t c);
bool is_cjk_ideograph(char32_t c);

enum class NormalForm { NFD, NFKD, NFC, NFKC };
std::string normalize(std::string_view utf8, NormalForm form);
// Full Unicode lower-case mapping (root locale: final sigma, U+0130 -> "i\u0307"), as Python's str.lower().
std::string to_lower(std::string_view utf8);
// NFD, then drop every nonspacing mark (Mn): "café" -> "cafe".
std::string strip_accents(std::string_view utf8);

}  // namespace tdyn::unicode
