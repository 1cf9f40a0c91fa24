#include "tokenizer/hf_json.h"

#include <nlohmann/json.hpp>

#include "core/base64.h"
#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/sentencepiece.h"
#include "tokenizer/stages.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unigram.h"
#include "tokenizer/wordpiece.h"

namespace tdyn {

namespace {

const char* const kMetaspace = "\xE2\x96\x81";  // "▁", SentencePiece's visible space

// A Regex pattern of the file, with the error saying where it is when ICU cannot compile it.
SplitRegex compile_regex(const std::string& pattern, const std::string& where) {
  try {
    return SplitRegex(pattern);
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
}

// Reads the parts of one tokenizer.json, with messages that say where in the file a problem is.
class TokenizerJsonReader {
 public:
  explicit TokenizerJsonReader(const std::string& name) : name_(name) {}

  PipelineParts read(const Json& root, const Json* config);
  void read_post_processor(const Json& p, const std::string& path, PipelineParts& parts);

 private:
  std::string where(const std::string& path) const { return fmt::format("tokenizer '{}': {}", name_, path); }
  std::string type_of(const Json& object, const std::string& path) const;
  const Json& member(const Json& object, const char* key, const std::string& path) const;

  std::unique_ptr<SubwordModel> read_model(const Json& model);
  void read_normalizer(const Json& n, const std::string& path, std::vector<TextNormalizer>& out);
  void read_pre_tokenizer(const Json& p, const std::string& path, std::vector<PreTokenizer>& out);
  void read_decoder(const Json& d, const std::string& path, TokenDecoder& out);
  std::optional<int32_t> special_token_id(const Json& value, const PipelineParts& parts) const;

  std::string name_;
  std::string model_type_;
  bool byte_level_ = false;
};

std::string TokenizerJsonReader::type_of(const Json& object, const std::string& path) const {
  if (!object.is_object()) fail("{} must be an object", where(path));
  return json_string(object, "type", "", where(path));
}

const Json& TokenizerJsonReader::member(const Json& object, const char* key, const std::string& path) const {
  if (!object.is_object() || !object.contains(key) || object[key].is_null())
    fail("{}: '{}' is missing", where(path), key);
  return object[key];
}

std::unique_ptr<SubwordModel> TokenizerJsonReader::read_model(const Json& model) {
  if (!model.is_object()) fail("{} must be an object", where("model"));
  model_type_ = json_string(model, "type", "", where("model"));
  if (model_type_.empty()) {
    // Older files leave the type out; the fields tell.
    if (model.contains("merges")) model_type_ = "BPE";
    else if (model.contains("vocab") && model["vocab"].is_array()) model_type_ = "Unigram";
    else if (model.contains("max_input_chars_per_word")) model_type_ = "WordPiece";
  }
  const std::string w = where("model");
  if (model_type_ == "BPE") {
    Vocabulary vocab = vocabulary_from_json_object(member(model, "vocab", "model"), name_);
    const Json& merges_json = member(model, "merges", "model");
    if (!merges_json.is_array()) fail("{}: 'merges' must be an array", w);
    MergeList merges;
    merges.reserve(merges_json.size());
    for (const Json& m : merges_json) {
      if (m.is_string()) {
        auto merge = split_merge(m.get<std::string>());
        if (!merge) fail("{}: merge {} '{}' is not two pieces separated by a space", w, merges.size(), m.get<std::string>());
        merges.push_back(std::move(*merge));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        fail("{}: each merge must be \"a b\" or [\"a\", \"b\"], got {}", w, m.dump());
      }
    }
    if (!json_string(model, "continuing_subword_prefix", "", w).empty() ||
        !json_string(model, "end_of_word_suffix", "", w).empty())
      fail("{}: BPE with continuing_subword_prefix / end_of_word_suffix is not supported", w);
    if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"].get<double>() > 0)
      fail("{}: BPE dropout is not supported (it makes encoding random)", w);
    BpeOptions options;
    options.unk_token = json_optional_string(model, "unk_token", w);
    options.fuse_unk = json_bool(model, "fuse_unk", false, w);
    options.byte_fallback = json_bool(model, "byte_fallback", false, w);
    options.ignore_merges = json_bool(model, "ignore_merges", false, w);
    return std::make_unique<BpeModel>(std::move(vocab), merges, options, name_);
  }
  if (model_type_ == "WordPiece") {
    Vocabulary vocab = vocabulary_from_json_object(member(model, "vocab", "model"), name_);
    int64_t max_chars = json_int(model, "max_input_chars_per_word", 100, w);
    if (max_chars <= 0) fail("{}: max_input_chars_per_word must be positive", w);
    return std::make_unique<WordPieceModel>(std::move(vocab), json_string(model, "unk_token", "[UNK]", w),
                                            json_string(model, "continuing_subword_prefix", "##", w), max_chars, name_);
  }
  if (model_type_ == "Unigram") {
    const Json& vocab_json = member(model, "vocab", "model");
    if (!vocab_json.is_array()) fail("{}: Unigram 'vocab' must be an array of [piece, score]", w);
    std::vector<std::pair<std::string, int64_t>> entries;
    std::vector<double> scores;
    for (const Json& entry : vocab_json) {
      if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number())
        fail("{}: Unigram vocab entry {} is not [piece, score]", w, entries.size());
      entries.emplace_back(entry[0].get<std::string>(), static_cast<int64_t>(entries.size()));
      scores.push_back(entry[1].get<double>());
    }
    std::optional<int32_t> unk_id;
    if (model.contains("unk_id") && !model["unk_id"].is_null()) {
      int64_t id = json_int(model, "unk_id", -1, w);
      if (id < 0 || id >= static_cast<int64_t>(entries.size()))
        fail("{}: unk_id {} is outside the {}-piece vocabulary", w, id, entries.size());
      unk_id = static_cast<int32_t>(id);
    }
    bool byte_fallback = json_bool(model, "byte_fallback", false, w);
    return std::make_unique<UnigramModel>(Vocabulary(std::move(entries), name_), std::move(scores), unk_id,
                                          byte_fallback, name_);
  }
  fail("{}: model type '{}' is not supported (expected BPE, WordPiece or Unigram)", w, model_type_);
}

void TokenizerJsonReader::read_normalizer(const Json& n, const std::string& path, std::vector<TextNormalizer>& out) {
  if (n.is_null()) return;
  std::string type = type_of(n, path);
  const std::string w = where(path);
  if (type == "Sequence") {
    const Json& list = member(n, "normalizers", path);
    if (!list.is_array()) fail("{}: 'normalizers' must be an array", w);
    for (size_t i = 0; i < list.size(); ++i) read_normalizer(list[i], fmt::format("{}.normalizers[{}]", path, i), out);
  } else if (type == "Lowercase") {
    out.push_back([](std::string_view s) { return unicode::to_lower(s); });
  } else if (type == "NFD" || type == "NFKD" || type == "NFC" || type == "NFKC") {
    unicode::NormalForm form = type == "NFD"    ? unicode::NormalForm::NFD
                               : type == "NFKD" ? unicode::NormalForm::NFKD
                               : type == "NFC"  ? unicode::NormalForm::NFC
                                                : unicode::NormalForm::NFKC;
    out.push_back([form](std::string_view s) { return unicode::normalize(s, form); });
  } else if (type == "StripAccents") {
    // The `tokenizers` StripAccents drops every combining mark (M*); it does not decompose first.
    out.push_back([](std::string_view s) {
      std::string kept;
      for (const auto& cp : unicode::decode_utf8(s, "StripAccents input"))
        if (!unicode::is_mark(cp.value)) kept.append(s.substr(cp.offset, cp.length));
      return kept;
    });
  } else if (type == "Replace") {
    const Json& pattern = member(n, "pattern", path);
    std::string content = json_string(n, "content", "", w);
    if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string() &&
        !pattern["String"].get<std::string>().empty()) {
      std::string from = pattern["String"].get<std::string>();
      out.push_back([from, content](std::string_view s) { return replace_all(s, from, content); });
    } else if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      // ALBERT and T5 collapse runs of spaces with " {2,}".
      const SplitRegex regex = compile_regex(pattern["Regex"].get<std::string>(), w);
      out.push_back([regex, content](std::string_view s) { return replace_matches(s, regex.matches(s), content); });
    } else {
      fail("{}: Replace pattern {} must be {{\"String\": ...}} (non-empty) or {{\"Regex\": ...}}", w, pattern.dump());
    }
  } else if (type == "Prepend") {
    std::string prefix = json_string(n, "prepend", "", w);
    out.push_back([prefix](std::string_view s) { return s.empty() ? std::string() : prefix + std::string(s); });
  } else if (type == "Strip") {
    bool left = json_bool(n, "strip_left", true, w), right = json_bool(n, "strip_right", true, w);
    out.push_back([left, right](std::string_view s) {
      auto cps = unicode::decode_utf8(s, "Strip input");
      size_t begin = 0, end = cps.size();
      while (left && begin < end && unicode::is_regex_space(cps[begin].value)) ++begin;
      while (right && end > begin && unicode::is_regex_space(cps[end - 1].value)) --end;
      if (begin == end) return std::string();
      return std::string(s.substr(cps[begin].offset, cps[end - 1].offset + cps[end - 1].length - cps[begin].offset));
    });
  } else if (type == "BertNormalizer") {
    bool lowercase = json_bool(n, "lowercase", true, w);
    out.push_back(make_bert_normalizer(json_bool(n, "clean_text", true, w), json_bool(n, "handle_chinese_chars", true, w),
                                       json_bool(n, "strip_accents", lowercase, w), lowercase));
  } else if (type == "Precompiled") {
    // SentencePiece's compiled character map (ALBERT, T5, XLNet): base64 of the NormalizerSpec.precompiled_charsmap
    // of the .model it was converted from, applied by the SentencePiece library.
    const Json& encoded = member(n, "precompiled_charsmap", path);
    if (!encoded.is_string()) fail("{}: 'precompiled_charsmap' must be a base64 string", w);
    auto charsmap = decode_base64(encoded.get<std::string>());
    if (!charsmap) fail("{}: 'precompiled_charsmap' is not valid base64", w);
    out.push_back(make_precompiled_normalizer(*charsmap, w + ": Precompiled charsmap"));
  } else {
    fail("{}: normalizer type '{}' is not supported", w, type);
  }
}

PrependScheme read_prepend_scheme(const Json& object, const std::string& w) {
  if (object.contains("prepend_scheme") && !object["prepend_scheme"].is_null()) {
    std::string scheme = json_string(object, "prepend_scheme", "always", w);
    if (scheme == "always") return PrependScheme::Always;
    if (scheme == "first") return PrependScheme::First;
    if (scheme == "never") return PrependScheme::Never;
    fail("{}: prepend_scheme '{}' is not one of always, first, never", w, scheme);
  }
  return json_bool(object, "add_prefix_space", true, w) ? PrependScheme::Always : PrependScheme::Never;
}

std::string read_replacement(const Json& object, const std::string& w) {
  std::string replacement = json_string(object, "replacement", kMetaspace, w);
  if (replacement.empty()) fail("{}: 'replacement' is empty", w);
  return replacement;
}

void TokenizerJsonReader::read_pre_tokenizer(const Json& p, const std::string& path, std::vector<PreTokenizer>& out) {
  if (p.is_null()) return;
  std::string type = type_of(p, path);
  const std::string w = where(path);
  if (type == "Sequence") {
    const Json& list = member(p, "pretokenizers", path);
    if (!list.is_array()) fail("{}: 'pretokenizers' must be an array", w);
    for (size_t i = 0; i < list.size(); ++i)
      read_pre_tokenizer(list[i], fmt::format("{}.pretokenizers[{}]", path, i), out);
  } else if (type == "ByteLevel") {
    byte_level_ = true;
    out.push_back(make_byte_level_pre_tokenizer(json_bool(p, "add_prefix_space", true, w), json_bool(p, "use_regex", true, w)));
  } else if (type == "Split") {
    const Json& pattern = member(p, "pattern", path);
    std::string behavior_name = json_string(p, "behavior", "", w);
    auto behavior = parse_split_behavior(behavior_name);
    if (!behavior) fail("{}: split behavior '{}' is not known", w, behavior_name);
    bool invert = json_bool(p, "invert", false, w);
    if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string() &&
        !pattern["String"].get<std::string>().empty()) {
      out.push_back(make_literal_split_pre_tokenizer(pattern["String"].get<std::string>(), *behavior, invert));
    } else if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      out.push_back(make_regex_split_pre_tokenizer(compile_regex(pattern["Regex"].get<std::string>(), w), *behavior, invert));
    } else {
      fail("{}: split pattern {} must be {{\"String\": ...}} or {{\"Regex\": ...}}", w, pattern.dump());
    }
  } else if (type == "Metaspace") {
    out.push_back(make_metaspace_pre_tokenizer(read_replacement(p, w), read_prepend_scheme(p, w), json_bool(p, "split", true, w)));
  } else if (type == "WhitespaceSplit") {
    out.push_back(make_whitespace_split_pre_tokenizer());
  } else if (type == "BertPreTokenizer") {
    out.push_back(make_bert_pre_tokenizer());
  } else {
    fail("{}: pre-tokenizer type '{}' is not supported", w, type);
  }
}

void TokenizerJsonReader::read_post_processor(const Json& p, const std::string& path, PipelineParts& parts) {
  if (p.is_null()) return;
  std::string type = type_of(p, path);
  const std::string w = where(path);
  auto token_id = [&](const Json& pair, const char* key) {
    // BertProcessing / RobertaProcessing store [token, id].
    const Json& v = member(pair, key, path);
    if (!v.is_array() || v.size() != 2 || !v[1].is_number_integer() || v[1].get<int64_t>() < 0 ||
        v[1].get<int64_t>() > INT32_MAX)
      fail("{}: '{}' must be [token, id]", w, key);
    return static_cast<int32_t>(v[1].get<int64_t>());
  };
  if (type == "Sequence") {
    const Json& list = member(p, "processors", path);
    if (!list.is_array()) fail("{}: 'processors' must be an array", w);
    for (size_t i = 0; i < list.size(); ++i) read_post_processor(list[i], fmt::format("{}.processors[{}]", path, i), parts);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets.
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    parts.special_prefix.push_back(token_id(p, "cls"));
    parts.special_suffix.insert(parts.special_suffix.begin(), token_id(p, "sep"));
  } else if (type == "TemplateProcessing") {
    const Json& single = member(p, "single", path);
    const Json& specials = p.contains("special_tokens") ? p["special_tokens"] : Json::object();
    if (!single.is_array()) fail("{}: 'single' must be an array", w);
    std::vector<int32_t> prefix, suffix;
    bool seen_sequence = false;
    for (const Json& item : single) {
      if (item.is_object() && item.contains("Sequence")) {
        if (seen_sequence) fail("{}: 'single' has more than one Sequence", w);
        seen_sequence = true;
      } else if (item.is_object() && item.contains("SpecialToken") && item["SpecialToken"].contains("id")) {
        std::string token = json_string(item["SpecialToken"], "id", "", w);
        if (!specials.is_object() || !specials.contains(token))
          fail("{}: special token '{}' of the template is not in special_tokens", w, token);
        const Json& ids = member(specials[token], "ids", path + ".special_tokens." + token);
        if (!ids.is_array()) fail("{}: special_tokens.{}.ids must be an array", w, token);
        for (const Json& id : ids) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
            fail("{}: special_tokens.{}.ids holds {}", w, token, id.dump());
          (seen_sequence ? suffix : prefix).push_back(static_cast<int32_t>(id.get<int64_t>()));
        }
      } else {
        fail("{}: template item {} is not understood", w, item.dump());
      }
    }
    if (!seen_sequence) fail("{}: 'single' has no Sequence", w);
    parts.special_prefix.insert(parts.special_prefix.end(), prefix.begin(), prefix.end());
    parts.special_suffix.insert(parts.special_suffix.begin(), suffix.begin(), suffix.end());
  } else {
    fail("{}: post-processor type '{}' is not supported", w, type);
  }
}

void TokenizerJsonReader::read_decoder(const Json& d, const std::string& path, TokenDecoder& out) {
  if (d.is_null()) return;
  std::string type = type_of(d, path);
  const std::string w = where(path);
  if (type == "Sequence") {
    const Json& list = member(d, "decoders", path);
    if (!list.is_array()) fail("{}: 'decoders' must be an array", w);
    for (size_t i = 0; i < list.size(); ++i) read_decoder(list[i], fmt::format("{}.decoders[{}]", path, i), out);
  } else if (type == "ByteLevel") {
    out.kind = TokenDecoder::Kind::ByteLevel;
  } else if (type == "WordPiece") {
    out.kind = TokenDecoder::Kind::WordPiece;
    out.marker = json_string(d, "prefix", "##", w);
  } else if (type == "Metaspace") {
    out.kind = TokenDecoder::Kind::Metaspace;
    out.marker = read_replacement(d, w);
    out.strip_leading_space = read_prepend_scheme(d, w) != PrependScheme::Never;
  } else if (type == "Replace") {
    // Llama 2 / Gemma: Replace("▁", " ") is how SentencePiece pieces become text.
    const Json& pattern = member(d, "pattern", path);
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string() ||
        pattern["String"].get<std::string>().empty() || json_string(d, "content", "", w) != " ")
      fail("{}: only Replace(<String>, \" \") is supported as a decoder, got {}", w, d.dump());
    out.kind = TokenDecoder::Kind::Metaspace;
    out.marker = pattern["String"].get<std::string>();
  } else if (type == "ByteFallback") {
    out.byte_fallback = true;
    if (out.kind == TokenDecoder::Kind::Plain) out.kind = TokenDecoder::Kind::Metaspace;
  } else if (type == "Fuse") {
    // Pieces are concatenated, which is what every kind but Plain does.
    if (out.kind == TokenDecoder::Kind::Plain) out.kind = TokenDecoder::Kind::Metaspace;
  } else if (type == "Strip") {
    std::string content = json_string(d, "content", " ", w);
    int64_t start = json_int(d, "start", 0, w), stop = json_int(d, "stop", 0, w);
    if (content != " " || start < 0 || start > 1 || stop != 0)
      fail("{}: only Strip(' ', start <= 1, stop 0) is supported, got {}", w, d.dump());
    out.strip_leading_space = start == 1;
  } else {
    fail("{}: decoder type '{}' is not supported", w, type);
  }
}

std::optional<int32_t> TokenizerJsonReader::special_token_id(const Json& value, const PipelineParts& parts) const {
  std::string content;
  if (value.is_string()) content = value.get<std::string>();
  else if (value.is_object() && value.contains("content") && value["content"].is_string())
    content = value["content"].get<std::string>();
  else return std::nullopt;
  for (const AddedToken& t : parts.added_tokens)
    if (t.content == content) return t.id;
  return parts.model->vocab().find(content);
}

PipelineParts TokenizerJsonReader::read(const Json& root, const Json* config) {
  if (!root.is_object()) fail("tokenizer '{}': the top level must be a JSON object", name_);
  if (!root.contains("model")) fail("tokenizer '{}': no 'model' (is this a tokenizer.json?)", name_);
  PipelineParts parts;
  parts.name = name_;
  parts.model = read_model(root["model"]);

  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    const Json& added = root["added_tokens"];
    if (!added.is_array()) fail("{} must be an array", where("added_tokens"));
    for (size_t i = 0; i < added.size(); ++i) {
      std::string w = where(fmt::format("added_tokens[{}]", i));
      int64_t id = json_int(added[i], "id", -1, w);
      if (id < 0 || id > INT32_MAX) fail("{}: id {} is out of range", w, id);
      AddedToken t;
      t.id = static_cast<int32_t>(id);
      t.content = json_string(added[i], "content", "", w);
      t.special = json_bool(added[i], "special", false, w);
      t.lstrip = json_bool(added[i], "lstrip", false, w);
      t.rstrip = json_bool(added[i], "rstrip", false, w);
      if (t.content.empty()) fail("{}: empty content", w);
      parts.added_tokens.push_back(std::move(t));
    }
  }
  read_normalizer(root.value("normalizer", Json()), "normalizer", parts.normalizers);
  read_pre_tokenizer(root.value("pre_tokenizer", Json()), "pre_tokenizer", parts.pre_tokenizers);
  read_post_processor(root.value("post_processor", Json()), "post_processor", parts);
  read_decoder(root.value("decoder", Json()), "decoder", parts.decoder);

  parts.kind = model_type_ == "WordPiece" ? "wordpiece"
               : model_type_ == "Unigram" ? "unigram"
               : byte_level_              ? "gpt2-bpe"
                                          : "sp-bpe";

  // BOS / EOS: tokenizer_config.json when it names them, else what the post-processor adds, else the usual names.
  if (config) {
    if (config->contains("bos_token")) parts.bos = special_token_id((*config)["bos_token"], parts);
    if (config->contains("eos_token")) parts.eos = special_token_id((*config)["eos_token"], parts);
  }
  if (!parts.bos && !parts.special_prefix.empty()) parts.bos = parts.special_prefix.front();
  if (!parts.eos && !parts.special_suffix.empty()) parts.eos = parts.special_suffix.back();
  for (const char* name : {"<s>", "<|begin_of_text|>", "<bos>", "<|endoftext|>"})
    if (!parts.bos) parts.bos = special_token_id(name, parts);
  for (const char* name : {"</s>", "<|end_of_text|>", "<eos>", "<|endoftext|>"})
    if (!parts.eos) parts.eos = special_token_id(name, parts);
  return parts;
}

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_json(const Json& root, const std::string& name, const Json* config) {
  return std::make_unique<PipelineTokenizer>(TokenizerJsonReader(name).read(root, config));
}

std::pair<std::vector<int32_t>, std::vector<int32_t>> tokenizer_json_special_template(const Json& root,
                                                                                      const std::string& name) {
  if (!root.is_object()) fail("tokenizer '{}': the top level must be a JSON object", name);
  PipelineParts parts;
  TokenizerJsonReader(name).read_post_processor(root.value("post_processor", Json()), "post_processor", parts);
  return {std::move(parts.special_prefix), std::move(parts.special_suffix)};
}

std::unique_ptr<Tokenizer> load_tokenizer_json(const fs::path& path) {
  Json root = read_json_file(path);
  fs::path config_file = path.parent_path() / "tokenizer_config.json";
  std::optional<Json> config;
  if (fs::exists(config_file)) config = read_json_file(config_file);
  return tokenizer_from_json(root, path.string(), config ? &*config : nullptr);
}

}  // namespace tdyn
