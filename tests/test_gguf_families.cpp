// GGUF architectures beyond llama: HF fixtures converted to GGUF the way llama.cpp's convert_hf_to_gguf.py converts
// them (its metadata keys, tensor names and transposes), run by tdyn, and compared with the fixtures' float64
// references: embeddings, every hook, attention patterns and logits (tests/fixture_check.h).
#include <cstring>

#include "core/error.h"
#include "fixture_check.h"
#include "io/gguf_writer.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/loader.h"
#include "test_util.h"

namespace tdyn {
namespace {

fs::path fixtures() { return test::shared_dir() / "fixtures"; }

std::string raw_bytes(const TensorInfo& t) { return std::string(reinterpret_cast<const char*>(t.data), t.nbytes); }

// A float32 matrix [rows, cols] stored as its transpose [cols, rows] (HF Conv1D [in, out] -> nn.Linear [out, in]).
GgufTensor transposed(const std::string& name, const TensorInfo& t) {
  EXPECT_EQ(t.dtype, DType::F32) << t.name;
  EXPECT_EQ(t.shape.size(), 2u) << t.name;
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<float> in(static_cast<size_t>(rows * cols)), out(in.size());
  std::memcpy(in.data(), t.data, t.nbytes);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  return gguf_f32_tensor(name, {cols, rows}, out.data());
}

GgufValue u32(int64_t v) { return GgufValue::uint32(static_cast<uint32_t>(v)); }

// convert_hf_to_gguf.py's GPT2Model: the Conv1D weights (c_attn, c_proj, c_fc) transposed, the causal-mask
// buffers dropped, c_attn kept fused as attn_qkv, and the (tied) token embedding written again as output.weight.
struct Gpt2Gguf {
  GgufMetadata metadata;
  std::vector<GgufTensor> tensors;
};
Gpt2Gguf convert_hf_gpt2(const fs::path& hf_dir) {
  const ModelConfig c = read_hf_config(hf_dir / "config.json");
  TensorStore hf;
  read_safetensors(hf_dir / "model.safetensors", hf);
  Gpt2Gguf g;
  g.metadata = {{"general.architecture", GgufValue::string("gpt2")},
                {"general.name", GgufValue::string("gpt2 fixture")},
                {"gpt2.block_count", u32(c.n_layers)},
                {"gpt2.context_length", u32(c.n_ctx)},
                {"gpt2.embedding_length", u32(c.d_model)},
                {"gpt2.feed_forward_length", u32(c.d_mlp)},
                {"gpt2.attention.head_count", u32(c.n_heads)},
                {"gpt2.attention.layer_norm_epsilon", GgufValue::float32(static_cast<float>(c.norm_eps))}};
  const std::vector<std::pair<std::string, std::string>> per_layer = {
      {"ln_1", "attn_norm"}, {"attn.c_attn", "attn_qkv"}, {"attn.c_proj", "attn_output"},
      {"ln_2", "ffn_norm"},  {"mlp.c_fc", "ffn_up"},      {"mlp.c_proj", "ffn_down"}};
  for (const std::string& name : hf.names()) {
    const TensorInfo& t = hf.get(name);
    std::string n = name.starts_with("transformer.") ? name.substr(12) : name;
    if (n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias")) continue;
    std::string out;
    if (n == "wte.weight") out = "token_embd.weight";
    else if (n == "wpe.weight") out = "position_embd.weight";
    else if (n.starts_with("ln_f.")) out = "output_norm." + n.substr(5);
    else if (n == "lm_head.weight") continue;  // tied: written from wte below
    else if (n.starts_with("h.")) {
      const size_t dot = n.find('.', 2);
      const std::string layer = n.substr(2, dot - 2), rest = n.substr(dot + 1);
      for (const auto& [from, to] : per_layer)
        if (rest.starts_with(from + ".")) out = "blk." + layer + "." + to + rest.substr(from.size());
    }
    if (out.empty()) {
      ADD_FAILURE() << "no GGUF name for " << name;
      continue;
    }
    const bool conv1d = out.ends_with(".weight") &&
                        (out.find("attn_qkv") != std::string::npos || out.find("attn_output") != std::string::npos ||
                         out.find("ffn_up") != std::string::npos || out.find("ffn_down") != std::string::npos);
    g.tensors.push_back(conv1d ? transposed(out, t) : GgufTensor{out, t.dtype, t.shape, raw_bytes(t)});
    if (out == "token_embd.weight") g.tensors.push_back({"output.weight", t.dtype, t.shape, raw_bytes(t)});
  }
  return g;
}

TEST(GgufGpt2, ConvertedFixtureMatchesEveryReference) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2/model.safetensors");
  for (const char* dir : {"gpt2", "gpt2/hub_layout"}) {
    const fs::path gguf = test::scratch_dir("gguf_gpt2") / "gpt2.gguf";
    const Gpt2Gguf g = convert_hf_gpt2(fixtures() / dir);
    write_gguf(gguf, g.metadata, g.tensors);
    auto model = load_model(gguf);
    const ModelConfig& c = model->config;
    EXPECT_EQ(c.family, "gpt2");
    EXPECT_EQ(c.format, "gguf");
    EXPECT_EQ(c.activation, Activation::GeluTanh);
    EXPECT_EQ(c.d_mlp, 256);
    EXPECT_EQ(c.d_vocab, 101);
    EXPECT_FALSE(c.tied_embeddings) << "llama.cpp writes the tied head out as output.weight";
    test::FixtureReport report;
    const int compared = test::check_fixture(gguf, fixtures() / "gpt2" / "refs.safetensors", &report);
    EXPECT_GE(compared, 2 * (1 + 3 * 6 + 1)) << dir;
    std::cout << "  " << dir << ": " << compared << " references, worst " << report.worst_key << " at "
              << report.worst_ratio << " x tolerance\n";
  }
}

// Metadata or tensors the forward pass cannot use are clear errors naming the key or tensor.
TEST(GgufGpt2, BrokenMetadataAndTensorsAreClearErrors) {
  TDYN_REQUIRE_SHARED("fixtures/gpt2/model.safetensors");
  const Gpt2Gguf good = convert_hf_gpt2(fixtures() / "gpt2");
  const fs::path gguf = test::scratch_dir("gguf_gpt2_bad") / "bad.gguf";
  auto expect_error = [&](const std::string& what, const Gpt2Gguf& g, const std::string& message) {
    write_gguf(gguf, g.metadata, g.tensors);
    try {
      load_model(gguf);
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << what << ": " << e.what();
    }
  };
  auto without_key = [&](const std::string& key) {
    Gpt2Gguf g = good;
    std::erase_if(g.metadata, [&](const auto& kv) { return kv.first == key; });
    return g;
  };
  auto with_key = [&](const std::string& key, GgufValue v) {
    Gpt2Gguf g = without_key(key);
    g.metadata.emplace_back(key, std::move(v));
    return g;
  };
  expect_error("no epsilon", without_key("gpt2.attention.layer_norm_epsilon"),
               "GGUF metadata has no 'gpt2.attention.layer_norm_epsilon'");
  expect_error("grouped kv heads", with_key("gpt2.attention.head_count_kv", u32(2)),
               "gpt2.attention.head_count_kv 2 differs from head_count 4");
  expect_error("heads not dividing", with_key("gpt2.attention.head_count", u32(5)),
               "gpt2.embedding_length 64 is not a multiple of the head count 5");
  expect_error("unknown architecture", with_key("general.architecture", GgufValue::string("falcon")),
               "GGUF architecture 'falcon' is not supported (supported: llama, gpt2)");
  Gpt2Gguf g = good;
  for (auto& t : g.tensors) {
    if (t.name != "blk.1.attn_qkv.weight") continue;
    const std::string stored = t.bytes;  // transposed back: HF's Conv1D [in, out] layout
    t = transposed(t.name, TensorInfo{t.name, t.dtype, t.shape, reinterpret_cast<const std::byte*>(stored.data()), stored.size(), ""});
  }
  expect_error("untransposed c_attn", g, "tensor 'blk.1.attn_qkv.weight' has wrong shape; expected [192, 64], got [64, 192]");
  g = good;
  std::erase_if(g.tensors, [](const GgufTensor& t) { return t.name == "position_embd.weight"; });
  expect_error("no positions", g, "missing tensor 'position_embd.weight'");
}

}  // namespace
}  // namespace tdyn
