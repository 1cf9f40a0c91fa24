// The corrupt-input suite: deliberately broken checkpoints and configs, one per failure kind. Each must give a
// tdyn::Error with a message that names the problem (library) and exit code 1 with that message on stderr
// (CLI) — never a crash, a hang or a silent success. The suite also runs under ASan + UBSan (scripts/test.sh).
#include <cstring>

#include <nlohmann/json.hpp>

#include "io/llama2c.h"
#include "io/safetensors.h"
#include "model/init.h"
#include "model/loader.h"
#include "test_util.h"

namespace tdyn {
namespace {

std::string u64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
std::string i32s(std::initializer_list<int32_t> v) {
  std::string s;
  for (int32_t x : v) s.append(reinterpret_cast<const char*>(&x), 4);
  return s;
}
std::string safetensors_bytes(const std::string& header, const std::string& data) { return u64(header.size()) + header + data; }

// A tiny valid Llama config.json (2 layers, d_model 8, vocab 16).
nlohmann::json tiny_llama_config() {
  return {{"model_type", "llama"}, {"vocab_size", 16}, {"hidden_size", 8}, {"intermediate_size", 12},
          {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
          {"max_position_embeddings", 32}, {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", true}};
}

struct CorruptCase {
  std::string name;      // file or directory name inside the scratch directory
  std::string expected;  // a phrase the error message must contain
};

class CorruptInputs : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::scratch_dir("corrupt"); }

  fs::path write(const std::string& name, const std::string& bytes) {
    fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    write_file_atomic(p, bytes);
    return p;
  }
  // A valid tiny HF model directory that a case then breaks.
  fs::path model_dir(const std::string& name, const nlohmann::json& config = tiny_llama_config()) {
    fs::path p = dir_ / name;
    write_random_init(config, p, 1);
    return p;
  }
  // Rewrites model.safetensors of `dir` through `edit` on its tensor map.
  void edit_tensors(const fs::path& dir, const std::function<void(std::map<std::string, TensorToWrite>&)>& edit) {
    TensorStore store;
    read_safetensors(dir / "model.safetensors", store);
    std::map<std::string, TensorToWrite> tensors;
    for (const auto& name : store.names()) {
      const TensorInfo& t = store.get(name);
      tensors[name] = {t.dtype, t.shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)};
    }
    edit(tensors);
    write_safetensors(dir / "model.safetensors.new", tensors);
    fs::rename(dir / "model.safetensors.new", dir / "model.safetensors");
  }

  void expect_rejected(const fs::path& path, const std::string& phrase) {
    SCOPED_TRACE(path.string());
    try {
      load_model(path);
      ADD_FAILURE() << "loaded without error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << "message: " << e.what();
    }
    std::string out, err;
    int rc = test::run_cli("info " + path.string(), &out, &err);
    EXPECT_EQ(rc, 1) << "stderr: " << err;
    EXPECT_NE(err.find(phrase), std::string::npos) << "stderr: " << err;
  }

  fs::path dir_;
};

const std::string kGoodHeader = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST_F(CorruptInputs, SafetensorsHeaderProblems) {
  nlohmann::json cfg = tiny_llama_config();
  auto in_model_dir = [&](const std::string& name, const std::string& bytes) {
    fs::path d = dir_ / name;
    write(name + "/config.json", cfg.dump());
    write(name + "/model.safetensors", bytes);
    return d;
  };
  expect_rejected(in_model_dir("too_short", "abc"), "too short");
  expect_rejected(in_model_dir("header_past_eof", u64(1000) + "{}"), "runs past the end");
  expect_rejected(in_model_dir("header_too_big", u64(uint64_t{1} << 40) + "{}"), "exceeds");
  expect_rejected(in_model_dir("bad_json", safetensors_bytes("{\"a\": [1,", "")), "invalid JSON");
  expect_rejected(in_model_dir("not_utf8", safetensors_bytes("{\"a\xff\xfe\": {}}", "")), "invalid JSON");
  expect_rejected(in_model_dir("not_object", safetensors_bytes("[1, 2]", "")), "not a JSON object");
  expect_rejected(in_model_dir("no_offsets", safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2]}})", std::string(8, 0))),
                  "needs dtype, shape and data_offsets");
  expect_rejected(in_model_dir("offset_out_of_range",
                               safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,800]}})", std::string(8, 0))),
                  "outside");
  expect_rejected(in_model_dir("offsets_reversed",
                               safetensors_bytes(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", std::string(8, 0))),
                  "outside");
  expect_rejected(in_model_dir("overlap", safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                                             std::string(12, 0))),
                  "overlap");
  expect_rejected(in_model_dir("size_mismatch",
                               safetensors_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 0))),
                  "needs 12");
  expect_rejected(in_model_dir("shape_overflow",
                               safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                                                 std::string(8, 0))),
                  "overflows");
  expect_rejected(in_model_dir("negative_dim",
                               safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, 0))),
                  "negative");
  expect_rejected(in_model_dir("unknown_dtype",
                               safetensors_bytes(R"({"a":{"dtype":"F8_E9","shape":[2],"data_offsets":[0,2]}})", std::string(2, 0))),
                  "unsupported dtype 'F8_E9'");
  expect_rejected(in_model_dir("duplicate_name", safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                                   R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                                                   std::string(8, 0))),
                  "duplicate key 'a'");
}

TEST_F(CorruptInputs, ShardedIndexProblems) {
  fs::path d = model_dir("sharded_missing");
  fs::rename(d / "model.safetensors", d / "model-00001-of-00002.safetensors");
  TensorStore store;
  read_safetensors(d / "model-00001-of-00002.safetensors", store);
  nlohmann::json map = nlohmann::json::object();
  for (const auto& n : store.names()) map[n] = "model-00001-of-00002.safetensors";
  map["model.norm.weight"] = "model-00002-of-00002.safetensors";
  write("sharded_missing/model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
  expect_rejected(d, "is missing");

  map["model.norm.weight"] = "../../etc/passwd";
  write("sharded_missing/model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
  expect_rejected(d, "plain file name");

  map["model.norm.weight"] = "model-00001-of-00002.safetensors";
  map["not.in.any.shard"] = "model-00001-of-00002.safetensors";
  write("sharded_missing/model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
  expect_rejected(d, "does not contain it");
}

TEST_F(CorruptInputs, ModelTensorProblems) {
  fs::path missing = model_dir("missing_tensor");
  edit_tensors(missing, [](auto& t) { t.erase("model.layers.1.mlp.up_proj.weight"); });
  expect_rejected(missing, "missing tensor 'model.layers.1.mlp.up_proj.weight'");

  fs::path shape = model_dir("wrong_shape");
  edit_tensors(shape, [](auto& t) { t["model.layers.0.self_attn.q_proj.weight"].shape = {4, 16}; });
  expect_rejected(shape, "tensor 'model.layers.0.self_attn.q_proj.weight' has wrong shape; expected [8, 8], got [4, 16]");

  fs::path unknown = model_dir("unknown_tensor");
  edit_tensors(unknown, [](auto& t) { t["model.layers.0.mystery.weight"] = t["model.norm.weight"]; });
  expect_rejected(unknown, "unknown tensor 'model.layers.0.mystery.weight'");

  fs::path dtype = model_dir("integer_weights");
  edit_tensors(dtype, [](auto& t) { t["model.norm.weight"].dtype = DType::I32; });
  expect_rejected(dtype, "expected a floating-point type");
}

TEST_F(CorruptInputs, ConfigProblems) {
  auto with_config = [&](const std::string& name, const std::string& text) {
    fs::path d = model_dir(name);
    write(name + "/config.json", text);
    return d;
  };
  nlohmann::json cfg = tiny_llama_config();
  expect_rejected(with_config("cfg_bad_json", "{\"model_type\": \"llama\","), "invalid JSON");
  expect_rejected(with_config("cfg_not_utf8", "{\"model_type\": \"ll\xc3\x28ma\"}"), "invalid JSON");
  cfg["model_type"] = "transformer-xl";
  expect_rejected(with_config("cfg_unknown_type", cfg.dump()), "unknown model_type 'transformer-xl'");
  cfg = tiny_llama_config();
  cfg.erase("model_type");
  expect_rejected(with_config("cfg_no_type", cfg.dump()), "no \"model_type\"");
  cfg = tiny_llama_config();
  cfg["frobnicate_attention"] = true;
  expect_rejected(with_config("cfg_unknown_key", cfg.dump()), "unknown config key(s) 'frobnicate_attention'");
  cfg = tiny_llama_config();
  cfg["hidden_size"] = "eight";
  expect_rejected(with_config("cfg_wrong_type", cfg.dump()), "hidden_size");
  cfg = tiny_llama_config();
  cfg["num_key_value_heads"] = 3;
  expect_rejected(with_config("cfg_bad_gqa", cfg.dump()), "multiple of n_kv_heads");
  cfg = tiny_llama_config();
  cfg["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_rejected(with_config("cfg_yarn", cfg.dump()), "rope scaling type 'yarn' is not supported");
  cfg = tiny_llama_config();
  cfg["num_hidden_layers"] = -3;
  expect_rejected(with_config("cfg_negative", cfg.dump()), "n_layers");
}

TEST_F(CorruptInputs, Llama2cProblems) {
  // dim 8, hidden 12, 1 layer, 2 heads, 2 kv heads, vocab 4 (shared), seq_len 4: head 4.
  const int64_t floats = 4 * 8 + 8 + 3 * 64 + 64 + 8 + 3 * 96 + 8 + 2 * 4 * 2;
  std::string body(4 * floats, '\0');
  std::string good = i32s({8, 12, 1, 2, 2, 4, 4}) + body;
  {
    TensorStore store;
    EXPECT_NO_THROW(read_llama2c(write("good.bin", good), store));
  }
  expect_rejected(write("truncated.bin", good.substr(0, good.size() - 12)), "truncated");
  expect_rejected(write("trailing.bin", good + "xxxx"), "implies");
  expect_rejected(write("header_only.bin", i32s({8, 12})), "cannot tell the format");
  expect_rejected(write("zero_dim.bin", i32s({0, 12, 1, 2, 2, 4, 4}) + body), "dim = 0");
  expect_rejected(write("huge_layers.bin", i32s({8, 12, 2000000000, 2, 2, 4, 4}) + body), "n_layers");
  expect_rejected(write("heads_dont_divide.bin", i32s({8, 12, 1, 3, 3, 4, 4}) + body), "not a multiple of n_heads");
  expect_rejected(write("kv_dont_divide.bin", i32s({8, 12, 1, 2, 3, 4, 4}) + body), "not a multiple of n_kv_heads");
  expect_rejected(write("versioned.bin", i32s({0x616b3432, 2, 8, 12, 1, 2, 2}) + body), "ak42");
  expect_rejected(write("missing.bin", "").parent_path() / "does_not_exist.bin", "does not exist");
}

TEST_F(CorruptInputs, CliReportsUsageErrorsWithExitCode2) {
  std::string err;
  EXPECT_EQ(test::run_cli("run", nullptr, &err), 2);
  EXPECT_EQ(test::run_cli("info", nullptr, &err), 2);
  EXPECT_EQ(test::run_cli("no-such-command", nullptr, &err), 2);
  EXPECT_EQ(test::run_cli("run " + model_dir("usage").string() + " --ids 1,x,3", nullptr, &err), 2);
  EXPECT_NE(err.find("--ids"), std::string::npos) << err;
  EXPECT_EQ(test::run_cli("run " + model_dir("usage2").string() + " --ids 1,99", nullptr, &err), 1);
  EXPECT_NE(err.find("outside the vocabulary"), std::string::npos) << err;
}

}  // namespace
}  // namespace tdyn
