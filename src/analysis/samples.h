// The token sequences an analysis runs: passages of a text corpus (WikiText-2 by default), an id file, or a
// single prompt. The residual-stream paper samples S passages of the WikiText-2 test split; the power-method
// paper runs real text through the model. Passages are paragraphs (non-empty lines that are not " = Heading = "
// lines), tokenised with the model's tokenizer (special tokens added as the model expects) and truncated to
// max_len tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/files.h"
#include "tokenizer/tokenizer.h"

namespace tdyn {

struct SampleOptions {
  std::string data;        // text file (passages), .npy of int ids ([T] or [S, T]), or .ids (one sample per line)
  std::string prompt;      // a single text sample (instead of data)
  std::vector<std::vector<int32_t>> ids;  // samples given as token ids, one list each (instead of data)
  int64_t samples = 1000;  // S: how many passages to draw (all if fewer qualify)
  int64_t max_len = 128;   // tokens per sample, after special tokens; longer passages are truncated
  int64_t min_len = 8;     // passages shorter than this (in tokens) are skipped
  uint64_t seed = 0;       // which passages: a seeded uniform draw without replacement, kept in corpus order
  bool add_special = true;

  nlohmann::json to_json() const;
};

struct Sample {
  std::vector<int32_t> ids;
  int64_t source_index = 0;  // passage / row / line number in the source
};

// Paragraphs of a WikiText-style corpus, trimmed, CR removed, headings dropped.
std::vector<std::string> split_passages(std::string_view text);

// Loads the samples. `tokenizer` is needed for text (throws Error otherwise); ids are checked against d_vocab.
std::vector<Sample> load_samples(const SampleOptions& options, const Tokenizer* tokenizer, int64_t d_vocab);

// The same, with the tokenizer file `tokenizer_path`, or when empty the one shipped with the model at `model_path`,
// loaded only when the samples are text.
std::vector<Sample> load_samples_for_model(const SampleOptions& options, const fs::path& model_path, int64_t d_vocab,
                                           const std::string& tokenizer_path = "");

// The default corpus when --data is not given: the WikiText-2 test split that ships with tdyn (see NOTICE), found
// beside the program or Python module this library is part of, never from the working directory: in
// $TDYN_DATA/wikitext-2/ when set, else in the first of default_corpus_places() that holds it. When none does, the
// first place (so that an error names where it was looked for), or an empty path where there is none.
fs::path default_corpus();
// The places default_corpus() looks in, in order.
std::vector<fs::path> default_corpus_places();

}  // namespace tdyn
