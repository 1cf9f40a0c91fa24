// Families as data: for each (family, format) a table mapping every weight role to its tensor name, its
// expected stored shape (a function of the config) and its storage layout. Binding a checkpoint walks the
// table, checks every shape, and rejects tensors the table does not know: a checkpoint either matches its
// family exactly or fails with an error naming the tensor and the expected vs actual shape.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/weights.h"

namespace tdyn {

enum class Role {
  // model-wide
  Embed, PosEmbed, TokenTypeEmbed, EmbedNorm, EmbedMap, PleEmbed, PleModelProj, PleProjNorm,
  FinalNorm, HeadDense, HeadNorm, Unembed,
  // per layer
  AttnNorm, AttnQ, AttnK, AttnV, AttnO, AttnQNorm, AttnKNorm, AttnPostNorm,
  MlpNorm, MlpGate, MlpUp, MlpDown, MlpPostNorm, PleGate, PleProj, PlePostNorm, LayerScalar,
  // accepted when present and not used: HF buffers, tensors HF ignores or ties on load
  Ignored, IgnoredPerLayer,
};
enum class Part { Weight, Bias };
// Vector: [n]; OutIn: nn.Linear [out, in]; InOut: GPT-2 Conv1D [in, out].
enum class Layout { Vector, OutIn, InOut };

struct TensorSpec {
  Role role;
  Part part;
  std::string name;  // "{l}" stands for the stored layer index, "{p}" for the checkpoint's name prefix
  // Expected stored shape for stored layer `layer` (0 for model-wide tensors); null: not checked (Ignored).
  std::function<Shape(const ModelConfig&, int64_t layer)> shape;
  Layout layout;
  std::function<bool(const ModelConfig&, int64_t layer)> present;  // null: always present
  // A slice of a fused tensor along its output axis, used in place: part `fused_index` of `fused_count`
  // parts (GPT-2 c_attn holds q|k|v, Phi-3 gate_up_proj gate|up). The parts are equal unless `fused_sizes`
  // gives their sizes (Phi-3 qkv_proj with grouped-query k|v). The shape above is the whole fused tensor's.
  int fused_index = 0, fused_count = 1;
  std::function<std::vector<int64_t>(const ModelConfig&, int64_t layer)> fused_sizes = nullptr;
  // The fused parts alternate per head instead: [n_heads][fused_count][d_head] along the output axis (GPT-NeoX
  // query_key_value holds q_h, k_h, v_h for each head h). Bound through a copy regrouped to
  // [fused_count][n_heads][d_head], made once per tensor; nn.Linear [out, in] layout only.
  bool fused_per_head = false;
};

struct FamilyTable {
  std::string family = {}, format = {};
  std::vector<TensorSpec> tensors = {};  // the first one (the token embedding) identifies the name prefix
  std::vector<std::string> ignored_suffixes = {};  // on-disk tensors the forward pass does not use (buffers)
  std::vector<std::string> prefixes = {""};   // alternatives for "{p}", tried in order
  std::vector<std::string> ignored_prefixes = {};  // whole sub-models not run (Gemma 4 vision/audio towers)
};

class GgufKeys;

// A family as tdyn knows it: the config.json model_type values and the GGUF general.architecture values it
// parses, and the tensor tables of the formats it comes in. Each is defined in its own file in model/families/,
// its config parsers beside its tables.
using HfConfigParser = ModelConfig (*)(const nlohmann::json& config, const std::string& origin, const ConfigParseOptions&);
using GgufConfigParser = ModelConfig (*)(const GgufKeys& keys, const TensorStore& store);
struct FamilyDefinition {
  std::vector<std::pair<std::string, HfConfigParser>> model_types;
  std::vector<std::pair<std::string, GgufConfigParser>> gguf_architectures = {};
  std::vector<FamilyTable> tables;
};

// Every family, in a fixed order (the order model types are listed in errors).
const std::vector<FamilyDefinition>& family_definitions();

// The parser that `list` (&FamilyDefinition::model_types or ::gguf_architectures) of some family gives for `key`,
// or null; `supported` receives every key of those lists, comma-separated, for the error.
template <typename Parser>
Parser find_parser(std::vector<std::pair<std::string, Parser>> FamilyDefinition::*list, const std::string& key,
                   std::string& supported) {
  Parser found = nullptr;
  for (const auto& family : family_definitions())
    for (const auto& [name, parser] : family.*list) {
      if (name == key) found = parser;
      supported += (supported.empty() ? "" : ", ") + name;
    }
  return found;
}

const FamilyTable& family_table(const std::string& family, const std::string& format);

// Binds every role of `config` to tensors of `store`; throws Error on a missing, unknown or misshapen tensor.
ModelWeights bind_weights(const ModelConfig& config, const TensorStore& store, const FamilyTable& table);

}  // namespace tdyn
