// PyTorch zip checkpoints (pytorch_model.bin): the zip reader, the restricted unpickler and the loader.
// Checkpoints written by PyTorch itself (/usr/bin/python3 with torch, at test time, from the shared fixtures)
// must give the same tensors, bit for bit, as the fixtures' safetensors and the same logits; hand-written
// pickles that name any other global, and corrupt archives, must be refused with an error saying what is wrong.
#include <cstring>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/torch_pickle.h"
#include "io/zip.h"
#include "model/loader.h"
#include "model/transformer.h"
#include "generated_fixtures.h"
#include "test_util.h"

namespace tdyn {
namespace {

using namespace std::string_literals;  // pickles hold NUL bytes

TensorStore read_bytes(const std::string& bytes, const std::string& name = "pytorch_model.bin") {
  TensorStore store;
  read_torch(MappedFile::from_bytes(bytes, name), store);
  return store;
}

// The error message of reading `bytes`, or "" when it loads.
std::string error_of(const std::string& bytes) {
  try {
    read_bytes(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_REFUSED(bytes, fragment)                                                   \
  do {                                                                                    \
    const std::string message = error_of(bytes);                                          \
    EXPECT_NE(message.find(fragment), std::string::npos) << "error was: '" << message << "'"; \
  } while (0)

// A checkpoint whose data.pkl is `pickle` and whose storages are `storages` (key -> bytes).
std::string archive(const std::string& pickle, const std::vector<std::pair<std::string, std::string>>& storages = {},
                    bool zip64 = false) {
  std::vector<std::pair<std::string, std::string>> entries = {{"archive/data.pkl", pickle}};
  for (const auto& [key, bytes] : storages) entries.emplace_back("archive/data/" + key, bytes);
  entries.emplace_back("archive/version", "3\n");
  return write_zip_stored(entries, zip64);
}

std::string le32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string unicode(const std::string& s) { return "X" + le32(static_cast<uint32_t>(s.size())) + s; }

// {"w": tensor over storage "0" (FloatStorage of `numel`), offset, size, stride} as torch.save writes it.
std::string one_tensor_pickle(int numel, int offset, const std::string& size, const std::string& stride) {
  return std::string("\x80\x02") + "ccollections\nOrderedDict\nq\x00)R("s + unicode("w") +
         "ctorch._utils\n_rebuild_tensor_v2\n((" + unicode("storage") + "ctorch\nFloatStorage\n" + unicode("0") +
         unicode("cpu") + "K" + std::string(1, static_cast<char>(numel)) + "tQK" +
         std::string(1, static_cast<char>(offset)) + size + stride + "\x89h\x00)RtRu."s;
}

std::string floats_bytes(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

TEST(TorchCheckpoint, WrittenTensorsReadBackInPlace) {
  const std::vector<float> f = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1e-3f};
  const std::vector<uint16_t> h = {0x3C00, 0xC000, 0x7BFF};
  const std::vector<int64_t> ids = {1, -2, int64_t{1} << 40};
  std::map<std::string, TensorToWrite> tensors = {
      {"a.weight", f32_tensor({2, 3}, f.data())},
      {"b.half", {DType::F16, {3}, std::string(reinterpret_cast<const char*>(h.data()), 6)}},
      {"c.bf16", {DType::BF16, {1, 3}, std::string(reinterpret_cast<const char*>(h.data()), 6)}},
      {"d.ids", {DType::I64, {3}, std::string(reinterpret_cast<const char*>(ids.data()), 24)}},
      {"e.scalar", f32_tensor({}, f.data() + 4)},
      {"f.empty", {DType::F32, {0, 4}, ""}}};
  for (bool zip64 : {false, true}) {
    SCOPED_TRACE(zip64 ? "zip64" : "zip");
    std::string bytes = torch_checkpoint_bytes(tensors, "some_stem");
    if (zip64) {  // the same entries in ZIP64 records
      std::vector<std::pair<std::string, std::string>> entries;
      const ZipArchive zip(MappedFile::from_bytes(bytes, "x"));
      for (const auto& e : zip.entries()) entries.emplace_back(e.name, std::string(zip.data(e)));
      bytes = write_zip_stored(entries, true);
    }
    const auto file = MappedFile::from_bytes(bytes, "pytorch_model.bin");
    TensorStore store;
    read_torch(file, store);
    EXPECT_EQ(store.format, "pytorch");
    EXPECT_EQ(store.metadata()["torch_archive"].get<std::string>(), "some_stem");
    ASSERT_EQ(store.size(), tensors.size());
    for (const auto& [name, t] : tensors) {
      const TensorInfo& got = store.get(name);
      EXPECT_EQ(got.dtype, t.dtype) << name;
      EXPECT_EQ(got.shape, t.shape) << name;
      ASSERT_EQ(got.nbytes, t.bytes.size()) << name;
      EXPECT_EQ(std::memcmp(got.data, t.bytes.data(), got.nbytes), 0) << name;
      // In place: the tensor points into the file, 64-byte aligned as torch.save aligns entries.
      if (got.nbytes) {
        EXPECT_GE(got.data, file->data());
        EXPECT_LT(got.data, file->data() + file->size());
        EXPECT_EQ((got.data - file->data()) % 64, 0) << name;
      }
    }
    EXPECT_TRUE(store.floats("a.weight").is_view());
  }
}

TEST(TorchCheckpoint, ViewsOfOneStorageAtOffsets) {
  // Two keys viewing one 8-float storage: w = elements [2, 8) as 2x3, v = [0, 4) as 4.
  const std::vector<float> s = {0, 1, 2, 3, 4, 5, 6, 7};
  std::string p = std::string("\x80\x02") + "ccollections\nOrderedDict\nq\x00)R("s + unicode("w") +
                  "ctorch._utils\n_rebuild_tensor_v2\nq\x01((" + unicode("storage") + "ctorch\nFloatStorage\n" +
                  unicode("0") + unicode("cpu") + "K\x08tq\x02QK\x02K\x02K\x03\x86K\x03K\x01\x86\x89h\x00)RtR"s +
                  unicode("v") + "h\x01(h\x02QK\x00K\x04\x85K\x01\x85\x89h\x00)RtRu."s;
  // BINGET of the memoized persistent id loads the same storage again: one record, two views.
  TensorStore store = read_bytes(archive(p, {{"0", floats_bytes(s)}}));
  const TensorInfo& w = store.get("w");
  const TensorInfo& v = store.get("v");
  EXPECT_EQ(w.shape, (Shape{2, 3}));
  EXPECT_EQ(w.data, v.data + 2 * sizeof(float));
  const FloatBuffer wf = store.floats("w");
  EXPECT_EQ(std::vector<float>(wf.data(), wf.data() + 6), std::vector<float>(s.begin() + 2, s.end()));
}

TEST(TorchCheckpoint, RefusesEveryOtherGlobalByName) {
  const std::string proto = "\x80\x02";
  // GLOBAL os.system + REDUCE, the classic payload.
  EXPECT_REFUSED(archive(proto + "cos\nsystem\nq\x00"s + unicode("touch /tmp/x") + "\x85R."), "'os.system'");
  EXPECT_REFUSED(archive(proto + "cposix\nsystem\n" + unicode("id") + "\x85R."), "'posix.system'");
  EXPECT_REFUSED(archive(proto + "cbuiltins\neval\n" + unicode("1+1") + "\x85R."), "'builtins.eval'");
  EXPECT_REFUSED(archive(proto + "c__builtin__\ngetattr\n."), "'__builtin__.getattr'");
  // Protocol 4's STACK_GLOBAL builds the name from two strings on the stack.
  EXPECT_REFUSED(archive("\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x02id\x85R."), "'os.system'");
  // Hidden inside an otherwise valid state dict, after a tensor.
  const std::string valid = one_tensor_pickle(2, 0, "K\x02\x85", "K\x01\x85");
  std::string evil = valid.substr(0, valid.size() - 2) + unicode("x") + "csubprocess\ncheck_output\n(" +
                     unicode("id") + "\x85tRu.";
  EXPECT_REFUSED(archive(evil, {{"0", floats_bytes({1, 2})}}), "'subprocess.check_output'");
  EXPECT_EQ(error_of(archive(valid, {{"0", floats_bytes({1, 2})}})), "");
  // Opcodes that construct objects without a global check.
  EXPECT_REFUSED(archive(proto + "(ios\nsystem\n."), "INST");
  EXPECT_REFUSED(archive(proto + "ccollections\nOrderedDict\n)\x81."), "NEWOBJ");
  // An allowed name used for something else.
  EXPECT_REFUSED(archive(proto + "ctorch\nFloatStorage\n)R."), "cannot be called");
}

TEST(TorchCheckpoint, RefusesCorruptArchivesClearly) {
  const std::string pickle = one_tensor_pickle(6, 0, "K\x02K\x03\x86", "K\x03K\x01\x86");
  const std::string data = floats_bytes({1, 2, 3, 4, 5, 6});
  const std::string good = archive(pickle, {{"0", data}});
  ASSERT_EQ(error_of(good), "");

  EXPECT_REFUSED(good.substr(0, good.size() / 2), "no zip end-of-central-directory record");
  EXPECT_REFUSED(good.substr(0, 10), "too short for a zip archive");
  std::string bad_cd = good;  // the first central-directory record's signature
  const size_t first_cd = good.find(std::string("PK\x01\x02", 4));
  bad_cd[first_cd] = 'Q';
  EXPECT_REFUSED(bad_cd, "bad signature");
  std::string bad_offset = good;  // the end record's central-directory offset (bytes -6..-3) beyond the file
  bad_offset[bad_offset.size() - 3] = '\x7f';
  EXPECT_REFUSED(bad_offset, "lies outside the file");
  std::string compressed = good;  // method 8 (deflate) in the first central record
  compressed[first_cd + 10] = 8;
  EXPECT_REFUSED(compressed, "is compressed (zip method 8)");

  EXPECT_REFUSED(archive(pickle, {}), "storage '0' has no entry 'archive/data/0'");
  EXPECT_REFUSED(archive(pickle, {{"0", data.substr(4)}}), "should hold 6 F32 element(s) = 24 bytes");
  EXPECT_REFUSED(archive(pickle.substr(0, pickle.size() - 1), {{"0", data}}), "ends without STOP");
  EXPECT_REFUSED(archive(pickle.substr(0, pickle.size() - 1) + "\xff", {{"0", data}}), "opcode 0xff (unknown)");
  EXPECT_REFUSED(archive(pickle.substr(0, 20), {{"0", data}}), "GLOBAL argument without a newline");
  EXPECT_REFUSED(archive(one_tensor_pickle(6, 0, "K\x03K\x02\x86", "K\x01K\x03\x86"), {{"0", data}}), "not contiguous");
  EXPECT_REFUSED(archive(one_tensor_pickle(6, 4, "K\x02K\x03\x86", "K\x03K\x01\x86"), {{"0", data}}),
                 "lie outside storage '0'");
  EXPECT_REFUSED(write_zip_stored({{"archive/version", "3\n"}}), "no 'archive/data.pkl'");
  EXPECT_REFUSED(write_zip_stored({{"archive/data.pkl", pickle}, {"archive/constants.pkl", ""}}), "TorchScript");
  EXPECT_REFUSED(std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15), "legacy (pre-1.6)");
  EXPECT_REFUSED(std::string("hello"), "not a PyTorch zip checkpoint");
}

// Builds a model directory from a fixture with its weights in pytorch_model.bin (tdyn's own writer).
fs::path torch_copy(const fs::path& fixture, const fs::path& dir) {
  TensorStore st;
  read_safetensors(fixture / "model.safetensors", st);
  std::map<std::string, TensorToWrite> tensors;
  for (const auto& name : st.names()) {
    const TensorInfo& t = st.get(name);
    tensors[name] = {t.dtype, t.shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)};
  }
  fs::create_directories(dir);
  fs::copy_file(fixture / "config.json", dir / "config.json");
  write_file_atomic(dir / "pytorch_model.bin", torch_checkpoint_bytes(tensors));
  return dir;
}

void expect_same_logits(const fs::path& a, const fs::path& b) {
  const std::vector<int32_t> ids = {1, 5, 9, 2, 7};
  const Tensor la = Transformer(load_model(a)).forward(ids);
  const Tensor lb = Transformer(load_model(b)).forward(ids);
  ASSERT_EQ(la.shape, lb.shape);
  EXPECT_EQ(std::memcmp(la.ptr(), lb.ptr(), la.size() * sizeof(float)), 0) << a << " vs " << b;
}

TEST(TorchCheckpoint, LoaderReadsADirectoryWithOnlyPytorchModelBin) {
  TDYN_REQUIRE_SHARED("fixtures/llama");
  const fs::path fixture = test::shared_dir() / "fixtures/llama";
  const fs::path dir = torch_copy(fixture, test::scratch_dir("torch_loader") / "llama");
  EXPECT_EQ(load_model(dir)->store.format, "pytorch");
  expect_same_logits(fixture, dir);
  try {  // the file itself has no config: the error says to pass its directory
    load_model(dir / "pytorch_model.bin");
    ADD_FAILURE() << "a bare pytorch_model.bin loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pass the directory that holds it"), std::string::npos) << e.what();
  }
  // Both present: safetensors wins (here the .bin is garbage and never read).
  fs::copy_file(fixture / "model.safetensors", dir / "model.safetensors");
  write_file_atomic(dir / "pytorch_model.bin", "garbage");
  EXPECT_EQ(load_model(dir)->store.format, "safetensors");
  fs::remove(dir / "model.safetensors");
  EXPECT_THROW(load_model(dir), Error);
  fs::remove_all(dir.parent_path());
}

// Checkpoints written by PyTorch's own torch.save from the shared fixtures (the script below), made once
// (generated_fixtures.h) and only read by the tests.
class TorchSaved : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(test::shared_dir() / "fixtures/llama/bf16") || !fs::exists(test::shared_dir() / "fixtures/gpt2")) return;
    if (std::system("/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null") != 0) return;
    std::string key = kScript;
    for (const char* input : {"gpt2/model.safetensors", "gpt2/config.json", "llama/model.safetensors", "llama/config.json",
                              "llama/bf16/model.safetensors", "llama/bf16/config.json", "_gen/sfio.py"})
      key += read_file(test::shared_dir() / "fixtures" / input);
    std::string why;
    dir_ = new fs::path(test::made_once("torch_saved", key, [](const fs::path& dir, std::string*) {
      const fs::path script = dir / "gen.py";
      write_file_atomic(script, kScript);
      const std::string cmd = "/usr/bin/python3 " + test::shell_quote(script.string()) + " " +
                              test::shell_quote(test::shared_dir().string()) + " " + test::shell_quote(dir.string());
      if (std::system(cmd.c_str()) != 0) throw Error("the torch.save generator script failed: " + cmd);
      return true;
    }, &why));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!fs::exists(test::shared_dir() / "fixtures/llama/bf16"))
      GTEST_SKIP() << "shared fixtures not found (set TDYN_SHARED to the shared/ directory)";
    if (!dir_) GTEST_SKIP() << "/usr/bin/python3 has no torch/numpy: PyTorch-written checkpoints not tested";
  }
  static fs::path fixture(const std::string& name) { return test::shared_dir() / "fixtures" / name; }
  static const char* const kScript;
  static inline fs::path* dir_ = nullptr;
};

const char* const TorchSaved::kScript = R"PY(
import json, os, shutil, sys
from collections import OrderedDict
import torch
shared, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(shared, "fixtures", "_gen"))
import sfio

def model_dir(name, src):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    shutil.copyfile(os.path.join(shared, "fixtures", src, "config.json"), os.path.join(d, "config.json"))
    return d

# gpt2, float32, as nn.Module.state_dict() returns it: every other tensor an nn.Parameter (pickled through
# _rebuild_parameter) and the _metadata attribute (pickled with BUILD)
t, _ = sfio.load(os.path.join(shared, "fixtures/gpt2/model.safetensors"))
sd = OrderedDict((k, torch.nn.Parameter(v) if i % 2 else v) for i, (k, v) in enumerate(t.items()))
sd._metadata = OrderedDict([("", {"version": 1})])
torch.save(sd, os.path.join(model_dir("gpt2", "gpt2"), "pytorch_model.bin"))

# gpt2 in float16, the same half-precision weights as safetensors and as torch.save (top folder "weights")
h = OrderedDict((k, v.half()) for k, v in t.items())
sfio.save(h, os.path.join(model_dir("gpt2_f16_st", "gpt2"), "model.safetensors"))
torch.save(h, os.path.join(model_dir("gpt2_f16", "gpt2"), "weights.bin"))
os.rename(os.path.join(out, "gpt2_f16", "weights.bin"), os.path.join(out, "gpt2_f16", "pytorch_model.bin"))

# llama in bfloat16, a plain dict
t, _ = sfio.load(os.path.join(shared, "fixtures/llama/bf16/model.safetensors"))
torch.save(dict(t), os.path.join(model_dir("llama_bf16", "llama/bf16"), "pytorch_model.bin"))

# llama float32 with shared storages: each layer's q/k/v projections are views of one fused matrix, sliced
# after 5 rows of padding, so three keys share one storage at three nonzero offsets
t, _ = sfio.load(os.path.join(shared, "fixtures/llama/model.safetensors"))
shared_sd = OrderedDict(t)
layer = 0
while f"model.layers.{layer}.self_attn.q_proj.weight" in t:
    names = [f"model.layers.{layer}.self_attn.{p}_proj.weight" for p in "qkv"]
    fused = torch.cat([torch.zeros(5, t[names[0]].shape[1])] + [t[n] for n in names])
    row = 5
    for n in names:
        shared_sd[n] = fused[row:row + t[n].shape[0]]
        row += t[n].shape[0]
    layer += 1
torch.save(shared_sd, os.path.join(model_dir("llama_shared", "llama"), "pytorch_model.bin"))

# llama sharded: two torch.save shards + pytorch_model.bin.index.json, as save_pretrained writes them
d = model_dir("llama_sharded", "llama")
names = sorted(t)
weight_map = OrderedDict()
for i, group in enumerate([names[:len(names) // 2], names[len(names) // 2:]]):
    fname = f"pytorch_model-{i + 1:05d}-of-00002.bin"
    torch.save({n: t[n] for n in group}, os.path.join(d, fname))
    weight_map.update((n, fname) for n in group)
with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": weight_map}, f)

# files tdyn must refuse
torch.save({"w": torch.arange(6.0).view(2, 3).t()}, os.path.join(out, "transposed.bin"))
torch.save({"w": torch.zeros(2)}, os.path.join(out, "legacy.bin"), _use_new_zipfile_serialization=False)
torch.save({"model": {"w": torch.zeros(2)}}, os.path.join(out, "nested.bin"))
class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + os.path.join(out, "payload_ran"),))
torch.save({"w": torch.zeros(2), "x": Payload()}, os.path.join(out, "payload.bin"))
)PY";

// Every tensor of `a` equals the one of the same name in `b`: dtype, shape and bytes.
void expect_identical_tensors(const TensorStore& a, const TensorStore& b) {
  ASSERT_EQ(a.names(), b.names());
  for (const auto& name : a.names()) {
    const TensorInfo& x = a.get(name);
    const TensorInfo& y = b.get(name);
    EXPECT_EQ(x.dtype, y.dtype) << name;
    EXPECT_EQ(x.shape, y.shape) << name;
    ASSERT_EQ(x.nbytes, y.nbytes) << name;
    EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0) << name << ": bytes differ";
  }
}

TEST_F(TorchSaved, TensorsAndLogitsEqualTheSafetensorsFixtures) {
  const std::vector<std::pair<std::string, fs::path>> cases = {
      {"gpt2", fixture("gpt2")},             // float32, Parameters, _metadata
      {"gpt2_f16", *dir_ / "gpt2_f16_st"},   // float16, top folder "weights"
      {"llama_bf16", fixture("llama/bf16")}, // bfloat16, plain dict
      {"llama_shared", fixture("llama")},    // q/k/v views of one storage
      {"llama_sharded", fixture("llama")}};  // pytorch_model.bin.index.json
  for (const auto& [name, reference] : cases) {
    SCOPED_TRACE(name);
    const fs::path dir = *dir_ / name;
    auto torch_model = load_model(dir);
    auto st_model = load_model(reference);
    EXPECT_EQ(torch_model->store.format, "pytorch");
    expect_identical_tensors(torch_model->store, st_model->store);
    expect_same_logits(dir, reference);
  }
  auto shared = load_model(*dir_ / "llama_shared");
  const TensorInfo& q = shared->store.get("model.layers.0.self_attn.q_proj.weight");
  const TensorInfo& k = shared->store.get("model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(k.data, q.data + q.nbytes) << "k_proj should follow q_proj in the one fused storage";
}

TEST_F(TorchSaved, CliRunsOnAPytorchModelBinDirectory) {
  std::string out, err;
  ASSERT_EQ(test::run_cli("info --json " + test::shell_quote((*dir_ / "llama_bf16").string()), &out, &err), 0) << err;
  EXPECT_NE(out.find("\"torch_archive\""), std::string::npos) << out;  // the archive's metadata
}

TEST_F(TorchSaved, RefusesWhatItCannotUseWithTheReason) {
  auto error_of_file = [](const fs::path& path) {
    try {
      TensorStore store;
      read_torch(path, store);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of_file(*dir_ / "transposed.bin").find("not contiguous"), std::string::npos);
  EXPECT_NE(error_of_file(*dir_ / "legacy.bin").find("legacy (pre-1.6)"), std::string::npos);
  EXPECT_NE(error_of_file(*dir_ / "nested.bin").find("'model' is a dict, not a tensor"), std::string::npos);
  const std::string payload = error_of_file(*dir_ / "payload.bin");
  EXPECT_NE(payload.find("'posix.system'"), std::string::npos) << payload;
  EXPECT_FALSE(fs::exists(*dir_ / "payload_ran"));
}

}  // namespace
}  // namespace tdyn
