// Loading a model from any supported on-disk format into config + tensor store + bound weights.
// MODEL may be a Hugging Face directory (config.json + model.safetensors or model.safetensors.index.json, or
// else pytorch_model.bin or pytorch_model.bin.index.json), a llama2.c legacy .bin, or a .gguf file.
#pragma once

#include <memory>

#include "io/tensor_store.h"
#include "model/config.h"
#include "model/weights.h"

namespace tdyn {

struct LoadOptions {
  ConfigParseOptions config;
  // Check every weight the model reads for NaN/Inf, failing on the first non-finite tensor with its name,
  // layer, element and value. It reads each weight once (for float32 checkpoints, which are otherwise mapped
  // lazily, that means the whole file at load); false skips it, e.g. to inspect a broken checkpoint.
  bool check_finite = true;
  // Pack every projection for products of many rows (kernels/packed_matrix.h), each at its first such product, when
  // the build has oneDNN and their float32 copies would take at most a quarter of the machine's memory: for a model
  // that runs many prompts, whose products then run near the FMA peak. Packing a matrix costs about a prompt's
  // product by it, and memory its float32 size beside the stored matrix (which decoding still reads); values move by
  // float32 round-off against the unpacked products. Off by default, so that one prompt (`tdyn run`) costs no more.
  // The sample pass packs the layer it runs whatever this says (with_float32_layer).
  bool pack_weights = false;
};

struct Model {
  fs::path path;
  ModelConfig config;
  TensorStore store;
  ModelWeights weights;

  int64_t parameter_count() const;  // unique parameters (tied matrices counted once)
};

// `spec`: a Hugging Face directory, a .gguf file, a llama2.c .bin, or a hub cache directory with an optional
// @REVISION (io/hub_cache.h). Model::path is the resolved directory or file.
std::shared_ptr<const Model> load_model(const fs::path& spec, const LoadOptions& options = {});

// A copy of `base` to rebind some weights of: its weights are views into the base's storage, which the copy keeps
// alive (a new matrix goes into weights.owners).
std::shared_ptr<Model> model_variant(std::shared_ptr<const Model> base);

// A variant of `base` whose layer `layer` reads float32 copies of its projections, the same values: products then
// read them instead of widening the stored rows again on every product. With packed kernels in the build, every
// projection of the layer gets a packed copy of its own (kernels/packed_matrix.h); without, the stored [out, in]
// bf16, f16 and quantized ones are widened in their layout. Worth the layer's float32 size in memory when many
// sequences run through one layer in turn (the sample pass). `base` itself when there is nothing to widen.
std::shared_ptr<const Model> with_float32_layer(std::shared_ptr<const Model> base, int64_t layer);

// Builds the config of a llama2.c legacy checkpoint from its header (llama2.c semantics: RMSNorm eps 1e-5,
// interleaved RoPE with theta 10000, SwiGLU, tied classifier when vocab_size > 0).
ModelConfig llama2c_config(const TensorStore& store);

}  // namespace tdyn
