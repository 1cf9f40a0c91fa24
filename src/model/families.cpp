#include "model/families.h"

#include <cstring>
#include <map>
#include <set>

#include "core/error.h"
#include "model/families/definitions.h"

namespace tdyn {
namespace {

std::string substitute(const std::string& pattern, const char* key, const std::string& value) {
  std::string out = pattern;
  size_t at = out.find(key);
  if (at != std::string::npos) out.replace(at, std::string(key).size(), value);
  return out;
}

bool per_layer(Role r) { return r >= Role::AttnNorm && r != Role::Ignored; }

Linear* linear_for(LayerWeights& L, ModelWeights& M, Role r) {
  switch (r) {
    case Role::AttnQ: return &L.q;
    case Role::AttnK: return &L.k;
    case Role::AttnV: return &L.v;
    case Role::AttnO: return &L.o;
    case Role::MlpGate: return &L.gate;
    case Role::MlpUp: return &L.up;
    case Role::MlpDown: return &L.down;
    case Role::PleGate: return &L.ple_gate;
    case Role::PleProj: return &L.ple_proj;
    case Role::EmbedMap: return &M.embed_map;
    case Role::PleModelProj: return &M.ple_model_proj;
    case Role::HeadDense: return &M.head_dense;
    case Role::Unembed: return &M.unembed;
    default: return nullptr;
  }
}

Norm* norm_for(LayerWeights& L, ModelWeights& M, Role r) {
  switch (r) {
    case Role::AttnNorm: return &L.attn_norm;
    case Role::AttnQNorm: return &L.q_norm;
    case Role::AttnKNorm: return &L.k_norm;
    case Role::AttnPostNorm: return &L.attn_post_norm;
    case Role::MlpNorm: return &L.mlp_norm;
    case Role::MlpPostNorm: return &L.mlp_post_norm;
    case Role::PlePostNorm: return &L.ple_post_norm;
    case Role::EmbedNorm: return &M.embed_norm;
    case Role::PleProjNorm: return &M.ple_proj_norm;
    case Role::FinalNorm: return &M.final_norm;
    case Role::HeadNorm: return &M.head_norm;
    default: return nullptr;
  }
}

StoredMatrix* table_for(ModelWeights& M, Role r) {
  switch (r) {
    case Role::Embed: return &M.embed;
    case Role::PleEmbed: return &M.ple_embed;
    default: return nullptr;
  }
}

// Small float32 vectors and tables read directly by the forward pass (widened when stored otherwise).
const float** floats_for(LayerWeights& L, ModelWeights& M, Role r) {
  switch (r) {
    case Role::PosEmbed: return &M.pos_embed;
    case Role::TokenTypeEmbed: return &M.token_type_embed;
    case Role::LayerScalar: return &L.layer_scalar;
    default: return nullptr;
  }
}

// A 2-D tensor as a matrix in place.
StoredMatrix matrix_of(const TensorInfo& t) {
  TDYN_CHECK(t.shape.size() == 2);
  return {t.data, t.dtype, t.shape[0], t.shape[1], static_cast<int64_t>(tensor_bytes(t.dtype, t.shape[1]))};
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The "{p}" value of this checkpoint: the first of the table's prefixes under which its first tensor exists.
std::string detect_prefix(const FamilyTable& table, const TensorStore& store) {
  const std::string& first = table.tensors.front().name;
  std::string tried;
  for (const auto& p : table.prefixes) {
    std::string name = substitute(first, "{p}", p);
    if (store.contains(name)) return p;
    tried += (tried.empty() ? "'" : ", '") + name + "'";
  }
  fail("missing tensor {} ({} family, {} format)", tried, table.family, table.format);
}

}  // namespace

const std::vector<FamilyDefinition>& family_definitions() {
  static const std::vector<FamilyDefinition> families = {llama_family(), phi3_family(),   gpt_family(),
                                                         encoders_family(), olmo3_family(), gemma4_family()};
  return families;
}

const FamilyTable& family_table(const std::string& family, const std::string& format) {
  for (const auto& f : family_definitions())
    for (const auto& t : f.tables)
      if (t.family == family && t.format == format) return t;
  fail("no tensor table for family '{}' in format '{}'", family, format);
}

namespace {

// One bind_weights call: the weights bound so far, the tensors used, and the buffers that vectors widened to float32
// and per-head fused matrices regrouped live in (each made once, however many specs slice it).
class WeightBinder {
 public:
  WeightBinder(const ModelConfig& c, const TensorStore& store, const FamilyTable& table)
      : c_(c), store_(store), table_(table), stored_(c.n_stored_layers()), prefix_(detect_prefix(table, store)) {}

  // Every instance of every tensor of the table: the model's own once, a layer's once per stored layer.
  void bind_all() {
    for (const auto& spec : table_.tensors) {
      const bool layered = per_layer(spec.role) || spec.role == Role::IgnoredPerLayer;
      const int64_t n_instances = layered ? c_.n_stored_layers() : 1;
      for (int64_t l = 0; l < n_instances; ++l)
        if (!spec.present || spec.present(c_, l)) bind(spec, l, layered);
    }
  }

  // A tensor of the checkpoint that no spec reads and the table does not ignore is refused: tdyn would run a
  // different model than the checkpoint's.
  void refuse_unknown_tensors() const {
    for (const auto& name : store_.names()) {
      if (used_.count(name)) continue;
      bool ignored = false;
      for (const auto& suffix : table_.ignored_suffixes) ignored |= ends_with(name, suffix);
      for (const auto& p : table_.ignored_prefixes) ignored |= starts_with(name, p);
      if (!ignored) fail("unknown tensor '{}' in a {} checkpoint ({} format): tdyn does not know what it does", name, c_.family, c_.format);
    }
  }

  // The weights: tied embeddings resolved, every layer with its stored layer's views (ALBERT reuses one stored
  // layer across depth).
  ModelWeights finish() {
    if (c_.tied_embeddings) {
      const float* decoder_bias = m_.unembed.b;
      m_.unembed = Linear{m_.embed, decoder_bias, c_.d_vocab, c_.embed_dim(), false};
    }
    m_.layers.resize(c_.n_layers);
    for (int64_t l = 0; l < c_.n_layers; ++l) {
      const LayerConfig lc = c_.layer(l);
      m_.layers[l] = stored_[lc.weights];
      const LayerWeights& L = m_.layers[l];
      TDYN_CHECK(L.q && L.o && L.up && L.down && m_.embed && m_.unembed);
      TDYN_CHECK(lc.kv_source != l || (L.k && L.v));
      TDYN_CHECK(!c_.gated_mlp || L.gate);
    }
    return std::move(m_);
  }

 private:
  // What one instance of a spec binds: its tensor's name, the tensor, its expected shape.
  struct Instance {
    const TensorSpec& spec;
    int64_t layer;
    std::string name;
    const TensorInfo& tensor;
    Shape shape;
  };

  void bind(const TensorSpec& spec, int64_t l, bool layered) {
    std::string name = substitute(substitute(spec.name, "{p}", prefix_), "{l}", std::to_string(l));
    const TensorInfo* t = store_.find(name);
    if (spec.role == Role::Ignored || spec.role == Role::IgnoredPerLayer) {
      if (t) used_.insert(name);
      return;
    }
    if (!t) fail("missing tensor '{}' ({} family, {} format)", name, c_.family, c_.format);
    const Shape expected = spec.shape(c_, l);
    if (t->shape != expected) fail("tensor '{}' has wrong shape; expected {}, got {}", name, shape_str(expected), shape_str(t->shape));
    if (!is_float(t->dtype))
      fail("tensor '{}' has dtype {}, expected a floating-point type (float32, float16, bfloat16 or a GGUF quantization)", name, dtype_name(t->dtype));
    if (used_.insert(name).second) m_.sources.push_back({name, layered ? l : -1});
    const Instance at{spec, l, std::move(name), *t, expected};
    LayerWeights& L = per_layer(spec.role) ? stored_[l] : unused_layer_;
    if (Linear* lin = linear_for(L, m_, spec.role)) {
      bind_linear(*lin, at);
    } else if (Norm* norm = norm_for(L, m_, spec.role)) {
      (spec.part == Part::Bias ? norm->b : norm->w) = vector_data(at);
    } else if (StoredMatrix* matrix = table_for(m_, spec.role)) {
      *matrix = matrix_of(*t);
      if (spec.role == Role::Embed) m_.embed_dtype = t->dtype;
      if (spec.role == Role::PleEmbed) m_.ple_embed_dtype = t->dtype;
    } else if (const float** data = floats_for(L, m_, spec.role)) {
      *data = vector_data(at);
    } else {
      TDYN_CHECK(false);
    }
  }

  // A fused tensor is `fused_count` parts along the output axis: columns of a Conv1D [in, out] matrix, rows of an
  // nn.Linear [out, in] one, elements of a bias. Part `fused_index` starts after the ones before it.
  void bind_linear(Linear& lin, const Instance& at) {
    const TensorSpec& spec = at.spec;
    const int64_t parts = spec.fused_count, index = spec.fused_index;
    const bool in_out = spec.layout == Layout::InOut;
    const int64_t total = spec.part == Part::Bias ? at.shape[0] : in_out ? at.shape[1] : at.shape[0];
    const std::vector<int64_t> sizes = spec.fused_sizes ? spec.fused_sizes(c_, at.layer) : std::vector<int64_t>(parts, total / parts);
    TDYN_CHECK(static_cast<int64_t>(sizes.size()) == parts);
    int64_t offset = 0;
    for (int64_t i = 0; i < index; ++i) offset += sizes[i];
    const int64_t size = sizes[index];
    if (spec.part == Part::Bias) {
      lin.b = vector_data(at) + offset;
      return;
    }
    TDYN_CHECK(!spec.fused_per_head || !in_out);
    const StoredMatrix whole = spec.fused_per_head ? regrouped_matrix(at) : matrix_of(at.tensor);
    lin.in_out = in_out;
    lin.out = size;
    lin.in = in_out ? at.shape[0] : at.shape[1];
    if (parts > 1 && in_out && is_quantized(at.tensor.dtype))
      fail("tensor '{}' is a fused Conv1D matrix stored as {}: its parts cannot be cut out of quantized blocks", at.name,
           dtype_name(at.tensor.dtype));
    lin.w = parts == 1 ? whole : in_out ? whole.column_slice(offset, size) : whole.row_slice(offset, size);
  }

  // Output-axis index of element e of part `part` in a per-head fused tensor: [head][part][d_head] order.
  int64_t per_head_index(const Instance& at, int64_t part, int64_t e) const {
    const int64_t head_dim = at.shape[0] / (at.spec.fused_count * c_.n_heads);
    return ((e / head_dim) * at.spec.fused_count + part) * head_dim + e % head_dim;
  }

  // A vector as float32: in place when already aligned float32, else widened once and owned (a per-head fused one
  // regrouped to [part][head][d_head]).
  const float* vector_data(const Instance& at) {
    if (auto it = widened_.find(at.name); it != widened_.end()) return it->second;
    auto buffer = std::make_shared<FloatBuffer>(store_.floats(at.name));
    if (at.spec.fused_per_head) {
      const int64_t n = at.shape[0] / at.spec.fused_count;
      std::vector<float> out(at.shape[0]);
      for (int64_t part = 0; part < at.spec.fused_count; ++part)
        for (int64_t e = 0; e < n; ++e) out[part * n + e] = buffer->data()[per_head_index(at, part, e)];
      buffer = std::make_shared<FloatBuffer>(std::move(out));
    }
    m_.owners.push_back(buffer);
    return widened_[at.name] = buffer->data();
  }

  // The per-head fused matrix with its rows regrouped to [part][head][d_head], in the stored dtype (each row,
  // quantized blocks included, is copied whole).
  StoredMatrix regrouped_matrix(const Instance& at) {
    if (auto it = regrouped_.find(at.name); it != regrouped_.end()) return it->second;
    const StoredMatrix whole = matrix_of(at.tensor);
    const int64_t n = whole.rows / at.spec.fused_count, row_bytes = whole.row_bytes;
    auto bytes = std::make_shared<std::vector<std::byte>>(whole.rows * row_bytes);
    for (int64_t part = 0; part < at.spec.fused_count; ++part)
      for (int64_t e = 0; e < n; ++e)
        std::memcpy(bytes->data() + (part * n + e) * row_bytes, whole.row(per_head_index(at, part, e)), row_bytes);
    m_.owners.push_back(bytes);
    StoredMatrix copy = whole;
    copy.data = bytes->data();
    return regrouped_[at.name] = copy;
  }

  const ModelConfig& c_;
  const TensorStore& store_;
  const FamilyTable& table_;
  ModelWeights m_;
  std::vector<LayerWeights> stored_;  // per stored layer
  LayerWeights unused_layer_;         // where a model-wide spec's layer lookups go
  std::set<std::string> used_;
  std::map<std::string, const float*> widened_;
  std::map<std::string, StoredMatrix> regrouped_;
  const std::string prefix_;
};

}  // namespace

ModelWeights bind_weights(const ModelConfig& c, const TensorStore& store, const FamilyTable& table) {
  WeightBinder binder(c, store, table);
  binder.bind_all();
  binder.refuse_unknown_tensors();
  return binder.finish();
}

}  // namespace tdyn
