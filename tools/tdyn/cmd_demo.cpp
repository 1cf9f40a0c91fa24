// tdyn demo [--out DIR]: the self-contained tour that needs no download. It writes a small random-initialised
// Llama checkpoint with tdyn's own safetensors writer, loads it back, describes it, runs it with every hook
// captured, checks the residual-stream identities, writes a results directory with a figure, and then runs
// every analysis (tdyn analyze) on that model with random token sequences, ending in DIR/analysis/index.html.
#include <chrono>
#include <cmath>
#include <iostream>

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

int run_demo(const DemoArgs& a) {
  ResultsDir out(a.out, "demo", invocation());
  out.options() = {{"out", a.out}, {"seed", a.seed}};

  // 1. A small Llama 3-style architecture (GQA, llama3 RoPE scaling), random weights by the HF init rule.
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
  fs::path model_dir = out.file("model");
  {
    PhaseTimer t(out, "write_checkpoint");
    write_random_init(llama_hf_config_json(arch), model_dir, a.seed);
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
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << fmt::format("ran {} prompt tokens + {} greedy tokens ({:.0f} tok/s); continuation ids:", prompt.size(),
                           g.new_tokens, (g.tokens.size() - 1) / seconds);
  for (int32_t id : generated) std::cout << " " << id;
  std::cout << "\n";

  // 4. Residual-stream numbers per layer: identities (exact) and the mean token norm through depth.
  double identity_error = 0;
  std::vector<double> layers, mean_norm;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto get = [&](const char* h) { return hooks.at(fmt::format("blocks.{}.{}", l, h)).data; };
    auto pre = get("hook_resid_pre"), attn = get("hook_attn_out"), mid = get("hook_resid_mid");
    auto mlp = get("hook_mlp_out"), post = get("hook_resid_post");
    double norm_sum = 0;
    for (size_t i = 0; i < pre.size(); ++i) {
      identity_error = std::max<double>(identity_error, std::abs(mid[i] - (pre[i] + attn[i])));
      identity_error = std::max<double>(identity_error, std::abs(post[i] - (mid[i] + mlp[i])));
    }
    for (int64_t p = 0; p < static_cast<int64_t>(prompt.size()); ++p) {
      double s = 0;
      for (int64_t i = 0; i < c.d_model; ++i) s += double(post[p * c.d_model + i]) * post[p * c.d_model + i];
      norm_sum += std::sqrt(s);
    }
    layers.push_back(static_cast<double>(l));
    mean_norm.push_back(norm_sum / prompt.size());
  }
  std::cout << fmt::format("residual identities resid_mid = resid_pre + attn_out, resid_post = resid_mid + mlp_out: "
                           "max |error| = {:g}\n", identity_error);
  out.npy("prompt_logits.npy", logits, "logits of the prompt, float32 [pos, d_vocab]");
  out.npy("resid_post_last_layer.npy", hooks.at(fmt::format("blocks.{}.hook_resid_post", c.n_layers - 1)),
          "residual stream after the last layer, float32 [pos, d_model]");
  out.csv("resid_norm.csv", {"layer", "mean_token_norm"}, [&] {
    std::vector<std::vector<double>> rows;
    for (size_t i = 0; i < layers.size(); ++i) rows.push_back({layers[i], mean_norm[i]});
    return rows;
  }(), "mean L2 norm of resid_post over prompt tokens, per layer");
  Figure fig{"resid_norm", "Mean token norm through depth (random init)", "layer", "mean ||resid_post||", {},
             {{"mean over prompt tokens", {layers, mean_norm}, "linespoints pt 7", ""}}};
  FigureFiles files = write_figure(out.path(), fig);
  for (const auto& f : files.written) out.record_file(f, "figure: mean token norm per layer");
  if (!files.rendered) std::cerr << "tdyn: note: " << files.note << "\n";
  out.results() = {{"prompt_tokens", prompt},
                   {"generated_tokens", generated},
                   {"tokens_per_second", (g.tokens.size() - 1) / seconds},
                   {"residual_identity_max_abs_error", identity_error},
                   {"mean_token_norm_per_layer", mean_norm},
                   {"hooks_captured", hooks.tensors().size()}};
  out.write();
  std::cout << "results: " << out.file("results.json").string() << "\n";
  if (identity_error != 0) return 3;
  if (a.skip_analysis) return 0;

  // 5. Every analysis of the three papers on this model, with random token sequences as the data.
  std::vector<int32_t> ids(a.samples * 48);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % c.d_vocab);
  write_npy(out.file("samples.npy"), ids.data(), {a.samples, 48});
  std::cout << "running tdyn analyze on it (" << a.samples << " random sequences of 48 tokens)...\n" << std::flush;
  std::vector<std::string> argv = {"tdyn", "analyze", model_dir.string(), "--data", out.file("samples.npy").string(),
                                   "--samples", std::to_string(a.samples), "--out", out.file("analysis").string()};
  if (progress_quiet()) argv.push_back("--quiet");
  int code = run_self(argv);
  if (code == 0) std::cout << "report: " << out.file("analysis/index.html").string() << "\n";
  return code;
}

std::function<int()> setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Self-contained tour (no download): write a random Llama checkpoint, reload, run, report");
  auto a = std::make_shared<DemoArgs>();
  cmd->add_option("--out", a->out, "Results directory")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed for the random weights and prompt")->capture_default_str();
  cmd->add_option("--samples", a->samples, "Random token sequences for the analyses")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--skip-analysis", a->skip_analysis, "Stop after the checkpoint round trip (no tdyn analyze)");
  return [a] { return run_demo(*a); };
}

TDYN_REGISTER_COMMAND("demo", 1, setup);

}  // namespace
}  // namespace tdyn::cli
