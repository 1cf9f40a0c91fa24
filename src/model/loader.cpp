#include "model/loader.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "io/gguf.h"
#include "model/gguf_config.h"
#include "io/llama2c.h"
#include "io/safetensors.h"
#include "model/families.h"

namespace tdyn {

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

int64_t Model::parameter_count() const {
  std::set<const std::byte*> seen;
  int64_t n = 0;
  for (const auto& name : store.names()) {
    const TensorInfo& t = store.get(name);
    if (seen.insert(t.data).second) n += numel(t.shape);
  }
  return n;
}

std::shared_ptr<const Model> load_model(const fs::path& path, const LoadOptions& options) {
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
    } else if (fs::exists(path / "pytorch_model.bin")) {
      fail("'{}' holds only pytorch_model.bin (a Python pickle, unsafe to load); convert it to model.safetensors", path.string());
    } else {
      fail("'{}' has no model.safetensors or model.safetensors.index.json", path.string());
    }
  } else if (is_gguf_file(path)) {
    read_gguf(path, model->store);
    model->config = gguf_config(model->store, path.string());
  } else if (looks_like_llama2c(path)) {
    read_llama2c(path, model->store);
    model->config = llama2c_config(model->store);
    model->config.validate(path.string());
  } else {
    fail("cannot tell the format of '{}': expected a Hugging Face directory, a .gguf file or a llama2.c .bin", path.string());
  }
  model->weights = bind_weights(model->config, model->store, family_table(model->config.family, model->config.format));
  return model;
}

}  // namespace tdyn
