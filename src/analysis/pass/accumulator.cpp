#include "analysis/pass/accumulator.h"

#include "core/error.h"
#include "model/sequence_state.h"

namespace tdyn {

int64_t PassSample::n_tokens() const { return state->n_pos; }

const Tensor& PassSample::at(const ResidualBoundary& boundary) const {
  if (boundary.sublayer < 0) return state->resid_post.at(layer);
  return boundary.sublayer % 2 == 0 ? state->resid_pre.at(layer) : state->resid_mid.at(layer);
}

void append_piece(std::vector<double>& out, std::span<const double> piece) {
  out.push_back(static_cast<double>(piece.size()));
  out.insert(out.end(), piece.begin(), piece.end());
}

std::vector<std::span<const double>> pieces(std::span<const double> numbers) {
  std::vector<std::span<const double>> out;
  for (size_t at = 0; at < numbers.size();) {
    const auto n = static_cast<size_t>(numbers[at++]);
    TDYN_CHECK(n <= numbers.size() - at);
    out.push_back(numbers.subspan(at, n));
    at += n;
  }
  return out;
}

std::vector<int64_t> boundaries_of_layer(const std::vector<ResidualBoundary>& boundaries, int64_t layer, int64_t n_layers) {
  std::vector<int64_t> out;
  for (size_t b = 0; b < boundaries.size(); ++b) {
    const ResidualBoundary& x = boundaries[b];
    if ((x.sublayer >= 0 && x.layer == layer) || (x.sublayer < 0 && layer == n_layers - 1)) out.push_back(static_cast<int64_t>(b));
  }
  return out;
}

}  // namespace tdyn
