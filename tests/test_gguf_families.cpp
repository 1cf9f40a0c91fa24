// GGUF architectures beyond llama: HF checkpoints converted to GGUF the way llama.cpp's convert_hf_to_gguf.py
// converts them (tests/gguf_convert.h: its metadata keys, tensor names, permutations and regroupings), run by tdyn,
// and compared with the same float64 references as the HF files: embeddings, every hook, attention patterns and
// logits (tests/fixture_check.h), at the same tolerances. GPT-2 from shared/fixtures; Mistral, Qwen2, Phi-3 and
// GPT-NeoX from the references generated at test time (tests/generated_fixtures.h). Then, per architecture,
// metadata and tensors the forward pass cannot use, and the architectures tdyn refuses, as clear errors.
#include "core/error.h"
#include "fixture_check.h"
#include "generated_fixtures.h"
#include "gguf_convert.h"
#include "io/gguf_writer.h"
#include "model/config.h"
#include "model/loader.h"
#include "test_util.h"

namespace tdyn {
namespace {

using test::GgufModel;
using test::u32;
using test::with_key;
using test::without_key;

fs::path fixtures() { return test::shared_dir() / "fixtures"; }

fs::path write(const GgufModel& g, const std::string& name) {
  const fs::path file = test::scratch_dir("gguf_" + name) / (name + ".gguf");
  write_gguf(file, g.metadata, g.tensors);
  return file;
}

// Every reference of `refs` (or, with `prefix` > 0, of its first `prefix` positions) checked on the GGUF file.
void expect_matches_references(const fs::path& gguf, const fs::path& refs, int64_t n_layers, int64_t prefix = 0) {
  const fs::path used = prefix > 0 ? test::prefix_refs(refs, prefix, gguf.parent_path() / "prefix_refs.safetensors") : refs;
  test::FixtureReport report;
  const int compared = test::check_fixture(gguf, used, &report);
  EXPECT_GE(compared, 2 * (1 + n_layers * 6 + 1)) << gguf;  // embeddings, 6 hooks per layer, logits (x 2 sequences)
  std::cout << fmt::format("[fidelity] {:<34} {:4d} tensors{}, worst error/tolerance {:.4f} ({})\n",
                           gguf.filename().string(), compared, prefix > 0 ? fmt::format(" (first {} positions)", prefix) : "",
                           report.worst_ratio, report.worst_key);
}

// Loading `g` fails with an error containing `message`.
void expect_load_error(const std::string& what, const GgufModel& g, const std::string& message) {
  const fs::path file = write(g, "broken");
  try {
    load_model(file);
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << what << ": " << e.what();
  }
}

// ---------------------------------------------------------------------------------------------------------
// GPT-2 (arch "gpt2").

TEST(GgufGpt2, ConvertedFixtureMatchesEveryReference) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2/model.safetensors");
  for (const char* dir : {"gpt2", "gpt2/hub_layout"}) {
    const fs::path gguf = write(test::convert_hf_gpt2(fixtures() / dir), "gpt2");
    auto model = load_model(gguf);
    const ModelConfig& c = model->config;
    EXPECT_EQ(c.family, "gpt2");
    EXPECT_EQ(c.format, "gguf");
    EXPECT_EQ(c.activation, Activation::GeluTanh);
    EXPECT_EQ(c.d_mlp, 256);
    EXPECT_EQ(c.d_vocab, 101);
    EXPECT_FALSE(c.tied_embeddings) << "llama.cpp writes the tied head out as output.weight";
    expect_matches_references(gguf, fixtures() / "gpt2" / "refs.safetensors", 3);
  }
}

// Metadata or tensors the forward pass cannot use are clear errors naming the key or tensor.
TEST(GgufGpt2, BrokenMetadataAndTensorsAreClearErrors) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2/model.safetensors");
  const GgufModel good = test::convert_hf_gpt2(fixtures() / "gpt2");
  expect_load_error("no epsilon", without_key(good, "gpt2.attention.layer_norm_epsilon"),
                    "GGUF metadata has no 'gpt2.attention.layer_norm_epsilon'");
  expect_load_error("grouped kv heads", with_key(good, "gpt2.attention.head_count_kv", u32(2)),
                    "gpt2.attention.head_count_kv 2 differs from head_count 4");
  expect_load_error("heads not dividing", with_key(good, "gpt2.attention.head_count", u32(5)),
                    "gpt2.embedding_length 64 is not a multiple of the head count 5");
  expect_load_error("unknown architecture", with_key(good, "general.architecture", GgufValue::string("falcon")),
                    "GGUF architecture 'falcon' is not supported (supported: llama, qwen2, qwen3, phi3, gpt2, gptneox; Mistral is written as llama)");
  GgufModel g = good;
  for (auto& t : g.tensors) {
    if (t.name != "blk.1.attn_qkv.weight") continue;
    const std::string stored = t.bytes;  // transposed back: HF's Conv1D [in, out] layout
    t = test::transposed(t.name, TensorInfo{t.name, t.dtype, t.shape, reinterpret_cast<const std::byte*>(stored.data()), stored.size(), ""});
  }
  expect_load_error("untransposed c_attn", g, "tensor 'blk.1.attn_qkv.weight' has wrong shape; expected [192, 64], got [64, 192]");
  g = good;
  std::erase_if(g.tensors, [](const GgufTensor& t) { return t.name == "position_embd.weight"; });
  expect_load_error("no positions", g, "missing tensor 'position_embd.weight'");
}

// ---------------------------------------------------------------------------------------------------------
// Mistral (arch "llama"), Qwen2 (arch "qwen2") and Qwen3 (arch "qwen3"). llama.cpp's converter writes none of
// these families' sliding windows, and llama.cpp runs every layer over the whole context: the GGUF files agree with
// the windowed references up to the window (6 positions), where it cuts nothing; past it they are different models.

constexpr int64_t kGeneratedWindow = 6;  // tests/refgen/extra_families.py: mistral, qwen2 and qwen3 sliding_window

TEST(GgufMistral, ConvertedAsLlamaMatchesReferencesWithinTheWindow) {
  TDYN_REQUIRE_GENERATED(root, extra_family_fixtures);
  const fs::path gguf = write(test::convert_hf_llama(root / "mistral"), "mistral");
  auto model = load_model(gguf);
  const ModelConfig& c = model->config;
  EXPECT_EQ(c.family, "llama");
  EXPECT_EQ(c.rope.style, RopeStyle::Interleaved);
  EXPECT_EQ(c.n_kv_heads, 2);
  for (int64_t l = 0; l < c.n_layers; ++l) EXPECT_EQ(c.layer(l).sliding_window, 0) << "layer " << l;
  expect_matches_references(gguf, root / "mistral" / "refs.safetensors", c.n_layers, kGeneratedWindow);
}

TEST(GgufQwen2, ConvertedFixtureMatchesReferencesWithinTheWindow) {
  TDYN_REQUIRE_GENERATED(root, extra_family_fixtures);
  const fs::path gguf = write(test::convert_hf_llama(root / "qwen2", {.arch = "qwen2", .write_vocab_size = false}), "qwen2");
  auto model = load_model(gguf);
  const ModelConfig& c = model->config;
  EXPECT_EQ(c.family, "qwen2");
  EXPECT_EQ(c.rope.style, RopeStyle::RotateHalf);
  EXPECT_TRUE(c.attn_qkv_bias);
  EXPECT_FALSE(c.attn_o_bias);
  EXPECT_TRUE(c.tied_embeddings) << "the tied head is not written: llama.cpp reuses token_embd";
  for (int64_t l = 0; l < c.n_layers; ++l) EXPECT_EQ(c.layer(l).sliding_window, 0) << "layer " << l;
  expect_matches_references(gguf, root / "qwen2" / "refs.safetensors", c.n_layers, kGeneratedWindow);
}

TEST(GgufQwen2, BrokenMetadataAndTensorsAreClearErrors) {
  TDYN_REQUIRE_GENERATED(root, extra_family_fixtures);
  const GgufModel good = test::convert_hf_llama(root / "qwen2", {.arch = "qwen2", .write_vocab_size = false});
  expect_load_error("no epsilon", without_key(good, "qwen2.attention.layer_norm_rms_epsilon"),
                    "GGUF metadata has no 'qwen2.attention.layer_norm_rms_epsilon'");
  expect_load_error("no context", without_key(good, "qwen2.context_length"), "GGUF metadata has no 'qwen2.context_length'");
  expect_load_error("partial rotary", with_key(good, "qwen2.rope.dimension_count", u32(8)),
                    "GGUF qwen2.rope.dimension_count is 8 but the head dimension is 16");
  expect_load_error("YaRN", with_key(good, "qwen2.rope.scaling.type", GgufValue::string("yarn")),
                    "GGUF qwen2.rope.scaling.type 'yarn' is not supported");
  GgufModel g = good;
  std::erase_if(g.tensors, [](const GgufTensor& t) { return t.name == "blk.1.attn_k.bias"; });
  expect_load_error("no k bias", g, "missing tensor 'blk.1.attn_k.bias'");
}

TEST(GgufQwen3, ConvertedFixtureMatchesReferencesWithinTheWindow) {
  TDYN_REQUIRE_GENERATED(root, extra_family_fixtures);
  const fs::path gguf = write(test::convert_hf_llama(root / "qwen3", {.arch = "qwen3", .write_vocab_size = false}), "qwen3");
  auto model = load_model(gguf);
  const ModelConfig& c = model->config;
  EXPECT_EQ(c.family, "qwen3");
  EXPECT_EQ(c.rope.style, RopeStyle::RotateHalf);
  EXPECT_EQ(c.qk_norm, QKNorm::PerHead);
  EXPECT_EQ(c.d_head, 24) << "head_dim comes from attention.key_length, not embedding_length / heads";
  EXPECT_TRUE(c.attn_qkv_bias && c.attn_o_bias) << "the fixture's biases are in the file";
  EXPECT_TRUE(c.tied_embeddings);
  for (int64_t l = 0; l < c.n_layers; ++l) EXPECT_EQ(c.layer(l).sliding_window, 0) << "layer " << l;
  expect_matches_references(gguf, root / "qwen3" / "refs.safetensors", c.n_layers, kGeneratedWindow);
}

TEST(GgufQwen3, BrokenMetadataAndTensorsAreClearErrors) {
  TDYN_REQUIRE_GENERATED(root, extra_family_fixtures);
  const GgufModel good = test::convert_hf_llama(root / "qwen3", {.arch = "qwen3", .write_vocab_size = false});
  expect_load_error("partial rotary", with_key(good, "qwen3.rope.dimension_count", u32(12)),
                    "GGUF qwen3.rope.dimension_count is 12 but the head dimension is 24");
  expect_load_error("YaRN", with_key(good, "qwen3.rope.scaling.type", GgufValue::string("yarn")),
                    "GGUF qwen3.rope.scaling.type 'yarn' is not supported");
  expect_load_error("value heads", with_key(good, "qwen3.attention.value_length", u32(16)),
                    "qwen3.attention.value_length 16 differs from key_length 24");
  GgufModel g = good;
  std::erase_if(g.tensors, [](const GgufTensor& t) { return t.name == "blk.2.attn_q_norm.weight"; });
  expect_load_error("no q norm", g, "missing tensor 'blk.2.attn_q_norm.weight'");
  // Without the head lengths the head is embedding_length / heads = 16 wide, and the q/k/v rows do not fit it.
  expect_load_error("no head lengths", without_key(without_key(good, "qwen3.attention.key_length"), "qwen3.attention.value_length"),
                    "'blk.0.attn_q.weight' has wrong shape");
}

TEST(GgufMistral, BrokenMetadataIsAClearError) {
  TDYN_REQUIRE_GENERATED(root, extra_family_fixtures);
  const GgufModel good = test::convert_hf_llama(root / "mistral");
  expect_load_error("no blocks", without_key(good, "llama.block_count"), "GGUF metadata has no 'llama.block_count'");
  expect_load_error("kv heads", with_key(good, "llama.attention.head_count_kv", u32(3)), "multiple of n_kv_heads");
}

// ---------------------------------------------------------------------------------------------------------
// Phi-3 (arch "phi3"): both fusions kept, the window kept, partial rotary embeddings.

TEST(GgufPhi3, ConvertedFixtureMatchesEveryReference) {
  TDYN_REQUIRE_GENERATED(root, extra_family_fixtures);
  const fs::path gguf = write(test::convert_hf_phi3(root / "phi3"), "phi3");
  auto model = load_model(gguf);
  const ModelConfig& c = model->config;
  const ModelConfig hf = read_hf_config(root / "phi3" / "config.json");
  EXPECT_EQ(c.family, "phi3");
  EXPECT_EQ(c.rope.style, RopeStyle::RotateHalf);
  EXPECT_EQ(c.rope.rotary_dim(c.d_head), hf.rope.rotary_dim(hf.d_head));
  EXPECT_EQ(c.rope.rotary_dim(c.d_head), c.d_head / 2);
  for (int64_t l = 0; l < c.n_layers; ++l) EXPECT_EQ(c.layer(l).sliding_window, hf.layer(l).sliding_window);
  // The fused tensors are used in place: k starts after q's rows, up after gate's.
  const LayerWeights& L = model->weights.layers[1];
  const std::byte* qkv = model->store.get("blk.1.attn_qkv.weight").data;
  const std::byte* gate_up = model->store.get("blk.1.ffn_up.weight").data;
  const int64_t row = 4 * c.d_model;
  EXPECT_EQ(L.k.w.data, qkv + c.q_dim() * row);
  EXPECT_EQ(L.up.w.data, gate_up + c.d_mlp * row);
  expect_matches_references(gguf, root / "phi3" / "refs.safetensors", c.n_layers);
}

TEST(GgufPhi3, BrokenMetadataAndTensorsAreClearErrors) {
  TDYN_REQUIRE_GENERATED(root, extra_family_fixtures);
  const GgufModel good = test::convert_hf_phi3(root / "phi3");
  expect_load_error("no width", without_key(good, "phi3.embedding_length"), "GGUF metadata has no 'phi3.embedding_length'");
  expect_load_error("odd rotary dims", with_key(good, "phi3.rope.dimension_count", u32(3)),
                    "GGUF phi3.rope.dimension_count is 3; expected an even number from 0 to the head dimension 16");
  expect_load_error("window as text", with_key(good, "phi3.attention.sliding_window", GgufValue::string("7")),
                    "'phi3.attention.sliding_window' must be an integer");
  GgufModel g = good;
  std::vector<float> factors(4, 1.0f);
  g.tensors.push_back(gguf_f32_tensor("rope_factors_long.weight", {4}, factors.data()));
  expect_load_error("LongRoPE", g, "GGUF phi3 tensor 'rope_factors_long.weight' (Phi-3 LongRoPE) is not supported");
  g = good;
  for (auto& t : g.tensors)
    if (t.name == "blk.0.ffn_up.weight") t.name = "blk.0.ffn_gate.weight";  // gate | up written unfused is not phi3
  expect_load_error("renamed fusion", g, "missing tensor 'blk.0.ffn_up.weight'");
}

// ---------------------------------------------------------------------------------------------------------
// GPT-NeoX (arch "gptneox"): query_key_value regrouped to q | k | v, parallel and sequential blocks.

class GgufGptNeox : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufGptNeox, ConvertedFixtureMatchesEveryReference) {
  TDYN_REQUIRE_GENERATED(root, gpt_neox_fixtures);
  const fs::path dir = root / GetParam();
  const fs::path gguf = write(test::convert_hf_gpt_neox(dir), std::string("gpt_neox_") + GetParam());
  auto model = load_model(gguf);
  const ModelConfig& c = model->config;
  const ModelConfig hf = read_hf_config(dir / "config.json");
  EXPECT_EQ(c.family, "gpt_neox");
  EXPECT_EQ(c.parallel_residual, std::string(GetParam()) == "parallel");
  EXPECT_EQ(c.activation, Activation::GeluErf);
  EXPECT_EQ(c.rope.rotary_dim(c.d_head), hf.rope.rotary_dim(hf.d_head));
  EXPECT_FALSE(c.tied_embeddings);
  expect_matches_references(gguf, dir / "refs.safetensors", c.n_layers);
}

INSTANTIATE_TEST_SUITE_P(Blocks, GgufGptNeox, ::testing::Values("parallel", "sequential"));

TEST(GgufGptNeoxErrors, BrokenMetadataIsAClearError) {
  TDYN_REQUIRE_GENERATED(root, gpt_neox_fixtures);
  const GgufModel good = test::convert_hf_gpt_neox(root / "parallel");
  expect_load_error("no parallel flag", without_key(good, "gptneox.use_parallel_residual"),
                    "GGUF metadata has no 'gptneox.use_parallel_residual'");
  expect_load_error("flag as integer", with_key(good, "gptneox.use_parallel_residual", u32(1)),
                    "GGUF key 'gptneox.use_parallel_residual' must be a bool");
  expect_load_error("no epsilon", without_key(good, "gptneox.attention.layer_norm_epsilon"),
                    "GGUF metadata has no 'gptneox.attention.layer_norm_epsilon'");
  expect_load_error("rotary past the head", with_key(good, "gptneox.rope.dimension_count", u32(18)),
                    "GGUF gptneox.rope.dimension_count is 18; expected an even number from 0 to the head dimension 16");
  expect_load_error("grouped kv heads", with_key(good, "gptneox.attention.head_count_kv", u32(2)),
                    "gptneox.attention.head_count_kv 2 differs from head_count 4");
}

// ---------------------------------------------------------------------------------------------------------
// Architectures llama.cpp defines for the families around tdyn's that tdyn cannot run: refused, saying why.

TEST(GgufRefusedArchitectures, SayWhy) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2/model.safetensors");
  const GgufModel gpt2 = test::convert_hf_gpt2(fixtures() / "gpt2");
  for (const auto& [arch, why] : std::vector<std::pair<std::string, std::string>>{
           {"bert", "llama.cpp's converter writes BERT as an embedding model, without the masked-LM head"},
           {"gemma3", "tdyn runs Gemma 4 only"},
           {"olmo2", "tdyn runs OLMo 3 only, from Hugging Face files: its per-layer-type RoPE"}}) {
    expect_load_error(arch, with_key(gpt2, "general.architecture", GgufValue::string(arch)),
                      fmt::format("GGUF architecture '{}' is not supported: {}", arch, why));
  }
}

}  // namespace
}  // namespace tdyn
