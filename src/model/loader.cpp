#include "model/loader.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/hub_cache.h"
#include "model/gguf_config.h"
#include "io/llama2c.h"
#include "io/safetensors.h"
#include "io/torch_pickle.h"
#include "io/zip.h"
#include "model/families.h"
#include "model/finite.h"
#include "kernels/packed_matrix.h"
#include "kernels/stored_matrix.h"

namespace tdyn {
namespace {

// "layer 3"; a stored layer that several layers reuse (ALBERT) lists them; -1: a model-wide tensor.
std::string layer_label(const ModelConfig& c, int64_t stored) {
  if (stored < 0) return "model-wide, not in a layer";
  std::vector<int64_t> users;
  for (int64_t l = 0; l < c.n_layers; ++l)
    if (c.layer(l).weights == stored) users.push_back(l);
  if (users == std::vector<int64_t>{stored}) return fmt::format("layer {}", stored);
  return fmt::format("stored layer {}, used by layers {}", stored, fmt::join(users, ", "));
}

// Every weight the model reads, checked for NaN/Inf before anything runs: a non-finite weight would otherwise
// surface as NaN metrics far from its cause. The check streams through each tensor as stored (float32 in place,
// other dtypes widened a chunk at a time into a per-thread buffer), so it keeps nothing and reads each weight
// byte once. Tensors are cut into chunks so that a few large matrices (the embedding) still spread over all
// threads; the first offender in binding order is reported.
void check_finite_weights(const Model& m) {
  const auto& sources = m.weights.sources;
  struct Chunk {
    size_t source;
    int64_t begin, end;  // values [begin, end) of the flattened tensor, whole blocks for quantized dtypes
  };
  std::vector<const TensorInfo*> infos;
  std::vector<Chunk> chunks;
  for (size_t s = 0; s < sources.size(); ++s) {
    const TensorInfo& t = m.store.get(sources[s].name);
    const int64_t n = numel(t.shape), block = dtype_layout(t.dtype).block_elements;
    const int64_t chunk = (int64_t{1} << 20) / block * block;  // 1 Mi values
    infos.push_back(&t);
    for (int64_t b = 0; b < n; b += chunk) chunks.push_back({s, b, std::min(b + chunk, n)});
  }
  // Widens chunk i into `buffer` (or points into the mapping) and returns its values.
  auto values = [&](const Chunk& c, std::vector<float>& buffer) -> const float* {
    const TensorInfo& t = *infos[c.source];
    const std::byte* at = t.data + tensor_bytes(t.dtype, c.begin);
    if (t.dtype == DType::F32 && reinterpret_cast<uintptr_t>(at) % alignof(float) == 0)
      return reinterpret_cast<const float*>(at);
    buffer.resize(c.end - c.begin);
    convert_to_float(t.dtype, at, c.end - c.begin, buffer.data());
    return buffer.data();
  };
  std::vector<int64_t> bad(chunks.size(), 0);
#pragma omp parallel
  {
    std::vector<float> buffer;
#pragma omp for schedule(dynamic)
    for (int64_t i = 0; i < static_cast<int64_t>(chunks.size()); ++i)
      bad[i] = count_non_finite(values(chunks[i], buffer), chunks[i].end - chunks[i].begin);
  }

  for (size_t i = 0; i < chunks.size(); ++i) {
    if (bad[i] == 0) continue;
    const auto& src = sources[chunks[i].source];
    const TensorInfo& info = *infos[chunks[i].source];
    int64_t count = 0;
    for (size_t j = 0; j < chunks.size(); ++j)
      if (chunks[j].source == chunks[i].source) count += bad[j];
    std::vector<float> buffer;
    const float* chunk_values = values(chunks[i], buffer);
    const int64_t offset = first_non_finite(chunk_values, chunks[i].end - chunks[i].begin);
    const int64_t first = chunks[i].begin + offset;
    std::vector<int64_t> index(info.shape.size());  // the flat index as a multi-index into the stored shape
    for (int64_t k = static_cast<int64_t>(index.size()) - 1, rest = first; k >= 0; --k) {
      index[k] = rest % info.shape[k];
      rest /= info.shape[k];
    }
    fail("weight tensor '{}' ({}) in '{}' is {} at element [{}] (flat index {}); {} of its {} elements {} NaN or "
         "Inf. A non-finite weight would turn every activation it touches into NaN/Inf; the checkpoint is corrupt "
         "or was saved after training diverged (--no-check-weights, or LoadOptions::check_finite = false, loads it "
         "anyway)",
         src.name, layer_label(m.config, src.layer), info.file, value_name(chunk_values[offset]), fmt::join(index, ", "),
         first, count, numel(info.shape), count == 1 ? "is" : "are");
  }
}

bool starts_like_zip(const fs::path& path) {
  char head[4] = {};
  std::ifstream(path, std::ios::binary).read(head, 4);
  return looks_like_zip(std::string_view(head, 4));
}

// A layer's projections, bound or not.
std::array<Linear*, 9> layer_projections(LayerWeights& L) {
  return {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down, &L.ple_gate, &L.ple_proj};
}

// Every bound projection of the model, each role once (a stored matrix may fill several: ALBERT's shared layers).
std::vector<Linear*> projections(ModelWeights& w) {
  std::vector<Linear*> all{&w.embed_map, &w.ple_model_proj, &w.head_dense, &w.unembed};
  for (LayerWeights& L : w.layers)
    for (Linear* l : layer_projections(L)) all.push_back(l);
  std::erase_if(all, [](const Linear* l) { return !*l; });
  return all;
}

// LoadOptions::pack_weights: every projection to be packed at its first product of many rows, a stored matrix that
// fills several roles once; none when their float32 copies could take more than a quarter of the machine's memory or
// the build has no packed kernels.
void pack_projections(ModelWeights& weights) {
  using Key = std::tuple<const std::byte*, DType, int64_t, int64_t, int64_t, bool>;
  const auto key = [](const Linear& l) { return Key{l.w.data, l.w.dtype, l.w.rows, l.w.cols, l.w.row_bytes, l.in_out}; };
  std::map<Key, std::shared_ptr<const PackedMatrix>> packed;
  int64_t bytes = 0;
  for (const Linear* l : projections(weights))
    if (packed.emplace(key(*l), nullptr).second) bytes += l->w.rows * l->w.cols * 4;
  const int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (packed_products_kernel().empty() || bytes > memory / 4) return;
  for (Linear* l : projections(weights)) {
    std::shared_ptr<const PackedMatrix>& p = packed.at(key(*l));
    if (!p) {
      p = PackedMatrix::of(l->w, l->in_out);
      weights.owners.push_back(p);
    }
    l->w.packed = p.get();
  }
}

}  // namespace

ModelConfig llama2c_config(const TensorStore& store) {
  const auto& h = store.metadata();
  ModelConfig c;
  c.family = "llama";
  c.format = "llama2c";
  c.d_model = h["dim"];
  c.d_mlp = h["hidden_dim"];
  c.n_layers = h["n_layers"];
  c.n_heads = h["n_heads"];
  c.n_kv_heads = h["n_kv_heads"];
  int64_t vocab = h["vocab_size"];
  c.d_vocab = std::abs(vocab);
  c.tied_embeddings = vocab > 0;
  c.n_ctx = h["seq_len"];
  c.d_head = c.d_model / c.n_heads;
  c.norm = NormKind::RMSNorm;
  c.norm_eps = 1e-5;
  c.activation = Activation::SiLU;
  c.gated_mlp = true;
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  c.rope.style = RopeStyle::Interleaved;
  c.rope.theta = 10000.0;
  c.bos_id = 1;
  c.eos_id = 2;
  c.source = h;
  return c;
}

std::shared_ptr<Model> model_variant(std::shared_ptr<const Model> base) {
  struct Variant {
    std::shared_ptr<const Model> base;  // owns the storage the views point into
    Model model;
  };
  auto holder = std::make_shared<Variant>();
  holder->base = base;
  holder->model = *base;  // the weights are views into the base's storage, shared, not copied
  return std::shared_ptr<Model>(holder, &holder->model);
}

std::shared_ptr<const Model> with_float32_layer(std::shared_ptr<const Model> base, int64_t layer) {
  TDYN_CHECK(layer >= 0 && layer < static_cast<int64_t>(base->weights.layers.size()));
  const std::shared_ptr<Model> variant = model_variant(base);
  Model& m = *variant;
  LayerWeights& L = m.weights.layers[layer];
  const bool packing = !packed_products_kernel().empty();
  bool changed = false;
  for (Linear* l : layer_projections(L)) {
    if (!*l || l->w.packed) continue;  // the base's own copy (LoadOptions::pack_weights) serves
    if (packing) {
      // A copy of the variant's own: the base, unless it packs itself, never holds every layer's.
      const std::shared_ptr<const PackedMatrix> packed = PackedMatrix::of(l->w, l->in_out);
      l->w.packed = packed.get();
      m.weights.owners.push_back(packed);
      changed = true;
      continue;
    }
    // Left as stored: float32 (read in place, or widened a panel at a time only when misaligned) and the Conv1D
    // layout [in, out], whose panels split each output's sum along the inputs where a product over the whole copy
    // would not, so that its values would move by round-off. The others' products are the same either way.
    if (l->w.dtype == DType::F32 || l->in_out) continue;
    const StoredMatrix w = l->w;
    std::shared_ptr<float[]> storage(new float[w.rows * w.cols]);  // every element written below
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
    for (int64_t r = 0; r < w.rows; ++r) w.row_floats(r, 0, w.cols, storage.get() + r * w.cols);
    l->w = StoredMatrix::of_floats(storage.get(), w.rows, w.cols, w.cols);
    m.weights.owners.push_back(std::move(storage));
    changed = true;
  }
  return changed ? variant : base;
}

int64_t Model::parameter_count() const {
  std::set<const std::byte*> seen;
  int64_t n = 0;
  for (const auto& name : store.names()) {
    const TensorInfo& t = store.get(name);
    if (seen.insert(t.data).second) n += numel(t.shape);
  }
  return n;
}

std::shared_ptr<const Model> load_model(const fs::path& spec, const LoadOptions& options) {
  const fs::path path = resolve_checkpoint(spec.string());
  auto model = std::make_shared<Model>();
  model->path = path;
  if (!fs::exists(path)) fail("model '{}' does not exist", path.string());
  if (fs::is_directory(path)) {
    fs::path config = path / "config.json";
    if (!fs::exists(config)) fail("'{}' is a directory without config.json (expected a Hugging Face model directory)", path.string());
    model->config = read_hf_config(config, options.config);
    if (fs::exists(path / "model.safetensors.index.json")) {
      read_safetensors_index(path / "model.safetensors.index.json", model->store);
    } else if (fs::exists(path / "model.safetensors")) {
      read_safetensors(path / "model.safetensors", model->store);
    } else if (fs::exists(path / "pytorch_model.bin.index.json")) {
      read_torch_index(path / "pytorch_model.bin.index.json", model->store);
    } else if (fs::exists(path / "pytorch_model.bin")) {
      read_torch(path / "pytorch_model.bin", model->store);  // a restricted unpickler: nothing in the file runs
    } else {
      fail("'{}' has no model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
           "pytorch_model.bin.index.json", path.string());
    }
  } else if (is_gguf_file(path)) {
    read_gguf(path, model->store);
    model->config = gguf_config(model->store, path.string());
  } else if (starts_like_zip(path)) {
    fail("'{}' is a zip archive, as torch.save writes pytorch_model.bin: pass the directory that holds it with its "
         "config.json", path.string());
  } else if (looks_like_llama2c(path)) {
    read_llama2c(path, model->store);
    model->config = llama2c_config(model->store);
    model->config.validate(path.string());
  } else {
    fail("cannot tell the format of '{}': expected a Hugging Face directory, a .gguf file or a llama2.c .bin", path.string());
  }
  model->weights = bind_weights(model->config, model->store, family_table(model->config.family, model->config.format));
  if (options.check_finite) check_finite_weights(*model);
  if (options.pack_weights) pack_projections(model->weights);
  return model;
}

}  // namespace tdyn
