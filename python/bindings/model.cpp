// tdyn.load(path) -> tdyn.Model: the forward pass with its hooks, generation, the tokenizer, layer matrices
// F_t = O_t V_t and exact residual-stream Jacobians (per sequence and as means over samples).
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <pybind11/eigen.h>
#include <pybind11/stl.h>

#include "analysis/jacobian/jacobian_model.h"
#include "analysis/jacobian/means.h"
#include "analysis/layer_matrix.h"
#include "convert.h"
#include "py_model.h"
#include "model/generate.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace tdyn::python {
namespace {

using Ids = std::vector<int32_t>;
// Positions as Python takes them: "last", "all", "5,23,-1", one int or a list of ints (negative: from the end).
using Positions = std::variant<std::string, int64_t, std::vector<int64_t>>;

PositionSpec position_spec(const Positions& positions) {
  if (const auto* text = std::get_if<std::string>(&positions)) return PositionSpec::parse(*text);
  PositionSpec spec;
  spec.kind = PositionSpec::Kind::List;
  if (const auto* one = std::get_if<int64_t>(&positions)) spec.list = {*one};
  else spec.list = std::get<std::vector<int64_t>>(positions);
  return spec;
}

// The TransformerLens-style description of a parsed configuration.
nlohmann::json describe(const ModelConfig& c) {
  nlohmann::json rope = {{"style", to_string(c.rope.style)}, {"theta", c.rope.theta}, {"scaling", c.rope.scaling}};
  if (c.rope.scaling != "default") rope["factor"] = c.rope.factor;
  if (c.rope.partial_rotary_factor != 1.0) rope["rotary_dims"] = c.rope.rotary_dim(c.d_head);  // partial rotary
  return {{"family", c.family},          {"format", c.format},
          {"d_model", c.d_model},        {"n_layers", c.n_layers},
          {"n_heads", c.n_heads},        {"n_kv_heads", c.n_kv_heads},
          {"d_head", c.d_head},          {"d_mlp", c.d_mlp},
          {"d_vocab", c.d_vocab},        {"d_embed", c.embed_dim()},
          {"n_ctx", c.n_ctx},            {"norm", to_string(c.norm)},
          {"norm_eps", c.norm_eps},      {"norm_placement", to_string(c.norm_placement)},
          {"parallel_residual", c.parallel_residual},
          {"activation", to_string(c.activation)}, {"gated_mlp", c.gated_mlp},
          {"attn_scale", c.attn_scale},  {"causal", c.causal},
          {"tied_embeddings", c.tied_embeddings},  {"rope", rope},
          {"bos_id", c.bos_id ? nlohmann::json(*c.bos_id) : nlohmann::json(nullptr)},
          {"eos_id", c.eos_id ? nlohmann::json(*c.eos_id) : nlohmann::json(nullptr)}};
}

void require_ids(const Ids& ids) {
  if (ids.empty()) fail("ids: expected at least one token id");
}

// An edit from Python: fn(activation) -> its replacement, a float array of the same shape (None: left as it is).
ActivationCache::Edit python_edit(py::function fn) {
  return [fn = std::move(fn)](const std::string& name, int64_t, float* data, const Shape& shape) {
    py::gil_scoped_acquire acquire;
    Tensor current(shape);
    std::copy(data, data + current.size(), current.ptr());
    py::object result = fn(to_numpy(std::move(current)));
    if (result.is_none()) return;
    // ensure() converts (float64 too) or, failing that, gives a null array.
    const auto replacement = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(result);
    if (!replacement) fail("edit of {}: the function returned {}, expected a float array", name, std::string(py::str(result.get_type())));
    const Shape got(replacement.shape(), replacement.shape() + replacement.ndim());
    if (got != shape) fail("edit of {}: the function returned shape {}, expected {}", name, shape_str(got), shape_str(shape));
    std::copy(replacement.data(), replacement.data() + replacement.size(), data);
  };
}

py::tuple run(const PyModel& self, const Ids& ids, const std::optional<std::string>& hooks,
              const std::optional<Ids>& token_types, const std::optional<std::map<std::string, py::function>>& edit) {
  require_ids(ids);
  std::optional<ActivationCache> cache;
  if (hooks) cache.emplace(*hooks);
  else if (edit && !edit->empty()) cache.emplace(ActivationCache::keeping_nothing());
  if (edit)
    for (const auto& [patterns, fn] : *edit) cache->add_edit(patterns, python_edit(fn));
  Tensor logits;
  {
    py::gil_scoped_release release;
    logits = self.transformer().forward(ids, cache ? &*cache : nullptr, nullptr, token_types.value_or(Ids{}));
  }
  if (hooks) cache->require_every_pattern_matches(cache->offered());  // the pass offered every hook there is
  py::dict activations;
  if (cache)
    for (const auto& [name, tensor] : cache->tensors()) activations[py::str(name)] = to_numpy(tensor);
  return py::make_tuple(to_numpy(std::move(logits)), activations);
}

// The CLI's `tdyn run` rules: stop at EOS (llama2.c checkpoints: at BOS, and at the end of the context).
Ids generate_ids(const PyModel& self, const Ids& ids, int64_t max_new_tokens, double temperature, uint64_t seed) {
  require_ids(ids);
  const ModelConfig& c = self.config();
  if (max_new_tokens < 0) fail("max_new_tokens must be >= 0, got {}", max_new_tokens);
  if (temperature < 0) fail("temperature must be >= 0, got {}", temperature);
  if (!c.causal && max_new_tokens > 0) fail("{} is an encoder (bidirectional): it does not generate", c.family);
  GenerateOptions options;
  options.max_new_tokens = max_new_tokens;
  options.temperature = temperature;
  options.seed = seed;
  const bool llama2c = c.format == "llama2c";
  if (llama2c && c.bos_id) options.stop_tokens.insert(*c.bos_id);
  else if (c.eos_id) options.stop_tokens.insert(*c.eos_id);
  options.overflow = llama2c ? ContextOverflow::Stop : ContextOverflow::Error;
  py::gil_scoped_release release;
  return generate(self.transformer(), ids, options, [](int32_t, int32_t) {}).tokens;
}

// Per-position sublayer Jacobians of one sequence, keyed as the fixtures: "pos{p}.blocks.{l}.jac_attn", ...
py::dict jacobians(PyModel& self, const Ids& ids, const Positions& positions, const std::optional<Ids>& token_types) {
  require_ids(ids);
  const JacobianModel& model = self.jacobian_model();
  const int64_t n_pos = static_cast<int64_t>(ids.size());
  const PositionSpec spec = position_spec(positions);
  for (int64_t p : spec.list)
    if (p < -n_pos || p >= n_pos) fail("position {} is outside a sequence of {} tokens", p, n_pos);

  std::vector<std::pair<std::string, linalg::Matrix>> out;
  {
    py::gil_scoped_release release;
    const SequenceState state = model.run(ids, token_types.value_or(Ids{}));
    for (int64_t pos : spec.resolve(n_pos)) {
      for (int64_t l = 0; l < self.config().n_layers; ++l) {
        const std::string prefix = fmt::format("pos{}.blocks.{}.", pos, l);
        linalg::Matrix attn = model.jacobian(state, l, Sublayer::Attention, pos);
        linalg::Matrix mlp = model.jacobian(state, l, Sublayer::Mlp, pos);
        linalg::Matrix block = model.block_jacobian(attn, mlp);  // the other positions stay fixed through both steps
        out.emplace_back(prefix + "jac_attn", std::move(attn));
        out.emplace_back(prefix + "jac_mlp", std::move(mlp));
        out.emplace_back(prefix + "jac_block", std::move(block));
      }
    }
  }
  py::dict result;
  for (auto& [name, j] : out) result[py::str(name)] = py::cast(std::move(j));
  return result;
}

py::dict mean_jacobians(PyModel& self, const std::vector<Ids>& samples, const Positions& positions, bool structured,
                        bool mean_of_products) {
  if (samples.empty()) fail("samples: expected at least one sequence of token ids");
  std::vector<Sample> sequences;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].empty()) fail("sample {} has no tokens", i);
    sequences.push_back({samples[i], static_cast<int64_t>(i)});
  }
  MeanJacobianOptions options;
  options.positions = position_spec(positions);
  options.structured = structured;
  options.mean_of_products = mean_of_products;
  const JacobianModel& model = self.jacobian_model();
  MeanJacobians means;
  {
    py::gil_scoped_release release;
    means = tdyn::mean_jacobians(model, sequences, options);
  }
  auto by_name = [](std::vector<linalg::Matrix>& matrices) {
    py::dict d;
    for (size_t k = 0; k < matrices.size(); ++k) d[py::str(sublayer_name(k))] = py::cast(std::move(matrices[k]));
    return d;
  };
  py::dict result;
  result["mean"] = by_name(means.mean);
  if (mean_of_products) result["mean_of_products"] = by_name(means.mean_of_products);
  result["n_samples"] = means.n_samples;
  result["n_pairs"] = means.n_pairs;
  return result;
}

void bind_tokenizer(py::module_& m) {
  py::class_<Tokenizer>(m, "Tokenizer", "Text <-> token ids with the tokenizer a checkpoint ships.")
      .def_property_readonly("kind", &Tokenizer::kind,
                             "'llama2c', 'gpt2-bpe', 'wordpiece', 'unigram', 'sp-bpe' or 'chars'.")
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size, "Number of tokens in the vocabulary.")
      .def_property_readonly("bos_id", &Tokenizer::bos_id, "Beginning-of-sequence id, or None.")
      .def_property_readonly("eos_id", &Tokenizer::eos_id, "End-of-sequence id, or None.")
      .def("encode", &Tokenizer::encode, py::arg("text"), py::arg("add_special") = true,
           "Token ids of `text`; add_special adds the model's special tokens (llama2.c: BOS; BERT: [CLS] .. [SEP]).")
      .def(
          "decode", [](const Tokenizer& t, const Ids& ids) { return lenient_str(t.decode(ids)); }, py::arg("ids"),
          "The text of a sequence of ids, as a generating model prints it (bytes that are not valid UTF-8 on their "
          "own become U+FFFD).")
      .def(
          "piece", [](const Tokenizer& t, int32_t id) { return lenient_str(t.piece(id)); }, py::arg("id"),
          "The raw vocabulary string of one id.")
      .def("__repr__", [](const Tokenizer& t) { return fmt::format("<tdyn.Tokenizer {} ({} tokens)>", t.kind(), t.vocab_size()); });

  m.def(
      "load_tokenizer", [](const std::string& path) { return load_tokenizer(path); }, py::arg("path"),
      "A tokenizer from a file: tokenizer.json, tokenizer.bin, vocab.txt, vocab.json (+ merges.txt), ...");
}

}  // namespace

void bind_model(py::module_& m) {
  bind_tokenizer(m);

  py::class_<PyModel>(m, "Model", "A loaded checkpoint (Hugging Face directory, llama2.c .bin or .gguf); see tdyn.load.")
      .def_property_readonly("config", [](const PyModel& s) { return to_python(describe(s.config())); },
                             "The parsed configuration as a dict (d_model, n_layers, n_heads, d_head, d_mlp, d_vocab, ...).")
      .def_property_readonly("source_config", [](const PyModel& s) { return to_python(*s.config().source); },
                             "The raw description the configuration was parsed from (config.json, GGUF metadata, header).")
      .def_property_readonly("family", [](const PyModel& s) { return s.config().family; },
                             "'llama', 'mistral', 'qwen2', 'phi3', 'gpt2', 'gpt_neo', 'gpt_neox', 'bert', 'albert', 'olmo3' or 'gemma4'.")
      .def_property_readonly("parameter_count", [](const PyModel& s) { return s.model().parameter_count(); },
                             "Number of unique parameters (tied matrices counted once).")
      .def_property_readonly("path", [](const PyModel& s) { return s.model().path.string(); }, "Where it was loaded from.")
      .def("run", &run, py::arg("ids"), py::arg("hooks") = "*", py::arg("token_types") = py::none(),
           py::arg("edit") = py::none(),
           R"doc(Runs the model on token ids (positions 0..len(ids)-1).

Returns (logits, activations): logits float32 [pos, d_vocab] and a dict from TransformerLens hook name
(hook_embed, blocks.{l}.hook_resid_pre, blocks.{l}.attn.hook_pattern, ...) to a float32 array.
hooks: comma-separated globs over hook names ('*' all, None nothing); a glob that matches no hook of the
model raises tdyn.Error listing its hooks. token_types: segment ids for BERT/ALBERT (default all 0).
edit: {globs: fn}; fn receives each matching writable activation as a float32 array and returns its
replacement of the same shape (or None to leave it), and the pass goes on from it: activation patching,
ablation, steering. The writable hooks are every layer's hook_resid_pre, hook_resid_mid, hook_resid_post,
hook_attn_out, hook_mlp_out, attn.hook_z [pos, head, d_head] and mlp.hook_post; activations returned are the
edited ones. A glob that matches no writable hook raises tdyn.Error before the run.)doc")
      .def("generate", &generate_ids, py::arg("ids"), py::arg("max_new_tokens"), py::arg("temperature") = 0.0,
           py::arg("seed") = 0,
           "Prompt + generated ids. temperature 0: greedy (first maximum); else samples softmax(logits / T) with "
           "`seed`. Stops early at the model's EOS (llama2.c checkpoints: at BOS or the end of the context).")
      .def(
          "tokenizer", [](const PyModel& s) { return load_tokenizer_for_model(s.model().path); },
          "The tokenizer shipped with the checkpoint (tokenizer.json, vocab files, tokenizer.bin beside a llama2.c "
          ".bin); raises tdyn.Error naming what was looked for when there is none.")
      .def(
          "layer_matrix",
          [](const PyModel& s, int64_t layer) {
            s.check_layer(layer);
            LayerMatrix lm = tdyn::layer_matrix(s.model(), layer);
            return py::make_tuple(py::cast(std::move(lm.f)), py::cast(std::move(lm.bias)));
          },
          py::arg("layer"),
          "(F, c) of one layer in float64: F = O V [d_model, d_model] (y = F x, heads summed, GQA value blocks "
          "expanded) and the offset c = O b_V + b_O [d_model] that the biases add.")
      .def("jacobians", &jacobians, py::arg("ids"), py::arg("positions") = "last", py::arg("token_types") = py::none(),
           R"doc(Exact sublayer Jacobians of one sequence in float64, d x d with rows = outputs.

Keys as the fixtures: 'pos{p}.blocks.{l}.jac_attn' (d resid_mid[p] / d resid_pre[p]), '...jac_mlp'
(d resid_post[p] / d resid_mid[p]; for a parallel-residual block, GPT-NeoX's, the MLP step's map from
resid_pre) and '...jac_block' (d resid_post[p] / d resid_pre[p]: their product, or jac_attn + jac_mlp - I for
a parallel block), the other positions held fixed.
positions: 'last', 'all', an int or a list of ints (negative count from the end).)doc")
      .def("mean_jacobians", &mean_jacobians, py::arg("samples"), py::arg("positions") = "last",
           py::arg("structured") = true, py::arg("mean_of_products") = false,
           R"doc(Mean sublayer Jacobians over samples (a list of token-id sequences) and positions.

Returns {'mean': {'blocks.{l}.jac_attn' / 'blocks.{l}.jac_mlp': J [d, d], in depth order},
'mean_of_products': likewise, the mean of J_k ... J_1 (only when asked), 'n_samples', 'n_pairs'}.
structured: accumulate in factored form at forward-pass cost (False: sum of exact per-sample Jacobians).
Positions outside a sample are skipped for that sample.)doc")
      .def("__repr__", [](const PyModel& s) {
        return fmt::format("<tdyn.Model {} {} layers, d_model {}, {} parameters>", s.config().family,
                           s.config().n_layers, s.config().d_model, s.model().parameter_count());
      });

  m.def(
      "load",
      [](const std::string& path, bool allow_unknown_config_keys, bool check_weights, bool pack_weights) {
        LoadOptions options;
        options.config.allow_unknown_keys = allow_unknown_config_keys;
        options.check_finite = check_weights;
        options.pack_weights = pack_weights;
        std::shared_ptr<const Model> model;
        {
          py::gil_scoped_release release;
          model = load_model(path, options);
        }
        return PyModel(std::move(model), options);
      },
      py::arg("path"), py::arg("allow_unknown_config_keys") = false, py::arg("check_weights") = true,
      py::arg("pack_weights") = false,
      "Loads a checkpoint: a Hugging Face directory (config.json + safetensors or pytorch_model.bin, sharded or "
      "not), a llama2.c .bin "
      "or a .gguf file. Weights stay memory-mapped. Unknown config.json keys are an error unless allowed; a NaN or "
      "Inf weight is an error naming the tensor unless check_weights=False. pack_weights=True, for a session that "
      "runs many prompts: each projection is packed at the first prompt for oneDNN's matmul (when tdyn was built "
      "with it; tdyn.packed_products names its kernels, empty without), a float32 copy beside the stored weights, and later prompts' products run "
      "near the FMA peak; their values move by float32 round-off.");
}

}  // namespace tdyn::python
