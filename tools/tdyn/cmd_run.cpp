// tdyn run MODEL (--prompt TEXT | --ids 1,2,3) [...]: runs a model on a prompt, optionally generates, and
// saves logits and hooked activations; --ablate and --patch edit activations on the way (every pass, new tokens'
// too). With temperature 0, stdout holds exactly the decoded prompt, the
// greedy continuation and one newline (for llama2.c checkpoints, byte for byte what llama2.c's run prints).
#include <chrono>
#include <iostream>
#include <optional>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "command.h"
#include "core/error.h"
#include "core/npy.h"
#include "model/ablation.h"
#include "model/generate.h"
#include "tokenizer/tokenizer.h"

namespace tdyn::cli {
namespace {

struct RunArgs {
  ModelArgs model;
  std::string tokenizer, prompt, save_logits, save_hooks, hooks = "*", overflow;
  std::vector<int32_t> ids, token_types;
  std::vector<std::string> ablate, patch;  // hook globs; ablate's as Ablation::parse reads them
  std::string patch_prompt;
  std::vector<int32_t> patch_ids;
  int64_t max_new_tokens = 32, steps = -1;
  double temperature = 0.0;
  uint64_t seed = 0;
  bool no_special = false;
};

void save_hooks(const ActivationCache& cache, const fs::path& dir) {
  fs::create_directories(dir);
  nlohmann::json index = nlohmann::json::object();
  for (const auto& [name, t] : cache.tensors()) {
    write_npy(dir / (name + ".npy"), t);
    index[name] = {{"file", name + ".npy"}, {"shape", t.shape}, {"dtype", "float32"}};
  }
  write_file_atomic(dir / "index.json", index.dump(2) + "\n");
}

// --tokenizer, or the one shipped with the model; without one, ids are printed (text prompts need one).
std::unique_ptr<Tokenizer> run_tokenizer(const RunArgs& a) {
  if (!a.tokenizer.empty()) return load_tokenizer(a.tokenizer);
  try {
    return load_tokenizer_for_model(a.model.path);
  } catch (const Error& e) {
    if (!a.prompt.empty()) throw;  // text needs a tokenizer
    std::cerr << "tdyn: note: no tokenizer (" << e.what() << "); printing token ids\n";
    return nullptr;
  }
}

void check_vocabulary(const std::vector<int32_t>& ids, const ModelConfig& c, const char* what = "") {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= c.d_vocab)
      fail("{}token id {} at position {} is outside the vocabulary [0, {})", what, ids[i], i, c.d_vocab);
}

std::vector<int32_t> prompt_ids(const RunArgs& a, const Tokenizer* tok, const ModelConfig& c) {
  std::vector<int32_t> prompt = !a.ids.empty() ? a.ids : tok->encode(a.prompt, !a.no_special);
  if (prompt.empty()) fail("the prompt encodes to no tokens");
  check_vocabulary(prompt, c);
  if (tok && tok->vocab_size() > c.d_vocab)
    fail("the tokenizer has {} tokens but the model's vocabulary has {}", tok->vocab_size(), c.d_vocab);
  return prompt;
}

// The generation settings; --steps (llama2.c's -n) may also shorten the prompt.
GenerateOptions generate_options(const RunArgs& a, const ModelConfig& c, std::vector<int32_t>& prompt) {
  GenerateOptions gen;
  gen.temperature = a.temperature;
  gen.seed = a.seed;
  gen.max_new_tokens = a.max_new_tokens;
  const bool llama2c = c.format == "llama2c";
  if (a.steps >= 0) {
    // llama2.c's -n: positions including the prompt (0 or > seq_len means seq_len); the token chosen at the
    // last position is printed too, so steps positions yield steps - prompt + 1 new tokens.
    int64_t steps = (a.steps == 0 || a.steps > c.n_ctx) ? c.n_ctx : a.steps;
    if (static_cast<int64_t>(prompt.size()) > steps) prompt.resize(steps);
    gen.max_new_tokens = steps - static_cast<int64_t>(prompt.size()) + 1;
  }
  if (!c.causal && gen.max_new_tokens > 0) {
    if (a.steps >= 0 || a.max_new_tokens != 32) fail("{} is an encoder (bidirectional): it does not generate; use --max-new-tokens 0", c.family);
    gen.max_new_tokens = 0;
  }
  // llama2.c ends a sequence when the model emits BOS; other models end at their EOS token.
  if (llama2c && c.bos_id) gen.stop_tokens.insert(*c.bos_id);
  else if (c.eos_id) gen.stop_tokens.insert(*c.eos_id);
  if (a.overflow == "crop") gen.overflow = ContextOverflow::Crop;
  else if (a.overflow == "stop" || (a.overflow.empty() && llama2c)) gen.overflow = ContextOverflow::Stop;
  else gen.overflow = ContextOverflow::Error;
  return gen;
}

// The prompt as decoded from its tokens (never its first token when that is BOS, as llama2.c), or its ids.
std::string prompt_echo(const std::vector<int32_t>& prompt, const Tokenizer* tok, const ModelConfig& c) {
  std::string echo;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (!tok) echo += std::to_string(prompt[i]) + " ";
    else if (i > 0 || !c.bos_id || prompt[0] != *c.bos_id) echo += tok->decode_step(i == 0 ? -1 : prompt[i - 1], prompt[i]);
  }
  return echo;
}

// A pass of `ids` capturing the hooks of `globs`.
ActivationCache capture_pass(const Transformer& transformer, std::span<const int32_t> ids,
                             const std::vector<std::string>& globs, std::span<const int32_t> types = {}) {
  ActivationCache cache(fmt::format("{}", fmt::join(globs, ",")));
  transformer.forward(ids, &cache, nullptr, types);
  return cache;
}

// Adds the edits of --ablate and --patch to `hooks`, their globs checked against the model's writable hooks before
// any pass. Mean ablation reads a pass of the prompt without edits, patching a pass of --patch-prompt / --patch-ids.
void add_edits(const RunArgs& a, const Transformer& transformer, const std::vector<int32_t>& prompt,
               const Tokenizer* tok, std::span<const int32_t> types, ActivationCache& hooks) {
  const std::vector<Ablation> ablations = Ablation::parse(a.ablate);
  if (ablations.empty() && a.patch.empty()) return;
  std::vector<std::string> all_globs = a.patch, mean_globs;
  for (const Ablation& x : ablations) {
    all_globs.push_back(x.glob);
    if (x.mean) mean_globs.push_back(x.glob);
  }
  ActivationCache check = ActivationCache::keeping_nothing();
  check.add_edit(fmt::format("{}", fmt::join(all_globs, ",")), zero_ablation());
  check.check_edits(transformer.writable_hook_names());

  std::optional<ActivationCache> clean, source;
  if (!mean_globs.empty()) clean = capture_pass(transformer, prompt, mean_globs, types);
  if (!a.patch.empty()) {
    std::vector<int32_t> ids = a.patch_ids;
    if (ids.empty() && a.patch_prompt.empty()) fail("--patch needs the prompt to patch from: --patch-prompt or --patch-ids");
    if (ids.empty() && !tok) fail("--patch-prompt needs a tokenizer (or give --patch-ids)");
    if (ids.empty()) ids = tok->encode(a.patch_prompt, !a.no_special);
    check_vocabulary(ids, transformer.config(), "--patch: ");
    source = capture_pass(transformer, ids, a.patch);
  }
  for (const Ablation& x : ablations) hooks.add_edit(x.glob, on_heads(x.heads, x.mean ? mean_ablation(*clean) : zero_ablation()));
  for (const std::string& glob : a.patch) hooks.add_edit(glob, patching(*source));
}

void save_outputs(const RunArgs& a, const Tensor& prompt_logits, const ActivationCache* hooks) {
  if (!a.save_logits.empty()) write_npy(a.save_logits, prompt_logits);
  if (!a.save_hooks.empty()) save_hooks(*hooks, a.save_hooks);
}

int run(const RunArgs& a) {
  auto model = a.model.load();
  const ModelConfig& c = model->config;
  Transformer transformer(model);
  const std::unique_ptr<Tokenizer> tok = run_tokenizer(a);
  std::vector<int32_t> prompt = prompt_ids(a, tok.get(), c);
  const GenerateOptions gen = generate_options(a, c, prompt);
  const std::vector<int32_t>& types = a.token_types;
  if (!types.empty()) {
    if (types.size() != prompt.size())
      fail("--token-types has {} entries but the prompt has {} tokens", types.size(), prompt.size());
    if (gen.max_new_tokens > 0) fail("--token-types applies to encoders, which do not generate");
  }
  std::unique_ptr<ActivationCache> hooks;
  if (!a.save_hooks.empty()) {
    transformer.check_hook_patterns(a.hooks);
    hooks = std::make_unique<ActivationCache>(a.hooks);
  }
  if (!a.ablate.empty() || !a.patch.empty()) {
    if (!hooks) hooks = std::make_unique<ActivationCache>(ActivationCache::keeping_nothing());
    add_edits(a, transformer, prompt, tok.get(), types, *hooks);
  }
  std::cout << prompt_echo(prompt, tok.get(), c) << std::flush;

  auto start = std::chrono::steady_clock::now();
  Tensor prompt_logits;
  if (!types.empty()) {  // encoders: one bidirectional pass, nothing to generate
    prompt_logits = transformer.forward(prompt, hooks.get(), nullptr, types);
    std::cout << "\n" << std::flush;
    save_outputs(a, prompt_logits, hooks.get());
    return 0;
  }
  Generation g = generate(transformer, prompt, gen,
                          [&](int32_t prev, int32_t next) {
                            std::cout << (tok ? tok->decode_step(prev, next) : std::to_string(next) + " ") << std::flush;
                          },
                          hooks.get(), a.save_logits.empty() ? nullptr : &prompt_logits);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "\n" << std::flush;
  save_outputs(a, prompt_logits, hooks.get());
  int64_t positions = static_cast<int64_t>(g.tokens.size()) - 1;
  std::cerr << fmt::format("tdyn: {} prompt tokens, {} new tokens, {:.1f} tok/s{}{}\n", prompt.size(), g.new_tokens,
                           positions > 0 ? positions / seconds : 0.0, g.stopped_on_token ? " (stopped at a stop token)" : "",
                           g.stopped_on_context ? " (stopped at the end of the context)" : "");
  return 0;
}

std::function<int()> setup_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Run a model on a prompt: generate text, save logits and activations");
  auto a = std::make_shared<RunArgs>();
  a->model.add_to(cmd);
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (default: the one shipped beside/inside MODEL)");
  auto* prompt = cmd->add_option("--prompt", a->prompt, "Prompt text (encoded with the model's tokenizer)");
  auto* ids = cmd->add_option("--ids", a->ids, "Prompt as comma-separated token ids, e.g. 1,403,407")->delimiter(',')->check(token_id);
  prompt->excludes(ids);
  cmd->add_option("--token-types", a->token_types,
                  "BERT/ALBERT segment ids, one per prompt token, e.g. 0,0,0,1,1 (default all 0)")
      ->delimiter(',')->check(token_id);
  cmd->add_flag("--no-special", a->no_special, "Do not add the tokenizer's special tokens (BOS, [CLS]/[SEP]) to --prompt");
  auto* max_new = cmd->add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate after the prompt")
                      ->capture_default_str()->check(non_negative_number);
  cmd->add_option("--steps", a->steps,
                  "llama2.c's -n: total positions including the prompt (0 = the model's context); "
                  "overrides --max-new-tokens")
      ->excludes(max_new)->check(non_negative_number);
  cmd->add_option("--temperature", a->temperature, "Sampling temperature; 0 = greedy (argmax, first maximum)")
      ->capture_default_str()->check(non_negative_number);
  cmd->add_option("--seed", a->seed, "Random seed for sampling (temperature > 0)")->capture_default_str();
  cmd->add_option("--context-overflow", a->overflow,
                  "What to do when generation runs past the model's context: error (default), stop (default for "
                  "llama2.c checkpoints, as its run does), or crop (keep the last n_ctx tokens and recompute them "
                  "from position 0 each step, as nanoGPT/minGPT generate())")
      ->check(CLI::IsMember({"error", "stop", "crop"}));
  cmd->add_option("--save-logits", a->save_logits, "Write prompt logits, float32 [pos, d_vocab], to this .npy file");
  cmd->add_option("--save-hooks", a->save_hooks,
                  "Write each captured activation of the prompt to DIR/<hook name>.npy, plus DIR/index.json");
  cmd->add_option("--hooks", a->hooks,
                  "Comma-separated globs over TransformerLens hook names, e.g. 'blocks.*.hook_resid_post' ('*' = all); a "
                  "glob that matches no hook of the model is an error that lists its hooks")
      ->capture_default_str();
  cmd->add_option("--ablate", a->ablate,
                  "Ablate the writable hooks matching GLOB on every pass (prompt and new tokens): GLOB or GLOB:zero sets "
                  "them to 0, GLOB:mean sets every position to the hook's mean over the prompt's positions (from a pass "
                  "without edits); :heads=H,H,... confines it to those heads of attn.hook_z (from 0). Writable: "
                  "blocks.{l}.hook_resid_pre/_mid/_post, hook_attn_out, hook_mlp_out, attn.hook_z, mlp.hook_post. "
                  "Repeatable; --save-hooks saves the edited values")
      ->type_name("GLOB[:zero|:mean][:heads=H,...]");
  auto* patch = cmd->add_option("--patch", a->patch,
                                "Activation patching: the writable hooks matching GLOB take, at each position the source "
                                "prompt covers, the values of a pass of that prompt (--patch-prompt or --patch-ids); "
                                "later positions are left as they are. Repeatable")
                    ->type_name("GLOB");
  auto* patch_prompt = cmd->add_option("--patch-prompt", a->patch_prompt, "The source prompt of --patch, as text");
  auto* patch_ids = cmd->add_option("--patch-ids", a->patch_ids, "The source prompt of --patch, as token ids")
                        ->delimiter(',')->check(token_id);
  patch_prompt->excludes(patch_ids)->needs(patch);
  patch_ids->needs(patch);
  return [cmd, a] {
    if (cmd->count("--prompt") == 0 && cmd->count("--ids") == 0) throw CLI::RequiredError("--prompt or --ids");
    return run(*a);
  };
}

TDYN_REGISTER_COMMAND("run", 20, setup_run);

}  // namespace
}  // namespace tdyn::cli
