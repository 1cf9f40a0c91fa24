#include "analysis/stream_points.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "core/error.h"
#include "core/text.h"

namespace tdyn {

const char* to_string(BoundarySet set) { return set == BoundarySet::Layers ? "layers" : "sublayers"; }

BoundarySet parse_boundary_set(const std::string& text) {
  if (text == "layers") return BoundarySet::Layers;
  if (text == "sublayers") return BoundarySet::Sublayers;
  fail("boundaries: expected 'layers' or 'sublayers', got '{}'", text);
}

std::vector<ResidualBoundary> residual_boundaries(int64_t n_layers, BoundarySet set) {
  if (n_layers < 1) fail("residual boundaries: the model has {} layers", n_layers);
  std::vector<ResidualBoundary> boundaries;
  for (int64_t l = 0; l < n_layers; ++l) {
    boundaries.push_back({fmt::format("blocks.{}.hook_resid_pre", l), l, 2 * l});
    if (set == BoundarySet::Sublayers) boundaries.push_back({fmt::format("blocks.{}.hook_resid_mid", l), l, 2 * l + 1});
  }
  boundaries.push_back({fmt::format("blocks.{}.hook_resid_post", n_layers - 1), n_layers, -1});
  return boundaries;
}

PositionSpec PositionSpec::parse(const std::string& text) {
  PositionSpec p;
  if (text == "last") return p;
  if (text == "all") {
    p.kind = Kind::All;
    return p;
  }
  p.kind = Kind::List;
  for (const std::string& item : split_list(text)) {
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size())
      fail("positions: expected 'last', 'all' or comma-separated integers, got '{}'", text);
    p.list.push_back(v);
  }
  return p;
}

std::vector<int64_t> PositionSpec::resolve(int64_t n_pos) const {
  std::vector<int64_t> out;
  if (kind == Kind::Last) out.push_back(n_pos - 1);
  if (kind == Kind::All)
    for (int64_t p = 0; p < n_pos; ++p) out.push_back(p);
  if (kind == Kind::List)
    for (int64_t p : list) {
      const int64_t q = p < 0 ? n_pos + p : p;
      if (q >= 0 && q < n_pos) out.push_back(q);
    }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string PositionSpec::to_string() const {
  if (kind == Kind::Last) return "last";
  if (kind == Kind::All) return "all";
  std::string s;
  for (size_t i = 0; i < list.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(list[i]);
  }
  return s;
}

}  // namespace tdyn
