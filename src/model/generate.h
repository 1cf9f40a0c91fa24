// Text generation on top of the forward pass: greedy (temperature 0, first maximum wins, as llama2.c's
// argmax) or temperature sampling, with a KV cache. Models with learned positions cannot go past n_ctx;
// ContextOverflow::Crop reproduces nanoGPT/minGPT's generate(): keep the last n_ctx tokens and recompute
// them from position 0 at every step.
#pragma once

#include <functional>
#include <random>
#include <optional>
#include <set>
#include <vector>

#include "model/transformer.h"

namespace tdyn {

enum class ContextOverflow { Error, Crop, Stop };

struct GenerateOptions {
  int64_t max_new_tokens = 0;
  double temperature = 0.0;  // 0: greedy
  uint64_t seed = 0;         // for temperature > 0 (std::mt19937_64)
  std::set<int32_t> stop_tokens;  // generation ends when one is produced (it is not kept)
  ContextOverflow overflow = ContextOverflow::Error;
};

struct Generation {
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t new_tokens = 0;
  bool stopped_on_token = false;
  bool stopped_on_context = false;
};

// The next-token choice: argmax (first maximum) when temperature is 0, else a sample of softmax(logits / T).
int32_t choose_token(const float* logits, int64_t d_vocab, double temperature, std::mt19937_64& rng);

// Runs the prompt (capturing `hooks` and returning its logits in *prompt_logits if asked), then generates. The
// edits of `hooks` run on every pass, the prompt's and each new token's (a cropped window's rows numbered from 0).
// `on_token(prev, next)` is called for every generated token as soon as it is chosen.
Generation generate(const Transformer& model, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                    const std::function<void(int32_t prev, int32_t next)>& on_token, ActivationCache* hooks = nullptr,
                    Tensor* prompt_logits = nullptr);

}  // namespace tdyn
