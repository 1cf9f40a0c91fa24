#include "tokenizer/stages.h"

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tdyn {

namespace {

// Splits at every code point for which `is_delimiter` holds, with the given behaviour.
template <typename Predicate>
void split_at_code_points(std::string_view word, Predicate is_delimiter, SplitBehavior behavior,
                          std::vector<std::string>& out) {
  std::vector<ByteRange> matches;
  for (const auto& cp : unicode::decode_utf8(word, "pre-tokenizer input"))
    if (is_delimiter(cp.value)) matches.emplace_back(cp.offset, cp.offset + cp.length);
  for (std::string& piece : split_at(word, matches, behavior)) out.push_back(std::move(piece));
}

}  // namespace

TextNormalizer make_bert_normalizer(bool clean_text, bool handle_chinese_chars, bool strip_accents, bool lowercase) {
  return [=](std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (const auto& cp : unicode::decode_utf8(text, "BERT normalizer input")) {
      if (clean_text) {
        if (cp.value == 0 || cp.value == 0xFFFD || unicode::is_bert_control(cp.value)) continue;
        if (unicode::is_bert_whitespace(cp.value)) {
          out += ' ';
          continue;
        }
      }
      bool isolate = handle_chinese_chars && unicode::is_cjk_ideograph(cp.value);
      if (isolate) out += ' ';
      out.append(text.substr(cp.offset, cp.length));
      if (isolate) out += ' ';
    }
    // BasicTokenizer lower-cases first, then strips accents.
    if (lowercase) out = unicode::to_lower(out);
    if (strip_accents) out = unicode::strip_accents(out);
    return out;
  };
}

PreTokenizer make_byte_level_pre_tokenizer(bool add_prefix_space, bool use_regex) {
  return [=](std::string_view word, bool, std::vector<std::string>& out) {
    std::string text;
    if (add_prefix_space && !word.starts_with(' ')) text += ' ';
    text += word;
    if (!use_regex) {
      out.push_back(bytes_to_unicode(text));
      return;
    }
    static const SplitRegex gpt2(kGpt2SplitPattern);
    for (const auto& [begin, end] : gpt2.matches(text))
      out.push_back(bytes_to_unicode(std::string_view(text).substr(begin, end - begin)));
  };
}

PreTokenizer make_regex_split_pre_tokenizer(SplitRegex regex, SplitBehavior behavior, bool invert) {
  return [=](std::string_view word, bool, std::vector<std::string>& out) {
    for (std::string& piece : split_at(word, regex.matches(word), behavior, invert))
      out.push_back(std::move(piece));
  };
}

PreTokenizer make_literal_split_pre_tokenizer(std::string literal, SplitBehavior behavior, bool invert) {
  TDYN_CHECK(!literal.empty());
  return [=](std::string_view word, bool, std::vector<std::string>& out) {
    for (std::string& piece : split_at(word, find_literal_matches(word, literal), behavior, invert))
      out.push_back(std::move(piece));
  };
}

PreTokenizer make_bert_pre_tokenizer() {
  return [](std::string_view word, bool, std::vector<std::string>& out) {
    std::vector<std::string> words;
    split_at_code_points(word, unicode::is_regex_space, SplitBehavior::Removed, words);
    for (const std::string& w : words)
      split_at_code_points(w, unicode::is_bert_punctuation, SplitBehavior::Isolated, out);
  };
}

PreTokenizer make_whitespace_split_pre_tokenizer() {
  return [](std::string_view word, bool, std::vector<std::string>& out) {
    split_at_code_points(word, unicode::is_regex_space, SplitBehavior::Removed, out);
  };
}

PreTokenizer make_metaspace_pre_tokenizer(std::string replacement, PrependScheme prepend, bool split) {
  TDYN_CHECK(!replacement.empty());
  return [=](std::string_view word, bool at_text_start, std::vector<std::string>& out) {
    std::string text = replace_all(word, " ", replacement);
    bool add_prefix = prepend == PrependScheme::Always || (prepend == PrependScheme::First && at_text_start);
    if (add_prefix && !text.starts_with(replacement)) text = replacement + text;
    if (!split) {
      out.push_back(std::move(text));
      return;
    }
    for (std::string& piece : split_at(text, find_literal_matches(text, replacement), SplitBehavior::MergedWithNext))
      out.push_back(std::move(piece));
  };
}

}  // namespace tdyn
