#include "analysis/samples.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <numeric>
#include <random>

#include <dlfcn.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/npy.h"
#include "tokenizer/unicode.h"

namespace tdyn {

nlohmann::json SampleOptions::to_json() const {
  // One sample given as ids is recorded as one list, as --ids takes it; several as a list of lists.
  const nlohmann::json given = ids.size() == 1 ? nlohmann::json(ids.front()) : nlohmann::json(ids);
  return {{"data", data}, {"prompt", prompt}, {"ids", given}, {"samples", samples}, {"max_len", max_len},
          {"min_len", min_len}, {"seed", seed}, {"add_special", add_special}};
}

std::vector<std::string> split_passages(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string line(text.substr(start, end - start));
    start = end + 1;
    line.erase(std::remove(line.begin(), line.end(), '\r'), line.end());
    size_t b = line.find_first_not_of(" \t"), e = line.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    line = line.substr(b, e - b + 1);
    if (line.size() >= 2 && line.front() == '=' && line.back() == '=') continue;  // " = Heading = "
    out.push_back(std::move(line));
  }
  return out;
}

namespace {

std::vector<int32_t> parse_ids(std::string_view line, const std::string& origin) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ',' || line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    if (i >= line.size()) break;
    int32_t v = 0;
    auto [ptr, ec] = std::from_chars(line.data() + i, line.data() + line.size(), v);
    if (ec != std::errc()) fail("{}: expected token ids, found '{}'", origin, line.substr(i, 20));
    ids.push_back(v);
    i = ptr - line.data();
  }
  return ids;
}

}  // namespace

std::vector<Sample> load_samples_for_model(const SampleOptions& options, const fs::path& model_path, int64_t d_vocab,
                                           const std::string& tokenizer_path) {
  const std::string extension = fs::path(options.data).extension().string();
  const bool text = options.ids.empty() && extension != ".npy" && extension != ".ids";
  std::unique_ptr<Tokenizer> tok;
  if (!tokenizer_path.empty()) tok = load_tokenizer(tokenizer_path);
  else if (text) tok = load_tokenizer_for_model(model_path);
  return load_samples(options, tok.get(), d_vocab);
}

std::vector<fs::path> default_corpus_places() {
  const fs::path file = fs::path("wikitext-2") / "wiki.test.raw";
  if (const char* env = std::getenv("TDYN_DATA"); env && *env) return {fs::path(env) / file};
  // The executable or the Python module this code was linked into (dladdr of a function of its own).
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&default_corpus_places), &info) == 0 || !info.dli_fname) return {};
  std::error_code ec;
  const fs::path object = fs::canonical(info.dli_fname, ec);
  if (ec) return {};
  const fs::path dir = object.parent_path();
  return {dir.parent_path() / "data" / file,                               // build/tdyn in the source tree
          dir.parent_path().parent_path() / "data" / file,                 // build/python/tdyn*.so in the source tree
          dir.parent_path() / "share/tdyn" / file,                         // PREFIX/bin/tdyn, installed
          dir.parent_path().parent_path().parent_path() / "share/tdyn" / file};  // PREFIX/lib/pythonX.Y/site-packages/
}

fs::path default_corpus() {
  const std::vector<fs::path> places = default_corpus_places();
  for (const fs::path& place : places)
    if (fs::is_regular_file(place)) return place;
  return places.empty() ? fs::path() : places.front();  // never a path relative to the working directory
}

std::vector<Sample> load_samples(const SampleOptions& o, const Tokenizer* tok, int64_t d_vocab) {
  if (o.samples <= 0) fail("--samples must be positive, got {}", o.samples);
  if (o.max_len <= 0) fail("--max-len must be positive, got {}", o.max_len);
  std::vector<Sample> candidates;
  auto need_tokenizer = [&] {
    if (!tok) fail("text input needs a tokenizer (none found beside the model; pass --tokenizer)");
  };
  if (!o.ids.empty()) {
    for (const std::vector<int32_t>& ids : o.ids) candidates.push_back({ids, static_cast<int64_t>(candidates.size())});
  } else if (!o.prompt.empty()) {
    need_tokenizer();
    candidates.push_back({tok->encode(o.prompt, o.add_special), 0});
  } else {
    fs::path file = o.data.empty() ? default_corpus() : fs::path(o.data);
    if (!fs::exists(file)) {
      if (!o.data.empty()) fail("data file '{}' does not exist", file.string());
      std::string looked;
      for (const fs::path& place : default_corpus_places()) looked += "\n  " + place.string();
      fail("the default corpus (WikiText-2's test split, shipped with tdyn) is not where it was looked for:{}\n"
           "set TDYN_DATA to the directory holding wikitext-2/wiki.test.raw, or pass --data", looked);
    }
    if (fs::is_directory(file)) fail("data '{}' is a directory; pass a text file, or a .npy of token ids", file.string());
    if (file.extension() == ".npy") {
      NpyArray a = read_npy(file);
      std::vector<int64_t> v = a.as_int64();
      if (a.shape.size() == 1) a.shape.insert(a.shape.begin(), 1);
      if (a.shape.size() != 2) fail("{}: expected token ids of shape [T] or [S, T], got {}", file.string(), shape_str(a.shape));
      for (int64_t s = 0; s < a.shape[0]; ++s)
        candidates.push_back({std::vector<int32_t>(v.begin() + s * a.shape[1], v.begin() + (s + 1) * a.shape[1]), s});
    } else if (file.extension() == ".ids") {
      std::string text = read_file(file);
      int64_t line_no = 0;
      for (size_t start = 0; start < text.size(); ++line_no) {
        size_t end = std::min(text.find('\n', start), text.size());
        auto ids = parse_ids(std::string_view(text).substr(start, end - start), file.string() + ":" + std::to_string(line_no + 1));
        if (!ids.empty()) candidates.push_back({ids, line_no});
        start = end + 1;
      }
    } else {
      need_tokenizer();
      const std::string text = read_file(file);
      if (auto why = unicode::why_not_utf8_text(text, /*allow_nul=*/false))
        fail("data file '{}' is {}; text corpora are read as UTF-8", file.string(), *why);
      std::vector<std::string> passages = split_passages(text);
      // Draw first (cheap), tokenise only what is drawn; skip short passages and draw again from the rest.
      std::vector<int64_t> order(passages.size());
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937_64(o.seed));
      std::vector<Sample> drawn;
      for (int64_t idx : order) {
        if (static_cast<int64_t>(drawn.size()) == o.samples) break;
        std::vector<int32_t> ids = tok->encode(passages[idx], o.add_special);
        if (static_cast<int64_t>(ids.size()) < o.min_len) continue;
        drawn.push_back({std::move(ids), idx});
      }
      std::sort(drawn.begin(), drawn.end(), [](const Sample& a, const Sample& b) { return a.source_index < b.source_index; });
      candidates = std::move(drawn);
    }
  }
  std::vector<Sample> out;
  for (auto& s : candidates) {
    if (static_cast<int64_t>(out.size()) == o.samples) break;
    if (static_cast<int64_t>(s.ids.size()) > o.max_len) s.ids.resize(o.max_len);
    if (s.ids.empty()) continue;
    for (size_t i = 0; i < s.ids.size(); ++i) {
      if (s.ids[i] < 0 || s.ids[i] >= d_vocab)
        fail("sample {}: token id {} at position {} is outside the vocabulary [0, {})", s.source_index, s.ids[i], i, d_vocab);
    }
    out.push_back(std::move(s));
  }
  if (out.empty()) fail("no usable samples (every candidate was empty or shorter than --min-len {})", o.min_len);
  return out;
}

}  // namespace tdyn
