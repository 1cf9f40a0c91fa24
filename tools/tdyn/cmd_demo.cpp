// tdyn demo [--out DIR]: the self-contained tour that needs no download. It writes a small random-initialised
// Llama checkpoint with tdyn's own safetensors writer, loads it back, describes it, runs it with every hook
// captured, checks the residual-stream identities, writes a results directory with a figure, and then runs
// every analysis (tdyn analyze) on that model with random token sequences, ending in DIR/analysis/index.html.
#include <chrono>
#include <cmath>
#include <iostream>
#include <random>

#include <fmt/ranges.h>

#include "cli_util.h"
#include "command.h"
#include "model/generate.h"
#include "model/init.h"
#include "report/figure.h"
#include "report/progress.h"
#include "report/results.h"
#include "core/npy.h"

namespace tdyn::cli {
namespace {

struct DemoArgs {
  std::string out = "tdyn-demo";
  uint64_t seed = 0;
  int64_t samples = 24;
  bool skip_analysis = false;
};

// A small Llama 3-style architecture (GQA, llama3 RoPE scaling).
ModelConfig demo_architecture() {
  ModelConfig arch;
  arch.family = "llama";
  arch.d_model = 128;
  arch.n_layers = 6;
  arch.n_heads = 8;
  arch.n_kv_heads = 2;
  arch.d_head = 16;
  arch.d_mlp = 384;
  arch.d_vocab = 512;
  arch.n_ctx = 256;
  arch.norm_eps = 1e-5;
  arch.rope = {.style = RopeStyle::RotateHalf, .theta = 500000.0, .scaling = "llama3", .factor = 8.0,
               .low_freq_factor = 1.0, .high_freq_factor = 4.0, .original_max_position = 64};
  arch.bos_id = 1;
  return arch;
}

// Per layer: the largest error of the residual identities (exact: resid_mid = resid_pre + attn_out, resid_post =
// resid_mid + mlp_out) and the mean token norm of resid_post.
struct ResidualNumbers {
  double identity_error = 0;
  std::vector<double> layers, mean_norm;
};

ResidualNumbers residual_numbers(const ActivationCache& hooks, const ModelConfig& c, int64_t positions) {
  ResidualNumbers r;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto get = [&](const char* h) { return hooks.at(fmt::format("blocks.{}.{}", l, h)).data; };
    auto pre = get("hook_resid_pre"), attn = get("hook_attn_out"), mid = get("hook_resid_mid");
    auto mlp = get("hook_mlp_out"), post = get("hook_resid_post");
    for (size_t i = 0; i < pre.size(); ++i) {
      r.identity_error = std::max<double>(r.identity_error, std::abs(mid[i] - (pre[i] + attn[i])));
      r.identity_error = std::max<double>(r.identity_error, std::abs(post[i] - (mid[i] + mlp[i])));
    }
    double norm_sum = 0;
    for (int64_t p = 0; p < positions; ++p) {
      double s = 0;
      for (int64_t i = 0; i < c.d_model; ++i) s += double(post[p * c.d_model + i]) * post[p * c.d_model + i];
      norm_sum += std::sqrt(s);
    }
    r.layers.push_back(static_cast<double>(l));
    r.mean_norm.push_back(norm_sum / static_cast<double>(positions));
  }
  return r;
}

void write_residual_outputs(ResultsDir& out, const ResidualNumbers& r, const Tensor& logits, const ActivationCache& hooks,
                            int64_t n_layers) {
  out.npy("prompt_logits.npy", logits, "logits of the prompt, float32 [pos, d_vocab]");
  out.npy("resid_post_last_layer.npy", hooks.at(fmt::format("blocks.{}.hook_resid_post", n_layers - 1)),
          "residual stream after the last layer, float32 [pos, d_model]");
  out.csv("resid_norm.csv", {"layer", "mean_token_norm"}, [&] {
    std::vector<std::vector<double>> rows;
    for (size_t i = 0; i < r.layers.size(); ++i) rows.push_back({r.layers[i], r.mean_norm[i]});
    return rows;
  }(), "mean L2 norm of resid_post over prompt tokens, per layer");
  Figure fig{"resid_norm", "Mean token norm through depth (random init)", "layer", "mean ||resid_post||", {},
             {{"mean over prompt tokens", {r.layers, r.mean_norm}, "linespoints pt 7", ""}}};
  const std::string note = out.figure(fig, "figure: mean token norm per layer");
  if (!note.empty()) std::cerr << "tdyn: note: " << note << "\n";
}

// Every analysis of the three papers on the demo model, with random token sequences as the data.
int run_demo_analysis(const DemoArgs& a, ResultsDir& out, const fs::path& model_dir, int64_t d_vocab, std::mt19937_64& rng) {
  std::vector<int32_t> ids(a.samples * 48);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % d_vocab);
  write_npy(out.file("samples.npy"), ids.data(), {a.samples, 48});
  std::cout << "running tdyn analyze on it (" << a.samples << " random sequences of 48 tokens)...\n" << std::flush;
  std::vector<std::string> argv = {"tdyn", "analyze", model_dir.string(), "--data", out.file("samples.npy").string(),
                                   "--samples", std::to_string(a.samples), "--out", out.file("analysis").string()};
  if (progress_quiet()) argv.push_back("--quiet");
  int code = run_self(argv);
  if (code == 0) std::cout << "report: " << out.file("analysis/index.html").string() << "\n";
  return code;
}

int run_demo(const DemoArgs& a) {
  ResultsDir out(a.out, "demo", invocation());
  out.options() = {{"out", a.out}, {"seed", a.seed}};
  // 1. The architecture with random weights by the HF init rule, written with tdyn's own safetensors writer.
  fs::path model_dir = out.file("model");
  {
    PhaseTimer t(out, "write_checkpoint");
    write_random_init(llama_hf_config_json(demo_architecture()), model_dir, a.seed);
  }
  out.record_file("model/config.json", "random-initialised Llama checkpoint: configuration");
  out.record_file("model/model.safetensors", "random-initialised Llama checkpoint: weights (N(0, 0.02), norms 1)");

  // 2. Load it back and describe it.
  auto model = load_model(model_dir);
  const ModelConfig& c = model->config;
  std::cout << fmt::format("wrote and reloaded {}: {} family, {} layers, d_model {}, {} heads ({} kv), d_mlp {}, "
                           "vocab {}, {} parameters\n",
                           model_dir.string(), c.family, c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.d_mlp,
                           c.d_vocab, model->parameter_count());
  out.model() = {{"path", model_dir.string()}, {"family", c.family}, {"parameters", model->parameter_count()}};

  // 3. Run it: a 32-token prompt with every hook captured, then 32 greedy tokens with the KV cache.
  Transformer transformer(model);
  std::vector<int32_t> prompt(32);
  std::mt19937_64 rng(a.seed);
  for (auto& id : prompt) id = static_cast<int32_t>(rng() % c.d_vocab);
  prompt[0] = 1;
  ActivationCache hooks("*");
  Tensor logits;
  GenerateOptions gen;
  gen.max_new_tokens = 32;
  std::vector<int32_t> generated;
  auto start = std::chrono::steady_clock::now();
  Generation g = generate(transformer, prompt, gen, [&](int32_t, int32_t next) { generated.push_back(next); }, &hooks, &logits);
  const double tokens_per_second = (g.tokens.size() - 1) / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << fmt::format("ran {} prompt tokens + {} greedy tokens ({:.0f} tok/s); continuation ids: {}\n", prompt.size(),
                           g.new_tokens, tokens_per_second, fmt::join(generated, " "));

  // 4. Residual-stream numbers per layer.
  const ResidualNumbers r = residual_numbers(hooks, c, static_cast<int64_t>(prompt.size()));
  std::cout << fmt::format("residual identities resid_mid = resid_pre + attn_out, resid_post = resid_mid + mlp_out: "
                           "max |error| = {:g}\n", r.identity_error);
  write_residual_outputs(out, r, logits, hooks, c.n_layers);
  out.results() = {{"prompt_tokens", prompt},          {"generated_tokens", generated},
                   {"tokens_per_second", tokens_per_second}, {"residual_identity_max_abs_error", r.identity_error},
                   {"mean_token_norm_per_layer", r.mean_norm}, {"hooks_captured", hooks.tensors().size()}};
  out.write();
  std::cout << "results: " << out.file("results.json").string() << "\n";
  if (r.identity_error != 0) return 3;
  return a.skip_analysis ? 0 : run_demo_analysis(a, out, model_dir, c.d_vocab, rng);
}

std::function<int()> setup_demo(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Self-contained tour (no download): write a random Llama checkpoint, reload, run, report");
  auto a = std::make_shared<DemoArgs>();
  cmd->add_option("--out", a->out, "Results directory")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed for the random weights and prompt")->capture_default_str();
  cmd->add_option("--samples", a->samples, "Random token sequences for the analyses")->capture_default_str()->check(positive_number);
  cmd->add_flag("--skip-analysis", a->skip_analysis, "Stop after the checkpoint round trip (no tdyn analyze)");
  return [a] { return run_demo(*a); };
}

TDYN_REGISTER_COMMAND("demo", 1, setup_demo);

}  // namespace
}  // namespace tdyn::cli
