// NaN/Inf in weights or activations: found and reported with the tensor (or hook), layer, element (or position and
// unit) and value, never passed on into a metric. Weights are poked in the checkpoint's bytes, in every format
// (safetensors F32 and BF16, GGUF F16, llama2.c); activations overflow from finite weights scaled to 1e30.
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/llama2c.h"
#include "analysis/jacobian/jacobian_model.h"
#include "io/safetensors.h"
#include "model/finite.h"
#include "model/init.h"
#include "model/transformer.h"
#include "test_util.h"

namespace tdyn {
namespace {

// A tiny Llama: 3 layers, d_model 16, vocab 32, tied embeddings.
nlohmann::json tiny_llama_config() {
  return {{"model_type", "llama"}, {"vocab_size", 32}, {"hidden_size", 16}, {"intermediate_size", 24},
          {"num_hidden_layers", 3}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
          {"max_position_embeddings", 32}, {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", true}};
}

std::string bytes_of(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }
std::string f32_bytes(float v) { return bytes_of(&v, 4); }
std::string u16_bytes(uint16_t v) { return bytes_of(&v, 2); }

// Overwrites element `index` of tensor `name` in checkpoint `file` with the raw encoding `element`. The tensor's
// offset comes from the format's own reader (its data pointer minus the start of the mapping).
void poke(const fs::path& file, const std::string& name, int64_t index, const std::string& element) {
  int64_t offset = 0;
  {
    auto mapped = MappedFile::open(file);
    TensorStore store;
    if (is_gguf_file(file)) read_gguf(mapped, store);
    else if (looks_like_llama2c(file)) read_llama2c(mapped, store);
    else read_safetensors(mapped, store);
    const TensorInfo& t = store.get(name);
    ASSERT_EQ(element.size(), dtype_size(t.dtype));
    offset = (t.data - mapped->data()) + index * static_cast<int64_t>(element.size());
  }
  std::string bytes = read_file(file);
  bytes.replace(offset, element.size(), element);
  write_file_atomic(file, bytes);
}

// Rewrites model.safetensors of `dir` through `edit` on its tensors.
void edit_tensors(const fs::path& dir, const std::function<void(std::map<std::string, TensorToWrite>&)>& edit) {
  std::map<std::string, TensorToWrite> tensors;
  {
    TensorStore store;
    read_safetensors(dir / "model.safetensors", store);
    for (const auto& name : store.names()) {
      const TensorInfo& t = store.get(name);
      tensors[name] = {t.dtype, t.shape, bytes_of(t.data, t.nbytes)};
    }
  }
  edit(tensors);
  write_safetensors(dir / "model.safetensors", tensors);
}

// float32 -> bfloat16 / float16 by truncation (tiny float16 values flush to zero): a valid encoding is all the
// load check needs.
uint16_t to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>(b >> 16);
}
uint16_t to_f16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint16_t sign = (b >> 16) & 0x8000;
  const int e = static_cast<int>((b >> 23) & 0xFF) - 127 + 15;
  if (e <= 0) return sign;
  TDYN_CHECK(e < 31);
  return static_cast<uint16_t>(sign | (e << 10) | ((b >> 13) & 0x3FF));
}
std::string converted(const TensorToWrite& t, uint16_t (*convert)(float)) {
  std::string out;
  for (size_t i = 0; i < t.bytes.size() / 4; ++i) {
    float f;
    std::memcpy(&f, t.bytes.data() + 4 * i, 4);
    out += u16_bytes(convert(f));
  }
  return out;
}

// The message of the tdyn::Error that `f` throws ("" and a test failure if it does not throw).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no tdyn::Error thrown";
  return "";
}

void expect_has(const std::string& text, const std::string& phrase) {
  EXPECT_NE(text.find(phrase), std::string::npos) << "'" << phrase << "' not in: " << text;
}

class NonFinite : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::scratch_dir("nonfinite"); }
  fs::path tiny(const std::string& name) {
    write_random_init(tiny_llama_config(), dir_ / name, 1);
    return dir_ / name;
  }
  fs::path dir_;
};

TEST_F(NonFinite, SafetensorsF32NanNamesTensorLayerElementAndCount) {
  const fs::path model = tiny("f32_nan");
  const std::string name = "model.layers.1.self_attn.q_proj.weight";  // [16, 16]
  poke(model / "model.safetensors", name, 2 * 16 + 5, f32_bytes(NAN));
  poke(model / "model.safetensors", name, 200, f32_bytes(-INFINITY));
  const std::string msg = error_of([&] { load_model(model); });
  expect_has(msg, "weight tensor '" + name + "' (layer 1)");
  expect_has(msg, "is nan at element [2, 5] (flat index 37)");
  expect_has(msg, "2 of its 256 elements are NaN or Inf");
  expect_has(msg, (model / "model.safetensors").string());

  // The CLI: exit code 1 and the same message; --no-check-weights loads it. `info` reads only the headers
  // unless asked to check the weights; every command takes both spellings of the one flag.
  std::string out, err;
  EXPECT_EQ(test::run_cli("run --ids 1,2 " + model.string(), &out, &err), 1) << err;
  expect_has(err, "weight tensor '" + name + "' (layer 1)");
  EXPECT_EQ(test::run_cli("run --no-check-weights --ids 1,2 --max-new-tokens 1 --save-logits " + (dir_ / "l.npy").string() + " " + model.string(), &out, &err), 1) << err;
  expect_has(err, "blocks.1.attn.hook_out_proj");
  EXPECT_EQ(test::run_cli("run --check-weights --ids 1,2 " + model.string(), &out, &err), 1) << err;
  expect_has(err, "weight tensor '" + name + "' (layer 1)");
  EXPECT_EQ(test::run_cli("run --check-weights --no-check-weights --ids 1,2 " + model.string(), &out, &err), 2) << err;
  EXPECT_EQ(test::run_cli("info " + model.string(), &out, &err), 0) << err;
  EXPECT_EQ(test::run_cli("info --no-check-weights " + model.string(), &out, &err), 0) << err;
  EXPECT_EQ(test::run_cli("info --check-weights " + model.string(), &out, &err), 1) << err;
  expect_has(err, "weight tensor '" + name + "' (layer 1)");
}

TEST_F(NonFinite, SkipFlagLoadsTheModelAndTheForwardPassStillStops) {
  const fs::path model = tiny("skip");
  poke(model / "model.safetensors", "model.layers.2.mlp.up_proj.weight", 0, f32_bytes(INFINITY));
  LoadOptions options;
  options.check_finite = false;
  std::shared_ptr<const Model> m;
  ASSERT_NO_THROW(m = load_model(model, options));
  // The activation check catches what the weight check was told to skip, at the MLP of layer 2.
  Transformer t(m);
  const std::vector<int32_t> ids = {1, 2, 3};
  const std::string msg = error_of([&] { t.forward(ids); });
  expect_has(msg, "in layer 2: blocks.2.mlp.hook_out_proj is");
  expect_has(msg, "the MLP sublayer");
}

TEST_F(NonFinite, SafetensorsBf16Inf) {
  const fs::path model = tiny("bf16");
  edit_tensors(model, [](std::map<std::string, TensorToWrite>& tensors) {
    for (auto& [name, t] : tensors) t = {DType::BF16, t.shape, converted(t, to_bf16)};
  });
  ASSERT_NO_THROW(load_model(model));
  poke(model / "model.safetensors", "model.layers.0.mlp.down_proj.weight", 24 * 3 + 1, u16_bytes(0x7F80));  // +inf
  const std::string msg = error_of([&] { load_model(model); });
  expect_has(msg, "'model.layers.0.mlp.down_proj.weight' (layer 0)");
  expect_has(msg, "is inf at element [3, 1] (flat index 73); 1 of its 384 elements is NaN or Inf");
}

TEST_F(NonFinite, ModelWideTensorIsNamedWithoutALayer) {
  const fs::path model = tiny("embed");
  poke(model / "model.safetensors", "model.embed_tokens.weight", 16 * 31 + 15, f32_bytes(NAN));
  const std::string msg = error_of([&] { load_model(model); });
  expect_has(msg, "'model.embed_tokens.weight' (model-wide, not in a layer)");
  expect_has(msg, "is nan at element [31, 15]");
}

// ALBERT's one stored layer serves all three layers: the message says so.
TEST_F(NonFinite, SharedLayerListsTheLayersThatUseIt) {
  TDYN_REQUIRE_SHARED("fixtures/albert/model.safetensors");
  const fs::path model = dir_ / "albert";
  fs::create_directories(model);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(test::shared_dir() / "fixtures/albert" / f, model / f);
  const std::string name = "albert.encoder.albert_layer_groups.0.albert_layers.0.attention.query.bias";
  poke(model / "model.safetensors", name, 63, f32_bytes(INFINITY));
  const std::string msg = error_of([&] { load_model(model); });
  expect_has(msg, "'" + name + "' (stored layer 0, used by layers 0, 1, 2)");
  expect_has(msg, "is inf at element [63] (flat index 63)");
}

// GGUF (llama.cpp names), every tensor float16.
TEST_F(NonFinite, GgufF16NegativeInf) {
  const fs::path hf = tiny("for_gguf");
  TensorStore store;
  read_safetensors(hf / "model.safetensors", store);
  auto gguf_name = [](std::string n) {
    const std::vector<std::pair<std::string, std::string>> map = {
        {"model.embed_tokens", "token_embd"},       {"model.norm", "output_norm"},
        {"model.layers.", "blk."},                  {"input_layernorm", "attn_norm"},
        {"self_attn.q_proj", "attn_q"},             {"self_attn.k_proj", "attn_k"},
        {"self_attn.v_proj", "attn_v"},             {"self_attn.o_proj", "attn_output"},
        {"post_attention_layernorm", "ffn_norm"},   {"mlp.gate_proj", "ffn_gate"},
        {"mlp.up_proj", "ffn_up"},                  {"mlp.down_proj", "ffn_down"}};
    for (const auto& [from, to] : map)
      if (size_t at = n.find(from); at != std::string::npos) n.replace(at, from.size(), to);
    return n;
  };
  std::vector<GgufTensor> tensors;
  for (const auto& name : store.names()) {
    const TensorInfo& t = store.get(name);
    tensors.push_back({gguf_name(name), DType::F16, t.shape, converted({t.dtype, t.shape, bytes_of(t.data, t.nbytes)}, to_f16)});
  }
  const GgufMetadata metadata = {
      {"general.architecture", GgufValue::string("llama")},
      {"llama.context_length", GgufValue::uint32(32)},
      {"llama.embedding_length", GgufValue::uint32(16)},
      {"llama.block_count", GgufValue::uint32(3)},
      {"llama.feed_forward_length", GgufValue::uint32(24)},
      {"llama.attention.head_count", GgufValue::uint32(2)},
      {"llama.attention.head_count_kv", GgufValue::uint32(1)},
      {"llama.attention.layer_norm_rms_epsilon", GgufValue::float32(1e-5f)},
  };
  const fs::path file = dir_ / "tiny.gguf";
  write_gguf(file, metadata, tensors);
  ASSERT_NO_THROW(load_model(file));
  poke(file, "blk.2.attn_v.weight", 8 * 16 - 1, u16_bytes(0xFC00));  // -inf, the last element of [8, 16]
  const std::string msg = error_of([&] { load_model(file); });
  expect_has(msg, "'blk.2.attn_v.weight' (layer 2)");
  expect_has(msg, "is -inf at element [7, 15] (flat index 127); 1 of its 128 elements");
}

// llama2.c: a copy of stories260K (5 layers, dim 64) with one NaN in layer 3's output projection.
TEST_F(NonFinite, Llama2cNan) {
  TDYN_REQUIRE_SHARED("models/stories260K/stories260K.bin");
  const fs::path file = dir_ / "stories260K.bin";
  fs::copy_file(test::shared_dir() / "models/stories260K/stories260K.bin", file);
  poke(file, "layers.3.attention.wo.weight", 64 * 10 + 7, f32_bytes(NAN));
  const std::string msg = error_of([&] { load_model(file); });
  expect_has(msg, "'layers.3.attention.wo.weight' (layer 3)");
  expect_has(msg, "is nan at element [10, 7] (flat index 647); 1 of its 4096 elements");
}

// Finite weights whose product overflows: layer 1's value and output projections all 1e30 make its attention
// output ~1e30 * 16 * 1e30 (past float32's 3.4e38) at every position.
fs::path overflowing_model(const fs::path& dir) {
  write_random_init(tiny_llama_config(), dir, 1);
  edit_tensors(dir, [](std::map<std::string, TensorToWrite>& tensors) {
    for (const char* name : {"model.layers.1.self_attn.v_proj.weight", "model.layers.1.self_attn.o_proj.weight"}) {
      TensorToWrite& t = tensors.at(name);
      std::vector<float> values(numel(t.shape), 1e30f);
      t = f32_tensor(t.shape, values.data());
    }
  });
  return dir;
}

TEST_F(NonFinite, ActivationOverflowNamesLayerHookPositionAndSublayer) {
  const fs::path model = overflowing_model(dir_ / "overflow");
  Transformer t(load_model(model));  // the weights themselves are finite
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  const std::string msg = error_of([&] { t.forward(ids); });
  expect_has(msg, "non-finite activation in layer 1: blocks.1.attn.hook_out_proj is");
  expect_has(msg, "at position 0, unit 0");
  expect_has(msg, "the attention sublayer");
  // Layer 0 ran and stayed finite: the steps taken alone show the same.
  Tensor x = t.embed(ids, 0);
  t.attention_block(0, x, 0, nullptr);
  t.mlp_block(0, x, nullptr);
  EXPECT_EQ(count_non_finite(x.ptr(), x.size()), 0);
  expect_has(error_of([&] { t.attention_block(1, x, 0, nullptr); }), "blocks.1.attn.hook_out_proj");
  // Generation runs the same checks.
  KVCache cache = t.new_cache(8);
  expect_has(error_of([&] { t.forward(ids, nullptr, &cache); }), "blocks.1.attn.hook_out_proj");
}

// The pass runs several sequences' layer steps as one product per projection: a NaN in the second sequence is still
// reported at its own position, and the finite sequences' results equal their steps taken one at a time.
TEST_F(NonFinite, StackedLayerStepsNameThePositionWithinTheSequence) {
  const Transformer t(load_model(tiny("stacked")));
  const std::vector<std::vector<int32_t>> ids = {{1, 2, 3, 4}, {5, 6, 7}, {8, 9}};
  const size_t n = ids.size();
  std::vector<Tensor> inputs, xs(n), alone(n);
  std::vector<KVCache> kvs, alone_kvs;
  std::vector<SequenceState> states(n), alone_states(n);
  std::vector<LayerEntry> entries;
  for (size_t i = 0; i < n; ++i) {
    inputs.push_back(t.embed(ids[i], 0));
    kvs.push_back(kv_sources(t, static_cast<int64_t>(ids[i].size())));
    alone_kvs.push_back(kvs.back());
  }
  for (size_t i = 0; i < n; ++i) {
    entries.push_back({ids[i], &inputs[i], &xs[i], &kvs[i], &states[i]});
    alone[i] = inputs[i];
    run_layer(t, 0, ids[i], inputs[i], alone[i], alone_kvs[i], alone_states[i]);
  }
  auto run_stacked = [&](std::vector<Tensor> from) {
    for (size_t i = 0; i < n; ++i) xs[i] = from[i], states[i] = SequenceState();
    run_attention_half(t, 0, entries);
    run_mlp_half(t, 0, entries);
  };
  run_stacked(inputs);
  for (size_t i = 0; i < n; ++i) {
    const std::string what = fmt::format("sequence {} stacked vs alone", i);
    test::expect_close(xs[i].data, alone[i].data, 1e-6, 1e-6, what);
    test::expect_close(states[i].resid_mid[0].data, alone_states[i].resid_mid[0].data, 1e-6, 1e-6, what + ", resid_mid");
    test::expect_close(states[i].keys[0].data, alone_states[i].keys[0].data, 1e-6, 1e-6, what + ", keys");
    EXPECT_EQ(states[i].resid_post[0].data, xs[i].data);
  }
  // A NaN entering the attention step, then one entering the MLP step.
  std::vector<Tensor> bad = inputs;
  bad[1].row(2)[3] = NAN;
  expect_has(error_of([&] { run_stacked(bad); }), "non-finite activation in layer 0: blocks.0.attn.hook_out_proj is nan at position 2,");
  run_stacked(inputs);
  for (size_t i = 0; i < n; ++i) xs[i] = states[i].resid_mid[0];
  xs[1].row(2)[3] = NAN;
  const std::string msg = error_of([&] { run_mlp_half(t, 0, entries); });
  expect_has(msg, "non-finite activation in layer 0: blocks.0.mlp.hook_out_proj is nan at position 2,");
}

TEST(NonFiniteCheck, MessageNamesHookPositionUnitValueAndCount) {
  Tensor x({3, 4});  // rows are positions 10, 11, 12
  EXPECT_NO_THROW(check_finite(x, 10, 2, "hook_resid_post", "the MLP step"));
  x.row(1)[2] = -INFINITY;
  x.row(2)[0] = NAN;
  const std::string msg = error_of([&] { check_finite(x, 10, 2, "hook_resid_post", "the MLP step"); });
  expect_has(msg, "in layer 2: blocks.2.hook_resid_post is -inf at position 11, unit 2 (2 of its 12 values are NaN or Inf)");
  expect_has(msg, "first appeared in the MLP step");
  expect_has(error_of([&] { check_finite(x, 0, -1, "logits", "the unembedding"); }), "non-finite activation: logits is -inf at position 1");
  EXPECT_EQ(value_name(NAN), "nan");
  EXPECT_EQ(value_name(INFINITY), "inf");
  EXPECT_EQ(value_name(-INFINITY), "-inf");
  // Every NaN and Inf encoding counts, whatever the payload or sign; the largest finite values do not.
  const float values[] = {NAN, -NAN, INFINITY, -INFINITY, std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(), 0.0f};
  EXPECT_EQ(count_non_finite(values, 8), 4);
  EXPECT_EQ(first_non_finite(values + 4, 4), -1);
}

// Every number in the arrays (.npy) and tables (.csv, .dat) under `dir` is finite: what an analysis wrote before
// it stopped (e.g. the weights' layer-matrix spectra of `tdyn power`) holds no NaN/Inf.
void expect_only_finite_outputs(const fs::path& dir) {
  if (!fs::exists(dir)) return;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const fs::path& p = entry.path();
    if (p.extension() == ".npy") {  // read by hand: read_npy does not take complex arrays
      const std::string bytes = read_file(p);
      ASSERT_GT(bytes.size(), 12u) << p;
      uint32_t header = 0;
      std::memcpy(&header, bytes.data() + 8, bytes[6] == 1 ? 2 : 4);
      const size_t start = (bytes[6] == 1 ? 10 : 12) + header;
      const std::string descr = bytes.substr(0, start);
      const bool f4 = descr.find("'<f4'") != std::string::npos || descr.find("'<c8'") != std::string::npos;
      const bool f8 = descr.find("'<f8'") != std::string::npos || descr.find("'<c16'") != std::string::npos;
      for (size_t i = start; f4 && i + 4 <= bytes.size(); i += 4) {
        float v;
        std::memcpy(&v, bytes.data() + i, 4);
        ASSERT_TRUE(std::isfinite(v)) << p;
      }
      for (size_t i = start; f8 && i + 8 <= bytes.size(); i += 8) {
        double v;
        std::memcpy(&v, bytes.data() + i, 8);
        ASSERT_TRUE(std::isfinite(v)) << p;
      }
    } else if (p.extension() == ".csv" || p.extension() == ".dat") {
      std::string text = read_file(p);
      for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      EXPECT_EQ(text.find("nan"), std::string::npos) << p;
      EXPECT_EQ(text.find("inf"), std::string::npos) << p;
    }
  }
}

// The analyses exit with code 1 and the message, write no results.json, and no NaN/Inf reaches a file.
TEST_F(NonFinite, CliAnalysesStopWithTheMessageAndWriteNoMetric) {
  const fs::path model = overflowing_model(dir_ / "overflow");
  std::string out, err;
  EXPECT_EQ(test::run_cli(fmt::format("run {} --ids 1,2,3 --max-new-tokens 2", model.string()), &out, &err), 1) << err;
  expect_has(err, "blocks.1.attn.hook_out_proj");
  int run_index = 0;
  for (const std::string command : {"jacobian", "jacobian --mean plain --cumulative both", "topology", "power"}) {
    SCOPED_TRACE(command);
    const fs::path res = dir_ / fmt::format("res_{}", run_index++);
    const int rc = test::run_cli(fmt::format("{} {} --ids 1,2,3,4,5,6 --out {} --quiet", command, model.string(), res.string()),
                                 &out, &err);
    EXPECT_EQ(rc, 1) << err;
    expect_has(err, "non-finite activation in layer 1: blocks.1.attn.hook_out_proj");
    EXPECT_FALSE(fs::exists(res / "results.json"));
    expect_only_finite_outputs(res);
  }
  // A NaN weight stops the analysis at load, before anything runs.
  const fs::path nan_model = tiny("nan");
  poke(nan_model / "model.safetensors", "model.layers.0.self_attn.k_proj.weight", 3, f32_bytes(NAN));
  EXPECT_EQ(test::run_cli(fmt::format("jacobian {} --ids 1,2,3 --out {} --quiet", nan_model.string(), (dir_ / "res_nan").string()),
                          &out, &err),
            1);
  expect_has(err, "weight tensor 'model.layers.0.self_attn.k_proj.weight' (layer 0)");
  EXPECT_FALSE(fs::exists(dir_ / "res_nan" / "results.json"));
}

}  // namespace
}  // namespace tdyn
