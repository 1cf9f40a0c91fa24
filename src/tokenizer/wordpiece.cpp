#include "tokenizer/wordpiece.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/json_files.h"
#include "tokenizer/stages.h"
#include "tokenizer/unicode.h"

namespace tdyn {

WordPieceModel::WordPieceModel(Vocabulary vocab, const std::string& unk_token, std::string continuing_prefix,
                               int64_t max_input_chars_per_word, const std::string& name)
    : SubwordModel(std::move(vocab)), prefix_(std::move(continuing_prefix)), max_chars_(max_input_chars_per_word) {
  auto unk = vocab_.find(unk_token);
  if (!unk) fail("tokenizer '{}': unk token '{}' is not in the vocabulary", name, unk_token);
  unk_id_ = *unk;
}

void WordPieceModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  std::vector<unicode::CodePoint> chars = unicode::decode_utf8(word, "WordPiece input");
  if (static_cast<int64_t>(chars.size()) > max_chars_) {
    ids.push_back(unk_id_);
    return;
  }
  std::vector<int32_t> pieces;
  std::string candidate;
  for (size_t start = 0; start < chars.size();) {
    // The longest piece starting at `start`, shrinking one character at a time.
    std::optional<int32_t> found;
    size_t end = chars.size();
    for (; end > start; --end) {
      size_t begin_byte = chars[start].offset, end_byte = chars[end - 1].offset + chars[end - 1].length;
      candidate.assign(start > 0 ? prefix_ : "");
      candidate.append(word.substr(begin_byte, end_byte - begin_byte));
      if ((found = vocab_.find(candidate))) break;
    }
    if (!found) {
      ids.push_back(unk_id_);
      return;
    }
    pieces.push_back(*found);
    start = end;
  }
  ids.insert(ids.end(), pieces.begin(), pieces.end());
}

std::unique_ptr<Tokenizer> load_bert_vocab_txt(const fs::path& vocab_file) {
  std::string text = read_file(vocab_file);
  fs::path config_file = vocab_file.parent_path() / "tokenizer_config.json";
  std::optional<Json> config;
  if (fs::exists(config_file)) config = read_json_file(config_file);
  return bert_tokenizer_from_vocab_txt(text, vocab_file.string(), config ? &*config : nullptr, config_file.string());
}

std::unique_ptr<Tokenizer> bert_tokenizer_from_vocab_txt(std::string_view text, const std::string& name,
                                                         const Json* config, const std::string& config_name) {
  if (auto bad = unicode::find_invalid_utf8(text)) fail("vocabulary '{}': not valid UTF-8 (byte {})", name, *bad);
  std::vector<std::pair<std::string, int64_t>> entries;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    entries.emplace_back(line, static_cast<int64_t>(entries.size()));
    pos = end + 1;
  }
  if (entries.empty()) fail("vocabulary '{}' is empty", name);

  bool lowercase = true, strip_accents = true, chinese = true;
  if (config) {
    lowercase = json_bool(*config, "do_lower_case", true, config_name);
    strip_accents = json_bool(*config, "strip_accents", lowercase, config_name);
    chinese = json_bool(*config, "tokenize_chinese_chars", true, config_name);
  }

  PipelineParts parts;
  parts.kind = "wordpiece";
  parts.name = name;
  Vocabulary vocab(std::move(entries), name);
  for (const char* special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    if (auto id = vocab.find(special)) parts.added_tokens.push_back({special, *id, true, false, false});
  auto cls = vocab.find("[CLS]"), sep = vocab.find("[SEP]");
  if (!cls || !sep) fail("vocabulary '{}' has no [CLS] / [SEP] piece", name);
  parts.special_prefix = {*cls};
  parts.special_suffix = {*sep};
  parts.bos = *cls;
  parts.eos = *sep;
  parts.model = std::make_unique<WordPieceModel>(std::move(vocab), "[UNK]", "##", 100, name);
  parts.normalizers.push_back(make_bert_normalizer(true, chinese, strip_accents, lowercase));
  parts.pre_tokenizers.push_back(make_bert_pre_tokenizer());
  parts.decoder = {TokenDecoder::Kind::WordPiece, "##", false, false};
  return std::make_unique<PipelineTokenizer>(std::move(parts));
}

}  // namespace tdyn
