// Generation end to end through the CLI: llama2.c checkpoints must print byte for byte what llama2.c's run
// printed for the same prompt and -n (the goldens in ../shared/models/*/gen_*.txt), and --save-logits /
// --save-hooks must write what the library computes.
#include <nlohmann/json.hpp>

#include "core/npy.h"
#include "model/generate.h"
#include "test_util.h"

namespace tdyn {
namespace {

using test::shell_quote;

class Llama2cGeneration : public ::testing::TestWithParam<std::string> {};

TEST_P(Llama2cGeneration, StdoutIsByteIdenticalToRunC) {
  const std::string model = GetParam();
  TDYN_REQUIRE_SHARED("models/" + model + "/golden.json");
  fs::path dir = test::shared_dir() / "models" / model;
  auto golden = nlohmann::json::parse(read_file(dir / "golden.json"));
  int checked = 0;
  for (const auto& entry : golden) {
    if (entry.value("kind", "") != "generation") continue;
    // argv: MODEL -z TOKENIZER -t 0 -n STEPS -i PROMPT
    const auto& argv = entry["argv"];
    std::string steps, prompt, tokenizer;
    for (size_t i = 1; i + 1 < argv.size(); i += 2) {
      if (argv[i] == "-n") steps = argv[i + 1];
      if (argv[i] == "-i") prompt = argv[i + 1];
      if (argv[i] == "-z") tokenizer = argv[i + 1];
    }
    std::string expected = read_file(dir / entry["file"].get<std::string>());
    expected = expected.substr(expected.find('\n') + 1);  // line 1 is the command
    std::string out, err;
    int rc = test::run_cli(fmt::format("run {} --tokenizer {} --steps {} --prompt {}", (dir / argv[0].get<std::string>()).string(),
                                       (dir / tokenizer).string(), steps, shell_quote(prompt)),
                           &out, &err);
    ASSERT_EQ(rc, 0) << err;
    EXPECT_EQ(out, expected) << model << " " << entry["file"] << "\nstderr: " << err;
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

INSTANTIATE_TEST_SUITE_P(Models, Llama2cGeneration, ::testing::Values("stories260K", "llama2xs", "aidreams260K"));

TEST(RunCommand, SavesLogitsAndHooksAsTheLibraryComputes) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  fs::path dir = test::scratch_dir("run_save");
  fs::path model = test::shared_dir() / "models/stories260K/stories260K.bin";
  std::string out, err;
  ASSERT_EQ(test::run_cli(fmt::format("run {} --ids 1,403,407,261,378 --max-new-tokens 0 --save-logits {} --save-hooks {} "
                                      "--hooks 'blocks.*.hook_resid_post,blocks.0.attn.hook_pattern'",
                                      model.string(), (dir / "logits.npy").string(), (dir / "hooks").string()),
                          &out, &err),
            0)
      << err;
  EXPECT_EQ(out, "Once upon a time\n");
  Transformer t(load_model(model));
  ActivationCache cache("*");
  std::vector<int32_t> ids = {1, 403, 407, 261, 378};
  Tensor logits = t.forward(ids, &cache);
  NpyArray saved = read_npy(dir / "logits.npy");
  EXPECT_EQ(saved.shape, (Shape{5, 512}));
  EXPECT_EQ(saved.as_float(), logits.data);
  auto index = nlohmann::json::parse(read_file(dir / "hooks/index.json"));
  EXPECT_EQ(index.size(), 5u + 1u);
  NpyArray pattern = read_npy(dir / "hooks/blocks.0.attn.hook_pattern.npy");
  EXPECT_EQ(pattern.shape, (Shape{8, 5, 5}));
  EXPECT_EQ(pattern.as_float(), cache.at("blocks.0.attn.hook_pattern").data);
  EXPECT_EQ(read_npy(dir / "hooks/blocks.4.hook_resid_post.npy").as_float(), cache.at("blocks.4.hook_resid_post").data);
}

TEST(RunCommand, RefusesAHookPatternThatMatchesNothing) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  fs::path dir = test::scratch_dir("run_bad_hooks");
  fs::path model = test::shared_dir() / "models/stories260K/stories260K.bin";
  std::string err;
  EXPECT_EQ(test::run_cli(fmt::format("run {} --ids 1,403 --max-new-tokens 0 --save-hooks {} "
                                      "--hooks 'blocks.*.hook_resid_post,blocks.*.hook_nonexistent'",
                                      model.string(), (dir / "hooks").string()),
                          nullptr, &err),
            1);
  EXPECT_NE(err.find("hook pattern 'blocks.*.hook_nonexistent' matches no hook of this model"), std::string::npos) << err;
  EXPECT_NE(err.find("blocks.{l}.hook_resid_post"), std::string::npos) << err;  // it lists the hooks there are
  EXPECT_FALSE(fs::exists(dir / "hooks"));
}

// --ablate and --patch edit every pass: the saved hooks and logits are those of the edited model, checked against
// identities that hold without it (zeroed attention leaves resid_mid = resid_pre; the whole stream patched from
// another prompt of the same length gives that prompt's logits; a mean ablation's rows are the clean rows' mean).
TEST(RunCommand, AblateAndPatchEditThePass) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  fs::path dir = test::scratch_dir("run_edits");
  const std::string model = (test::shared_dir() / "models/stories260K/stories260K.bin").string();
  const std::vector<int32_t> a = {1, 403, 407, 261, 378}, b = {1, 365, 301, 278, 322};
  Transformer t(load_model(model));
  auto run = [&](const std::string& args, const std::string& name) {
    std::string err;
    EXPECT_EQ(test::run_cli(fmt::format("run {} --ids 1,403,407,261,378 --max-new-tokens 0 --save-logits {} --save-hooks {} {}",
                                        model, (dir / (name + ".npy")).string(), (dir / name).string(), args),
                            nullptr, &err),
              0)
        << err;
  };
  auto saved = [&](const std::string& name, const std::string& hook) { return read_npy(dir / name / (hook + ".npy")).as_float(); };

  run("--ablate blocks.1.hook_attn_out --hooks 'blocks.1.hook_*'", "zero");
  EXPECT_EQ(saved("zero", "blocks.1.hook_resid_mid"), saved("zero", "blocks.1.hook_resid_pre"));
  for (float v : saved("zero", "blocks.1.hook_attn_out")) ASSERT_EQ(v, 0.0f);

  run("--patch 'blocks.2.hook_resid_post' --patch-ids 1,365,301,278,322 --hooks blocks.2.hook_resid_post", "patch");
  EXPECT_EQ(read_npy(dir / "patch.npy").as_float(), t.forward(b).data);

  run("--ablate 'blocks.0.mlp.hook_post:mean' --hooks blocks.0.mlp.hook_post", "mean");
  ActivationCache clean("blocks.0.mlp.hook_post");
  t.forward(a, &clean);
  const Tensor& h = clean.at("blocks.0.mlp.hook_post");
  const std::vector<float> got = saved("mean", "blocks.0.mlp.hook_post");
  const int64_t n = h.dim(0), width = h.dim(1);
  for (int64_t j = 0; j < width; ++j) {
    double mean = 0;
    for (int64_t p = 0; p < n; ++p) mean += h.row(p)[j];
    mean /= static_cast<double>(n);
    for (int64_t p = 0; p < n; ++p) ASSERT_NEAR(got[p * width + j], mean, 1e-6 + 1e-6 * std::abs(mean)) << p << ", " << j;
  }

  // One head's z: zero at every position, the other heads as in the pass without edits.
  run("--ablate 'blocks.1.attn.hook_z:zero:heads=1' --hooks blocks.1.attn.hook_z", "head");
  ActivationCache z_clean("blocks.1.attn.hook_z");
  t.forward(a, &z_clean);
  const Tensor& z = z_clean.at("blocks.1.attn.hook_z");  // [pos, heads, d_head]
  const std::vector<float> z_got = saved("head", "blocks.1.attn.hook_z");
  ASSERT_EQ(z_got.size(), z.data.size());
  const int64_t n_heads = z.dim(1), d_head = z.dim(2);
  for (size_t i = 0; i < z_got.size(); ++i)
    ASSERT_EQ(z_got[i], static_cast<int64_t>(i) / d_head % n_heads == 1 ? 0.0f : z.data[i]) << i;

  for (const auto& [args, error] : std::vector<std::pair<std::string, std::string>>{
           {"--ablate blocks.0.attn.hook_pattern", "'blocks.0.attn.hook_pattern' matches no writable hook"},
           {"--ablate blocks.0.hook_resid_post:max", "'max' is not understood (GLOB[:zero|:mean][:heads=H,H,...])"},
           {"--ablate blocks.0.attn.hook_z:heads=1,x", "'x' is not a head number"},
           {"--ablate blocks.0.attn.hook_z:heads=99", "blocks.0.attn.hook_z: head 99 is out of range"},
           {"--ablate blocks.0.hook_mlp_out:heads=0", "heads can be chosen only in a [pos, heads, d_head] activation"},
           {"--patch blocks.0.hook_resid_post", "--patch needs the prompt to patch from"},
           {"--patch-ids 1,2", "--patch-ids requires --patch"}}) {
    std::string err;
    EXPECT_NE(test::run_cli(fmt::format("run {} --ids 1,403 --max-new-tokens 0 {}", model, args), nullptr, &err), 0) << args;
    EXPECT_NE(err.find(error), std::string::npos) << args << ": " << err;
  }
}

// Generation runs the edits on every pass, the prompt's and each new token's, with its absolute position; the
// captures stay the prompt's.
TEST(Generate, EditsRunOnEveryStep) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  Transformer t(load_model(test::shared_dir() / "models/stories260K/stories260K.bin"));
  ActivationCache hooks("blocks.0.hook_resid_post");
  std::vector<std::pair<int64_t, int64_t>> calls;  // (start, rows)
  hooks.add_edit("blocks.0.hook_resid_post",
                 [&](const std::string&, int64_t start, float*, const Shape& shape) { calls.emplace_back(start, shape[0]); });
  GenerateOptions options;
  options.max_new_tokens = 4;
  generate(t, {1, 403, 407}, options, [](int32_t, int32_t) {}, &hooks);
  EXPECT_EQ(calls, (std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 1}, {4, 1}, {5, 1}}));
  EXPECT_EQ(hooks.at("blocks.0.hook_resid_post").dim(0), 3);
}

TEST(Hooks, EveryPatternMustMatchAnOfferedHook) {
  ActivationCache cache("blocks.*.hook_resid_pre,hook_embed,blocks.?.attn.hook_z");
  for (const char* name : {"hook_embed", "blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre", "blocks.0.attn.hook_pattern"})
    cache.wants(name);
  EXPECT_EQ(cache.offered().size(), 4u);
  try {
    cache.require_every_pattern_matches(cache.offered());
    FAIL() << "blocks.?.attn.hook_z matched nothing and was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "hook pattern 'blocks.?.attn.hook_z' matches no hook of this model; its hooks are "
              "blocks.{l}.attn.hook_pattern, blocks.{l}.hook_resid_pre, hook_embed");
  }
  EXPECT_NO_THROW(ActivationCache("hook_*,blocks.1.*").require_every_pattern_matches(cache.offered()));
}

TEST(RunCommand, TemperatureSamplingIsSeededAndDeterministic) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  fs::path model = test::shared_dir() / "models/stories260K/stories260K.bin";
  std::string a, b, c;
  std::string cmd = "run " + model.string() + " --prompt 'Once' --max-new-tokens 40 --temperature 1.0 --seed ";
  ASSERT_EQ(test::run_cli(cmd + "7", &a), 0);
  ASSERT_EQ(test::run_cli(cmd + "7", &b), 0);
  ASSERT_EQ(test::run_cli(cmd + "8", &c), 0);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Generate, ChooseTokenTakesTheFirstMaximumWhenGreedy) {
  std::mt19937_64 rng(0);
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(choose_token(logits.data(), 4, 0.0, rng), 1);
  // A very low temperature concentrates the sample on the maximum; a very peaked distribution too.
  std::vector<float> peaked = {0.0f, 50.0f, 0.0f};
  for (int i = 0; i < 100; ++i) EXPECT_EQ(choose_token(peaked.data(), 3, 1.0, rng), 1);
}

}  // namespace
}  // namespace tdyn

namespace tdyn {
namespace {

// slm4096 (GPT-2 layout, 128 learned positions, character vocabulary): its authors' generate() crops to the
// last 128 tokens and recomputes from position 0 each step; --context-overflow crop reproduces it exactly.
TEST(Slm4096Generation, CropModeReproducesTheAuthorsGreedyText) {
  TDYN_REQUIRE_SHARED("models/slm4096/golden.json");
  fs::path dir = test::shared_dir() / "models/slm4096";
  Transformer model(load_model(dir));
  for (const char* name : {"q_slm", "q_cats"}) {
    std::vector<int64_t> expected64 = read_npy(dir / fmt::format("gen_{}_200_ids.npy", name)).as_int64();
    std::vector<int32_t> expected(expected64.begin(), expected64.end());
    std::vector<int32_t> prompt(expected.begin(), expected.end() - 200);
    GenerateOptions opts;
    opts.max_new_tokens = 200;
    opts.overflow = ContextOverflow::Crop;
    Generation g = generate(model, prompt, opts, [](int32_t, int32_t) {});
    EXPECT_EQ(g.tokens, expected) << name;

    std::string ids;
    for (int32_t id : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    std::string out, err;
    ASSERT_EQ(test::run_cli(fmt::format("run {} --ids {} --max-new-tokens 200 --context-overflow crop", dir.string(), ids), &out, &err), 0) << err;
    EXPECT_EQ(out, read_file(dir / fmt::format("gen_{}_200.txt", name)) + "\n");
    // Without crop the default is HF's behaviour: a clear error past the 128 learned positions.
    EXPECT_EQ(test::run_cli(fmt::format("run {} --ids {} --max-new-tokens 200", dir.string(), ids), &out, &err), 1);
    EXPECT_NE(err.find("context"), std::string::npos) << err;
  }
}

TEST(Slm4096Generation, StopModeEndsAtTheContext) {
  TDYN_REQUIRE_SHARED("models/slm4096/golden.json");
  Transformer model(load_model(test::shared_dir() / "models/slm4096"));
  GenerateOptions opts;
  opts.max_new_tokens = 500;
  opts.overflow = ContextOverflow::Stop;
  Generation g = generate(model, {23, 8, 1}, opts, [](int32_t, int32_t) {});
  EXPECT_TRUE(g.stopped_on_context);
  EXPECT_EQ(g.tokens.size(), 129u);  // positions 0..127 run; the token chosen at 127 is kept
}

}  // namespace
}  // namespace tdyn
