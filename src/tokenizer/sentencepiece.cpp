#include "tokenizer/sentencepiece.h"

#include <charconv>
#include <cstring>
#include <algorithm>
#include <optional>

#include <sentencepiece_processor.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/json_files.h"
#include "tokenizer/pretokenize.h"

namespace tdyn {

namespace {

const char* const kSpaceSymbol = "\xE2\x96\x81";  // "▁"

// --- protobuf wire format (just enough for ModelProto) ---

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

struct Field {
  uint32_t number = 0;
  WireType type = kVarint;
  uint64_t varint = 0;      // kVarint, kFixed64, kFixed32
  std::string_view bytes;   // kBytes
};

// Reads the fields of one message in order; throws Error naming `what` on anything malformed.
class WireReader {
 public:
  WireReader(std::string_view data, std::string what) : data_(data), what_(std::move(what)) {}
  bool next(Field& f) {
    if (pos_ == data_.size()) return false;
    const uint64_t key = varint();
    f.number = static_cast<uint32_t>(key >> 3);
    if (f.number == 0 || key >> 3 > (1u << 29)) fail("{}: bad field number at byte {}", what_, pos_);
    f.type = static_cast<WireType>(key & 7);
    switch (f.type) {
      case kVarint: f.varint = varint(); break;
      case kFixed64: f.varint = fixed(8); break;
      case kFixed32: f.varint = fixed(4); break;
      case kBytes: {
        const uint64_t n = varint();
        if (n > data_.size() - pos_) fail("{}: field {} claims {} bytes, {} are left", what_, f.number, n, data_.size() - pos_);
        f.bytes = data_.substr(pos_, n);
        pos_ += n;
        break;
      }
      default: fail("{}: field {} has wire type {}, which a ModelProto never uses", what_, f.number, key & 7);
    }
    return true;
  }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ == data_.size()) fail("{}: truncated (a number runs past the end)", what_);
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("{}: a number is longer than 10 bytes", what_);
  }
  uint64_t fixed(size_t n) {
    if (data_.size() - pos_ < n) fail("{}: truncated (a fixed-size number runs past the end)", what_);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    pos_ += n;
    return v;
  }

  std::string_view data_;
  std::string what_;
  size_t pos_ = 0;
};

// The payload of a string / bytes / message field.
std::string_view bytes_of(const Field& f, const std::string& what) {
  if (f.type != kBytes) fail("{}: field {} should be a string or message", what, f.number);
  return f.bytes;
}

// A NormalizerSpec; its charsmap is checked. `info` is null for the denormalizer, of which only that matters.
void read_normalizer_spec(std::string_view data, const std::string& what, SentencePieceModelInfo* info) {
  WireReader r(data, what);
  for (Field f; r.next(f);) {
    if (f.number == 2) {
      const std::string_view charsmap = bytes_of(f, what);
      check_precompiled_charsmap(charsmap, what + " precompiled_charsmap");
      if (info) info->precompiled_charsmap = std::string(charsmap);
    }
    if (!info || f.type != kVarint) continue;
    if (f.number == 3) info->add_dummy_prefix = f.varint != 0;
    if (f.number == 4) info->remove_extra_whitespaces = f.varint != 0;
    if (f.number == 5) info->escape_whitespaces = f.varint != 0;
  }
}

void put_varint(std::string& out, uint64_t v) {
  do {
    uint8_t b = v & 0x7F;
    v >>= 7;
    out += static_cast<char>(v ? b | 0x80 : b);
  } while (v);
}
void put_key(std::string& out, uint32_t number, WireType type) { put_varint(out, (uint64_t{number} << 3) | type); }
void put_bytes(std::string& out, uint32_t number, std::string_view bytes) {
  put_key(out, number, kBytes);
  put_varint(out, bytes.size());
  out += bytes;
}
void put_int(std::string& out, uint32_t number, int64_t v) {
  put_key(out, number, kVarint);
  put_varint(out, static_cast<uint64_t>(v));  // negative int32: ten bytes of two's complement, as protobuf does
}

// A ModelProto whose only job is normalization: one <unk> piece, the CHAR model (so each normalized character comes
// back as its own piece, known or not), and a NormalizerSpec with `charsmap` and every other step off.
std::string charsmap_only_model(const std::string& charsmap) {
  std::string piece, trainer, normalizer, model;
  put_bytes(piece, 1, "<unk>");
  put_int(piece, 3, 2);  // UNKNOWN
  put_int(trainer, 3, 4);  // CHAR
  put_int(trainer, 40, 0);  // unk_id
  put_int(trainer, 41, -1);  // no bos / eos / pad
  put_int(trainer, 42, -1);
  put_int(trainer, 43, -1);
  put_bytes(normalizer, 1, "precompiled");
  put_bytes(normalizer, 2, charsmap);
  put_int(normalizer, 3, 0);  // add_dummy_prefix
  put_int(normalizer, 4, 0);  // remove_extra_whitespaces
  put_int(normalizer, 5, 0);  // escape_whitespaces
  put_bytes(model, 1, piece);
  put_bytes(model, 2, trainer);
  put_bytes(model, 3, normalizer);
  return model;
}

std::unique_ptr<sentencepiece::SentencePieceProcessor> load_processor(std::string_view model_proto, const std::string& name) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->LoadFromSerializedProto(model_proto);
  if (!status.ok()) fail("SentencePiece model '{}': {}", name, status.ToString());
  return sp;
}

std::optional<int32_t> special_id(const Json& config, const char* key, const sentencepiece::SentencePieceProcessor& sp) {
  if (!config.contains(key)) return std::nullopt;
  const Json& v = config[key];
  std::string content = v.is_string() ? v.get<std::string>()
                        : v.is_object() && v.contains("content") && v["content"].is_string() ? v["content"].get<std::string>()
                                                                                              : "";
  if (content.empty()) return std::nullopt;
  const int id = sp.PieceToId(content);
  if (id == sp.unk_id() && content != sp.IdToPiece(sp.unk_id())) return std::nullopt;
  return id;
}

}  // namespace

SentencePieceModelInfo read_sentencepiece_model_info(std::string_view model_proto, const std::string& name) {
  SentencePieceModelInfo info;
  const std::string what = fmt::format("SentencePiece model '{}'", name);
  WireReader r(model_proto, what);
  int64_t pieces = 0;
  for (Field f; r.next(f);) {
    if (f.number == 1) {
      bytes_of(f, what);
      ++pieces;
    } else if (f.number == 2) {
      WireReader t(bytes_of(f, what), what + " trainer_spec");
      for (Field g; t.next(g);) {
        if (g.number == 3 && g.type == kVarint) {
          if (g.varint < 1 || g.varint > 4)
            fail("{}: model_type {} is not unigram (1), bpe (2), word (3) or char (4)", what, g.varint);
          info.model_type = static_cast<int>(g.varint);
        }
        if (g.number == 44) info.unk_surface = std::string(bytes_of(g, what + " trainer_spec"));
      }
    } else if (f.number == 3) {
      read_normalizer_spec(bytes_of(f, what), what + " normalizer_spec", &info);
    } else if (f.number == 5) {
      read_normalizer_spec(bytes_of(f, what), what + " denormalizer_spec", nullptr);
    }
  }
  if (pieces == 0) fail("{}: no pieces (is this a SentencePiece .model file?)", what);
  return info;
}

void check_precompiled_charsmap(std::string_view charsmap, const std::string& name) {
  if (charsmap.empty()) return;  // no normalization
  if (charsmap.size() < 4) fail("{}: {} bytes, too short for the trie size", name, charsmap.size());
  uint32_t trie_bytes = 0;
  for (int i = 0; i < 4; ++i) trie_bytes |= static_cast<uint32_t>(static_cast<uint8_t>(charsmap[i])) << (8 * i);
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes > charsmap.size() - 4)
    fail("{}: trie of {} bytes in a {}-byte charsmap (expected a positive multiple of 4 that fits)", name, trie_bytes,
         charsmap.size());
  const size_t n_units = trie_bytes / 4;
  std::vector<uint32_t> unit(n_units);
  std::memcpy(unit.data(), charsmap.data() + 4, trie_bytes);  // little-endian, as the library reads it
  const std::string_view normalized = charsmap.substr(4 + trie_bytes);
  if (normalized.empty() || normalized.back() != '\0')
    fail("{}: the normalized strings do not end with a NUL byte", name);
  // Darts-clone's unit layout and the library's walk (commonPrefixSearch): from a node p, the children sit at
  // p ^ offset(p) ^ byte, one matches when its label is that byte, and a node with has_leaf keeps its value at
  // p ^ offset(p). Every unit the walk can read must exist and every value index a normalized string. Darts-clone
  // shares common suffixes (a DAG, not a tree), but a cycle would let one key match without end, and the library
  // keeps at most 32 matches per position without checking, so no path may pass more leaves than that.
  auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
  auto has_leaf = [](uint32_t u) { return ((u >> 8) & 1) == 1; };
  auto label = [](uint32_t u) { return u & ((1u << 31) | 0xFF); };
  constexpr int kMaxMatches = 32;
  // Depth-first, without recursion (a corrupt trie can be deep): state 0 unseen, 1 on the path, 2 done; leaves[p]
  // is the most leaves on a path that starts at p (capped above kMaxMatches).
  std::vector<uint8_t> state(n_units, 0), leaves(n_units, 0);
  std::vector<std::pair<size_t, uint32_t>> path;  // (node, next byte to try)
  auto enter = [&](size_t p) {
    const size_t base = p ^ offset(unit[p]);
    if ((base | 0xFF) >= n_units) fail("{}: trie unit {} points past the {} units", name, p, n_units);
    if (p != 0 && has_leaf(unit[p]) && (unit[base] & 0x7FFFFFFFu) >= normalized.size())
      fail("{}: trie value {} is past the {} bytes of normalized strings", name, unit[base] & 0x7FFFFFFFu,
           normalized.size());
    state[p] = 1;
    path.emplace_back(p, 0);
  };
  enter(0);
  while (!path.empty()) {
    auto& [p, next] = path.back();
    const size_t base = p ^ offset(unit[p]);
    if (next < 256) {
      const size_t child = base ^ next;
      const bool is_child = label(unit[child]) == next;
      ++next;
      if (!is_child) continue;
      if (state[child] == 1) fail("{}: the trie has a cycle through unit {}", name, child);
      if (state[child] == 0) enter(child);
      continue;
    }
    // Every child is done: the most leaves below, plus this node's own.
    int most = 0;
    for (uint32_t b = 0; b < 256; ++b)
      if (label(unit[base ^ b]) == b) most = std::max<int>(most, leaves[base ^ b]);
    const int own = p != 0 && has_leaf(unit[p]);
    leaves[p] = static_cast<uint8_t>(std::min(most + own, kMaxMatches + 1));
    state[p] = 2;
    path.pop_back();
  }
  if (leaves[0] > kMaxMatches) fail("{}: more than {} rules match along one key", name, kMaxMatches);
}

TextNormalizer make_precompiled_normalizer(const std::string& charsmap, const std::string& name) {
  check_precompiled_charsmap(charsmap, name);
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp = load_processor(charsmap_only_model(charsmap), name);
  return [sp, name](std::string_view text) {
    // The pieces of the CHAR model are the normalized text cut into characters (unknown ones keep their text).
    std::vector<std::string> pieces;
    const auto status = sp->Encode(text, &pieces);
    if (!status.ok()) fail("{}: Precompiled normalizer: {}", name, status.ToString());
    std::string out;
    for (const std::string& p : pieces) out += p;
    return out;
  };
}

SentencePieceTokenizer::SentencePieceTokenizer(std::string_view bytes, const std::string& name)
    : name_(name), info_(read_sentencepiece_model_info(bytes, name)), sp_(load_processor(bytes, name)) {
  if (sp_->bos_id() >= 0) special_prefix_.push_back(sp_->bos_id());
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::load(const fs::path& path) {
  auto tok = std::make_unique<SentencePieceTokenizer>(read_file(path), path.string());
  const fs::path dir = path.parent_path();
  std::error_code ec;
  if (fs::is_regular_file(dir / "tokenizer.json", ec)) {
    const Json root = read_json_file(dir / "tokenizer.json");
    auto [prefix, suffix] = tokenizer_json_special_template(root, (dir / "tokenizer.json").string());
    for (int32_t id : prefix) tok->check_id(id);
    for (int32_t id : suffix) tok->check_id(id);
    tok->set_special_tokens(std::move(prefix), std::move(suffix));
  } else if (fs::is_regular_file(dir / "tokenizer_config.json", ec)) {
    const Json config = read_json_file(dir / "tokenizer_config.json");
    const std::string w = (dir / "tokenizer_config.json").string();
    std::vector<int32_t> prefix, suffix;
    std::optional<int32_t> bos = special_id(config, "bos_token", *tok->sp_), eos = special_id(config, "eos_token", *tok->sp_);
    if (!bos) bos = tok->bos_id();
    if (!eos) eos = tok->eos_id();
    if (json_bool(config, "add_bos_token", true, w) && bos) prefix.push_back(*bos);
    if (json_bool(config, "add_eos_token", false, w) && eos) suffix.push_back(*eos);
    tok->set_special_tokens(std::move(prefix), std::move(suffix));
  }
  return tok;
}

void SentencePieceTokenizer::set_special_tokens(std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
  special_prefix_ = std::move(prefix);
  special_suffix_ = std::move(suffix);
}

std::string SentencePieceTokenizer::kind() const {
  static const char* const kinds[] = {"", "sentencepiece-unigram", "sentencepiece-bpe", "sentencepiece-word",
                                      "sentencepiece-char"};
  return kinds[info_.model_type];
}

int64_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

std::vector<int32_t> SentencePieceTokenizer::encode_utf8(std::string_view text, bool add_special) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) fail("SentencePiece model '{}': cannot encode the text: {}", name_, status.ToString());
  if (!add_special) return std::vector<int32_t>(ids.begin(), ids.end());
  std::vector<int32_t> out(special_prefix_);
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), special_suffix_.begin(), special_suffix_.end());
  return out;
}

void SentencePieceTokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= sp_->GetPieceSize())
    fail("token id {} is outside the {}-piece vocabulary of '{}'", id, sp_->GetPieceSize(), name_);
}

std::string SentencePieceTokenizer::decode_step(int32_t prev, int32_t id) const {
  check_id(id);
  if (sp_->IsControl(id)) return "";
  if (sp_->IsUnknown(id)) return info_.unk_surface;
  std::string p = sp_->IdToPiece(id);
  if (sp_->IsByte(id)) {
    unsigned byte = 0;
    const auto [end, ec] = std::from_chars(p.data() + std::min<size_t>(3, p.size()), p.data() + p.size(), byte, 16);
    if (p.size() != 6 || !p.starts_with("<0x") || ec != std::errc() || end != p.data() + 5 || p[5] != '>' || byte > 255)
      fail("SentencePiece model '{}': byte piece {} is '{}', not <0xXX>", name_, id, p);
    return std::string(1, static_cast<char>(byte));
  }
  const bool at_start = prev < 0 || (prev < sp_->GetPieceSize() && sp_->IsControl(prev));
  if (at_start && p.starts_with(kSpaceSymbol)) p.erase(0, std::strlen(kSpaceSymbol));
  return replace_all(p, kSpaceSymbol, " ");
}

std::optional<int32_t> SentencePieceTokenizer::bos_id() const {
  if (sp_->bos_id() < 0) return std::nullopt;
  return sp_->bos_id();
}

std::optional<int32_t> SentencePieceTokenizer::eos_id() const {
  if (sp_->eos_id() < 0) return std::nullopt;
  return sp_->eos_id();
}

std::string SentencePieceTokenizer::piece(int32_t id) const {
  check_id(id);
  return sp_->IdToPiece(id);
}

}  // namespace tdyn
