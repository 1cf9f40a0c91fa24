#include "model/generate.h"

#include <cmath>
#include <optional>

#include "core/error.h"

namespace tdyn {

int32_t choose_token(const float* logits, int64_t d_vocab, double temperature, std::mt19937_64& rng) {
  if (temperature <= 0) {
    int64_t best = 0;
    for (int64_t i = 1; i < d_vocab; ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    return static_cast<int32_t>(best);
  }
  double max_logit = logits[0];
  for (int64_t i = 1; i < d_vocab; ++i) max_logit = std::max<double>(max_logit, logits[i]);
  std::vector<double> p(d_vocab);
  double sum = 0;
  for (int64_t i = 0; i < d_vocab; ++i) sum += p[i] = std::exp((logits[i] - max_logit) / temperature);
  double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
  for (int64_t i = 0; i < d_vocab; ++i) {
    if ((u -= p[i]) < 0) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(d_vocab - 1);
}

Generation generate(const Transformer& model, const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                    const std::function<void(int32_t, int32_t)>& on_token, ActivationCache* hooks, Tensor* prompt_logits) {
  const ModelConfig& c = model.config();
  if (prompt.empty()) fail("the prompt has no tokens");
  if (opts.max_new_tokens < 0) fail("--max-new-tokens must be non-negative, got {}", opts.max_new_tokens);
  const int64_t n_ctx = c.n_ctx;
  if (static_cast<int64_t>(prompt.size()) > n_ctx && opts.overflow != ContextOverflow::Crop)
    fail("the prompt has {} tokens but the model's context is {} positions (see --context-overflow)", prompt.size(), n_ctx);

  Generation g;
  g.tokens = prompt;
  std::mt19937_64 rng(opts.seed);
  const int64_t total = static_cast<int64_t>(prompt.size()) + opts.max_new_tokens;
  const bool cropping = opts.overflow == ContextOverflow::Crop;
  // The last generated token is never fed back, so positions 0 .. total - 2 must fit.
  if (total - 1 > n_ctx && opts.overflow == ContextOverflow::Error)
    fail("{} prompt + {} new tokens exceed the model's context of {} positions (see --context-overflow)", prompt.size(),
         opts.max_new_tokens, n_ctx);

  // Edits apply to every pass, captures to the prompt's only.
  std::optional<ActivationCache> step_edits;
  if (hooks && hooks->has_edits()) step_edits.emplace(hooks->edits_only());
  ActivationCache* const steps = step_edits ? &*step_edits : nullptr;

  // The prompt is one whole-sequence forward (hooks see every prompt position), filling the cache.
  KVCache cache = model.new_cache(std::min(std::max<int64_t>(total - 1, prompt.size()), n_ctx));
  std::span<const int32_t> first(prompt.data(), std::min<size_t>(prompt.size(), n_ctx));
  Tensor logits = model.forward(first, hooks, &cache);
  if (static_cast<int64_t>(prompt.size()) > n_ctx) {  // crop mode with a long prompt: recompute the tail window
    logits = model.forward(std::span(prompt).last(n_ctx), steps);
  }
  if (prompt_logits) *prompt_logits = logits;
  std::vector<float> last(logits.row(logits.dim(0) - 1), logits.row(logits.dim(0) - 1) + c.d_vocab);

  while (g.new_tokens < opts.max_new_tokens) {
    int32_t next = choose_token(last.data(), c.d_vocab, opts.temperature, rng);
    if (opts.stop_tokens.count(next)) {
      g.stopped_on_token = true;
      break;
    }
    on_token(g.tokens.back(), next);
    g.tokens.push_back(next);
    ++g.new_tokens;
    if (g.new_tokens == opts.max_new_tokens) break;
    const int64_t length = static_cast<int64_t>(g.tokens.size());
    if (length <= n_ctx) {  // position length - 1 fits: one cached step
      Tensor step = model.forward(std::span(g.tokens).last(1), steps, &cache);
      last.assign(step.ptr(), step.ptr() + c.d_vocab);
    } else if (cropping) {
      Tensor window = model.forward(std::span(g.tokens).last(n_ctx), steps);
      last.assign(window.row(n_ctx - 1), window.row(n_ctx - 1) + c.d_vocab);
    } else {
      g.stopped_on_context = true;
      break;
    }
  }
  return g;
}

}  // namespace tdyn
