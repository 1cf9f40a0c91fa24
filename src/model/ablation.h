// Ablations as the command line and the analyses name them: the writable hooks matching a glob set to zero or to
// their mean over positions, the whole activation or only some heads of attn.hook_z.
//
// `tdyn run` runs any of them on one prompt (with model/hooks.h's ready-made edits). The analyses over samples run
// zero ablations of the sublayers' parts (ZeroedParts): a part set to zero is a constant, so the Jacobians of the
// ablated model lose exactly its derivative, and the float64 local maps (analysis/jacobian) zero the same parts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/hooks.h"

namespace tdyn {

class Transformer;

struct Ablation {
  std::string glob;            // writable hooks (fnmatch globs, comma-separated)
  bool mean = false;           // each position the hook's mean over the prompt's positions, else 0
  std::vector<int64_t> heads;  // only these heads of an attn.hook_z [pos, heads, d_head]; empty: all of it

  // "GLOB[:zero|:mean][:heads=H,H,...]"; throws Error naming the spec on anything else.
  static Ablation parse(const std::string& spec);
  static std::vector<Ablation> parse(const std::vector<std::string>& specs);
  std::string to_string() const;  // the spec parse() reads back
};

// The specs as to_string() writes them, in order (what results.json records).
nlohmann::json to_json(const std::vector<Ablation>& ablations);

// `edit` confined to the given heads of a [pos, heads, d_head] activation: it runs on a copy, and only those heads'
// values are written back (no heads: `edit` itself, on the whole activation). Throws Error (naming the hook) on an
// activation of another shape or a head out of range.
ActivationCache::Edit on_heads(std::vector<int64_t> heads, ActivationCache::Edit edit);

// Zero ablations resolved against a model, per layer: what the analyses over samples set to zero.
class ZeroedParts {
 public:
  struct Layer {
    std::vector<bool> heads;  // attn.hook_z heads set to 0 (every head when hook_attn_out is)
    bool attn_out = false;    // hook_attn_out: the attention sublayer adds nothing (not even W_O's bias)
    bool mlp_hidden = false;  // mlp.hook_post: the MLP's output is its output bias
    bool mlp_out = false;     // hook_mlp_out: the MLP adds nothing
    bool any() const;
    bool head(int64_t h) const { return !heads.empty() && heads[h]; }
  };

  ZeroedParts() = default;  // nothing ablated
  // Throws Error for a mean ablation (the analyses have no clean pass to take means from), a glob that matches
  // no writable hook, one that matches a residual-stream hook (the boundaries the analyses measure between), and
  // heads on another hook than attn.hook_z or out of range.
  ZeroedParts(const Transformer& transformer, const std::vector<Ablation>& ablations);

  bool empty() const { return ablations_.empty(); }
  const Layer& layer(int64_t l) const;
  // Adds the float32 edits that set these parts to zero in a forward pass to `cache`.
  void add_edits(ActivationCache& cache) const;
  // The same edits on their own, for running one layer (or part of it), or null when this layer zeroes nothing.
  std::unique_ptr<ActivationCache> edits(int64_t layer) const;
  nlohmann::json to_json() const;  // the specs, as to_string() writes them (what a pass's identity records)

 private:
  std::vector<Ablation> ablations_;
  std::vector<Layer> layers_;
};

}  // namespace tdyn
