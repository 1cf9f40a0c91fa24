#include "model/ablation.h"

#include <algorithm>
#include <charconv>
#include <memory>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/text.h"
#include "model/transformer.h"

namespace tdyn {

namespace {

std::vector<int64_t> parse_heads(const std::string& spec, const std::string& list) {
  std::vector<int64_t> heads;
  for (const std::string& item : split_list(list)) {
    int64_t h = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), h);
    if (ec != std::errc() || end != item.data() + item.size() || h < 0)
      fail("--ablate {}: '{}' is not a head number (heads=H,H,... counts from 0)", spec, item);
    heads.push_back(h);
  }
  std::sort(heads.begin(), heads.end());
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  return heads;
}

}  // namespace

Ablation Ablation::parse(const std::string& spec) {
  const std::vector<std::string> parts = split_list(spec, ':');  // hook names hold no ':'
  Ablation a{parts[0], false, {}};
  if (a.glob.empty()) fail("--ablate {}: no hook glob before the ':'", spec);
  bool how_given = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if ((part == "zero" || part == "mean") && !how_given && a.heads.empty()) {
      a.mean = part == "mean";
      how_given = true;
    } else if (part.rfind("heads=", 0) == 0 && a.heads.empty()) {
      a.heads = parse_heads(spec, part.substr(6));
      if (a.heads.empty()) fail("--ablate {}: heads= lists no head", spec);
    } else {
      fail("--ablate {}: '{}' is not understood (GLOB[:zero|:mean][:heads=H,H,...])", spec, part);
    }
  }
  return a;
}

std::vector<Ablation> Ablation::parse(const std::vector<std::string>& specs) {
  std::vector<Ablation> out;
  for (const std::string& spec : specs) out.push_back(parse(spec));
  return out;
}

std::string Ablation::to_string() const {
  std::string s = glob + (mean ? ":mean" : ":zero");
  if (!heads.empty()) s += fmt::format(":heads={}", fmt::join(heads, ","));
  return s;
}

ActivationCache::Edit on_heads(std::vector<int64_t> heads, ActivationCache::Edit edit) {
  if (heads.empty()) return edit;
  return [heads = std::move(heads), edit = std::move(edit)](const std::string& name, int64_t start, float* data,
                                                             const Shape& shape) {
    if (shape.size() != 3) fail("{}: heads can be chosen only in a [pos, heads, d_head] activation (attn.hook_z)", name);
    const int64_t n = shape[0], n_heads = shape[1], d_head = shape[2];
    for (int64_t h : heads)
      if (h >= n_heads) fail("{}: head {} is out of range (the layer has {} heads)", name, h, n_heads);
    std::vector<float> edited(data, data + numel(shape));
    edit(name, start, edited.data(), shape);
    for (int64_t p = 0; p < n; ++p)
      for (int64_t h : heads) {
        const int64_t at = (p * n_heads + h) * d_head;
        std::copy_n(edited.data() + at, d_head, data + at);
      }
  };
}

bool ZeroedParts::Layer::any() const {
  return attn_out || mlp_hidden || mlp_out || std::find(heads.begin(), heads.end(), true) != heads.end();
}

ZeroedParts::ZeroedParts(const Transformer& transformer, const std::vector<Ablation>& ablations)
    : ablations_(ablations) {
  const ModelConfig& c = transformer.config();
  layers_.assign(c.n_layers, Layer{});
  for (const Ablation& a : ablations) {
    const std::string spec = a.to_string();
    if (a.mean) fail("--ablate {}: the analyses run zero ablations only (a mean needs a pass without it)", spec);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      Layer& layer = layers_[l];
      auto ablated = [&](const char* part) { return matches_glob(a.glob, fmt::format("blocks.{}.{}", l, part)); };
      for (const char* resid : {"hook_resid_pre", "hook_resid_mid", "hook_resid_post"})
        if (ablated(resid))
          fail("--ablate {}: blocks.{}.{} is a residual-stream boundary, which the analyses measure between; ablate "
               "a sublayer's part instead (attn.hook_z, hook_attn_out, mlp.hook_post, hook_mlp_out)", spec, l, resid);
      const bool z = ablated("attn.hook_z");
      if (!a.heads.empty()) {
        for (const char* other : {"hook_attn_out", "mlp.hook_post", "hook_mlp_out"})
          if (ablated(other)) fail("--ablate {}: heads= applies to attn.hook_z only, and the glob matches blocks.{}.{}", spec, l, other);
        for (int64_t h : a.heads)
          if (z && h >= c.n_heads) fail("--ablate {}: head {} is out of range (the model has {} heads)", spec, h, c.n_heads);
      }
      layer.heads.resize(c.n_heads, false);
      if (z)
        for (int64_t h = 0; h < c.n_heads; ++h)
          if (a.heads.empty() || std::binary_search(a.heads.begin(), a.heads.end(), h)) layer.heads[h] = true;
      if (ablated("hook_attn_out")) {
        layer.attn_out = true;
        layer.heads.assign(c.n_heads, true);
      }
      layer.mlp_hidden = layer.mlp_hidden || ablated("mlp.hook_post");
      layer.mlp_out = layer.mlp_out || ablated("hook_mlp_out");
    }
  }
  ActivationCache check = ActivationCache::keeping_nothing();  // each glob must match a writable hook, as in a run
  add_edits(check);
  check.check_edits(transformer.writable_hook_names());
}

const ZeroedParts::Layer& ZeroedParts::layer(int64_t l) const {
  static const Layer none;
  return layers_.empty() ? none : layers_.at(l);
}

void ZeroedParts::add_edits(ActivationCache& cache) const {
  for (const Ablation& a : ablations_) cache.add_edit(a.glob, on_heads(a.heads, zero_ablation()));
}

std::unique_ptr<ActivationCache> ZeroedParts::edits(int64_t layer) const {
  if (!this->layer(layer).any()) return nullptr;
  auto cache = std::make_unique<ActivationCache>(ActivationCache::keeping_nothing());
  add_edits(*cache);
  return cache;
}

nlohmann::json to_json(const std::vector<Ablation>& ablations) {
  nlohmann::json out = nlohmann::json::array();
  for (const Ablation& a : ablations) out.push_back(a.to_string());
  return out;
}

nlohmann::json ZeroedParts::to_json() const { return tdyn::to_json(ablations_); }

}  // namespace tdyn
