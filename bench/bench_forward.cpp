// tokens/s of tdyn's forward pass on one checkpoint: prefill (one TOKENS-long prompt, no KV cache, as an analysis
// sample runs) and one-token decode steps with a KV cache (as `tdyn run` generates). The median of REPEATS runs;
// bench/prefill_vs_torch.sh and bench/run_vs_reference.sh print it against their baselines.
//   bench_forward MODEL TOKENS REPEATS THREADS [DECODE_STEPS]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "model/loader.h"
#include "model/transformer.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL TOKENS REPEATS THREADS [DECODE_STEPS]\n", argv[0]);
    return 2;
  }
  const int64_t n_tokens = std::atoll(argv[2]);
  const int repeats = std::atoi(argv[3]), threads = std::atoi(argv[4]);
  const int64_t decode_steps = argc > 5 ? std::atoll(argv[5]) : 0;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  tdyn::LoadOptions options;
  options.check_finite = false;
  options.pack_weights = true;  // many prompts through one model: the warm-up packs the weights
  const tdyn::Transformer model(tdyn::load_model(argv[1], options));
  const int64_t vocab = model.config().d_vocab;
  std::vector<int32_t> ids(n_tokens);
  for (int64_t i = 0; i < n_tokens; ++i) ids[i] = static_cast<int32_t>(i % vocab);

  model.forward(ids);  // warm-up: maps the weights in
  std::vector<double> prefill;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    model.forward(ids);
    prefill.push_back(n_tokens / seconds_since(start));
  }
  std::printf("prefill_tok_s %.1f\n", median(prefill));

  if (decode_steps > 0) {
    std::vector<double> decode;
    for (int r = 0; r < repeats; ++r) {
      tdyn::KVCache cache = model.new_cache(decode_steps);
      int32_t token = 1;
      const auto start = std::chrono::steady_clock::now();
      for (int64_t step = 0; step < decode_steps; ++step) {
        const tdyn::Tensor logits = model.forward({&token, 1}, nullptr, &cache);
        token = static_cast<int32_t>(std::max_element(logits.data.begin(), logits.data.end()) - logits.data.begin());
      }
      decode.push_back(decode_steps / seconds_since(start));
    }
    std::printf("decode_tok_s %.1f\n", median(decode));
  }
}
