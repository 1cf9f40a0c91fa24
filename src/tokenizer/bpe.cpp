#include "tokenizer/bpe.h"

#include <queue>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/json_files.h"
#include "tokenizer/stages.h"
#include "tokenizer/unicode.h"

namespace tdyn {

BpeModel::BpeModel(Vocabulary vocab, const MergeList& merges, BpeOptions options, const std::string& name)
    : SubwordModel(std::move(vocab)), name_(name), options_(std::move(options)) {
  if (merges.size() > INT32_MAX) fail("tokenizer '{}': too many merges", name);
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto left_id = vocab_.find(left), right_id = vocab_.find(right), merged_id = vocab_.find(left + right);
    if (!left_id || !right_id || !merged_id)
      fail("tokenizer '{}': merge {} ('{}' '{}') uses a piece that is not in the vocabulary ('{}')", name, rank, left,
           right, !left_id ? left : !right_id ? right : left + right);
    // A repeated merge keeps its first (highest-priority) rank.
    merges_.emplace(pair_key(*left_id, *right_id), Merge{static_cast<int32_t>(rank), *merged_id});
  }
  if (options_.unk_token) {
    unk_id_ = vocab_.find(*options_.unk_token);
    if (!unk_id_) fail("tokenizer '{}': unk token '{}' is not in the vocabulary", name, *options_.unk_token);
  }
  for (int b = 0; b < 256; ++b) byte_piece_ids_[b] = vocab_.find(fmt::format("<0x{:02X}>", b)).value_or(-1);
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (options_.ignore_merges) {
    if (auto id = vocab_.find(word)) {
      ids.push_back(*id);
      return;
    }
  }

  // The initial symbols: one per character, or its byte pieces, or unk.
  std::vector<int32_t> symbol_ids;
  bool previous_was_unk = false;
  for (const auto& cp : unicode::decode_utf8(word, "BPE input")) {
    std::string_view character = word.substr(cp.offset, cp.length);
    if (auto id = vocab_.find(character)) {
      symbol_ids.push_back(*id);
      previous_was_unk = false;
      continue;
    }
    if (options_.byte_fallback) {
      bool all_bytes_known = true;
      for (unsigned char b : character) all_bytes_known = all_bytes_known && byte_piece_ids_[b] >= 0;
      if (all_bytes_known) {
        for (unsigned char b : character) symbol_ids.push_back(byte_piece_ids_[b]);
        previous_was_unk = false;
        continue;
      }
    }
    if (!unk_id_)
      fail("tokenizer '{}': character U+{:04X} is not in the vocabulary and there is no unk token{}", name_,
           static_cast<uint32_t>(cp.value), options_.byte_fallback ? " or byte piece for it" : "");
    if (!(options_.fuse_unk && previous_was_unk)) symbol_ids.push_back(*unk_id_);
    previous_was_unk = true;
  }

  // Symbols form a linked list; candidate merges wait in a heap ordered by (rank, position). A heap entry is
  // stale once either of its symbols has changed, which is checked when it is popped.
  const int n = static_cast<int>(symbol_ids.size());
  std::vector<int> next(n), prev(n);
  for (int i = 0; i < n; ++i) next[i] = i + 1 < n ? i + 1 : -1, prev[i] = i - 1;
  struct Candidate {
    int32_t rank;
    int position;
    int32_t left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : position > o.position; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> candidates;
  auto consider = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    int32_t a = symbol_ids[left], b = symbol_ids[next[left]];
    if (auto it = merges_.find(pair_key(a, b)); it != merges_.end()) candidates.push({it->second.rank, left, a, b});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  std::vector<bool> alive(n, true);
  while (!candidates.empty()) {
    Candidate c = candidates.top();
    candidates.pop();
    int right = next[c.position];
    if (!alive[c.position] || symbol_ids[c.position] != c.left_id || right < 0 || symbol_ids[right] != c.right_id)
      continue;
    symbol_ids[c.position] = merges_.at(pair_key(c.left_id, c.right_id)).merged_id;
    alive[right] = false;
    next[c.position] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.position;
    consider(prev[c.position]);
    consider(c.position);
  }
  for (int i = 0; i >= 0 && n > 0; i = next[i]) ids.push_back(symbol_ids[i]);
}

std::optional<std::pair<std::string, std::string>> split_merge(std::string_view line) {
  size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string_view::npos)
    return std::nullopt;
  return std::pair<std::string, std::string>(line.substr(0, space), line.substr(space + 1));
}

MergeList parse_merges_text(std::string_view text, const std::string& name) {
  if (auto bad = unicode::find_invalid_utf8(text)) fail("merges file '{}': not valid UTF-8 (byte {})", name, *bad);
  MergeList merges;
  size_t line_number = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;
    auto merge = split_merge(line);
    if (!merge)
      fail("merges file '{}', line {}: expected two pieces separated by one space, got '{}'", name, line_number, line);
    merges.push_back(std::move(*merge));
  }
  return merges;
}

std::unique_ptr<Tokenizer> load_gpt2_bpe(const fs::path& vocab_file, const fs::path& merges_file) {
  Json vocab_json = read_json_file(vocab_file);
  return gpt2_bpe_tokenizer(vocab_json, vocab_file.string(), read_file(merges_file), merges_file.string());
}

std::unique_ptr<Tokenizer> gpt2_bpe_tokenizer(const Json& vocab_json, const std::string& vocab_name,
                                              std::string_view merges_text, const std::string& merges_name) {
  std::string name = fmt::format("{} + {}", vocab_name, merges_name);
  Vocabulary vocab = vocabulary_from_json_object(vocab_json, vocab_name);
  MergeList merges = parse_merges_text(merges_text, merges_name);

  PipelineParts parts;
  parts.kind = "gpt2-bpe";
  parts.name = name;
  if (auto end_of_text = vocab.find("<|endoftext|>")) {
    parts.added_tokens.push_back({"<|endoftext|>", *end_of_text, true, false, false});
    parts.bos = parts.eos = *end_of_text;
  }
  parts.model = std::make_unique<BpeModel>(std::move(vocab), merges, BpeOptions{}, name);
  parts.pre_tokenizers.push_back(make_byte_level_pre_tokenizer(false, true));
  parts.decoder.kind = TokenDecoder::Kind::ByteLevel;
  return std::make_unique<PipelineTokenizer>(std::move(parts));
}

}  // namespace tdyn
