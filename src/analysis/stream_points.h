// Where the shared sample pass (pass/run.h) measures the residual stream: the boundaries between sublayer maps,
// at which it sums correlations and Jacobians, and the token positions of each sample whose Jacobians it sums.
// The analyses that read the pass (jacobian, topology, power) name them with these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tdyn {

// `layers` (default): blocks.{l}.hook_resid_pre for every layer l (the stream entering layer l) and
// blocks.{L−1}.hook_resid_post (the stream leaving the last layer): L + 1 boundaries, one per depth of the
// paper's "per layer" graphs. `sublayers` adds blocks.{l}.hook_resid_mid (the pre-MLP boundary), so that
// every sublayer map of the Jacobian analysis has the boundary it leaves: 2L + 1 boundaries.
enum class BoundarySet { Layers, Sublayers };
const char* to_string(BoundarySet set);
BoundarySet parse_boundary_set(const std::string& text);  // "layers" | "sublayers"; throws Error otherwise

struct ResidualBoundary {
  std::string hook;       // e.g. "blocks.3.hook_resid_pre"
  int64_t layer = 0;      // the layer whose sublayer map leaves this boundary (L for the final boundary)
  int64_t sublayer = -1;  // k of that map (2l attention, 2l + 1 MLP; jacobian_model.h order); −1 for the final one
};

std::vector<ResidualBoundary> residual_boundaries(int64_t n_layers, BoundarySet set);

// Which positions of each sample: the last token (default, the paper's choice), all, or a list (negative
// entries count from the end: −1 is the last token; entries outside a sample are skipped for that sample).
struct PositionSpec {
  enum class Kind { Last, All, List };
  Kind kind = Kind::Last;
  std::vector<int64_t> list;

  // "last", "all" or "5,23,-1"; throws Error otherwise.
  static PositionSpec parse(const std::string& text);
  std::vector<int64_t> resolve(int64_t n_pos) const;  // sorted, distinct, inside [0, n_pos)
  std::string to_string() const;
};

}  // namespace tdyn
