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

ModelWeights bind_weights(const ModelConfig& c, const TensorStore& store, const FamilyTable& table) {
  ModelWeights m;
  const int64_t n_stored = c.n_stored_layers();
  std::vector<LayerWeights> stored(n_stored);
  LayerWeights unused_layer;
  std::set<std::string> used;
  std::map<std::string, const float*> widened;  // vectors widened once, even when several specs slice them
  std::map<std::string, StoredMatrix> regrouped;  // per-head fused matrices regrouped once (fused_per_head)
  const std::string prefix = detect_prefix(table, store);
  for (const auto& spec : table.tensors) {
    const bool layered = per_layer(spec.role) || spec.role == Role::IgnoredPerLayer;
    const int64_t n_instances = layered ? n_stored : 1;
    for (int64_t l = 0; l < n_instances; ++l) {
      if (spec.present && !spec.present(c, l)) continue;
      std::string name = substitute(substitute(spec.name, "{p}", prefix), "{l}", std::to_string(l));
      const TensorInfo* t = store.find(name);
      if (spec.role == Role::Ignored || spec.role == Role::IgnoredPerLayer) {
        if (t) used.insert(name);
        continue;
      }
      if (!t) fail("missing tensor '{}' ({} family, {} format)", name, c.family, c.format);
      Shape expected = spec.shape(c, l);
      if (t->shape != expected)
        fail("tensor '{}' has wrong shape; expected {}, got {}", name, shape_str(expected), shape_str(t->shape));
      if (!is_float(t->dtype))
        fail("tensor '{}' has dtype {}, expected a floating-point type (float32, float16, bfloat16 or a GGUF quantization)", name, dtype_name(t->dtype));
      if (used.insert(name).second) m.sources.push_back({name, layered ? l : -1});
      // Output-axis index of element e of part `part` in a per-head fused tensor: [head][part][d_head] order.
      const int64_t head_dim = spec.fused_per_head ? expected[0] / (spec.fused_count * c.n_heads) : 0;
      auto per_head_index = [&](int64_t part, int64_t e) {
        return ((e / head_dim) * spec.fused_count + part) * head_dim + e % head_dim;
      };
      // Vectors as float32 pointers: in place when already aligned float32, else widened once and owned.
      auto vector_data = [&]() -> const float* {
        if (auto it = widened.find(name); it != widened.end()) return it->second;
        auto buffer = std::make_shared<FloatBuffer>(store.floats(name));
        if (spec.fused_per_head) {  // regrouped to [part][head][d_head]
          const int64_t n = expected[0] / spec.fused_count;
          std::vector<float> out(expected[0]);
          for (int64_t part = 0; part < spec.fused_count; ++part)
            for (int64_t e = 0; e < n; ++e) out[part * n + e] = buffer->data()[per_head_index(part, e)];
          buffer = std::make_shared<FloatBuffer>(std::move(out));
        }
        m.owners.push_back(buffer);
        return widened[name] = buffer->data();
      };
      // The per-head fused matrix with its rows regrouped to [part][head][d_head], in the stored dtype (each
      // row, quantized blocks included, is copied whole).
      auto regrouped_matrix = [&]() -> StoredMatrix {
        if (auto it = regrouped.find(name); it != regrouped.end()) return it->second;
        const StoredMatrix whole = matrix_of(*t);
        const int64_t n = whole.rows / spec.fused_count, row_bytes = whole.row_bytes;
        auto bytes = std::make_shared<std::vector<std::byte>>(whole.rows * row_bytes);
        for (int64_t part = 0; part < spec.fused_count; ++part)
          for (int64_t e = 0; e < n; ++e)
            std::memcpy(bytes->data() + (part * n + e) * row_bytes, whole.row(per_head_index(part, e)), row_bytes);
        m.owners.push_back(bytes);
        StoredMatrix copy = whole;
        copy.data = bytes->data();
        return regrouped[name] = copy;
      };
      LayerWeights& L = per_layer(spec.role) ? stored[l] : unused_layer;
      if (Linear* lin = linear_for(L, m, spec.role)) {
        // A fused tensor is `fused_count` parts along the output axis: columns of a Conv1D [in, out] matrix,
        // rows of an nn.Linear [out, in] one, elements of a bias. Part `fused_index` starts after the ones before it.
        const int64_t parts = spec.fused_count, index = spec.fused_index;
        const bool in_out = spec.layout == Layout::InOut;
        const int64_t total = spec.part == Part::Bias ? expected[0] : in_out ? expected[1] : expected[0];
        const std::vector<int64_t> sizes =
            spec.fused_sizes ? spec.fused_sizes(c, l) : std::vector<int64_t>(parts, total / parts);
        TDYN_CHECK(static_cast<int64_t>(sizes.size()) == parts);
        int64_t offset = 0;
        for (int64_t i = 0; i < index; ++i) offset += sizes[i];
        const int64_t size = sizes[index];
        if (spec.part == Part::Bias) {
          lin->b = vector_data() + offset;
        } else {
          TDYN_CHECK(!spec.fused_per_head || !in_out);
          const StoredMatrix whole = spec.fused_per_head ? regrouped_matrix() : matrix_of(*t);
          lin->in_out = in_out;
          lin->out = size;
          lin->in = in_out ? expected[0] : expected[1];
          if (parts > 1 && in_out && is_quantized(t->dtype))
            fail("tensor '{}' is a fused Conv1D matrix stored as {}: its parts cannot be cut out of quantized blocks", name,
                 dtype_name(t->dtype));
          lin->w = parts == 1 ? whole : in_out ? whole.column_slice(offset, size) : whole.row_slice(offset, size);
        }
      } else if (Norm* norm = norm_for(L, m, spec.role)) {
        (spec.part == Part::Bias ? norm->b : norm->w) = vector_data();
      } else if (StoredMatrix* matrix = table_for(m, spec.role)) {
        *matrix = matrix_of(*t);
        if (spec.role == Role::Embed) m.embed_dtype = t->dtype;
        if (spec.role == Role::PleEmbed) m.ple_embed_dtype = t->dtype;
      } else if (const float** data = floats_for(L, m, spec.role)) {
        *data = vector_data();
      } else {
        TDYN_CHECK(false);
      }
    }
  }
  if (c.tied_embeddings) {
    const float* decoder_bias = m.unembed.b;
    m.unembed = Linear{m.embed, decoder_bias, c.d_vocab, c.embed_dim(), false};
  }
  for (const auto& name : store.names()) {
    if (used.count(name)) continue;
    bool ignored = false;
    for (const auto& suffix : table.ignored_suffixes) ignored |= ends_with(name, suffix);
    for (const auto& p : table.ignored_prefixes) ignored |= starts_with(name, p);
    if (!ignored) fail("unknown tensor '{}' in a {} checkpoint ({} format): tdyn does not know what it does", name, c.family, c.format);
  }
  // Every layer gets its stored layer's views (ALBERT reuses one stored layer across depth).
  m.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerConfig lc = c.layer(l);
    m.layers[l] = stored[lc.weights];
    const LayerWeights& L = m.layers[l];
    TDYN_CHECK(L.q && L.o && L.up && L.down && m.embed && m.unembed);
    TDYN_CHECK(lc.kv_source != l || (L.k && L.v));
    TDYN_CHECK(!c.gated_mlp || L.gate);
  }
  return m;
}

}  // namespace tdyn
