// Writes the seed corpus of every fuzz target (fuzz/corpus/<target>/) with tdyn's own writers: small valid
// files of each kind and family, so that the fuzzer starts from inputs that get deep into each reader. Every
// seed is run through its entry point here and the outcome printed, so a seed that no longer loads is seen.
//
// Usage: make_fuzz_corpus OUT_DIR
#include <cstdio>
#include <functional>
#include <map>

#include <sentencepiece_trainer.h>

#include "core/base64.h"
#include "entry_points.h"
#include "io/gguf_writer.h"
#include "io/torch_pickle.h"
#include "io/zip.h"
#include "model/init.h"

namespace tdyn::fuzz {
namespace {

fs::path g_out;
fs::path g_scratch;
int g_rejected = 0;

using Entry = std::function<void(std::string_view)>;
const std::map<std::string, Entry> kEntries = {
    {"safetensors", safetensors},     {"safetensors_index", safetensors_index},
    {"gguf", gguf},                   {"llama2c", llama2c},
    {"config", config},               {"npy", npy},
    {"tokenizer_json", tokenizer_json}, {"tokenizer_llama2c", tokenizer_llama2c},
    {"vocab_txt", vocab_txt},         {"gpt2_bpe", gpt2_bpe},
    {"char_vocab", char_vocab},       {"model", model},
    {"sentencepiece_model", sentencepiece_model}, {"torch", torch_checkpoint},
    {"hub_cache", hub_cache}};

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(g_out / target);
  write_file_atomic(g_out / target / name, bytes);
  try {
    kEntries.at(target)(bytes);
    std::printf("  %-18s %-28s %7zu bytes  loads\n", target.c_str(), name.c_str(), bytes.size());
  } catch (const Error& e) {
    ++g_rejected;
    std::printf("  %-18s %-28s %7zu bytes  REJECTED: %s\n", target.c_str(), name.c_str(), bytes.size(), e.what());
  }
}

std::string raw(const TensorInfo& t) { return std::string(reinterpret_cast<const char*>(t.data), t.nbytes); }

std::string safetensors_file(const std::map<std::string, TensorToWrite>& tensors,
                             const std::map<std::string, std::string>& metadata = {{"format", "pt"}}) {
  write_safetensors(g_scratch / "t.safetensors", tensors, metadata);
  return read_file(g_scratch / "t.safetensors");
}

template <typename T>
TensorToWrite typed(DType dtype, const Shape& shape, const std::vector<T>& values) {
  return {dtype, shape, std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T))};
}

// Tiny configs (d_model 8, vocab 16) of every family.
std::map<std::string, nlohmann::json> family_configs() {
  nlohmann::json gemma4_text = nlohmann::json::parse(R"({
    "model_type": "gemma4_text", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 16,
    "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
    "global_head_dim": 8, "max_position_embeddings": 8, "rms_norm_eps": 1e-6, "sliding_window": 4,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
    "num_kv_shared_layers": 1, "use_double_wide_mlp": true, "hidden_size_per_layer_input": 2,
    "final_logit_softcapping": 30.0,
    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                           "rope_theta": 1000000.0}}})");
  nlohmann::json gemma4 = {{"model_type", "gemma4"}, {"text_config", gemma4_text}};
  return {
      {"llama", nlohmann::json::parse(R"({"model_type": "llama", "vocab_size": 16, "hidden_size": 8,
        "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
        "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 16}})")},
      {"gpt2", nlohmann::json::parse(R"({"model_type": "gpt2", "vocab_size": 16, "n_positions": 8, "n_embd": 8,
        "n_layer": 2, "n_head": 2, "scale_attn_by_inverse_layer_idx": true})")},
      {"gpt_neo", nlohmann::json::parse(R"({"model_type": "gpt_neo", "vocab_size": 16, "max_position_embeddings": 8,
        "hidden_size": 8, "num_layers": 2, "num_heads": 2, "intermediate_size": 16, "window_size": 4,
        "attention_types": [[["global", "local"], 1]]})")},
      {"bert", nlohmann::json::parse(R"({"model_type": "bert", "vocab_size": 16, "hidden_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 8,
        "type_vocab_size": 2})")},
      {"albert", nlohmann::json::parse(R"({"model_type": "albert", "vocab_size": 16, "embedding_size": 4,
        "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16,
        "max_position_embeddings": 8, "type_vocab_size": 2})")},
      {"olmo3", nlohmann::json::parse(R"({"model_type": "olmo3", "vocab_size": 16, "hidden_size": 8,
        "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": 8,
        "sliding_window": 4})")},
      {"gemma4_text", gemma4_text},
      {"gemma4", gemma4},
  };
}

void readers() {
  // safetensors: float and integer dtypes, metadata, an empty tensor, a scalar.
  std::vector<float> f(24);
  for (size_t i = 0; i < f.size(); ++i) f[i] = 0.25f * static_cast<float>(i) - 2.0f;
  seed("safetensors", "f32", safetensors_file({{"w", f32_tensor({4, 6}, f.data())}, {"b", f32_tensor({6}, f.data())}}));
  seed("safetensors", "dtypes",
       safetensors_file({{"h", typed<uint16_t>(DType::F16, {2, 2}, {0x3c00, 0xbc00, 0x0001, 0x7c00})},
                         {"bf", typed<uint16_t>(DType::BF16, {3}, {0x3f80, 0xc000, 0x7fc0})},
                         {"d", typed<double>(DType::F64, {2}, {1.5, -0.5})},
                         {"i", typed<int64_t>(DType::I64, {2}, {7, -7})},
                         {"u", typed<uint8_t>(DType::U8, {3}, {1, 2, 255})},
                         {"empty", typed<float>(DType::F32, {0, 4}, {})},
                         {"scalar", typed<float>(DType::F32, {}, {3.0f})}},
                        {{"format", "pt"}, {"note", "seed"}}));

  // Sharded index: two shards, named as Hugging Face names them.
  const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
  nlohmann::json index = {{"metadata", {{"total_size", 120}}}, {"weight_map", {{"a", s1}, {"b", s2}, {"c", s2}}}};
  seed("safetensors_index", "two_shards",
       join_parts({index.dump(2), safetensors_file({{"a", f32_tensor({2, 3}, f.data())}}),
                   safetensors_file({{"b", f32_tensor({3}, f.data())}, {"c", f32_tensor({4, 1}, f.data())}})}));

  // PyTorch zip checkpoints: every storage dtype (also in ZIP64 records), and torch.save's idioms written by
  // hand as PyTorch writes them: an nn.Parameter, two tensors viewing one storage at different offsets (the
  // persistent id memoized and fetched again), the state dict's _metadata attribute set with BUILD.
  const std::map<std::string, TensorToWrite> torch_dtypes = {
      {"h", typed<uint16_t>(DType::F16, {2, 2}, {0x3c00, 0xbc00, 0x0001, 0x7c00})},
      {"bf", typed<uint16_t>(DType::BF16, {3}, {0x3f80, 0xc000, 0x7fc0})},
      {"d", typed<double>(DType::F64, {2}, {1.5, -0.5})},
      {"i", typed<int64_t>(DType::I64, {2}, {7, -7})},
      {"u", typed<uint8_t>(DType::U8, {3}, {1, 2, 255})},
      {"empty", typed<float>(DType::F32, {0, 4}, {})},
      {"scalar", typed<float>(DType::F32, {}, {3.0f})}};
  const std::string torch_bytes = torch_checkpoint_bytes(torch_dtypes);
  seed("torch", "dtypes", torch_bytes);
  std::vector<std::pair<std::string, std::string>> entries;
  const ZipArchive zip(MappedFile::from_bytes(torch_bytes, "seed"));
  for (const auto& e : zip.entries()) entries.emplace_back(e.name, std::string(zip.data(e)));
  seed("torch", "zip64", write_zip_stored(entries, true));
  using namespace std::string_literals;
  auto x = [](const std::string& s) { return "X"s + static_cast<char>(s.size()) + "\0\0\0"s + s; };
  const std::string views_pickle =
      "\x80\x02" "ccollections\nOrderedDict\nq\x00)Rq\x01("s + x("w") +
      "ctorch._utils\n_rebuild_parameter\nctorch._utils\n_rebuild_tensor_v2\nq\x02((" + x("storage") +
      "ctorch\nFloatStorage\n" + x("0") + x("cpu") + "K\x08tq\x03QK\x02K\x02K\x03\x86K\x03K\x01\x86\x89h\x00)RtR"
      "\x88h\x00)R\x87R"s + x("v") + "h\x02(h\x03QK\x00K\x04\x85K\x01\x85\x89h\x00)RtRu}"s + x("_metadata") +
      "h\x00)R"s + x("") + "}" + x("version") + "K\x01sssb.";
  seed("torch", "views", write_zip_stored({{"archive/data.pkl", views_pickle},
                                           {"archive/data/0", std::string(reinterpret_cast<const char*>(f.data()), 32)},
                                           {"archive/version", "3\n"}}));

  // GGUF: every metadata value type, nested arrays, a custom alignment, F32/F16/BF16 tensors.
  std::vector<GgufValue> ragged = {GgufValue::int32s({1, -2, 3}), GgufValue::strings({"x"}),
                                   GgufValue::array(GgufType::Float64, {})};
  GgufMetadata metadata = {
      {"general.architecture", GgufValue::string("llama")}, {"general.alignment", GgufValue::uint32(64)},
      {"t.u8", GgufValue::uint8(200)}, {"t.i8", GgufValue::int8(-100)}, {"t.u16", GgufValue::uint16(60000)},
      {"t.i16", GgufValue::int16(-30000)}, {"t.u32", GgufValue::uint32(4000000000u)},
      {"t.i32", GgufValue::int32(-2000000000)}, {"t.f32", GgufValue::float32(0.1f)},
      {"t.bool", GgufValue::boolean(true)}, {"t.str", GgufValue::string("h\xc3\xa9llo")},
      {"t.u64", GgufValue::uint64(5)}, {"t.i64", GgufValue::int64(-7)}, {"t.f64", GgufValue::float64(3.5)},
      {"t.nested", GgufValue::array(GgufType::Array, std::move(ragged))},
      {"tokenizer.ggml.tokens", GgufValue::strings({"<unk>", "<s>", "</s>", "a"})}};
  seed("gguf", "value_types",
       gguf_bytes(metadata, {gguf_f32_tensor("w", {4, 6}, f.data()),
                             {"h", DType::F16, {2, 2}, typed<uint16_t>(DType::F16, {4}, {0x3c00, 0, 1, 2}).bytes},
                             {"bf", DType::BF16, {1, 1, 1, 3}, typed<uint16_t>(DType::BF16, {3}, {0x3f80, 0, 1}).bytes}}));

  // llama2.c: dim 8, hidden 12, 1 layer, 2 heads / 1 kv head, vocab 16 (negative: separate classifier), seq 4.
  for (int32_t vocab : {16, -16}) {
    const int64_t dim = 8, hidden = 12, L = 1, head = 4, kv = 4, seq = 4, v = 16;
    int64_t floats = v * dim + L * (dim + dim * dim + 2 * kv * dim + dim * dim + dim + 3 * hidden * dim) + dim + seq * head;
    if (vocab < 0) floats += v * dim;
    std::string bytes;
    for (int32_t h : {8, 12, 1, 2, 1, vocab, 4}) bytes.append(reinterpret_cast<const char*>(&h), 4);
    for (int64_t i = 0; i < floats; ++i) {
      float x = 0.01f * static_cast<float>(i % 17);
      bytes.append(reinterpret_cast<const char*>(&x), 4);
    }
    seed("llama2c", vocab > 0 ? "shared_classifier" : "separate_classifier", bytes);
  }

  // .npy of each dtype tdyn writes.
  const std::vector<double> d = {1, -2, 3.5, 4};
  const std::vector<int64_t> i64 = {1, -2, 3, 4};
  const std::vector<int32_t> i32 = {1, -2, 3, 4};
  write_npy(g_scratch / "a.npy", f.data(), Shape{2, 3, 4});
  seed("npy", "f4", read_file(g_scratch / "a.npy"));
  write_npy(g_scratch / "a.npy", d.data(), Shape{4});
  seed("npy", "f8", read_file(g_scratch / "a.npy"));
  write_npy(g_scratch / "a.npy", i64.data(), Shape{2, 2});
  seed("npy", "i8", read_file(g_scratch / "a.npy"));
  write_npy(g_scratch / "a.npy", i32.data(), Shape{1, 4});
  seed("npy", "i4", read_file(g_scratch / "a.npy"));
  write_npy(g_scratch / "a.npy", f.data(), Shape{});
  seed("npy", "scalar", read_file(g_scratch / "a.npy"));
}

// Each family: its config.json, and a whole randomly initialised model directory.
void models() {
  int n = 0;
  for (const auto& [family, cfg] : family_configs()) {
    seed("config", family, cfg.dump(2));
    const fs::path dir = g_scratch / family;
    fs::remove_all(dir);
    write_random_init(cfg, dir, 1);
    seed("model", "hf_" + family, join_parts({read_file(dir / "config.json"), read_file(dir / "model.safetensors")}));
    ++n;
  }

  // Llama again: sharded, as GGUF, and the tensors it is made of.
  const fs::path dir = g_scratch / "llama";
  TensorStore store;
  read_safetensors(dir / "model.safetensors", store);
  std::map<std::string, TensorToWrite> first, second;
  nlohmann::json weight_map = nlohmann::json::object();
  const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
  for (const auto& name : store.names()) {
    const TensorInfo& t = store.get(name);
    const bool in_first = name.find("layers.1.") == std::string::npos && name != "lm_head.weight";
    (in_first ? first : second)[name] = {t.dtype, t.shape, raw(t)};
    weight_map[name] = in_first ? s1 : s2;
  }
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  seed("model", "hf_llama_sharded", join_parts({read_file(dir / "config.json"), index.dump(1),
                                                safetensors_file(first), safetensors_file(second)}));

  // GGUF names as llama.cpp's converter writes them (q/k row order does not matter to a fuzzer).
  const std::vector<std::pair<std::string, std::string>> renames = {
      {"model.embed_tokens", "token_embd"}, {"model.layers.", "blk."}, {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"}, {"self_attn.v_proj", "attn_v"}, {"self_attn.o_proj", "attn_output"},
      {"mlp.gate_proj", "ffn_gate"}, {"mlp.up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"},
      {"input_layernorm", "attn_norm"}, {"post_attention_layernorm", "ffn_norm"}, {"model.norm", "output_norm"},
      {"lm_head", "output"}};
  std::vector<GgufTensor> tensors;
  for (const auto& name : store.names()) {
    std::string g = name;
    for (const auto& [from, to] : renames)
      if (auto p = g.find(from); p != std::string::npos) g.replace(p, from.size(), to);
    const TensorInfo& t = store.get(name);
    tensors.push_back({g, t.dtype, t.shape, raw(t)});
  }
  GgufMetadata m = {
      {"general.architecture", GgufValue::string("llama")}, {"llama.context_length", GgufValue::uint32(32)},
      {"llama.embedding_length", GgufValue::uint32(8)}, {"llama.block_count", GgufValue::uint32(2)},
      {"llama.feed_forward_length", GgufValue::uint32(12)}, {"llama.rope.dimension_count", GgufValue::uint32(4)},
      {"llama.attention.head_count", GgufValue::uint32(2)}, {"llama.attention.head_count_kv", GgufValue::uint32(1)},
      {"llama.attention.layer_norm_rms_epsilon", GgufValue::float32(1e-5f)},
      {"llama.rope.freq_base", GgufValue::float32(10000.0f)}, {"llama.vocab_size", GgufValue::uint32(16)},
      {"tokenizer.ggml.bos_token_id", GgufValue::uint32(1)}, {"tokenizer.ggml.eos_token_id", GgufValue::uint32(2)}};
  const std::string gguf_llama = gguf_bytes(m, tensors);
  seed("gguf", "llama", gguf_llama);
  // The same metadata over block-quantized tensors (a Q8_0 and a Q4_K matrix from tdyn's reference encoder),
  // for the block decoders behind TensorStore::floats. d_model 8 is no whole block, so these are not the model's.
  std::vector<float> values(2 * 256);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.05f * static_cast<float>(static_cast<int>(i % 23) - 11);
  seed("gguf", "quantized",
       gguf_bytes(m, {gguf_quantized_tensor("blk.0.attn_q.weight", {2, 64}, DType::Q8_0, values.data()),
                      gguf_quantized_tensor("blk.0.ffn_down.weight", {2, 256}, DType::Q4_K, values.data())}));
  seed("model", "gguf_llama", gguf_llama);

  // GPT-2 as llama.cpp names it: fused attn_qkv, learned positions, biases, output.weight written out.
  {
    const int64_t d = 8, ff = 16, v = 16, ctx = 8;
    std::vector<GgufTensor> g;
    auto add = [&](const std::string& name, const Shape& shape) {
      std::vector<float> x(static_cast<size_t>(numel(shape)));
      for (size_t i = 0; i < x.size(); ++i) x[i] = 0.03f * static_cast<float>(static_cast<int>((i * 7 + name.size()) % 13) - 6);
      g.push_back(gguf_f32_tensor(name, shape, x.data()));
    };
    add("token_embd.weight", {v, d});
    add("position_embd.weight", {ctx, d});
    for (const char* n : {"blk.0.attn_norm", "blk.0.ffn_norm", "output_norm"}) add(std::string(n) + ".weight", {d}), add(std::string(n) + ".bias", {d});
    add("blk.0.attn_qkv.weight", {3 * d, d});
    add("blk.0.attn_qkv.bias", {3 * d});
    add("blk.0.attn_output.weight", {d, d});
    add("blk.0.attn_output.bias", {d});
    add("blk.0.ffn_up.weight", {ff, d});
    add("blk.0.ffn_up.bias", {ff});
    add("blk.0.ffn_down.weight", {d, ff});
    add("blk.0.ffn_down.bias", {d});
    add("output.weight", {v, d});
    GgufMetadata gm = {{"general.architecture", GgufValue::string("gpt2")}, {"gpt2.context_length", GgufValue::uint32(ctx)},
                       {"gpt2.embedding_length", GgufValue::uint32(d)}, {"gpt2.block_count", GgufValue::uint32(1)},
                       {"gpt2.feed_forward_length", GgufValue::uint32(ff)}, {"gpt2.attention.head_count", GgufValue::uint32(2)},
                       {"gpt2.attention.layer_norm_epsilon", GgufValue::float32(1e-5f)}};
    const std::string gguf_gpt2 = gguf_bytes(gm, g);
    seed("gguf", "gpt2", gguf_gpt2);
    seed("model", "gguf_gpt2", gguf_gpt2);
  }

  // Tokenizers carried in GGUF metadata (tokenizer.ggml.*), on the llama metadata above: SentencePiece-style
  // ("llama": scores, token types, byte tokens), byte-level BPE ("gpt2": merges) and WordPiece ("bert").
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; b += 17) pieces.push_back(fmt::format("<0x{:02X}>", b)), types.push_back(6);
  for (const char* p : {"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab", "\xC3\xA9", "<|user|>"})
    pieces.push_back(p), types.push_back(std::string(p) == "<|user|>" ? 4 : 1);
  std::vector<float> scores;
  for (size_t i = 0; i < pieces.size(); ++i) scores.push_back(-static_cast<float>(i));
  GgufMetadata spm = m;
  for (auto kv : GgufMetadata{{"tokenizer.ggml.model", GgufValue::string("llama")},
                              {"tokenizer.ggml.tokens", GgufValue::strings(pieces)},
                              {"tokenizer.ggml.scores", GgufValue::float32s(scores)},
                              {"tokenizer.ggml.token_type", GgufValue::int32s(types)},
                              {"tokenizer.ggml.unknown_token_id", GgufValue::uint32(0)},
                              {"tokenizer.ggml.add_bos_token", GgufValue::boolean(true)},
                              {"tokenizer.ggml.add_eos_token", GgufValue::boolean(true)}})
    spm.push_back(kv);
  seed("gguf", "tokenizer_llama", gguf_bytes(spm, tensors));
  GgufMetadata bpe = m;
  for (auto kv : GgufMetadata{{"tokenizer.ggml.model", GgufValue::string("gpt2")},
                              {"tokenizer.ggml.pre", GgufValue::string("gpt-2")},
                              {"tokenizer.ggml.tokens", GgufValue::strings({"H", "e", "l", "o", "\xC4\xA0", "He", "ll", "Hell", "<|endoftext|>"})},
                              {"tokenizer.ggml.token_type", GgufValue::int32s({1, 1, 1, 1, 1, 1, 1, 1, 3})},
                              {"tokenizer.ggml.merges", GgufValue::strings({"H e", "l l", "He ll"})}})
    bpe.push_back(kv);
  seed("gguf", "tokenizer_gpt2", gguf_bytes(bpe, tensors));
  GgufMetadata wpm = m;
  for (auto kv : GgufMetadata{{"tokenizer.ggml.model", GgufValue::string("bert")},
                              {"tokenizer.ggml.tokens", GgufValue::strings({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "\xE2\x96\x81" "hello", "lo", "\xE2\x96\x81" "a"})},
                              {"tokenizer.ggml.token_type", GgufValue::int32s({3, 2, 3, 3, 1, 1, 1})}})
    wpm.push_back(kv);
  seed("gguf", "tokenizer_bert", gguf_bytes(wpm, tensors));
  seed("model", "llama2c", read_file(g_out / "llama2c" / "separate_classifier"));
  seed("safetensors", "llama", read_file(dir / "model.safetensors"));
  std::map<std::string, TensorToWrite> all = first;
  all.insert(second.begin(), second.end());
  seed("torch", "llama", torch_checkpoint_bytes(all));
  seed("model", "hf_llama_torch", join_parts({read_file(dir / "config.json"), torch_checkpoint_bytes(all)}));
}

void tokenizers() {
  // llama2.c tokenizer.bin: <unk>, BOS, EOS, the 256 byte pieces, then a few merges.
  std::string bin;
  auto put_i32 = [&](int32_t v) { bin.append(reinterpret_cast<const char*>(&v), 4); };
  auto put_piece = [&](float score, const std::string& piece) {
    bin.append(reinterpret_cast<const char*>(&score), 4);
    put_i32(static_cast<int32_t>(piece.size()));
    bin += piece;
  };
  put_i32(8);
  put_piece(0, "<unk>");
  put_piece(0, "\n<s>\n");
  put_piece(0, "\n</s>\n");
  for (int b = 0; b < 256; ++b) put_piece(0, fmt::format("<0x{:02X}>", b));
  float score = -1;
  for (const char* p : {" ", "e", "l", "o", "h", "w", "r", "d", "ll", "he", "hell", "hello", " w", " wor", "\xC3\xA9"})
    put_piece(score--, p);
  seed("tokenizer_llama2c", "small", bin);

  // BERT vocab.txt (+ tokenizer_config.json).
  const std::string vocab_txt = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n##s\n##ing\n,\n!\n.\na\nh\n##e\n##llo\n\xE4\xB8\xAD\n";
  seed("vocab_txt", "bert", vocab_txt);
  seed("vocab_txt", "bert_cased", join_parts({vocab_txt, R"({"do_lower_case": false, "strip_accents": true})"}));

  // GPT-2 vocab.json + merges.txt (byte-level pieces: "Ġ" is the space).
  const std::string gpt2_vocab = R"({"H": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7, "ll": 8,
    "He": 9, "Hell": 10, "Hello": 11, "Ġw": 12, "Ġwo": 13, ",": 14, "!": 15, "<|endoftext|>": 16})";
  seed("gpt2_bpe", "small", join_parts({gpt2_vocab, "#version: 0.2\nl l\nH e\nHe ll\nHell o\n\xC4\xA0 w\n\xC4\xA0w o\n"}));

  // Character vocabulary.
  seed("char_vocab", "chars", R"({"\n": 0, " ": 1, "!": 2, "a": 3, "b": 4, "e": 5, "h": 6, "l": 7, "o": 8, "é": 9, "中": 10})");

  // tokenizer.json: byte-level BPE, SentencePiece-style BPE with byte fallback, WordPiece, Unigram.
  seed("tokenizer_json", "bytelevel_bpe", R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 16, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
              "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": )" + gpt2_vocab + R"(,
              "merges": ["l l", "H e", ["He", "ll"], "Hell o", "Ġ w", "Ġw o"]}})");
  seed("tokenizer_json", "sentencepiece_bpe", join_parts({R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true, "lstrip": false, "rstrip": false},
                     {"id": 1, "content": "<s>", "special": true, "lstrip": false, "rstrip": false},
                     {"id": 2, "content": "</s>", "special": true, "lstrip": false, "rstrip": false}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x00>": 3, "<0x41>": 4, "<0xC3>": 5, "<0xA9>": 6,
                        "▁": 7, "h": 8, "e": 9, "l": 10, "o": 11, "▁h": 12, "ll": 13, "▁he": 14, "▁hell": 15},
              "merges": ["▁ h", "l l", "▁h e", "▁he ll"]}})",
                                                         R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}})"}));
  seed("tokenizer_json", "wordpiece", R"({
    "added_tokens": [{"id": 0, "content": "[PAD]", "special": true}, {"id": 1, "content": "[UNK]", "special": true},
                     {"id": 2, "content": "[CLS]", "special": true}, {"id": 3, "content": "[SEP]", "special": true},
                     {"id": 4, "content": "[MASK]", "special": true}],
    "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null,
                   "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
    "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 100,
              "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "hello": 5, "world": 6,
                        "##s": 7, ",": 8, "!": 9, "h": 10, "##ello": 11, "中": 12}}})");
  seed("tokenizer_json", "unigram", R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "</s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"},
                   {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
    "post_processor": {"type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}}],
        "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
    "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
    "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": false,
              "vocab": [["<unk>", 0.0], ["</s>", 0.0], ["▁", -2.0], ["h", -3.0], ["e", -3.0], ["l", -3.0],
                        ["o", -3.0], ["▁hello", -1.0], ["ll", -2.5], ["▁he", -2.0], ["world", -1.5]]}})");
  // SentencePiece .model files trained by the library on a few lines: a Unigram model with a small charsmap (three
  // custom rules instead of nmt_nfkc's 240 kB), a byte-fallback BPE model without one; and the small charsmap as a
  // tokenizer.json Precompiled normalizer.
  std::string corpus;
  for (int i = 0; i < 20; ++i)
    corpus += "the quick brown fox jumps over the lazy dog\nhello world, this is a small corpus for a tiny model\n"
              "caf\xC3\xA9 na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 numbers 123 456\n";
  write_file_atomic(g_scratch / "spm.txt", corpus);
  write_file_atomic(g_scratch / "rules.tsv", "FF21\t41\nFB01\t66 69\n3000\t20\n");  // Ａ -> A, ﬁ -> fi, ideographic space
  auto train = [&](const std::string& name, const std::string& args) {
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        fmt::format("--input={} --model_prefix={} --minloglevel=2 --hard_vocab_limit=false {}",
                    (g_scratch / "spm.txt").string(), (g_scratch / name).string(), args));
    if (!status.ok()) fail("training the SentencePiece seed '{}': {}", name, status.ToString());
    return read_file(g_scratch / (name + ".model"));
  };
  const std::string unigram = train("unigram", "--model_type=unigram --vocab_size=60 --normalization_rule_tsv=" +
                                                   (g_scratch / "rules.tsv").string());
  seed("sentencepiece_model", "unigram_rules", unigram);
  seed("sentencepiece_model", "bpe_byte_fallback",
       train("bpe", "--model_type=bpe --vocab_size=320 --byte_fallback=true --normalization_rule_name=identity"));
  const std::string charsmap = read_sentencepiece_model_info(unigram, "unigram").precompiled_charsmap;
  seed("tokenizer_json", "precompiled", R"({
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Precompiled", "precompiled_charsmap": ")" +
                                              encode_base64(charsmap) + R"("},
                   {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
    "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["▁", -2.0], ["A", -3.0], ["f", -3.0],
              ["i", -3.0], ["▁the", -1.0]]}})");
}

// Hub caches: refs naming commits, snapshots linking into blobs/, a revision by ref, by commit prefix, and the
// bare directory (main).
void hub_caches() {
  const std::string main_commit = "4a6b3c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f7", step_commit = "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432";
  const std::vector<std::string> cache = {
      "file refs/main\n" + main_commit,
      "file refs/step1000\n" + step_commit,
      "file blobs/0c1d\n{\"model_type\": \"gpt2\"}",
      "link snapshots/" + main_commit + "/config.json\n../../blobs/0c1d",
      "link snapshots/" + step_commit + "/config.json\n../../blobs/0c1d",
  };
  auto with_revision = [&](const std::string& revision) {
    std::vector<std::string> parts = {revision};
    parts.insert(parts.end(), cache.begin(), cache.end());
    return join_parts(parts);
  };
  seed("hub_cache", "bare_directory", with_revision(""));
  seed("hub_cache", "ref", with_revision("step1000"));
  seed("hub_cache", "commit_prefix", with_revision(step_commit.substr(0, 7)));
}

}  // namespace
}  // namespace tdyn::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR (normally fuzz/corpus)\n", argv[0]);
    return 2;
  }
  using namespace tdyn;
  fuzz::g_out = argv[1];
  fuzz::g_scratch = fs::temp_directory_path() / fmt::format("tdyn_fuzz_corpus_{}", ::getpid());
  fs::create_directories(fuzz::g_scratch);
  fuzz::readers();
  fuzz::models();
  fuzz::tokenizers();
  fuzz::hub_caches();
  fs::remove_all(fuzz::g_scratch);
  std::printf("%d seed(s) rejected by their entry point\n", fuzz::g_rejected);
  return 0;
}
