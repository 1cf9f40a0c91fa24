#include "tokenizer/unicode.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "core/error.h"

namespace tdyn::unicode {

namespace {

// Decodes one code point at `pos`; returns its length, or 0 when the bytes there are not valid UTF-8.
size_t decode_one(std::string_view text, size_t pos, char32_t* out) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char lead = byte(pos);
  if (lead < 0x80) {
    *out = lead;
    return 1;
  }
  size_t length;
  char32_t value, minimum;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, value = lead & 0x1F, minimum = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, value = lead & 0x0F, minimum = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, value = lead & 0x07, minimum = 0x10000;
  } else {
    return 0;
  }
  if (pos + length > text.size()) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return 0;
    value = (value << 6) | (byte(pos + i) & 0x3F);
  }
  if (value < minimum || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  *out = value;
  return length;
}

icu::UnicodeString to_icu(std::string_view utf8) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), static_cast<int32_t>(utf8.size())));
}

std::string from_icu(const icu::UnicodeString& s) {
  std::string out;
  s.toUTF8String(out);
  return out;
}

const icu::Normalizer2& normalizer(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::NFD: n = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::NFKD: n = icu::Normalizer2::getNFKDInstance(status); break;
    case NormalForm::NFC: n = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::NFKC: n = icu::Normalizer2::getNFKCInstance(status); break;
  }
  if (U_FAILURE(status) || !n) fail("ICU normalization data is unavailable: {}", u_errorName(status));
  return *n;
}

}  // namespace

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    char32_t c;
    size_t n = decode_one(text, pos, &c);
    if (n == 0) return pos;
    pos += n;
  }
  return std::nullopt;
}

std::optional<std::string> why_not_utf8_text(std::string_view text, bool allow_nul) {
  if (auto bad = find_invalid_utf8(text)) {
    const bool utf16_mark = text.starts_with("\xFF\xFE") || text.starts_with("\xFE\xFF");
    return fmt::format("not valid UTF-8 (byte {}){}", *bad, utf16_mark ? ": it starts with a UTF-16 byte-order mark" : "");
  }
  if (auto nul = text.find('\0'); !allow_nul && nul != std::string_view::npos)
    return fmt::format("not UTF-8 text: it has a NUL character at byte {}{}", nul, nul <= 1 ? " (is it UTF-16?)" : "");
  return std::nullopt;
}

std::vector<CodePoint> decode_utf8(std::string_view text, std::string_view what) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    char32_t c;
    size_t n = decode_one(text, pos, &c);
    if (n == 0) fail("{}: invalid UTF-8 at byte {}", what, pos);
    out.push_back({c, pos, n});
    pos += n;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

bool is_number(char32_t c) { return (U_GET_GC_MASK(c) & U_GC_N_MASK) != 0; }
bool is_regex_space(char32_t c) { return u_isUWhiteSpace(c); }
bool is_nonspacing_mark(char32_t c) { return u_charType(c) == U_NON_SPACING_MARK; }
bool is_mark(char32_t c) { return (U_GET_GC_MASK(c) & U_GC_M_MASK) != 0; }

bool is_bert_whitespace(char32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || u_charType(c) == U_SPACE_SEPARATOR;
}

bool is_bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return (U_GET_GC_MASK(c) & U_GC_C_MASK) != 0;
}

bool is_bert_punctuation(char32_t c) {
  // BERT counts every non-alphanumeric ASCII symbol ('$', '^', '`', ...) as punctuation, not only category P.
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  return (U_GET_GC_MASK(c) & U_GC_P_MASK) != 0;
}

bool is_cjk_ideograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::string normalize(std::string_view utf8, NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  icu::UnicodeString result = normalizer(form).normalize(to_icu(utf8), status);
  if (U_FAILURE(status)) fail("Unicode normalization failed: {}", u_errorName(status));
  return from_icu(result);
}

std::string to_lower(std::string_view utf8) {
  icu::UnicodeString s = to_icu(utf8);
  s.toLower(icu::Locale::getRoot());
  return from_icu(s);
}

std::string strip_accents(std::string_view utf8) {
  std::string decomposed = normalize(utf8, NormalForm::NFD);
  std::string out;
  out.reserve(decomposed.size());
  for (const CodePoint& cp : decode_utf8(decomposed, "accent stripping"))
    if (!is_nonspacing_mark(cp.value)) out.append(decomposed, cp.offset, cp.length);
  return out;
}

}  // namespace tdyn::unicode
