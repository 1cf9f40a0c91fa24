#include "tokenizer/unigram.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tdyn {

namespace {
constexpr double kUnknownPenalty = 10.0;  // SentencePiece's kUnkPenalty
}

UnigramModel::UnigramModel(Vocabulary vocab, std::vector<double> scores, std::optional<int32_t> unk_id,
                           bool byte_fallback, const std::string& name)
    : SubwordModel(std::move(vocab)), name_(name), scores_(std::move(scores)), unk_id_(unk_id),
      byte_fallback_(byte_fallback) {
  TDYN_CHECK(static_cast<int64_t>(scores_.size()) == vocab_.size());
  if (unk_id_ && !vocab_.piece(*unk_id_))
    fail("tokenizer '{}': unk_id {} is outside the {}-piece vocabulary", name, *unk_id_, vocab_.size());
  double min_score = std::numeric_limits<double>::max();
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    if (const std::string* piece = vocab_.piece(id)) {
      min_score = std::min(min_score, scores_[id]);
      max_piece_bytes_ = std::max(max_piece_bytes_, piece->size());
    }
  }
  unk_score_ = min_score - kUnknownPenalty;
  for (int b = 0; b < 256; ++b) byte_piece_ids_[b] = vocab_.find(fmt::format("<0x{:02X}>", b)).value_or(-1);
}

void UnigramModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  std::vector<unicode::CodePoint> chars = unicode::decode_utf8(word, "Unigram input");
  // best[k]: the best segmentation of the first k characters ends with the piece chars[start[k] .. k).
  struct Node {
    double score = 0;
    size_t start = 0;
    int32_t id = -1;  // -1: an unknown character
    bool reached = false;
  };
  const size_t n = chars.size();
  std::vector<Node> best(n + 1);
  best[0].reached = true;
  auto byte_end = [&](size_t k) { return k == n ? word.size() : chars[k].offset; };
  for (size_t start = 0; start < n; ++start) {
    TDYN_CHECK(best[start].reached);
    bool single_character_piece = false;
    for (size_t end = start + 1; end <= n && byte_end(end) - chars[start].offset <= max_piece_bytes_; ++end) {
      auto id = vocab_.find(word.substr(chars[start].offset, byte_end(end) - chars[start].offset));
      if (!id) continue;
      double score = best[start].score + scores_[*id];
      if (!best[end].reached || score > best[end].score) best[end] = {score, start, *id, true};
      if (end == start + 1) single_character_piece = true;
    }
    if (!single_character_piece) {
      double score = best[start].score + unk_score_;
      if (!best[start + 1].reached || score > best[start + 1].score) best[start + 1] = {score, start, -1, true};
    }
  }

  struct Piece {
    size_t start, end;
    int32_t id;
  };
  std::vector<Piece> path;
  for (size_t end = n; end > 0; end = best[end].start) path.push_back({best[end].start, end, best[end].id});
  std::reverse(path.begin(), path.end());

  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i].id >= 0) {
      ids.push_back(path[i].id);
      continue;
    }
    // A run of unknown characters: one unk, or the bytes of all of them.
    size_t run_end = i;
    while (run_end + 1 < path.size() && path[run_end + 1].id < 0) ++run_end;
    std::string_view text = word.substr(chars[path[i].start].offset, byte_end(path[run_end].end) - chars[path[i].start].offset);
    bool bytes_known = byte_fallback_;
    for (unsigned char b : text) bytes_known = bytes_known && byte_piece_ids_[b] >= 0;
    if (bytes_known) {
      for (unsigned char b : text) ids.push_back(byte_piece_ids_[b]);
    } else if (unk_id_) {
      ids.push_back(*unk_id_);
    } else {
      fail("tokenizer '{}': '{}' is not covered by any piece and the model has no unk_id", name_, text);
    }
    i = run_end;
  }
}

}  // namespace tdyn
