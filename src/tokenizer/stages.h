// Ready-made pipeline stages (see pipeline.h), shared by the tokenizer.json reader and the loaders of the classic
// file sets, so that e.g. GPT-2 from merges.txt and GPT-2 from tokenizer.json run the same code.
#pragma once

#include <string>

#include "tokenizer/pipeline.h"
#include "tokenizer/pretokenize.h"

namespace tdyn {

// BERT's BasicTokenizer text cleanup: drop NUL, U+FFFD and control characters, map whitespace to ' ', put
// spaces around CJK ideographs, then lower-case and/or strip accents (NFD, drop Mn).
TextNormalizer make_bert_normalizer(bool clean_text, bool handle_chinese_chars, bool strip_accents, bool lowercase);

// Byte-level: optionally prefix a space, optionally split with GPT-2's regex, then map bytes to characters.
PreTokenizer make_byte_level_pre_tokenizer(bool add_prefix_space, bool use_regex);
// Split at the matches of a known regex / a literal string.
PreTokenizer make_regex_split_pre_tokenizer(SplitRegex regex, SplitBehavior behavior, bool invert);
PreTokenizer make_literal_split_pre_tokenizer(std::string literal, SplitBehavior behavior, bool invert);
// BERT: split on whitespace (dropped) and isolate each punctuation character.
PreTokenizer make_bert_pre_tokenizer();
// Split on whitespace, dropping it.
PreTokenizer make_whitespace_split_pre_tokenizer();
// SentencePiece's Metaspace: ' ' -> replacement; prepend it ("always", "first" = only at the text start,
// "never"); with `split`, each replacement starts a new word.
enum class PrependScheme { Always, First, Never };
PreTokenizer make_metaspace_pre_tokenizer(std::string replacement, PrependScheme prepend, bool split);

}  // namespace tdyn
