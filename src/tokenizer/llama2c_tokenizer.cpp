#include "tokenizer/llama2c_tokenizer.h"

#include <cstring>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tdyn {

namespace {

// run.c handles pieces as C strings: everything from the first NUL on is invisible to it.
std::string_view as_c_string(std::string_view s) { return s.substr(0, s.find('\0')); }

bool c_isprint(unsigned char c) { return c >= 0x20 && c <= 0x7E; }
bool c_isspace(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// sscanf(piece, "<0x%02hhX>", &byte) == 1: "<0x" followed by one or two hex digits (the closing '>' is not
// checked by sscanf's return value either).
std::optional<unsigned char> byte_piece_value(std::string_view piece) {
  if (piece.substr(0, 3) != "<0x" || piece.size() < 4 || hex_digit(piece[3]) < 0) return std::nullopt;
  int value = hex_digit(piece[3]);
  if (piece.size() > 4 && hex_digit(piece[4]) >= 0) value = value * 16 + hex_digit(piece[4]);
  return static_cast<unsigned char>(value);
}

}  // namespace

std::unique_ptr<Llama2cTokenizer> Llama2cTokenizer::load(const fs::path& path) {
  return parse(read_file(path), path.string());
}

std::unique_ptr<Llama2cTokenizer> Llama2cTokenizer::parse(std::string_view bytes, const std::string& name) {
  auto read_i32 = [&](size_t offset) {
    int32_t v;
    std::memcpy(&v, bytes.data() + offset, 4);
    return v;
  };
  if (bytes.size() < 4) fail("llama2.c tokenizer '{}': file too short ({} bytes) for the 4-byte header", name, bytes.size());
  int32_t max_token_length = read_i32(0);
  if (max_token_length <= 0 || static_cast<size_t>(max_token_length) > bytes.size())
    fail("llama2.c tokenizer '{}': invalid max_token_length {} (file is {} bytes)", name, max_token_length, bytes.size());

  std::unique_ptr<Llama2cTokenizer> tok(new Llama2cTokenizer());
  tok->name_ = name;
  size_t offset = 4;
  while (offset < bytes.size()) {
    size_t id = tok->pieces_.size();
    if (bytes.size() - offset < 8)
      fail("llama2.c tokenizer '{}': truncated entry for token {} at byte {} (need 8 bytes for score and length, {} left)",
           name, id, offset, bytes.size() - offset);
    float score;
    std::memcpy(&score, bytes.data() + offset, 4);
    int32_t length = read_i32(offset + 4);
    offset += 8;
    if (length < 0 || length > max_token_length)
      fail("llama2.c tokenizer '{}': token {} has length {} (expected 0..max_token_length={})", name, id, length,
           max_token_length);
    if (static_cast<size_t>(length) > bytes.size() - offset)
      fail("llama2.c tokenizer '{}': token {} has length {} but only {} bytes remain", name, id, length,
           bytes.size() - offset);
    tok->pieces_.emplace_back(bytes.substr(offset, length));
    tok->scores_.push_back(score);
    offset += length;
  }
  if (tok->pieces_.size() <= kEos) fail("llama2.c tokenizer '{}': only {} tokens (needs at least <unk>, BOS, EOS)", name, tok->pieces_.size());
  if (tok->pieces_.size() > INT32_MAX) fail("llama2.c tokenizer '{}': too many tokens", name);
  for (size_t id = 0; id < tok->pieces_.size(); ++id)
    tok->id_of_.emplace(std::string(as_c_string(tok->pieces_[id])), static_cast<int32_t>(id));
  return tok;
}

int32_t Llama2cTokenizer::lookup(std::string_view piece) const {
  auto it = id_of_.find(std::string(piece));
  return it == id_of_.end() ? -1 : it->second;
}

const std::string& Llama2cTokenizer::checked_piece(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size())
    fail("llama2.c tokenizer '{}': token id {} out of range [0, {})", name_, id, pieces_.size());
  return pieces_[id];
}

std::string Llama2cTokenizer::piece(int32_t id) const { return checked_piece(id); }

float Llama2cTokenizer::score(int32_t id) const {
  checked_piece(id);
  return scores_[id];
}

std::vector<int32_t> Llama2cTokenizer::encode_utf8(std::string_view text, bool add_special) const {
  // run.c reads the prompt as a C string: a NUL would end the text there, unseen.
  if (auto why = unicode::why_not_utf8_text(text, /*allow_nul=*/false))
    fail("llama2.c tokenizer '{}': input text is {} (run.c stops reading at a NUL)", name_, *why);
  std::vector<int32_t> tokens;
  if (add_special) tokens.push_back(kBos);
  if (!text.empty()) {
    // SentencePiece's add_dummy_prefix: the text is encoded as if it started with a space.
    int32_t dummy_prefix = lookup(" ");
    if (dummy_prefix < 0) fail("llama2.c tokenizer '{}': has no \" \" piece for the dummy prefix", name_);
    tokens.push_back(dummy_prefix);
  }

  // One token per UTF-8 code point when the code point is a piece, else one per byte (id = byte + 3). Like
  // run.c, a lead byte starts a new sequence and at most 4 bytes are grouped.
  auto is_continuation = [](char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; };
  std::string code_point;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!is_continuation(text[i])) code_point.clear();
    code_point += text[i];
    if (i + 1 < text.size() && is_continuation(text[i + 1]) && code_point.size() < 4) continue;
    int32_t id = lookup(code_point);
    if (id >= 0) {
      tokens.push_back(id);
    } else {
      for (unsigned char byte : code_point) {
        int32_t byte_id = kFirstByteId + byte;
        if (static_cast<size_t>(byte_id) >= pieces_.size())
          fail("llama2.c tokenizer '{}': byte fallback id {} for byte 0x{:02X} is outside the {}-token vocabulary",
               name_, byte_id, byte, pieces_.size());
        tokens.push_back(byte_id);
      }
    }
    code_point.clear();
  }

  // Merge the adjacent pair whose concatenation is the highest-scoring piece (leftmost on ties), until none is.
  // run.c starts from best_score = -1e10 and includes the BOS in the scan; both are kept for exactness.
  std::string pair;
  while (true) {
    float best_score = -1e10f;
    int32_t best_id = -1;
    size_t best_index = 0;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      pair.assign(as_c_string(pieces_[tokens[i]]));
      pair.append(as_c_string(pieces_[tokens[i + 1]]));
      int32_t id = lookup(pair);
      if (id >= 0 && scores_[id] > best_score) {
        best_score = scores_[id];
        best_id = id;
        best_index = i;
      }
    }
    if (best_id < 0) break;
    tokens[best_index] = best_id;
    tokens.erase(tokens.begin() + static_cast<ptrdiff_t>(best_index) + 1);
  }
  return tokens;
}

std::string Llama2cTokenizer::decode_step(int32_t prev, int32_t id) const {
  std::string_view piece = as_c_string(checked_piece(id));
  if (prev < 0 && id == kBos) return {};
  // After BOS, SentencePiece strips the dummy-prefix space.
  if (prev == kBos && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
  std::string text;
  if (auto byte = byte_piece_value(piece)) {
    text.assign(1, static_cast<char>(*byte));
  } else {
    text.assign(piece);
  }
  // safe_printf: nothing for an empty piece or a lone byte that is neither printable nor whitespace (C locale).
  text = std::string(as_c_string(text));
  if (text.empty()) return {};
  if (text.size() == 1) {
    auto c = static_cast<unsigned char>(text[0]);
    if (!c_isprint(c) && !c_isspace(c)) return {};
  }
  return text;
}

}  // namespace tdyn
