// GGUF: writer -> reader round trip, HF Llama fixtures converted to GGUF and run against the float64
// references, and one deliberately corrupt file per failure kind the reader must reject.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <span>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/safetensors.h"
#include "model/gguf_config.h"
#include "model/init.h"
#include "model/loader.h"
#include "model/transformer.h"
#include "gguf_convert.h"
#include "test_util.h"

namespace tdyn {
namespace {

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// ---------------------------------------------------------------------------------------------------------
// (a) Round trip: every metadata value type, every tensor dtype, bit-exact.

GgufMetadata every_value_type(uint32_t alignment) {
  std::vector<GgufValue> ragged;  // an array of arrays of different lengths and element types
  ragged.push_back(GgufValue::int32s({1, -2, 3}));
  ragged.push_back(GgufValue::strings({"x"}));
  ragged.push_back(GgufValue::array(GgufType::Float64, {}));
  return {
      {"general.architecture", GgufValue::string("llama")},
      {"general.alignment", GgufValue::uint32(alignment)},
      {"test.uint8", GgufValue::uint8(200)},
      {"test.int8", GgufValue::int8(-100)},
      {"test.uint16", GgufValue::uint16(60000)},
      {"test.int16", GgufValue::int16(-30000)},
      {"test.uint32", GgufValue::uint32(4000000000u)},
      {"test.int32", GgufValue::int32(-2000000000)},
      {"test.float32", GgufValue::float32(0.1f)},
      {"test.bool", GgufValue::boolean(true)},
      {"test.string", GgufValue::string("h\xc3\xa9llo, \"world\"\n")},
      {"test.empty_string", GgufValue::string("")},
      {"test.uint64", GgufValue::uint64((uint64_t{1} << 63) + 5)},
      {"test.int64", GgufValue::int64(-(int64_t{1} << 62) - 7)},
      {"test.float64", GgufValue::float64(3.141592653589793)},
      {"test.array.bools", GgufValue::array(GgufType::Bool, {GgufValue::boolean(false), GgufValue::boolean(true)})},
      {"test.array.uint8", GgufValue::array(GgufType::UInt8, {GgufValue::uint8(0), GgufValue::uint8(255)})},
      {"test.array.empty", GgufValue::array(GgufType::UInt32, {})},
      {"test.array.nested", GgufValue::array(GgufType::Array, std::move(ragged))},
      {"tokenizer.ggml.tokens", GgufValue::strings({"<unk>", "<s>", "</s>", "\xe2\x96\x81the"})},
      {"tokenizer.ggml.scores", GgufValue::float32s({0.0f, -1.5f, -2.25f, -1e-8f})},
      {"tokenizer.ggml.token_type", GgufValue::int32s({2, 3, 3, 1})},
  };
}

std::vector<GgufTensor> every_dtype() {
  return {
      {"blk.0.attn_q.weight", DType::F32, {3, 5}, random_bytes(3 * 5 * 4, 1)},
      {"half", DType::F16, {2, 3, 4}, random_bytes(2 * 3 * 4 * 2, 2)},
      {"brain", DType::BF16, {7}, random_bytes(7 * 2, 3)},
      {"four_d", DType::F32, {2, 1, 3, 2}, random_bytes(2 * 1 * 3 * 2 * 4, 4)},
      {"empty", DType::F32, {0, 4}, ""},
  };
}

TEST(GgufRoundTrip, EveryValueTypeAndDtypeBitExact) {
  for (uint32_t alignment : {32u, 1u, 64u}) {
    SCOPED_TRACE(fmt::format("alignment {}", alignment));
    const fs::path file = test::scratch_dir("gguf_round_trip") / "all.gguf";
    const GgufMetadata metadata = every_value_type(alignment);
    const std::vector<GgufTensor> tensors = every_dtype();
    write_gguf(file, metadata, tensors);
    ASSERT_TRUE(is_gguf_file(file));

    TensorStore store;
    read_gguf(file, store);
    EXPECT_EQ(store.format, "gguf");
    ASSERT_EQ(store.metadata().size(), metadata.size());
    for (const auto& [key, value] : metadata) {
      ASSERT_TRUE(store.metadata().contains(key)) << key;
      EXPECT_EQ(store.metadata()[key], value.to_json()) << key;
      // JSON compares numbers by value across kinds; the kind (unsigned, signed, float) must match too.
      EXPECT_EQ(store.metadata()[key].type(), value.to_json().type()) << key;
    }
    EXPECT_EQ(store.metadata()["test.uint64"].get<uint64_t>(), (uint64_t{1} << 63) + 5);
    EXPECT_EQ(store.metadata()["test.float32"].get<double>(), static_cast<double>(0.1f));
    EXPECT_EQ(store.metadata()["test.array.nested"][1][0], "x");
    EXPECT_EQ(store.metadata()["tokenizer.ggml.tokens"].size(), 4u);

    ASSERT_EQ(store.size(), tensors.size());
    for (const auto& t : tensors) {
      const TensorInfo& got = store.get(t.name);
      EXPECT_EQ(got.dtype, t.dtype) << t.name;
      EXPECT_EQ(got.shape, t.shape) << t.name;
      EXPECT_EQ(test::raw_bytes(got), t.bytes) << t.name;
      if (!t.bytes.empty()) EXPECT_EQ(reinterpret_cast<uintptr_t>(got.data) % alignment, 0u) << t.name;
    }
    // Conversions through the store: BF16 is the top half of a float32.
    auto brain = store.floats("brain");
    uint16_t first;
    std::memcpy(&first, tensors[2].bytes.data(), 2);
    uint32_t bits = static_cast<uint32_t>(first) << 16;
    float expected;
    std::memcpy(&expected, &bits, 4);
    EXPECT_EQ(std::memcmp(&brain.data()[0], &expected, 4), 0);
  }
}

TEST(GgufWriter, RejectsWhatLlamaCppCouldNotRead) {
  const fs::path dir = test::scratch_dir("gguf_writer_rejects");
  auto expect_error = [&](const GgufMetadata& m, const std::vector<GgufTensor>& t, const std::string& needle) {
    try {
      write_gguf(dir / "x.gguf", m, t);
      ADD_FAILURE() << "expected an error containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  GgufTensor ok{"w", DType::F32, {2}, std::string(8, '\0')};
  expect_error({{"a", GgufValue::uint8(1)}, {"a", GgufValue::uint8(2)}}, {}, "'a' given twice");
  expect_error({}, {ok, ok}, "'w' given twice");
  expect_error({}, {{std::string(64, 'n'), DType::F32, {1}, std::string(4, '\0')}}, "64 bytes");
  expect_error({}, {{"five", DType::F32, {1, 1, 1, 1, 1}, std::string(4, '\0')}}, "5 dimensions");
  expect_error({}, {{"i", DType::I32, {1}, std::string(4, '\0')}}, "dtype I32");
  expect_error({}, {{"q", DType::Q8_0, {2, 16}, std::string(34, '\0')}}, "rows of 16 values are not a whole number");
  expect_error({{"general.alignment", GgufValue::uint32(24)}}, {}, "power of two");
  expect_error({{"general.alignment", GgufValue::uint64(32)}}, {}, "must be a uint32");
}

// ---------------------------------------------------------------------------------------------------------
// (b) HF Llama fixtures converted to GGUF, run, and compared with the float64 references.

// An HF Llama directory converted to a GGUF file as llama.cpp's converter does (tests/gguf_convert.h).
void convert_hf_llama(const fs::path& hf_dir, const fs::path& out, bool write_vocab_size,
                      std::optional<DType> quantize = std::nullopt) {
  const test::GgufModel g = test::convert_hf_llama(hf_dir, {.write_vocab_size = write_vocab_size, .quantize = quantize});
  write_gguf(out, g.metadata, g.tensors);
}

// Runs the GGUF model on the reference sequences and compares logits with the manifest tolerance (or a
// looser one: |a - b| <= rtol |b| + atol_of_max * max|ref|).
void expect_logits_match(const fs::path& gguf, const fs::path& refs_file, double rtol = 1e-4, double atol_of_max = 2e-5) {
  auto model = load_model(gguf);
  TensorStore refs;
  read_safetensors(refs_file, refs);
  Transformer transformer(model);
  for (const char* seq : {"seq0", "seq1"}) {
    std::vector<int32_t> ids;
    for (int64_t id : refs.ints(fmt::format("{}.input_ids", seq))) ids.push_back(static_cast<int32_t>(id));
    Tensor logits = transformer.forward(ids);
    std::vector<double> ref = refs.doubles(fmt::format("{}.logits", seq));
    ASSERT_EQ(logits.shape, (Shape{static_cast<int64_t>(ids.size()), model->config.d_vocab}));
    ASSERT_EQ(static_cast<size_t>(logits.size()), ref.size());
    double max_ref = 0;
    for (double v : ref) max_ref = std::max(max_ref, std::abs(v));
    auto c = test::compare(logits.ptr(), ref.data(), ref.size(), rtol, atol_of_max * max_ref);
    std::string what = fmt::format("{} {}.logits", gguf.filename().string(), seq);
    EXPECT_TRUE(c.ok) << c.describe(what);
    std::cout << "  " << c.describe(what) << "\n";
  }
}

TEST(GgufLlama, ConvertedFixtureMatchesReferenceLogits) {
  TDYN_REQUIRE_SHARED("fixtures/llama/model.safetensors");
  const fs::path fixture = test::shared_dir() / "fixtures/llama";
  const fs::path gguf = test::scratch_dir("gguf_llama") / "llama.gguf";
  convert_hf_llama(fixture, gguf, /*write_vocab_size=*/true);

  auto model = load_model(gguf);
  const ModelConfig& c = model->config;
  EXPECT_EQ(c.format, "gguf");
  EXPECT_EQ(c.rope.style, RopeStyle::Interleaved);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.d_head, 16);
  EXPECT_EQ(c.d_vocab, 256);
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_id, 2);
  // The divisors reproduce the reference's llama3 inverse frequencies (float32 storage of the divisors).
  ASSERT_EQ(c.rope.freq_divisors.size(), 8u);
  TensorStore refs;
  read_safetensors(fixture / "refs.safetensors", refs);
  test::expect_close(rope_inv_freq(c.rope, c.d_head), refs.doubles("rope.inv_freq"), 1e-7, 0, "rope.inv_freq");

  expect_logits_match(gguf, fixture / "refs.safetensors");
}

TEST(GgufLlama, TiedFixtureWithoutVocabKeyMatchesReferenceLogits) {
  TDYN_REQUIRE_SHARED("fixtures/llama_tied/model.safetensors");
  const fs::path fixture = test::shared_dir() / "fixtures/llama_tied";
  const fs::path gguf = test::scratch_dir("gguf_llama_tied") / "llama_tied.gguf";
  convert_hf_llama(fixture, gguf, /*write_vocab_size=*/false);

  auto model = load_model(gguf);
  EXPECT_TRUE(model->config.tied_embeddings);
  EXPECT_EQ(model->config.n_kv_heads, 1);
  EXPECT_EQ(model->config.d_vocab, 200);  // from token_embd.weight
  EXPECT_DOUBLE_EQ(model->config.rope.theta, 500000.0);
  EXPECT_TRUE(model->config.rope.freq_divisors.empty());
  expect_logits_match(gguf, fixture / "refs.safetensors");
}

TEST(GgufLlama, Bf16FixtureMatchesItsReferenceLogits) {
  TDYN_REQUIRE_SHARED("fixtures/llama/bf16/model.safetensors");
  const fs::path fixture = test::shared_dir() / "fixtures/llama/bf16";
  const fs::path gguf = test::scratch_dir("gguf_llama_bf16") / "llama_bf16.gguf";
  convert_hf_llama(fixture, gguf, /*write_vocab_size=*/true);
  auto model = load_model(gguf);
  EXPECT_EQ(model->store.get("blk.0.attn_q.weight").dtype, DType::BF16);
  expect_logits_match(gguf, fixture / "refs.safetensors");
}

// Quantized weights are used in place by the matrix products (kernels/products.h). Q8_0 moves each weight of this
// fixture by about 0.5% (RMS, relative), which its three layers amplify to a few percent of the logits, in
// proportion to the step (Q5_0's, 8x coarser, gives 0.33); a wrongly decoded block would move them by their
// own size.
TEST(GgufLlama, Q8_0FixtureStaysCloseToReferenceLogits) {
  TDYN_REQUIRE_SHARED("fixtures/llama/model.safetensors");
  const fs::path fixture = test::shared_dir() / "fixtures/llama";
  const fs::path gguf = test::scratch_dir("gguf_llama_q8_0") / "llama_q8_0.gguf";
  convert_hf_llama(fixture, gguf, /*write_vocab_size=*/true, DType::Q8_0);
  auto model = load_model(gguf);
  EXPECT_EQ(model->store.get("blk.0.attn_q.weight").dtype, DType::Q8_0);
  EXPECT_EQ(model->store.get("token_embd.weight").dtype, DType::Q8_0);
  EXPECT_EQ(model->store.get("blk.0.ffn_down.weight").dtype, DType::F32);  // rows of 172: no whole blocks
  TensorStore refs;
  read_safetensors(fixture / "refs.safetensors", refs);
  Transformer transformer(model);
  for (const char* seq : {"seq0", "seq1"}) {
    std::vector<int32_t> ids;
    for (int64_t id : refs.ints(fmt::format("{}.input_ids", seq))) ids.push_back(static_cast<int32_t>(id));
    const Tensor logits = transformer.forward(ids);
    const std::vector<double> ref = refs.doubles(fmt::format("{}.logits", seq));
    ASSERT_EQ(static_cast<size_t>(logits.size()), ref.size());
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      diff2 += (logits.ptr()[i] - ref[i]) * (logits.ptr()[i] - ref[i]);
      ref2 += ref[i] * ref[i];
    }
    const double relative_rms = std::sqrt(diff2 / ref2);
    std::cout << "  llama_q8_0.gguf " << seq << ".logits: relative RMS difference " << relative_rms << "\n";
    EXPECT_LT(relative_rms, 0.06) << seq;  // measured 0.040 and 0.030; Q5_0 (8x coarser) gives 0.33
  }
}

// Relative RMS difference of `a` from `b`.
double relative_rms(std::span<const float> a, std::span<const float> b) {
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff2 += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    ref2 += double(b[i]) * double(b[i]);
  }
  return std::sqrt(diff2 / ref2);
}

// K-quants need rows of 256 values: a random Llama of that width (d_mlp 512), every matrix stored as Q8_0 or Q4_K
// and used in place, against its float32 source. Each format moves the logits in proportion to how far it moves
// the weights (measured: Q8_0 0.53 % of the weights' RMS, 1.3 % of the logits'; Q4_K 8.0 % and 20 %), with the
// same amplification for both; a block decoded wrongly, or a product reading the wrong rows, would break that.
TEST(GgufLlama, BlockQuantizedModelsStayCloseToTheirFloat32Source) {
  const fs::path dir = test::scratch_dir("gguf_llama_k_quants");
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 256},
                                 {"intermediate_size", 512}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                                 {"head_dim", 64}, {"num_hidden_layers", 2}, {"hidden_act", "silu"},
                                 {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
                                 {"vocab_size", 256}, {"bos_token_id", 1}, {"eos_token_id", 2},
                                 {"tie_word_embeddings", false}, {"torch_dtype", "float32"}};
  write_random_init(config, dir / "hf", 7);
  const std::vector<int32_t> ids = {1, 17, 99, 3, 250, 42, 8, 8, 130, 77, 5, 64};
  auto source = load_model(dir / "hf");
  const Tensor reference = Transformer(source).forward(ids);
  const FloatBuffer down = source->store.floats("model.layers.1.mlp.down_proj.weight");
  std::map<DType, double> amplification;
  for (DType type : {DType::Q8_0, DType::Q4_K}) {
    const fs::path gguf = dir / fmt::format("model_{}.gguf", dtype_name(type));
    convert_hf_llama(dir / "hf", gguf, /*write_vocab_size=*/true, type);
    auto model = load_model(gguf);
    for (const char* name : {"token_embd.weight", "blk.0.attn_q.weight", "blk.1.ffn_down.weight", "output.weight"})
      EXPECT_EQ(model->store.get(name).dtype, type) << name;
    const FloatBuffer quantized = model->store.floats("blk.1.ffn_down.weight");
    const double weights = relative_rms({quantized.data(), quantized.size()}, {down.data(), down.size()});
    const double logits = relative_rms(Transformer(model).forward(ids).data, reference.data);
    std::cout << "  " << dtype_name(type) << ": relative RMS difference from float32: weights " << weights << ", logits " << logits << "\n";
    EXPECT_LT(weights, type == DType::Q8_0 ? 0.01 : 0.12) << dtype_name(type);
    EXPECT_LT(logits, 4 * weights) << dtype_name(type);
    amplification[type] = logits / weights;
  }
  EXPECT_NEAR(amplification[DType::Q4_K] / amplification[DType::Q8_0], 1.0, 0.5);
}

TEST(GgufConfig, RejectsWhatTheForwardPassCannotRun) {
  const fs::path dir = test::scratch_dir("gguf_config_rejects");
  auto base = [] {
    return GgufMetadata{
        {"general.architecture", GgufValue::string("llama")},
        {"llama.context_length", GgufValue::uint32(16)},
        {"llama.embedding_length", GgufValue::uint32(8)},
        {"llama.block_count", GgufValue::uint32(1)},
        {"llama.feed_forward_length", GgufValue::uint32(16)},
        {"llama.attention.head_count", GgufValue::uint32(2)},
        {"llama.attention.layer_norm_rms_epsilon", GgufValue::float32(1e-5f)},
    };
  };
  std::vector<float> embed(5 * 8, 0.5f);
  std::vector<GgufTensor> tensors = {gguf_f32_tensor("token_embd.weight", {5, 8}, embed.data())};
  auto expect_error = [&](GgufMetadata m, const std::string& needle) {
    write_gguf(dir / "m.gguf", m, tensors);
    TensorStore store;
    read_gguf(dir / "m.gguf", store);
    try {
      gguf_config(store, "m.gguf");
      ADD_FAILURE() << "expected an error containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  {
    TensorStore store;
    write_gguf(dir / "ok.gguf", base(), tensors);
    read_gguf(dir / "ok.gguf", store);
    ModelConfig c = gguf_config(store, "ok.gguf");
    EXPECT_EQ(c.d_vocab, 5);
    EXPECT_EQ(c.n_kv_heads, 2);
    EXPECT_EQ(c.d_head, 4);
    EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  }
  auto with = [&](const std::string& key, GgufValue v) {
    GgufMetadata m = base();
    for (auto& [k, value] : m) {
      if (k == key) { value = v; return m; }
    }
    m.push_back({key, v});
    return m;
  };
  auto without = [&](const std::string& key) {
    GgufMetadata m = base();
    std::erase_if(m, [&](const auto& kv) { return kv.first == key; });
    return m;
  };
  expect_error(with("general.architecture", GgufValue::string("falcon")), "architecture 'falcon' is not supported (supported: llama, qwen2, qwen3, phi3, gpt2, gptneox; Mistral is written as llama)");
  expect_error(without("llama.block_count"), "no 'llama.block_count'");
  expect_error(with("llama.block_count", GgufValue::string("3")), "'llama.block_count' must be an integer, got a string");
  expect_error(with("llama.rope.dimension_count", GgufValue::uint32(2)), "partial rotary");
  expect_error(with("llama.rope.scaling.type", GgufValue::string("yarn")), "'yarn' is not supported");
  expect_error(with("llama.attention.head_count_kv", GgufValue::uint32(3)), "multiple of n_kv_heads");
  expect_error(with("llama.expert_count", GgufValue::uint32(8)), "mixture-of-experts");
  {
    GgufMetadata m = with("llama.rope.scaling.type", GgufValue::string("linear"));
    m.push_back({"llama.rope.scaling.factor", GgufValue::float32(4.0f)});
    write_gguf(dir / "linear.gguf", m, tensors);
    TensorStore store;
    read_gguf(dir / "linear.gguf", store);
    ModelConfig c = gguf_config(store, "linear.gguf");
    EXPECT_EQ(c.rope.scaling, "linear");
    EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  }
  {
    std::vector<float> wrong(3, 1.0f);
    auto with_freqs = tensors;
    with_freqs.push_back(gguf_f32_tensor("rope_freqs.weight", {3}, wrong.data()));
    write_gguf(dir / "freqs.gguf", base(), with_freqs);
    TensorStore store;
    read_gguf(dir / "freqs.gguf", store);
    try {
      gguf_config(store, "freqs.gguf");
      ADD_FAILURE() << "expected a rope_freqs.weight shape error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'rope_freqs.weight' has wrong shape; expected [2]"), std::string::npos) << e.what();
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// (c) Corrupt files: each must throw tdyn::Error with a message naming the problem; none may crash or hang.

// ggml type ids written out, rather than taken from the reader's own table.
constexpr uint32_t kGgmlF32 = 0, kGgmlQ8_0 = 8, kGgmlQ8_1 = 9, kGgmlQ2_K = 10, kGgmlQ4_K = 12;

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

std::string kv_string(const std::string& key, const std::string& value) {
  std::string out;
  put_string(out, key);
  put<uint32_t>(out, static_cast<uint32_t>(GgufType::String));
  put_string(out, value);
  return out;
}

// A key with a raw type id and payload, for values the writer would refuse to produce.
std::string kv_raw(const std::string& key, uint32_t type, const std::string& payload) {
  std::string out;
  put_string(out, key);
  put<uint32_t>(out, type);
  return out + payload;
}

std::string tensor_info(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
  std::string out;
  put_string(out, name);
  put<uint32_t>(out, static_cast<uint32_t>(ne.size()));
  for (uint64_t d : ne) put<uint64_t>(out, d);
  put<uint32_t>(out, type);
  put<uint64_t>(out, offset);
  return out;
}

// A small valid file, field by field, that each corrupt case alters: tensors "a" (F32 [4] at 0) and
// "b" (F32 [2, 2] at 32) after one key.
struct RawGguf {
  uint32_t magic = kGgufMagic, version = 3;
  std::optional<uint64_t> tensor_count, kv_count;  // default: the real counts
  std::vector<std::string> kvs = {kv_string("general.architecture", "llama")};
  std::vector<std::string> infos = {tensor_info("a", {4}, kGgmlF32, 0), tensor_info("b", {2, 2}, kGgmlF32, 32)};
  std::string data = random_bytes(64, 7);

  std::string bytes() const {
    std::string out;
    put<uint32_t>(out, magic);
    put<uint32_t>(out, version);
    put<uint64_t>(out, tensor_count.value_or(infos.size()));
    put<uint64_t>(out, kv_count.value_or(kvs.size()));
    for (const auto& kv : kvs) out += kv;
    for (const auto& info : infos) out += info;
    out.append((32 - out.size() % 32) % 32, '\0');
    return out + data;
  }
};

void write_raw(const fs::path& path, const std::string& bytes) {
  fs::remove(path);  // a fresh file: ext4 flushes to disk on close when an existing file is truncated
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Returns the reader's error message, or "" when the file was accepted.
std::string read_error(const fs::path& path) {
  try {
    TensorStore store;
    read_gguf(path, store);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

struct CorruptCase {
  std::string name;
  std::string bytes;
  std::string expected;  // a substring of the error message
};

std::vector<CorruptCase> corrupt_cases() {
  std::vector<CorruptCase> cases;
  auto add = [&](std::string name, const RawGguf& g, std::string expected) {
    cases.push_back({std::move(name), g.bytes(), std::move(expected)});
  };
  RawGguf g;
  g.magic = 0x58554747;  // "GGUX"
  add("bad_magic", g, "not a GGUF file");
  g = {};
  g.version = 1;
  add("version_1", g, "GGUF version 1 is not supported");
  g = {};
  g.version = 99;
  add("version_99", g, "unsupported GGUF version 99");
  g = {};
  g.version = 0x03000000;
  add("big_endian", g, "big-endian GGUF (version 3)");
  g = {};
  g.tensor_count = ~uint64_t{0};
  add("tensor_count_overflow", g, "claims 18446744073709551615 tensors");
  g = {};
  g.tensor_count = uint64_t{1} << 61;  // times the size of a tensor info would wrap around 2^64
  add("tensor_count_wraps", g, "tensors but the");
  g = {};
  g.kv_count = 1000;
  add("kv_count_past_eof", g, "claims 1000 key/value pairs");
  g = {};
  g.kv_count = 2;  // passes the byte bound, but the file ends after the first pair
  g.infos.clear();
  g.data.clear();
  cases.push_back({"kv_count_past_eof_later", g.bytes().substr(0, 24 + g.kvs[0].size()), "truncated"});
  g = {};
  {
    std::string key;
    put<uint64_t>(key, uint64_t{1} << 40);
    key += "general.name";
    g.kvs.push_back(key);
  }
  add("key_length_past_eof", g, "key of 1099511627776 bytes");
  g = {};
  {
    std::string value;
    put<uint64_t>(value, 1000000);
    value += "short";
    g.kvs.push_back(kv_raw("general.name", static_cast<uint32_t>(GgufType::String), value));
  }
  add("string_length_past_eof", g, "string value of 1000000 bytes");
  g = {};
  {
    std::string array;
    put<uint32_t>(array, static_cast<uint32_t>(GgufType::UInt32));
    put<uint64_t>(array, uint64_t{1} << 61);
    g.kvs.push_back(kv_raw("tokenizer.ggml.token_type", static_cast<uint32_t>(GgufType::Array), array));
  }
  add("array_count_huge", g, "array of 2305843009213693952 uint32 elements");
  g = {};
  {
    std::string array;
    put<uint32_t>(array, static_cast<uint32_t>(GgufType::String));
    put<uint64_t>(array, 40);  // 40 strings need at least 320 bytes
    g.kvs.push_back(kv_raw("tokenizer.ggml.tokens", static_cast<uint32_t>(GgufType::Array), array));
  }
  add("string_array_count_past_eof", g, "array of 40 string elements");
  g = {};
  {
    std::string nested;
    for (int i = 0; i < 20; ++i) {
      put<uint32_t>(nested, static_cast<uint32_t>(GgufType::Array));
      put<uint64_t>(nested, 1);
    }
    g.kvs.push_back(kv_raw("deep", static_cast<uint32_t>(GgufType::Array), nested));
  }
  add("arrays_nested_too_deep", g, "nested deeper than");
  g = {};
  g.kvs.push_back(kv_raw("weird", 13, std::string(8, '\0')));
  add("unknown_value_type", g, "key 'weird': unknown value type 13");
  g = {};
  {
    std::string array;
    put<uint32_t>(array, 77);
    put<uint64_t>(array, 0);
    g.kvs.push_back(kv_raw("weird", static_cast<uint32_t>(GgufType::Array), array));
  }
  add("unknown_array_element_type", g, "unknown element type 77");
  g = {};
  g.kvs.push_back(kv_raw("flag", static_cast<uint32_t>(GgufType::Bool), std::string(1, '\2')));
  add("bool_not_0_or_1", g, "bool value is 2");
  g = {};
  g.kvs.push_back(kv_string("general.architecture", "gpt2"));
  add("duplicate_key", g, "key 'general.architecture': duplicate key");
  g = {};
  {
    std::string v;
    put<uint32_t>(v, 24);
    g.kvs.push_back(kv_raw("general.alignment", static_cast<uint32_t>(GgufType::UInt32), v));
  }
  add("alignment_not_power_of_two", g, "alignment 24 is not a power of two");
  g = {};
  {
    std::string v;
    put<uint64_t>(v, 32);
    g.kvs.push_back(kv_raw("general.alignment", static_cast<uint32_t>(GgufType::UInt64), v));
  }
  add("alignment_wrong_type", g, "must be a uint32, got a uint64");
  g = {};
  g.infos[1] = tensor_info("b", {1, 1, 1, 1, 4}, kGgmlF32, 32);
  add("n_dims_5", g, "tensor 'b': n_dims is 5, expected 1..4");
  g = {};
  g.infos[1] = tensor_info("b", {}, kGgmlF32, 32);
  add("n_dims_0", g, "n_dims is 0");
  g = {};
  g.infos[1] = tensor_info("b", {uint64_t{1} << 40, uint64_t{1} << 40}, kGgmlF32, 32);
  add("dims_overflow", g, "tensor 'b': dimensions overflow");
  g = {};
  g.infos[1] = tensor_info("b", {0, uint64_t{1} << 63}, kGgmlF32, 32);  // 0 elements, but no int64 dimension
  add("dim_past_int64_after_zero", g, "tensor 'b': dimensions overflow");
  g = {};
  g.infos[1] = tensor_info("b", {uint64_t{1} << 60}, kGgmlF32, 32);  // numel fits, bytes do not fit the file
  add("tensor_bytes_past_eof", g, "tensor 'b' data");
  g = {};
  g.infos[1] = tensor_info("b", {4}, kGgmlF32, 4096);
  add("tensor_offset_past_eof", g, "tensor 'b' data [4096, 4112) lies outside the 64-byte data section");
  g = {};
  g.infos[1] = tensor_info("b", {4}, kGgmlF32, ~uint64_t{0} - 31);  // aligned, and offset + size wraps
  add("tensor_offset_wraps", g, "lies outside");
  g = {};
  g.infos[1] = tensor_info("b", {2}, kGgmlF32, 36);
  add("misaligned_offset", g, "tensor 'b' data offset 36 is not a multiple of the alignment 32");
  g = {};
  g.infos[1] = tensor_info("b", {16}, kGgmlF32, 0);
  add("overlapping_tensors", g, "tensors 'a' and 'b' overlap");
  g = {};
  g.infos[1] = tensor_info("a", {4}, kGgmlF32, 32);
  add("duplicate_tensor_name", g, "duplicate tensor name 'a'");
  g = {};
  g.infos[0] = tensor_info("blk.0.attn_q.weight", {256}, kGgmlQ2_K, 0);
  add("unsupported_type_q2_k", g,
      "unsupported tensor type Q2_K for tensor 'blk.0.attn_q.weight' (tdyn reads GGUF tensors of types F32, F16, "
      "BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K;");
  g = {};
  g.infos[0] = tensor_info("blk.0.ffn_down.weight", {32}, kGgmlQ8_1, 0);
  add("unsupported_type_q8_1", g, "unsupported tensor type Q8_1 for tensor 'blk.0.ffn_down.weight'");
  g = {};
  g.infos[0] = tensor_info("blk.0.ffn_down.weight", {48, 1}, kGgmlQ8_0, 0);
  add("quantized_row_not_whole_blocks", g,
      "tensor 'blk.0.ffn_down.weight' of type Q8_0 has rows of ne[0] = 48 values, not a whole number of its "
      "32-value blocks");
  g = {};
  g.infos[1] = tensor_info("b", {256, 2}, kGgmlQ4_K, 32);  // 2 blocks of 144 bytes in a 64-byte data section
  add("quantized_data_past_eof", g, "tensor 'b' data [32, 320) lies outside the 64-byte data section (shape [2, 256] of Q4_K");
  g = {};
  g.infos[0] = tensor_info("a", {4}, 1000, 0);
  add("unknown_ggml_type", g, "tensor 'a' has unknown ggml type id 1000");
  g = {};
  g.data.resize(40);  // "b" needs [32, 48)
  add("truncated_data", g, "tensor 'b' data [32, 48) lies outside the 40-byte data section");
  {
    std::string whole = RawGguf{}.bytes();
    cases.push_back({"truncated_header", whole.substr(0, 20), "truncated"});
    cases.push_back({"truncated_tensor_info", whole.substr(0, whole.size() - 64 - 20), "truncated"});
    cases.push_back({"empty_file", "", "not a GGUF file"});
  }
  return cases;
}

TEST(GgufCorrupt, EveryBrokenFileIsAClearError) {
  const fs::path dir = test::scratch_dir("gguf_corrupt");
  const fs::path valid = dir / "valid.gguf";
  write_raw(valid, RawGguf{}.bytes());
  ASSERT_EQ(read_error(valid), "") << "the unaltered file must be valid";
  const auto cases = corrupt_cases();
  EXPECT_GE(cases.size(), 16u);
  for (const auto& c : cases) {
    const fs::path path = dir / (c.name + ".gguf");
    write_raw(path, c.bytes);
    std::string message = read_error(path);
    EXPECT_NE(message, "") << c.name << ": accepted";
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": got \"" << message << "\"";
    EXPECT_NE(message.find(path.string()), std::string::npos) << c.name << ": message does not name the file: " << message;
  }
}

// Every prefix and every single-byte corruption of a valid file is either read or rejected with an Error.
TEST(GgufCorrupt, NoPrefixOrByteFlipCrashes) {
  const fs::path dir = test::scratch_dir("gguf_fuzz");
  const fs::path path = dir / "f.gguf";
  std::vector<float> w(32, 1.0f);
  const std::string whole = gguf_bytes(
      {{"general.architecture", GgufValue::string("llama")},
       {"tokenizer.ggml.tokens", GgufValue::strings({"a", "bc"})},
       {"nested", GgufValue::array(GgufType::Array, {GgufValue::int32s({1, 2})})}},
      {gguf_f32_tensor("w", {2, 3}, w.data()), gguf_quantized_tensor("q", {1, 32}, DType::Q8_0, w.data()),
       {"h", DType::F16, {2}, std::string(4, '\1')}});
  // The last tensor ("h", 4 bytes) is followed by 28 bytes of padding: only those may be cut.
  for (size_t n = 0; n < whole.size(); ++n) {
    write_raw(path, whole.substr(0, n));
    std::string message = read_error(path);
    if (n < whole.size() - 28) EXPECT_NE(message, "") << "prefix of " << n << " bytes accepted";
  }
  for (size_t i = 0; i < whole.size(); ++i) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::string bytes = whole;
      bytes[i] = static_cast<char>(bytes[i] ^ flip);
      write_raw(path, bytes);
      read_error(path);  // must return, with or without an error
    }
  }
}

TEST(GgufCorrupt, CliReportsTheErrorWithoutCrashing) {
  std::string out, err;
  if (test::run_cli("info --help", &out, &err) != 0) GTEST_SKIP() << "the CLI has no 'info' command yet";
  const fs::path dir = test::scratch_dir("gguf_cli");
  RawGguf g;
  g.infos[0] = tensor_info("blk.0.attn_q.weight", {256}, kGgmlQ2_K, 0);
  write_raw(dir / "q2_k.gguf", g.bytes());
  int status = test::run_cli("info " + (dir / "q2_k.gguf").string(), &out, &err);
  EXPECT_EQ(status, 1) << err;
  EXPECT_NE(err.find("unsupported tensor type Q2_K for tensor 'blk.0.attn_q.weight'"), std::string::npos) << err;
}

}  // namespace
}  // namespace tdyn
